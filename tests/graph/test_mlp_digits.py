"""examples/train_mlp_digits.py reaches 95% test accuracy on scikit-learn's digits."""

import pathlib
import runpy

import pytest

EXAMPLE = pathlib.Path(__file__).parent.parent.parent / "examples" / "train_mlp_digits.py"


def test_mlp_reaches_95_percent():
    pytest.importorskip("sklearn", reason="scikit-learn is in the test extra")
    train = runpy.run_path(str(EXAMPLE))["train"]
    assert train(epochs=12, quiet=True) >= 0.95
