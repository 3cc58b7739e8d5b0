"""Reshapes read each group of dimensions of equal products from its own output indices
(`ops.reshape_groups`): the dimensions a reshape keeps index directly, so a channel
shuffle's reshape is a contiguous vector copy, not divisions per element and a gather."""

import re

import numpy as np
import pytest
from hypothesis import given, settings, strategies as hs

import tensorlang.graph as G
from tensorlang.graph.ops import reshape_groups


def _factor(n, rng):
    out = []
    while n > 1:
        d = next(d for d in range(2, n + 1) if n % d == 0) if rng.random() < 0.5 else n
        out.append(d)
        n //= d
    return out or [1]


@settings(max_examples=40, deadline=None)
@given(hs.lists(hs.integers(1, 6), min_size=1, max_size=4), hs.integers(0, 10 ** 6))
def test_reshape_groups_multiply_out_and_reshape_matches_numpy(dims, seed):
    rng = np.random.default_rng(seed)
    size = int(np.prod(dims))
    new = _factor(size, rng)
    for _ in range(int(rng.integers(0, 3))):          # leading, trailing ones
        new.insert(int(rng.integers(0, len(new) + 1)), 1)
    groups = reshape_groups(dims, new)
    assert [d for gi, _ in groups for d in gi] == list(range(len(dims)))
    assert [d for _, gj in groups for d in gj] == list(range(len(new)))
    for gi, gj in groups:
        assert np.prod([dims[d] for d in gi]) == np.prod([new[d] for d in gj])
    x = G.Variable("x", tuple(dims), "float32")
    xv = rng.standard_normal(dims).astype("float32")
    (got,) = G.Executor([G.reshape(x * 1.0, tuple(new))]).run({x: xv})
    np.testing.assert_array_equal(got, xv.reshape(new))


@pytest.mark.parametrize("shape,new", [((1, 240, 28, 28), (1, 3, 80, 28, 28)),
                                       ((1, 3, 80, 28, 28), (1, 240, 28, 28)),
                                       ((2, 6, 7, 13), (2, 42, 13)), ((3, 5, 1), (15,)),
                                       ((1,), (1, 1, 1)), ((4, 6), (8, 3))])
def test_reshapes_match_numpy(shape, new, rng):
    x = G.Variable("x", shape, "float32")
    xv = rng.standard_normal(shape).astype("float32")
    ex = G.Executor([G.reshape(x * 2.0, new)], fuse=False)
    (got,) = ex.run({x: xv})
    np.testing.assert_array_equal(got, (xv * 2).reshape(new))


def test_a_channel_shuffles_reshape_is_a_contiguous_copy():
    x = G.Variable("x", (1, 240, 28, 28), "float32")
    ex = G.Executor([G.reshape(x * 2.0, (1, 3, 80, 28, 28))], fuse=False)
    ex.run({x: np.ones((1, 240, 28, 28), "float32")})
    (step,) = [s for s in ex._last.steps if s.node.op == "reshape"]
    asm = step.kernel.get_source("asm")
    assert "gather" not in asm and "scatter" not in asm and re.search(r"vmovups\s+%zmm|"
                                                                     r"vmovups\s+%ymm", asm)
