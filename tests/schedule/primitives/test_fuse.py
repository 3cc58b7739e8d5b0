"""fuse: adjacent loops, outer first, into one (i.j.fused)."""

import numpy as np
import pytest

import tensorlang as tl

from .helpers import (
    allocations, assert_computes, assert_refused_with_witness, assert_replays, blur, check_blur,
    grid, grid_ref, matmul, RNG, run_matmul,
)






def test_fuse_constant_and_after_split():
    X = tl.placeholder((5, 7), name="X")
    Y = tl.compute((5, 7), lambda i, j: X[i, j] + 1.0, name="Y")
    s = tl.create_schedule(Y)
    f = s[Y].fuse(*Y.op.axis)
    assert f.name == "i.j.fused"
    assert "for i_j_fused in range(35)" in str(tl.lower(s, [X, Y]))
    s[Y].split(f, factor=8)
    g = tl.build(s, [X, Y])
    x = RNG.random((5, 7), dtype=np.float32)
    y = np.zeros((5, 7), np.float32)
    g(x, y)
    np.testing.assert_allclose(y, x + 1)
    # symbolic outer extent, constant inner
    A, B, C = matmul()
    s = tl.create_schedule(C)
    i, j = C.op.axis
    jo, ji = s[C].split(j, factor=4)
    s[C].fuse(jo, ji)
    run_matmul(s, A, B, C)


def test_fuse_misuse():
    A, B, C = matmul()
    s = tl.create_schedule(C)
    i, j = C.op.axis
    (k,) = C.op.reduce_axis
    with pytest.raises(tl.ScheduleError, match="adjacent"):
        s[C].fuse(i, k)
    with pytest.raises(tl.ScheduleError, match="adjacent"):
        s[C].fuse(j, i)
    with pytest.raises(NotImplementedError, match="constant"):
        s[C].fuse(i, j)  # symbolic inner extent


def test_fuse_then_split_with_compute_at():
    A, B, C = blur(13)
    s = tl.create_schedule(C)
    f = s[C].fuse(*C.op.axis)
    fo, fi = s[C].split(f, factor=8)
    s[B].compute_at(s[C], fo)
    shapes = allocations(tl.lower(s, [A, C]))
    # 8 consecutive points of a 13-wide row span at most 2 rows -> 4 rows of B, 13 wide
    assert shapes["B"] == (4, 13)
    check_blur(s, A, C, sizes=(13,))


def test_fuse_of_an_attach_loop_is_refused():
    A, B, C = blur(8)
    s = tl.create_schedule(C)
    s[B].compute_at(s[C], C.op.axis[0])
    with pytest.raises(tl.ScheduleError, match="computed at loop y"):
        s[C].fuse(*C.op.axis)


# ------------------------------------------- the interpreter, the witness, the replay
def test_fuse_of_a_recurrence_matches_numpy_and_the_interpreter():
    x, u = grid(m=5)
    s = tl.create_schedule(u)
    f = s[u].fuse("i", "j")
    s[u].split(f, factor=3)
    cases = [([x], grid_ref(x)) for x in (RNG.standard_normal((n, 5)) for n in (1, 7, 12))]
    assert_computes(s, [x, u], cases, rtol=1e-12)


def test_fused_loop_names_the_witness_of_a_refused_parallel():
    x, u = grid(m=5)
    s = tl.create_schedule(u)
    f = s[u].fuse("i", "j")
    w = assert_refused_with_witness(s, lambda: s[u].parallel(f), "parallel", "u")
    for point, loops in ((w.source, w.source_loops), (w.sink, w.sink_loops)):
        assert loops == {"i.j.fused": point["i"] * 5 + point["j"]}, w


def test_fuse_replays():
    def make():
        X = tl.placeholder((5, 7), name="X")
        return X, tl.compute((5, 7), lambda i, j: X[i, j] + 1.0, name="Y")

    X, Y = make()
    s = tl.create_schedule(Y)
    s[Y].split(s[Y].fuse(*Y.op.axis), factor=8)
    assert_replays(s, [X, Y], make)
