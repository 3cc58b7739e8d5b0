"""examples/train_transformer_digits.py: a one-layer transformer (Q/K/V self-attention,
layer norm, relu MLP) trained through the executor's kernels reaches >= 75% test accuracy
on scikit-learn's digits (rows as tokens) — issue 14's end-to-end check of batched and
transposed matmuls, softmax, layer norm and their gradients."""

import pathlib
import runpy

import pytest

EXAMPLE = pathlib.Path(__file__).parent.parent.parent / "examples" / "train_transformer_digits.py"


@pytest.mark.slow
def test_transformer_reaches_75_percent():
    pytest.importorskip("sklearn", reason="scikit-learn is in the test extra")
    train = runpy.run_path(str(EXAMPLE))["train"]
    assert train(epochs=4, quiet=True) >= 0.75
