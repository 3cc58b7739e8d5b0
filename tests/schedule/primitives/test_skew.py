"""skew: inner := inner + factor * outer (wavefronts)."""

import numpy as np
import pytest

import tensorlang as tl

from .helpers import RNG, matmul


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
