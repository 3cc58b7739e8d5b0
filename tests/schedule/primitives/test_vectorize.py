"""vectorize: a loop as one vector operation per statement."""

import numpy as np
import pytest

import tensorlang as tl

from .helpers import (
    assert_computes, assert_refused_with_witness, assert_replays, matmul, prefix_sum, RNG,
    run_matmul, run_vadd, vadd, vadd_cases,
)






def test_vectorize_uses_vector_types():
    A, B, C = matmul()
    s = tl.create_schedule(C)
    i, j = C.op.axis
    (k,) = C.op.reduce_axis
    jo, ji = s[C].split(j, factor=8)
    s[C].reorder(i, jo, k, ji)
    s[C].vectorize(ji)
    f = tl.build(s, [A, B, C])
    assert "<8 x float>" in f.get_source()
    run_matmul(s, A, B, C)


def test_vectorize_guarded_reads_and_gathers():
    n = tl.var("n")
    A = tl.placeholder((n,), name="A")
    M = tl.placeholder((n, 3), name="M")
    B = tl.compute((n,), lambda i: tl.if_then_else(i > 0, A[i - 1], -1.0) + M[i, 1]
                   + tl.if_then_else(i < n - 1, A[i + 1], 5.0), name="B")
    s = tl.create_schedule(B)
    io, ii = s[B].split(B.op.axis[0], factor=4)
    s[B].vectorize(ii)
    f = tl.build(s, [A, M, B])
    for size in (1, 3, 4, 9, 40):
        a = RNG.random(size, dtype=np.float32)
        m = RNG.random((size, 3), dtype=np.float32)
        b = np.zeros(size, np.float32)
        f(a, m, b)
        ref = np.concatenate([[-1.0], a[:-1]]) + m[:, 1] + np.concatenate([a[1:], [5.0]])
        np.testing.assert_allclose(b, ref, rtol=1e-6)


def test_vectorize_types_and_casts():
    X = tl.placeholder((37,), dtype="int32", name="X")
    Y = tl.compute((37,), lambda i: (X[i] // 3 + i).astype("float64") * 0.5
                   + tl.sqrt((X[i] % 5).astype("float32")).astype("float64"), name="Y")
    Z = tl.compute((37,), lambda i: Y[i] > 3.0, name="Z")
    s = tl.create_schedule(Z)
    for T in (Y, Z):
        _, ii = s[T].split(T.op.axis[0], factor=8)
        s[T].vectorize(ii)
    f = tl.build(s, [X, Z])
    x = RNG.integers(-50, 50, 37).astype(np.int32)
    z = np.zeros(37, bool)
    f(x, z)
    y = (x // 3 + np.arange(37)) * 0.5 + np.sqrt((x % 5).astype(np.float32)).astype(np.float64)
    np.testing.assert_array_equal(z, y > 3.0)


def test_a_vector_loop_may_hold_serial_and_unrolled_loops():
    """TVM's and Halide's idiom: vectorise j with the reduction k inside it — each k step is
    one vector multiply-add of all lanes (a vector accumulator). Sizes that do and do not
    fill the vectors (masked tails)."""
    for n in (1, 13, 37, 64):
        A, B, C = matmul(n, n)
        s = tl.create_schedule(C)
        i, j = C.op.axis
        (k,) = C.op.reduce_axis
        jo, ji = s[C].split(j, factor=16)
        s[C].reorder(i, jo, ji, k)
        s[C].vectorize(ji)
        if n == 64:
            ko, ki = s[C].split(k, factor=4)
            s[C].unroll(ki)
        run_matmul(s, A, B, C, sizes=((n, n),))
    A, B, C = matmul(8, 8)
    s = tl.create_schedule(C)
    i, j = C.op.axis
    (k,) = C.op.reduce_axis
    s[C].reorder(i, k, j)
    s[C].vectorize(j)
    s[C].reorder(j, k)               # the vector loop moves out past k: still legal
    assert s[C].loops == ["i", "j", "k"]
    run_matmul(s, A, B, C, sizes=((8, 8),))
    assert "<8 x float>" in tl.build(s, [A, B, C]).get_source("ll") or \
        "<4 x float>" in tl.build(s, [A, B, C]).get_source("ll")


def test_nothing_parallel_or_vectorized_runs_inside_a_vector_loop():
    A, B, C = matmul(8, 8)
    s = tl.create_schedule(C)
    i, j = C.op.axis
    (k,) = C.op.reduce_axis
    s[C].reorder(i, j, k)
    s[C].vectorize(j)
    s[C].parallel(i)                 # outside the vector loop: fine
    with pytest.raises(tl.ScheduleError, match="inside the vectorized loop j"):
        s[C].parallel(k)
    assert s[C].loops == ["i", "j", "k"]


def _triangular(n):
    X = tl.placeholder((n, n), name="X")
    W = tl.placeholder((n, n), name="W")
    k = tl.reduce_axis((0, n), name="k")
    return X, W, tl.compute((n, n), lambda i, j: tl.sum(X[i, k] * W[k, j], axis=k,
                                                         where=k <= j), name="Y")


def _affine(n, dtype):
    A = tl.placeholder((n,), dtype, name="A")
    return A, tl.compute((n,), lambda i: A[i] * 2 + 1, name="B")


def test_inner_loops_whose_bounds_vary_by_lane_run_masked():
    """An inner loop whose range differs between lanes (a triangular reduction; a split's
    outer loop inside its vectorised inner one, found by the pipeline fuzzer) runs over
    the union of the lanes' ranges, each lane masked off outside its own."""
    for n in (1, 7, 37):
        X, W, Y = _triangular(n)
        s = tl.create_schedule(Y)
        jo, ji = s[Y].split(Y.op.axis[1], factor=8)
        s[Y].vectorize(ji)
        f = tl.build(s, [X, W, Y])
        x, w = (np.random.default_rng(n).standard_normal((n, n)).astype("f4") for _ in "xw")
        y = np.zeros((n, n), "f4")
        f(x, w, y)
        np.testing.assert_allclose(y, x @ np.triu(w), rtol=1e-4, atol=1e-5)
        for dt in ("float32", "float16"):
            A, B = _affine(n * 3, dt)
            s = tl.create_schedule(B)
            o, i = s[B].split(B.op.axis[0], factor=16)
            s[B].vectorize(i)
            s[B].reorder(i, o)            # the outer loop runs inside the vector lanes
            a = np.arange(n * 3).astype(dt)
            b = np.zeros_like(a)
            tl.build(s, [A, B])(a, b)
            np.testing.assert_array_equal(b, (a * 2 + 1).astype(dt))


def test_a_vector_loop_carrying_a_dependence_through_an_inner_loop_is_refused():
    # lanes run at the same time: a j that carries a dependence cannot be vectorized,
    # whatever runs inside it (the witness names the two iterations)
    n = 8
    X = tl.placeholder((n, n), name="X")
    k = tl.reduce_axis((0, n), name="k")
    Y = tl.compute((n,), lambda j: tl.sum(X[j, k], axis=k), name="Y")
    s = tl.create_schedule(Y)
    (kk,) = Y.op.reduce_axis
    ko, ki = s[Y].split(kk, factor=4)
    s[Y].reorder(Y.op.axis[0], ki, ko)
    with pytest.raises(tl.IllegalScheduleError) as err:
        s[Y].vectorize(ki)
    assert err.value.witness is not None


@pytest.mark.parametrize("size", [1, 13, 37, 64])
def test_unroll_and_vectorize_take_the_placed_extent(size):
    # TVM's opt_gemm recipe: after compute_at at a tile loop, the local stage's loops run over
    # one tile (4 x 16); their unplaced extent is the whole (symbolic) matrix. unroll and
    # vectorize used to check that one and refuse (issue 16, item 3).
    n = tl.var("n")
    A = tl.placeholder((n, n), name="A")
    B = tl.placeholder((n, n), name="B")
    k = tl.reduce_axis((0, n), name="k")
    C = tl.compute((n, n), lambda i, j: tl.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = tl.create_schedule(C)
    CC = s.cache_write(C, "local")
    i, j = s[C].op.axis
    io, jo, ii, ji = s[C].tile(i, j, 4, 16)
    s[CC].compute_at(s[C], jo)
    ci, cj = s[CC].op.axis
    (ck,) = s[CC].op.reduce_axis
    s[CC].reorder(ck, ci, cj)
    s[CC].unroll(ci)
    s[CC].vectorize(cj)
    f = tl.build(s, [A, B, C])
    assert "<16 x float>" in f.get_source()
    rng = np.random.default_rng(size)
    a = rng.standard_normal((size, size)).astype("float32")
    b = rng.standard_normal((size, size)).astype("float32")
    c = np.zeros((size, size), "float32")
    f(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)


def test_vectorize_partial_tiles():
    A, B = vadd()
    s = tl.create_schedule(B)
    io, ii = s[B].split(B.op.axis[0], factor=8)
    s[B].vectorize(ii)
    text = str(tl.lower(s, [A, B]))
    assert "== 8:" in text and "range(8):" in text  # the full tile is separated
    run_vadd(s, A, B)


def test_vectorize_misuse_names_the_loop():
    A, B, C = matmul()
    s = tl.create_schedule(C)
    i, j = C.op.axis
    with pytest.raises(tl.ScheduleError, match="grows with the sizes"):
        s[C].vectorize(j)


# ------------------------------------------- the interpreter, the witness, the replay
@pytest.mark.parametrize("factor", [1, 4, 7])
def test_vectorize_matches_numpy_and_the_interpreter(factor):
    A, B = vadd()
    s = tl.create_schedule(B)
    io, ii = s[B].split(B.op.axis[0], factor=factor)
    s[B].vectorize(ii)
    assert_computes(s, [A, B], vadd_cases())


def test_vectorize_of_a_loop_carrying_a_dependence_names_both_lanes():
    x, y = prefix_sum()
    s = tl.create_schedule(y)
    s[y].split("i", factor=4)
    w = assert_refused_with_witness(s, lambda: s[y].vectorize("i.inner"), "vectorize", "y")
    assert w.source_loops["i.outer"] == w.sink_loops["i.outer"]      # one vector, two lanes
    assert w.source_loops["i.inner"] != w.sink_loops["i.inner"]
    assert w.sink["i"] == w.source["i"] + 1


def test_vectorize_replays():
    A, B, C = matmul()
    s = tl.create_schedule(C)
    jo, ji = s[C].split(C.op.axis[1], factor=8)
    s[C].reorder(C.op.axis[0], jo, C.op.reduce_axis[0], ji)
    s[C].vectorize(ji)
    assert_replays(s, [A, B, C], matmul)
