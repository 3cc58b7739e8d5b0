"""parallel: a loop's iterations on the thread pool."""

import numpy as np
import pytest

import tensorlang as tl

from .helpers import (
    assert_computes, assert_refused_with_witness, assert_replays, grid, matmul, matmul_cases,
    RNG, run_matmul, vadd,
)






def test_parallel_runs_on_the_pool():
    from tensorlang.backends.llvm.pool import pool_threads

    A, B, C = matmul()
    s = tl.create_schedule(C)
    i, j = C.op.axis
    s[C].parallel(i)
    assert "# parallel" in str(tl.lower(s, [A, B, C]))
    run_matmul(s, A, B, C, sizes=((1, 1), (2, 3), (13, 7), (64, 33)))
    assert pool_threads() >= 1
    assert "tl_parallel_launch" in tl.build(s, [A, B, C]).get_source()


def test_parallel_with_intermediate_and_nested():
    n = tl.var("n")
    X = tl.placeholder((n, 16), name="X")
    Y = tl.compute((n, 16), lambda i, j: X[i, j] * 2.0, name="Y")
    Z = tl.compute((n, 16), lambda i, j: Y[i, j] + 1.0, name="Z")
    s = tl.create_schedule(Z)
    s[Y].parallel(Y.op.axis[0])
    s[Y].parallel(Y.op.axis[1])  # nested parallel loops run inline in the workers
    io, ii = s[Z].split(Z.op.axis[0], factor=3)
    s[Z].parallel(io)
    f = tl.build(s, [X, Z])
    for size in (1, 5, 50):
        x = RNG.random((size, 16), dtype=np.float32)
        z = np.zeros((size, 16), np.float32)
        f(x, z)
        np.testing.assert_allclose(z, x * 2 + 1)


def test_parallel_misuse_names_the_argument():
    A, B, C = matmul()
    s = tl.create_schedule(C)
    i, j = C.op.axis
    io, ii = s[C].split(i, factor=4)
    s[C].vectorize(ii)          # the serial loop j may run inside a vector loop
    with pytest.raises(tl.ScheduleError, match="inside the vectorized loop i.inner"):
        s[C].parallel(j)
    with pytest.raises(tl.ScheduleError, match="must be a loop"):
        s[C].parallel(3)
    X, Y = vadd()
    s2 = tl.create_schedule(Y)
    (a2, b2) = s2[Y].split(Y.op.axis[0], factor=2)
    with pytest.raises(tl.ScheduleError, match="of stage"):
        s[C].parallel(a2)


# ------------------------------------------- the interpreter, the witness, the replay
def test_parallel_matches_numpy_and_the_interpreter():
    A, B, C = matmul()
    s = tl.create_schedule(C)
    io, ii = s[C].split(C.op.axis[0], factor=4)
    s[C].parallel(io)
    assert_computes(s, [A, B, C], matmul_cases())


def test_parallel_loop_carrying_a_dependence_is_refused_with_a_witness():
    x, u = grid()
    s = tl.create_schedule(u)
    w = assert_refused_with_witness(s, lambda: s[u].parallel("i"), "parallel", "u")
    assert (w.sink["i"] - w.source["i"], w.sink["j"] - w.source["j"]) == (1, 0)
    A, B, C = matmul()
    s = tl.create_schedule(C)
    w = assert_refused_with_witness(s, lambda: s[C].parallel("k"), "parallel", "C")
    assert w.sink["k"] == w.source["k"] + 1
    with pytest.raises(tl.IllegalScheduleError, match=r"rfactor\(C, k\)"):
        s[C].parallel("k")   # the message says how to reduce in parallel


def test_parallel_replays():
    A, B, C = matmul()
    s = tl.create_schedule(C)
    s[C].parallel(C.op.axis[0])
    assert_replays(s, [A, B, C], matmul)
