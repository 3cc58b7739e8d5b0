"""skew: inner := inner + factor * outer (wavefronts)."""

import numpy as np
import pytest

import tensorlang as tl

from .helpers import (
    assert_computes, assert_refused_with_witness, assert_replays, grid, grid_cases, matmul, RNG,
)






def test_skew_prints_and_computes():
    X = tl.placeholder((6, 5), name="X")
    Y = tl.compute((6, 5), lambda i, j: X[i, j] * 3.0, name="Y")
    s = tl.create_schedule(Y)
    i, j = Y.op.axis
    s[Y].skew(i, j, factor=2)
    text = str(tl.lower(s, [X, Y]))
    assert "for j in range(i * 2, i * 2 + 5):" in text
    g = tl.build(s, [X, Y])
    x = RNG.random((6, 5), dtype=np.float32)
    y = np.zeros((6, 5), np.float32)
    g(x, y)
    np.testing.assert_allclose(y, x * 3)


def test_strided_loop_from_isl():
    """Regression (found by the long property run): skew + split + reorder where isl emits a
    loop with a stride of 2."""
    x = tl.placeholder((3, 1), dtype="float64", name="x")
    u = tl.recurrence((3, 1), lambda u, i, j: x[i, j] + tl.if_then_else(
        j >= 1, u[i, j - 1], 0.0), dtype="float64", name="u")
    s = tl.create_schedule(u)
    s[u].skew("i", "j")
    s[u].split("i", factor=2)
    s[u].reorder("i.inner", "j", "i.outer")
    assert "// 2" in str(tl.lower(s, [x, u]))
    f = tl.build(s, [x, u])
    xv = RNG.random((3, 1))
    out = np.zeros((3, 1))
    f(xv, out)
    np.testing.assert_allclose(out, xv)


def test_skew_misuse_names_the_argument():
    A, B, C = matmul()
    s = tl.create_schedule(C)
    i, j = C.op.axis
    io, ii = s[C].split(i, factor=4)
    with pytest.raises(tl.ScheduleError, match="factor must not be 0"):
        s[C].skew(io, j, factor=0)


# ------------------------------------------- the interpreter, the witness, the replay
def test_skewed_wavefront_matches_numpy_and_the_interpreter():
    x, u = grid()
    s = tl.create_schedule(u)
    s[u].skew("i", "j", factor=2)
    s[u].reorder("j", "i")
    s[u].parallel("i")       # within a wavefront j' = j + 2i the i carry nothing
    assert_computes(s, [x, u], grid_cases(), rtol=1e-12)


def test_skewed_loop_names_the_witness_of_a_refused_parallel():
    x, u = grid()
    s = tl.create_schedule(u)
    s[u].skew("i", "j", factor=2)
    w = assert_refused_with_witness(s, lambda: s[u].parallel("j"), "parallel", "u")
    for point, loops in ((w.source, w.source_loops), (w.sink, w.sink_loops)):
        assert loops == {"i": point["i"], "j": point["j"] + 2 * point["i"]}, w


def test_skew_replays():
    x, u = grid()
    s = tl.create_schedule(u)
    s[u].skew("i", "j", factor=3)
    assert_replays(s, [x, u], grid)
