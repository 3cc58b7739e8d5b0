"""Each schedule primitive: the loop nest it prints, numpy on dividing and non-dividing
extents (1, primes, factor > extent, symbolic), and misuse."""

import numpy as np
import pytest

import tensorlang as tl

RNG = np.random.default_rng(0)


def vadd(n=None):
    n = tl.var("n") if n is None else n
    A = tl.placeholder((n,), name="A")
    B = tl.compute((n,), lambda i: A[i] * 2.0 + 1.0, name="B")
    return A, B


def matmul(n=None, m=None):
    n = tl.var("n") if n is None else n
    m = tl.var("m") if m is None else m
    A = tl.placeholder((n, m), name="A")
    B = tl.placeholder((m, n), name="B")
    k = tl.reduce_axis((0, m), name="k")
    C = tl.compute((n, n), lambda i, j: tl.sum(A[i, k] * B[k, j], axis=k), name="C")
    return A, B, C


def run_vadd(s, A, B, sizes=(1, 2, 7, 13, 64, 300)):
    f = tl.build(s, [A, B])
    for n in sizes:
        a = RNG.random(n, dtype=np.float32)
        b = np.full(n, np.nan, np.float32)
        f(a, b)
        np.testing.assert_allclose(b, a * 2 + 1, rtol=1e-6)


def run_matmul(s, A, B, C, sizes=((1, 1), (13, 7), (33, 17))):
    f = tl.build(s, [A, B, C])
    for n, m in sizes:
        a = RNG.random((n, m), dtype=np.float32)
        b = RNG.random((m, n), dtype=np.float32)
        c = np.full((n, n), np.nan, np.float32)
        f(a, b, c)
        np.testing.assert_allclose(c, a @ b, rtol=1e-5)


# ----------------------------------------------------------------------------- split
def test_split_loop_nest_and_numbers():
    A, B = vadd(10)
    s = tl.create_schedule(B)
    io, ii = s[B].split(B.op.axis[0], factor=4)
    assert (io.name, ii.name) == ("i.outer", "i.inner")
    text = str(tl.lower(s, [A, B]))
    assert "for i_outer in range(3):" in text
    assert "for i_inner in range(min(4, 10 - i_outer * 4)):" in text
    f = tl.build(s, [A, B])
    a = RNG.random(10, dtype=np.float32)
    b = np.zeros(10, np.float32)
    f(a, b)
    np.testing.assert_allclose(b, a * 2 + 1)


@pytest.mark.parametrize("factor", [1, 3, 4, 8, 500])
def test_split_symbolic(factor):
    A, B = vadd()
    s = tl.create_schedule(B)
    s[B].split(B.op.axis[0], factor=factor)
    run_vadd(s, A, B)


def test_split_nparts_and_twice():
    A, B = vadd(13)
    s = tl.create_schedule(B)
    io, ii = s[B].split(B.op.axis[0], nparts=4)
    assert "for i_outer in range(4)" in str(tl.lower(s, [A, B]))
    s[B].split(ii, factor=2)
    assert s[B].loops == ["i.outer", "i.inner.outer", "i.inner.inner"]
    run_vadd(s, A, B, sizes=(13,))


def test_split_extent_one_and_offset_axis():
    A, B = vadd(1)
    s = tl.create_schedule(B)
    s[B].split(B.op.axis[0], factor=4)
    run_vadd(s, A, B, sizes=(1,))
    # a reduction axis that starts at 3: the first tile is full
    X = tl.placeholder((20,), name="X")
    k = tl.reduce_axis((3, 17), name="k")
    Y = tl.compute((1,), lambda i: tl.sum(X[k], axis=k), name="Y")
    s = tl.create_schedule(Y)
    ko, ki = s[Y].split(k, factor=5)
    assert "for k_outer in range(3)" in str(tl.lower(s, [X, Y]))
    f = tl.build(s, [X, Y])
    x = RNG.random(20, dtype=np.float32)
    y = np.zeros(1, np.float32)
    f(x, y)
    np.testing.assert_allclose(y[0], x[3:17].sum(), rtol=1e-5)


# ------------------------------------------------------------------------------ tile
def test_tile_matmul():
    A, B, C = matmul()
    s = tl.create_schedule(C)
    i, j = C.op.axis
    xo, yo, xi, yi = s[C].tile(i, j, 4, 8)
    assert s[C].loops == ["i.outer", "j.outer", "i.inner", "j.inner", "k"]
    run_matmul(s, A, B, C)


def test_tile_constant_sizes_nest():
    A, B, C = matmul(6, 5)
    s = tl.create_schedule(C)
    i, j = C.op.axis
    s[C].tile(i, j, 4, 4)
    text = str(tl.lower(s, [A, B, C]))
    assert text.index("i_outer") < text.index("j_outer") < text.index("i_inner")
    run_matmul(s, A, B, C, sizes=((6, 5),))


# --------------------------------------------------------------------------- reorder
def test_reorder_matmul_and_nest():
    A, B, C = matmul()
    s = tl.create_schedule(C)
    i, j = C.op.axis
    (k,) = C.op.reduce_axis
    s[C].reorder(k, j, i)
    assert s[C].loops == ["k", "j", "i"]
    text = str(tl.lower(s, [A, B, C]))
    # the init moves out of the reduction: its own nest comes first
    assert text.index("C[i, j] = 0.0") < text.index("for k in range(m)")
    run_matmul(s, A, B, C)


def test_reorder_partial_keeps_other_positions():
    A, B, C = matmul()
    s = tl.create_schedule(C)
    i, j = C.op.axis
    io, ii = s[C].split(i, factor=4)
    s[C].reorder(ii, io)
    assert s[C].loops == ["i.inner", "i.outer", "j", "k"]
    run_matmul(s, A, B, C)


# ------------------------------------------------------------------------------ fuse
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


# ------------------------------------------------------------------------------ skew
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


# ------------------------------------------------------------ unroll, vectorize, parallel
def test_unroll_is_real():
    A, B = vadd(16)
    s = tl.create_schedule(B)
    io, ii = s[B].split(B.op.axis[0], factor=4)
    s[B].unroll(ii)
    lowered = tl.lower(s, [A, B])
    assert "# unrolled" in str(lowered)
    f = tl.build(s, [A, B])
    assert f.get_source().count("fmul") >= 4 or f.get_source().count("<4 x float>") >= 1
    run_vadd(s, A, B, sizes=(16,))


def test_unroll_and_vectorize_partial_tiles():
    for prim in ("unroll", "vectorize"):
        A, B = vadd()
        s = tl.create_schedule(B)
        io, ii = s[B].split(B.op.axis[0], factor=8)
        getattr(s[B], prim)(ii)
        text = str(tl.lower(s, [A, B]))
        assert "== 8:" in text and "range(8):" in text  # the full tile is separated
        run_vadd(s, A, B)


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


# ----------------------------------------------------------------------------- misuse
def test_misuse_names_the_argument():
    A, B, C = matmul()
    s = tl.create_schedule(C)
    i, j = C.op.axis
    with pytest.raises(tl.ScheduleError, match="factor must be >= 1"):
        s[C].split(i, factor=0)
    with pytest.raises(tl.ScheduleError, match="factor must be an int"):
        s[C].split(i, factor=2.5)
    with pytest.raises(tl.ScheduleError, match="exactly one"):
        s[C].split(i)
    with pytest.raises(tl.ScheduleError, match="nparts needs"):
        s[C].split(i, nparts=2)
    X, Y = vadd()
    with pytest.raises(tl.ScheduleError, match="another stage"):
        s[C].split(Y.op.axis[0], factor=2)
    io, ii = s[C].split(i, factor=4)
    with pytest.raises(tl.ScheduleError, match="no longer exists"):
        s[C].split(i, factor=2)
    with pytest.raises(tl.ScheduleError, match="grows with the sizes"):
        s[C].vectorize(j)
    s[C].vectorize(ii)          # the serial loop j may run inside a vector loop
    with pytest.raises(tl.ScheduleError, match="inside the vectorized loop i.inner"):
        s[C].parallel(j)
    with pytest.raises(tl.ScheduleError, match="grows with the sizes"):
        s[C].unroll(j)
    with pytest.raises(tl.ScheduleError, match="once"):
        s[C].reorder(io, io)
    with pytest.raises(tl.ScheduleError, match="must be a loop"):
        s[C].parallel(3)
    s2 = tl.create_schedule(Y)
    (a2, b2) = s2[Y].split(Y.op.axis[0], factor=2)
    with pytest.raises(tl.ScheduleError, match="of stage"):
        s[C].parallel(a2)
    with pytest.raises(tl.ScheduleError, match="factor must not be 0"):
        s[C].skew(io, j, factor=0)


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


def test_trace_prints_and_replays():
    A, B, C = matmul()
    s = tl.create_schedule(C)
    i, j = C.op.axis
    xo, yo, xi, yi = s[C].tile(i, j, 4, 4)
    s[C].parallel(xo)
    assert s.trace_text().splitlines() == ['s["C"].tile("i", "j", 4, 4)',
                                           's["C"].parallel("i.outer")']
    # the trace is data; its text is Python that replays on a fresh schedule
    assert [(t.stage, t.call.prim, t.call.args) for t in s.trace] == \
        [("C", "tile", ("i", "j", 4, 4)), ("C", "parallel", ("i.outer",))]
    A2, B2, C2 = matmul()
    s3 = tl.create_schedule(C2)
    exec(s.trace_text(), {"s": s3})
    assert s3.trace == s.trace
    s2 = s.replay(tl.create_schedule(C2))
    assert str(tl.lower(s2, [A2, B2, C2])) == str(tl.lower(s, [A, B, C]))


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


def test_programs_of_one_structure_share_their_dependence_analysis():
    """The dependences are cached by the isl text they are computed from (the
    auto-scheduler builds a program per candidate): two schedules of one computation share
    the analysis, a computation with other accesses gets its own, and an illegal schedule
    is refused either way."""
    from tensorlang.schedule import program as P

    def stencil(shift):
        A = tl.placeholder((64,), "float32", name="A")
        B = tl.recurrence((64,), lambda b, i: A[i] + tl.if_then_else(
            i >= shift, b[i - shift], 0.0), dtype="float32", name="B")
        return B

    P._DEPS.clear()
    one, two = tl.create_schedule(stencil(1)), tl.create_schedule(stencil(1))
    assert two.program.deps is one.program.deps and len(P._DEPS) == 1
    other = tl.create_schedule(stencil(2))
    assert other.program.deps is not one.program.deps and len(P._DEPS) == 2
    B = other.outputs[0]
    with pytest.raises(tl.IllegalScheduleError):
        other[B].parallel(B.op.axis[0])
