"""compute_at / compute_root / compute_inline / cache_read / cache_write against numpy,
the exact shapes of local buffers, and refused placements with their witnesses."""

import numpy as np
import pytest

import tensorlang as tl
from tensorlang.ir.stmt import Allocate
from tensorlang.ir.visit import walk_stmt


def allocations(f) -> dict[str, tuple]:
    """name -> shape (ints where constant) of every allocation in a lowered function."""
    out = {}
    for x in walk_stmt(f.body):
        if isinstance(x, Allocate):
            out[x.buffer.name] = tuple(getattr(e, "value", str(e)) for e in x.buffer.shape)
    return out


def blur(n, m=None):
    m = n if m is None else m
    A = tl.placeholder((n + 2, m), name="A")
    B = tl.compute((n + 2, m), lambda y, x: A[y, x] * 2.0 + 1.0, name="B")
    C = tl.compute((n, m), lambda y, x: B[y, x] + B[y + 1, x] + B[y + 2, x], name="C")
    return A, B, C


def check_blur(s, A, C, sizes):
    f = tl.build(s, [A, C])
    for N in sizes:
        a = np.random.default_rng(N).random((N + 2, N), dtype=np.float32)
        c = np.full((N, N), np.nan, np.float32)
        f(a, c)
        b = a * 2 + 1
        np.testing.assert_allclose(c, b[:-2] + b[1:-1] + b[2:], rtol=1e-5)


@pytest.mark.parametrize("level", ["root", "tile", "row", "x_inner"])
def test_blur_compute_at_levels(level):
    n = tl.var("n")
    A, B, C = blur(n)
    s = tl.create_schedule(C)
    y, x = C.op.axis
    yo, xo, yi, xi = s[C].tile(y, x, 16, 32)
    if level == "root":
        s[B].compute_root()
    elif level == "tile":
        s[B].compute_at(s[C], xo)
    elif level == "row":
        s[B].compute_at(s[C], yi)
    else:
        s[B].compute_at(s[C], xi)
    f = tl.lower(s, [A, C])
    shapes = allocations(f)
    expect = {"root": ("n + 2", "n"), "tile": (18, 32), "row": (3, 32), "x_inner": (3, 1)}
    got = shapes["B"]
    assert tuple(map(str, got)) == tuple(map(str, expect[level])), f
    check_blur(s, A, C, sizes=(1, 5, 16, 37))


def test_halo_footprint_is_exact_for_a_tile():
    A, B, C = blur(64)
    s = tl.create_schedule(C)
    yo, xo, yi, xi = s[C].tile(*C.op.axis, 16, 32)
    s[B].compute_at(s[C], xo)
    f = tl.lower(s, [A, C])
    assert allocations(f)["B"] == (18, 32)
    assert "B[y_inner + 1, x_inner]" in str(f)
    check_blur(s, A, C, sizes=(64,))


def test_split_factor_larger_than_extent_gives_the_real_extent():
    A, B, C = blur(5)
    s = tl.create_schedule(C)
    yo, yi = s[C].split(C.op.axis[0], factor=64)
    s[B].compute_at(s[C], yo)
    assert allocations(tl.lower(s, [A, C]))["B"] == (7, 5)   # not 66
    check_blur(s, A, C, sizes=(5,))


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


def test_compute_at_follows_a_later_split_of_its_loop():
    n = tl.var("n")
    A, B, C = blur(n)
    s = tl.create_schedule(C)
    s[B].compute_at(s[C], C.op.axis[0])
    s[C].split(C.op.axis[0], factor=8)
    assert s[B].state.attach == ("C", "y.inner")
    check_blur(s, A, C, sizes=(1, 9, 20))


def test_compute_at_a_parallel_loop_gets_a_buffer_per_iteration():
    n = tl.var("n")
    A, B, C = blur(n)
    s = tl.create_schedule(C)
    s[B].compute_at(s[C], C.op.axis[0])
    s[C].parallel(C.op.axis[0])
    text = str(tl.lower(s, [A, C]))
    assert text.index("# parallel") < text.index("allocate")
    check_blur(s, A, C, sizes=(1, 7, 64))


def test_fuse_of_an_attach_loop_is_refused():
    A, B, C = blur(8)
    s = tl.create_schedule(C)
    s[B].compute_at(s[C], C.op.axis[0])
    with pytest.raises(tl.ScheduleError, match="computed at loop y"):
        s[C].fuse(*C.op.axis)


def test_halide_outer_split_bounds_case():
    """Halide's bounds_inference_outer_split: the copy needs 5 rows of 512, not more."""
    inp = tl.placeholder((516, 512), dtype="int16", name="input")
    cpy = tl.compute((516, 512), lambda y, x: inp[y, x], name="input_cpy")
    cpy2 = tl.compute((516, 512), lambda y, x: cpy[y, x], name="input_cpy_2")
    sm = tl.compute((512, 512), lambda y, x: cpy2[y, x] + cpy2[y + 1, x] + cpy2[y + 2, x]
                    + cpy2[y + 3, x] + cpy2[y + 4, x], name="sum_stage")
    sc = tl.compute((512, 512), lambda y, x: sm[y, x], name="sum_stage_cpy")
    sc2 = tl.compute((512, 512), lambda y, x: sc[y, x], name="sum_stage_cpy_2")
    s = tl.create_schedule(sc2)
    s[sm].compute_inline()
    s[sc].compute_at(s[sc2], sc2.op.axis[0])
    xo, xi = s[sc].split(sc.op.axis[1], factor=32)
    s[cpy2].compute_at(s[sc], xo)
    s[cpy].compute_at(s[sc], sc.op.axis[0])
    shapes = allocations(tl.lower(s, [inp, sc2]))
    assert shapes["input_cpy"] == (5, 512)
    assert shapes["input_cpy_2"] == (5, 32)
    f = tl.build(s, [inp, sc2])
    a = np.random.default_rng(0).integers(-100, 100, size=(516, 512)).astype("int16")
    o = np.zeros((512, 512), "int16")
    f(a, o)
    np.testing.assert_array_equal(o, sum(a[d:d + 512] for d in range(5)).astype("int16"))


def test_reduction_computed_at_its_consumer():
    n = tl.var("n")
    A = tl.placeholder((n, 9), name="A")
    k = tl.reduce_axis((0, 9), name="k")
    R = tl.compute((n,), lambda i: tl.max(A[i, k], axis=k, where=A[i, k] < 0.5), name="R")
    D = tl.compute((n,), lambda i: R[i] * 2.0, name="D")
    s = tl.create_schedule(D)
    io, ii = s[D].split(D.op.axis[0], factor=4)
    s[R].compute_at(s[D], io)
    s[D].parallel(io)
    assert allocations(tl.lower(s, [A, D]))["R"] == (4,)
    f = tl.build(s, [A, D])
    for N in (1, 6, 33):
        a = np.random.default_rng(N).random((N, 9), dtype=np.float32)
        a[0] = 0.9  # a row where nothing passes: the identity (-inf) matters
        d = np.zeros(N, np.float32)
        f(a, d)
        ref = np.where(a < 0.5, a, -np.inf).max(axis=1) * 2
        np.testing.assert_array_equal(d, ref.astype(np.float32))


def test_chain_of_placements_and_two_producers_in_one_loop():
    n = tl.var("n")
    A = tl.placeholder((n,), name="A")
    B = tl.compute((n,), lambda i: A[i] + 1.0, name="B")
    C = tl.compute((n,), lambda i: B[i] * 2.0, name="C")
    D = tl.compute((n,), lambda i: B[i] + C[i], name="D")
    s = tl.create_schedule(D)
    s[C].compute_at(s[D], D.op.axis[0])
    s[B].compute_at(s[D], D.op.axis[0])
    f = tl.build(s, [A, D])
    a = np.arange(5, dtype=np.float32)
    d = np.zeros(5, np.float32)
    f(a, d)
    np.testing.assert_array_equal(d, (a + 1) * 3)


# ------------------------------------------------------------------------------ refusals
def test_compute_at_a_stage_that_does_not_read_it():
    n = tl.var("n")
    A = tl.placeholder((n,), name="A")
    B = tl.compute((n,), lambda i: A[i] + 1.0, name="B")
    C = tl.compute((n,), lambda i: A[i] * 2.0, name="C")
    D = tl.compute((n,), lambda i: B[i] + C[i], name="D")
    s = tl.create_schedule(D)
    with pytest.raises(tl.ScheduleError, match="C does not read B"):
        s[B].compute_at(s[C], C.op.axis[0])
    assert s[B].state.attach is None


def test_compute_at_with_a_reader_outside_the_loop_gives_a_witness():
    n = tl.var("n")
    A = tl.placeholder((n,), name="A")
    B = tl.compute((n,), lambda i: A[i] + 1.0, name="B")
    C = tl.compute((n,), lambda i: B[i] * 2.0, name="C")
    D = tl.compute((n,), lambda i: B[i] + C[i], name="D")
    s = tl.create_schedule(D)
    with pytest.raises(tl.IllegalScheduleError, match=r"D\[i=0\] reads B\[0\]") as e:
        s[B].compute_at(s[C], C.op.axis[0])
    assert e.value.witness.sink == {"i": 0}


def test_compute_at_of_a_recurrence_that_reads_outside_its_region():
    n = tl.var("n")
    x = tl.placeholder((n,), name="x")
    P = tl.recurrence((n,), lambda P, i: tl.if_then_else(i > 0, P[i - 1], 0.0) + x[i],
                      name="P")
    Q = tl.compute((n,), lambda i: P[i] * 2.0, name="Q")
    s = tl.create_schedule(Q)
    with pytest.raises(tl.IllegalScheduleError,
                       match=r"P\[i=1\] reads P\[0\] \(with n=2\), which is not computed"):
        s[P].compute_at(s[Q], Q.op.axis[0])
    # at root it is fine, and a recurrence may be placed where its reads stay inside
    io, ii = s[Q].split(Q.op.axis[0], factor=4)
    with pytest.raises(tl.IllegalScheduleError):
        s[P].compute_at(s[Q], io)


def test_cycles_and_outputs_are_refused():
    n = tl.var("n")
    A = tl.placeholder((n,), name="A")
    B = tl.compute((n,), lambda i: A[i] + 1.0, name="B")
    C = tl.compute((n,), lambda i: B[i] * 2.0, name="C")
    D = tl.compute((n,), lambda i: C[i] - 1.0, name="D")
    s = tl.create_schedule(D)
    s[C].compute_at(s[D], D.op.axis[0])
    with pytest.raises(tl.ScheduleError):
        s[C].compute_at(s[C], C.op.axis[0])
    s[B].compute_at(s[C], C.op.axis[0])
    with pytest.raises(tl.ScheduleError, match="cycle"):
        s[C].compute_at(s[B], B.op.axis[0])
    with pytest.raises(tl.ScheduleError, match="output"):
        s[D].compute_at(s[C], C.op.axis[0])
    with pytest.raises(tl.ScheduleError, match="not a loop"):
        s[B].compute_at(s[D], "nope")
    f = tl.build(s, [A, D])
    a = np.arange(4, dtype=np.float32)
    d = np.zeros(4, np.float32)
    f(a, d)
    np.testing.assert_array_equal(d, (a + 1) * 2 - 1)


def test_vector_loop_cannot_hold_a_stage():
    A, B, C = blur(8)
    s = tl.create_schedule(C)
    s[C].vectorize(C.op.axis[1])
    with pytest.raises(tl.ScheduleError, match="vector"):
        s[B].compute_at(s[C], C.op.axis[1])


# ------------------------------------------------------------------- inline, root, caches
def test_compute_inline_and_root():
    n = tl.var("n")
    A = tl.placeholder((n,), name="A")
    B = tl.compute((n,), lambda i: A[i] + 1.0, name="B")
    C = tl.compute((n,), lambda i: B[i] * B[i] + B[n - 1 - i], name="C")
    s = tl.create_schedule(C)
    s[B].compute_inline()
    text = str(tl.lower(s, [A, C]))
    assert "B" not in text.replace("def main", "")
    f = tl.build(s, [A, C])
    for N in (1, 4, 11):
        a = np.random.default_rng(N).random(N, dtype=np.float32)
        c = np.zeros(N, np.float32)
        f(a, c)
        np.testing.assert_allclose(c, (a + 1) ** 2 + (a + 1)[::-1], rtol=1e-6)


def test_compute_inline_refuses_reductions_recurrences_and_outputs():
    n = tl.var("n")
    A = tl.placeholder((n, 4), name="A")
    k = tl.reduce_axis((0, 4), name="k")
    R = tl.compute((n,), lambda i: tl.sum(A[i, k], axis=k), name="R")
    P = tl.recurrence((n,), lambda P, i: tl.if_then_else(i > 0, P[i - 1], 0.0) + R[i],
                      name="P")
    Q = tl.compute((n,), lambda i: P[i] + 1.0, name="Q")
    s = tl.create_schedule(Q)
    with pytest.raises(tl.ScheduleError, match="reduction"):
        s[R].compute_inline()
    with pytest.raises(tl.ScheduleError, match="recurrence"):
        s[P].compute_inline()
    with pytest.raises(tl.ScheduleError, match="output"):
        s[Q].compute_inline()


def matmul(N, M, K):
    A = tl.placeholder((N, K), name="A")
    B = tl.placeholder((K, M), name="B")
    k = tl.reduce_axis((0, K), name="k")
    C = tl.compute((N, M), lambda i, j: tl.sum(A[i, k] * B[k, j], axis=k), name="C")
    return A, B, C


@pytest.mark.parametrize("shape", [(64, 48, 40), (37, 29, 13), (1, 1, 1)])
def test_matmul_cache_write_compute_at_and_cache_read(shape):
    N, M, K = shape
    A, B, C = matmul(N, M, K)
    s = tl.create_schedule(C)
    CC = s.cache_write(C, "local")
    AA = s.cache_read(A, "local", [CC])
    i, j = s[C].op.axis
    io, jo, ii, ji = s[C].tile(i, j, 8, 16)
    s[CC].compute_at(s[C], jo)
    ci, cj = s[CC].op.axis
    (ck,) = s[CC].op.reduce_axis
    ko, ki = s[CC].split(ck, factor=4)
    s[CC].reorder(ko, ci, ki, cj)
    s[AA].compute_at(s[CC], ko)
    shapes = allocations(tl.lower(s, [A, B, C]))
    assert shapes["C_local"] == (min(8, N), min(16, M))
    assert shapes["A_local"] == (min(8, N), min(4, K))
    f = tl.build(s, [A, B, C])
    rng = np.random.default_rng(N)
    a = rng.random((N, K), dtype=np.float32)
    b = rng.random((K, M), dtype=np.float32)
    c = np.zeros((N, M), np.float32)
    f(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4)
    # the trace replays onto a fresh schedule
    A2, B2, C2 = matmul(N, M, K)
    s2 = s.replay(tl.create_schedule(C2))
    assert str(tl.lower(s2, [A2, B2, C2])) == str(tl.lower(s, [A, B, C]))


@pytest.mark.parametrize("n", [127, 128])
def test_unrolled_loops_under_compute_at_take_the_tile_bound(n):
    """An unrolled row loop of the local tile runs at most 4 times under its tile, not n:
    the full-tile case (unrolled, vector) is the one taken, and the tail still computes."""
    A, B, C = matmul(n, 40, 9)
    s = tl.create_schedule(C)
    CC = s.cache_write(C, "local")
    io, jo, ii, ji = s[C].tile(*s[C].op.axis, 4, 16)
    s[CC].compute_at(s[C], jo)
    ci, cj = s[CC].op.axis
    (ck,) = s[CC].op.reduce_axis
    s[CC].reorder(ck, ci, cj)
    s[CC].unroll(ci)
    s[CC].vectorize(cj)
    text = str(tl.lower(s, [A, B, C]))
    assert "range(i_outer * 4, i_outer * 4 + 4):  # unrolled" in text
    assert f"i_outer * 4 + {n}" not in text
    f = tl.build(s, [A, B, C])
    rng = np.random.default_rng(n)
    a, b = rng.random((n, 9), dtype=np.float32), rng.random((9, 40), dtype=np.float32)
    c = np.zeros((n, 40), np.float32)
    f(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5)


def test_cache_misuse():
    A, B, C = matmul(8, 8, 8)
    s = tl.create_schedule(C)
    with pytest.raises(tl.ScheduleError, match="scope"):
        s.cache_read(A, "registers", [C])
    with pytest.raises(tl.ScheduleError, match="not part of this schedule"):
        s.cache_read(tl.placeholder((8,), name="D"), "local", [C])
    AA = s.cache_read(A, "local", [C])
    with pytest.raises(tl.ScheduleError, match="A_local does not read B"):
        s.cache_read(B, "local", [AA])
    s2 = tl.create_schedule(C)
    s2[C].split(C.op.axis[0], factor=2)
    with pytest.raises(tl.ScheduleError, match="apply cache_write first"):
        s2.cache_write(C, "local")
    with pytest.raises(tl.ScheduleError, match="input"):
        s2.cache_write(A, "local")


# ---------------------------------------------------------------------------------- rfactor
def test_rfactor_sum_over_1027_with_nparts_4_then_parallel():
    A = tl.placeholder((1027,), name="A")
    k = tl.reduce_axis((0, 1027), name="k")
    C = tl.compute((), lambda: tl.sum(A[k], axis=k), name="C")
    s = tl.create_schedule(C)
    ko, ki = s[C].split(k, nparts=4)
    R = s.rfactor(C, ko)
    assert R.shape[0].value == 4
    s[R].parallel(R.op.axis[0])
    text = str(tl.lower(s, [A, C]))
    assert "# parallel" in text and "min(257, 1027 - k_outer * 257)" in text
    f = tl.build(s, [A, C])
    a = np.random.default_rng(0).random(1027, dtype=np.float32)
    c = np.zeros((), np.float32)
    f(a, c)
    np.testing.assert_allclose(c, a.astype(np.float64).sum(), rtol=1e-5)


@pytest.mark.parametrize("reducer,ident", [(tl.min, np.inf), (tl.max, -np.inf)])
def test_rfactor_predicated_min_max_vectorised(reducer, ident):
    n = tl.var("n")
    A = tl.placeholder((n, 10), name="A")
    k = tl.reduce_axis((0, 10), name="k")
    C = tl.compute((n,), lambda i: reducer(A[i, k], axis=k, where=A[i, k] > 0.5), name="C")
    s = tl.create_schedule(C)
    ko, ki = s[C].split(k, factor=4)
    R = s.rfactor(C, ki)
    kr = s[R].op.reduce_axis[0]
    s[R].reorder(R.op.axis[1], kr, R.op.axis[0])
    s[R].vectorize(R.op.axis[0])
    f = tl.build(s, [A, C])
    np_red = np.min if reducer is tl.min else np.max
    for N in (1, 3, 17):
        a = np.random.default_rng(N).random((N, 10), dtype=np.float32)
        a[0] = 0.1    # nothing passes: the identity is the answer
        c = np.zeros(N, np.float32)
        f(a, c)
        ref = np_red(np.where(a > 0.5, a, ident), axis=1).astype(np.float32)
        np.testing.assert_array_equal(c, ref)


@pytest.mark.parametrize("n", [1, 7, 64])
@pytest.mark.parametrize("reducer, ref", [(tl.sum, np.sum), (tl.max, np.max)])
def test_rfactor_of_the_only_reduce_loop_leaves_no_reduction(n, reducer, ref):
    # the partial results are the values themselves (an UnboundLocalError before: the
    # factored stage had an init statement and no reduce axis)
    A = tl.placeholder((3, n), name="A")
    k = tl.reduce_axis((0, n), name="k")
    C = tl.compute((3,), lambda i: reducer(A[i, k], axis=k, where=A[i, k] > 0.25), name="C")
    s = tl.create_schedule(C)
    R = s.rfactor(C, k)
    assert not R.op.reduce_axis
    s[R].parallel(R.op.axis[0])
    f = tl.build(s, [A, C])
    a = np.random.default_rng(n).random((3, n), dtype=np.float32)
    c = np.zeros(3, np.float32)
    f(a, c)
    ident = 0.0 if reducer is tl.sum else -np.inf
    np.testing.assert_allclose(c, ref(np.where(a > 0.25, a, ident), axis=1), rtol=1e-6)


def test_rfactor_symbolic_extent_and_misuse():
    n = tl.var("n")
    A = tl.placeholder((n,), name="A")
    k = tl.reduce_axis((0, n), name="k")
    C = tl.compute((), lambda: tl.sum(A[k], axis=k), name="C")
    s = tl.create_schedule(C)
    ko, ki = s[C].split(k, factor=8)
    R = s.rfactor(C, ki)
    s[R].parallel(R.op.axis[0])
    f = tl.build(s, [A, C])
    for N in (1, 7, 8, 100):
        a = np.random.default_rng(N).random(N, dtype=np.float32)
        c = np.zeros((), np.float32)
        f(a, c)
        np.testing.assert_allclose(c, a.sum(), rtol=1e-5)
    B = tl.placeholder((4, 5), name="B")
    D = tl.compute((4,), lambda i: B[i, 0] * 2.0, name="D")
    s2 = tl.create_schedule(D)
    with pytest.raises(tl.ScheduleError, match="not a reduction"):
        s2.rfactor(D, D.op.axis[0])
    j = tl.reduce_axis((0, 5), name="j")
    E = tl.compute((4,), lambda i: tl.sum(B[i, j], axis=j), name="E")
    s3 = tl.create_schedule(E)
    with pytest.raises(tl.ScheduleError, match="not a reduction loop"):
        s3.rfactor(E, E.op.axis[0])
    am = tl.compute((4,), lambda i: tl.argmax(B[i, j], axis=j), name="am")
    with pytest.raises(NotImplementedError, match="several values"):
        tl.create_schedule(am).rfactor(am, j)


# ------------------------------------------------------------------------------- packing
@pytest.mark.parametrize("shape", [(37, 45, 23), (16, 32, 8), (1, 1, 1)])
def test_pack_matmul_operand_into_blocks(shape):
    N, M, K = shape
    A, B, C = matmul(N, M, K)
    s = tl.create_schedule(C)
    BP = s.pack(B, 1, 16)
    assert [getattr(x, "value", x) for x in BP.shape] == [-(-M // 16), K, 16]
    i, j = C.op.axis
    (k,) = C.op.reduce_axis
    io, jo, ii, ji = s[C].tile(i, j, 8, 16)
    s[C].reorder(io, jo, k, ii, ji)
    s[BP].compute_root()
    text = str(tl.lower(s, [A, B, C]))
    assert "B_packed[" in text and "* B[" not in text
    f = tl.build(s, [A, B, C])
    rng = np.random.default_rng(M)
    a = rng.random((N, K), dtype=np.float32)
    b = rng.random((K, M), dtype=np.float32)
    c = np.zeros((N, M), np.float32)
    f(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4)


def test_pack_misuse():
    A, B, C = matmul(4, 4, 4)
    s = tl.create_schedule(C)
    with pytest.raises(tl.ScheduleError, match="axis must be < 2"):
        s.pack(B, 2, 4)
    with pytest.raises(tl.ScheduleError, match="factor must be >= 1"):
        s.pack(B, 1, 0)


def test_primitives_on_an_inlined_stage_are_refused():
    A = tl.placeholder((8,), name="A")
    P = tl.compute((8,), lambda i: A[i] * 2.0, name="P")
    C = tl.compute((8,), lambda i: P[i] + 1.0, name="C")
    s = tl.create_schedule(C)
    s[P].compute_inline()
    for prim in (lambda: s[P].compute_inline(), lambda: s[P].compute_root(),
                 lambda: s[P].split(P.op.axis[0], factor=2),
                 lambda: s[P].compute_at(s[C], C.op.axis[0]),
                 lambda: s[P].parallel(P.op.axis[0])):
        with pytest.raises(tl.ScheduleError, match="inlined"):
            prim()


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


def _check_rect_blur(s, A, C, n, m):
    a = np.random.default_rng(n * m).random((n + 2, m), dtype=np.float32)
    c = np.full((n, m), np.nan, np.float32)
    tl.build(s, [A, C])(a, c)
    b = a * 2 + 1
    np.testing.assert_allclose(c, b[:-2] + b[1:-1] + b[2:], rtol=1e-5)


@pytest.mark.parametrize("n,m", [(1, 1), (5, 3), (16, 33)])
def test_reorder_storage_transposes_a_stage_and_its_readers(n, m):
    A, B, C = blur(n, m)
    s = tl.create_schedule(C)
    BT = s[B].reorder_storage("x", "y")
    assert [x.value for x in BT.shape] == [m, n + 2]
    assert s[BT].loops == ["y", "x"]            # the loops keep their order
    assert 's["B"].reorder_storage("x", "y")' in s.trace_text()
    f = tl.lower(s, [A, C])
    assert allocations(f)["B"] == (m, n + 2)
    _check_rect_blur(s, A, C, n, m)
    again = tl.create_schedule(C).replay(tl.create_schedule(C), s.trace)
    assert str(tl.lower(again, [A, C])) == str(f)


def test_reorder_storage_of_a_cache_tile_then_placed():
    A, B, C = blur(20, 24)
    s = tl.create_schedule(C)
    CL = s.cache_write(C, "local")
    CL = s[CL].reorder_storage("x", "y")
    yo, xo, yi, xi = s[C].tile(*s[C].op.axis, 4, 8)
    s[CL].compute_at(s[C], xo)
    assert allocations(tl.lower(s, [A, C]))["C_local"] == (8, 4)
    _check_rect_blur(s, A, C, 20, 24)


def test_reorder_storage_misuse():
    A, B, C = blur(4)
    s = tl.create_schedule(C)
    with pytest.raises(tl.ScheduleError, match="output of the schedule"):
        s[C].reorder_storage("x", "y")
    with pytest.raises(tl.ScheduleError, match="each spatial axis of stage B once"):
        s[B].reorder_storage("x")
    with pytest.raises(tl.ScheduleError, match="argument 1 must be a spatial axis"):
        s[B].reorder_storage("x", "q")
    s[B].split("x", factor=2)
    with pytest.raises(tl.ScheduleError, match="apply reorder_storage first"):
        s[B].reorder_storage("x", "y")


def _batched_register_tile(nb, m, n, kk, tile, lanes=16, parallel=True):
    """A batched matmul C = A @ B whose accumulator tile (cache_write) is computed at the
    column tile, its rows and column vectors unrolled, under a fused (batch, row-tile)
    loop: (schedule, A, B, C)."""
    A = tl.placeholder((nb, m, kk), "float32", name="A")
    B = tl.placeholder((nb, kk, n), "float32", name="B")
    k = tl.reduce_axis((0, kk), name="k")
    C = tl.compute((nb, m, n), lambda b, i, j: tl.sum(A[b, i, k] * B[b, k, j], axis=k),
                   name="C")
    s = tl.create_schedule(C)
    s.cache_write("C", "local")
    s["C"].tile("i", "j", *tile)
    s["C"].split("j.inner", factor=lanes)
    s["C"].vectorize("j.inner.inner")
    s["C_local"].compute_at("C", "j.outer")
    s["C_local"].split("j", factor=lanes)
    s["C_local"].reorder("b", "k", "i", "j.outer", "j.inner")
    s["C_local"].unroll("i")
    s["C_local"].unroll("j.outer")
    s["C_local"].vectorize("j.inner")
    s["C"].fuse("b", "i.outer")
    if parallel:
        s["C"].parallel("b.i.outer.fused")
    return s, A, B, C


def test_a_local_tile_under_a_fused_loop_has_a_one_piece_corner_and_stays_in_registers():
    """The accumulator tile of a batched matmul under a fused (batch, row-tile) parallel
    loop: its corner along the rows is 8 (f mod 16) — islpy 2026.2.1 gives it as three
    pieces, and `i1 - select(...)` kept the tile out of registers (4x slower). The corner
    is composed from the batch's, one piece: the index is `i1 - f % 16 * 8`, the same
    expression as the row loop's start, and the tile has no stack access; numpy's
    result."""
    import re

    s, A, B, C = _batched_register_tile(8, 128, 128, 128, (8, 48))
    text = str(tl.lower(s, [A, B, C]))
    assert "select" not in text, text
    tgt = "llvm -mtriple=x86_64-unknown-linux-gnu -mcpu=skylake-avx512"
    f = tl.build(s, [A, B, C], target=tgt)
    asm = f.get_source("asm")
    assert len(re.findall(r"\(%rsp", asm)) < 24, "the tile went to the stack"
    a = np.random.default_rng(1).standard_normal((8, 128, 128)).astype("f4")
    b = np.random.default_rng(2).standard_normal((8, 128, 128)).astype("f4")
    got = np.zeros((8, 128, 128), "f4")
    tl.build(s, [A, B, C])(a, b, got)
    np.testing.assert_allclose(got, a @ b, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("rows,tile", [(128, (12, 32)), (61, (6, 48))])
def test_a_local_tile_whose_rows_do_not_divide_stays_in_registers(rows, tile):
    """The same batched matmul with row tiles that do not divide the rows: isl writes the
    copy-out's row under the fused loop with divisions (`127 - (120 f + 131 i + 127) mod
    132` for 12-row tiles of 128 rows), and the row in the tile as that minus the corner —
    equal to the copy-out loop's own variable, which LLVM cannot see, so the tile went to
    the stack, a store after every FMA (0.25 ms against 0.07). The index into the tile is
    now isl's affine form of it: no division in the copy-out's index into the tile, the
    tile no array in memory after LLVM's passes, numpy's result."""
    import re

    s, A, B, C = _batched_register_tile(3, rows, 128, 128, tile)
    text = str(tl.lower(s, [A, B, C]))
    copy_out = re.findall(r"C\[[^\]]*\] = C_local\[([^\]]*)\]", text)
    assert copy_out, text
    assert not any("%" in x or "//" in x for x in copy_out), copy_out
    tgt = "llvm -mtriple=x86_64-unknown-linux-gnu -mcpu=skylake-avx512"
    ll = tl.build(s, [A, B, C], target=tgt).get_source("ll")
    assert not re.search(r"alloca \[\d+ x float\]", ll), "the tile stayed in memory"
    a = np.random.default_rng(1).standard_normal((3, rows, 128)).astype("f4")
    b = np.random.default_rng(2).standard_normal((3, 128, 128)).astype("f4")
    got = np.zeros((3, rows, 128), "f4")
    tl.build(s, [A, B, C])(a, b, got)
    np.testing.assert_allclose(got, a @ b, rtol=1e-4, atol=1e-3)


@pytest.mark.slow
def test_register_tiles_under_fused_loops_match_numpy_at_any_sizes():
    """Property: a batched matmul's accumulator tile (cache_write, computed at the column
    tile, rows and column vectors unrolled) under a fused (batch, row-tile) loop, at sizes
    the tile does and does not divide — 1, primes, larger — against numpy. The indices
    into the tile are isl's affine forms where its loop expressions had divisions."""
    from hypothesis import example, given, settings
    from hypothesis import strategies as hs

    @settings(max_examples=25, deadline=None, derandomize=True)
    @example(1, 1, 1, 1, 1, 4, False)
    @example(3, 29, 37, 7, 6, 12, True)
    @example(2, 13, 40, 5, 7, 16, True)
    @given(hs.integers(1, 3), hs.integers(1, 29), hs.integers(1, 40), hs.integers(1, 7),
           hs.integers(1, 7), hs.sampled_from([4, 8, 12, 16]), hs.booleans())
    def check(nb, m, n, kk, mr, nc, par):
        s, A, B, C = _batched_register_tile(nb, m, n, kk, (mr, nc), lanes=4, parallel=par)
        rng = np.random.default_rng(nb * 1000 + m)
        a = rng.standard_normal((nb, m, kk)).astype("f4")
        b = rng.standard_normal((nb, kk, n)).astype("f4")
        got = np.full((nb, m, n), np.nan, "f4")
        tl.build(s, [A, B, C])(a, b, got)
        np.testing.assert_allclose(got, a @ b, rtol=1e-4, atol=1e-4)

    check()


def _blur_at_tile(n, rows, cols, bcols, lanes=16):
    """A 3x3 blur whose first stage, its rows fused with its column tiles (split by
    `bcols`), is computed at each `rows` x `cols` tile of the second (split by 16 inside)."""
    X = tl.placeholder((n + 2, n + 2), "float32", name="X")
    bx = tl.compute((n + 2, n), lambda i, j: X[i, j] + X[i, j + 1] + X[i, j + 2], name="bx")
    by = tl.compute((n, n), lambda i, j: bx[i, j] + bx[i + 1, j] + bx[i + 2, j], name="by")
    s = tl.create_schedule(by)
    io, jo, ii, ji = s[by].tile("i", "j", rows, cols)
    jio, jii = s[by].split(ji, factor=lanes)
    s[by].vectorize(jii)
    s[by].fuse(io, jo)
    bo, bi = s[bx].split("j", factor=bcols)
    s[bx].vectorize(bi)
    s[bx].fuse("i", bo)
    s[bx].compute_at(s[by], jio)
    return s, X, by


@pytest.mark.parametrize("n", [64, 29])
def test_a_stage_at_a_strided_loop_indexes_its_buffer_by_the_loops_counter(n):
    """The blur's first stage, its rows fused with its 16-column tiles, computed at each
    16-column vector of the second stage's 16 x 256 tiles: isl runs the fused loop every
    (columns / 16)-th value, and the buffer's row is `(... + i_j_outer_fused) // 60 - ...`
    in its value — the loop's counter k (`v = first + step * k`), which the index now is
    (isl's affine hull with the counter as a variable): no division in the index, the
    3 x 16 buffer no array in memory after LLVM's passes (measured 0.138 -> 0.104 ms at
    1024^2 on Zen 5), numpy's result at a size the tiles divide and one they do not."""
    import re

    s, X, by = _blur_at_tile(n, 16, 256, 16)
    text = str(tl.lower(s, [X, by]))
    assert "_k in range" in text, text                      # the strided loop's counter
    stores = re.findall(r"bx\[([^\]]*)\] = ", text)
    assert stores and not any("//" in x or "%" in x for x in stores), stores
    tgt = "llvm -mtriple=x86_64-unknown-linux-gnu -mcpu=skylake-avx512"
    ll = tl.build(s, [X, by], target=tgt).get_source("ll")
    assert not re.search(r"alloca \[\d+ x float\]", ll), "the buffer stayed in memory"
    x = np.random.default_rng(3).standard_normal((n + 2, n + 2)).astype("f4")
    got = np.full((n, n), np.nan, "f4")
    tl.build(s, [X, by])(x, got)
    b = x[:, :-2] + x[:, 1:-1] + x[:, 2:]
    np.testing.assert_allclose(got, b[:-2] + b[1:-1] + b[2:], rtol=1e-5, atol=1e-5)


@pytest.mark.slow
def test_blur_stages_at_strided_loops_match_numpy_at_any_sizes():
    """Property: the blur's first stage, rows fused with its column tiles, computed at each
    vector of the second stage's tiles (isl runs the fused loop with a stride, the buffer
    indexed by its counter) at sizes the tiles do and do not divide, against numpy."""
    from hypothesis import example, given, settings
    from hypothesis import strategies as hs

    @settings(max_examples=20, deadline=None, derandomize=True)
    @example(1, 1, 4, 4)
    @example(29, 7, 24, 8)
    @example(37, 16, 64, 4)
    @given(hs.integers(1, 40), hs.integers(1, 16), hs.sampled_from([4, 8, 12, 24, 64]),
           hs.sampled_from([4, 8, 16]))
    def check(n, rows, cols, bcols):
        s, X, by = _blur_at_tile(n, rows, cols, bcols, lanes=4)
        x = np.random.default_rng(n * 100 + rows).standard_normal((n + 2, n + 2)).astype("f4")
        got = np.full((n, n), np.nan, "f4")
        tl.build(s, [X, by])(x, got)
        b = x[:, :-2] + x[:, 1:-1] + x[:, 2:]
        np.testing.assert_allclose(got, b[:-2] + b[1:-1] + b[2:], rtol=1e-5, atol=1e-5)

    check()
