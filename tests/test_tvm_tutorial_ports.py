"""TVM's TE tutorials ported line by line, with only the imports changed (`import tensorlang
as te`, and `tvm` the same module): "Schedule Primitives in TVM" and "Reduce" (the parts
whose primitives tensorlang has: the cross-thread reduction's `set_store_predicate` and
`tvm.tir.const` are TVM's alone; `split(nparts=)` of a symbolic extent is refused, as
isl cannot express it), "Compute and Reduce with Tuple Inputs" and "Scan and Recurrent Kernel"
(its GPU schedule needs the step loop inside the bound loops here; its scan over two states
is refused), each result checked against numpy."""

import types

import numpy as np
import pytest

import tensorlang as te

tvm = te


def test_schedule_primitives_tutorial():
    n = te.var("n")
    m = te.var("m")

    # declare a matrix element-wise multiply
    A = te.placeholder((m, n), name="A")
    B = te.placeholder((m, n), name="B")
    C = te.compute((m, n), lambda i, j: A[i, j] * B[i, j], name="C")

    s = te.create_schedule([C.op])
    # lower will transform the computation from definition to the real
    # callable function. With argument `simple_mode=True`, it will
    # return you a readable C like statement, we use it here to print the
    # schedule result.
    text = str(tvm.lower(s, [A, B, C], simple_mode=True))
    assert "for i" in text and "for j" in text

    # split
    A = te.placeholder((m,), name="A")
    B = te.compute((m,), lambda i: A[i] * 2, name="B")

    s = te.create_schedule(B.op)
    xo, xi = s[B].split(B.op.axis[0], factor=32)
    text = str(tvm.lower(s, [A, B], simple_mode=True))
    assert "i_outer" in text and "i_inner" in text
    _check(tvm.build(s, [A, B]), lambda a: a * 2, (37,))

    A = te.placeholder((m,), name="A")
    B = te.compute((m,), lambda i: A[i], name="B")

    s = te.create_schedule(B.op)
    # nparts on a symbolic extent makes the inner extent ceil(m / 32), and the index
    # outer * ceil(m / 32) + inner is not affine in m: isl (Presburger arithmetic) cannot
    # express it, so tensorlang refuses it, saying what to do; with a constant extent it works
    with pytest.raises(te.ScheduleError, match="nparts needs loop i to have a constant"):
        bx, tx = s[B].split(B.op.axis[0], nparts=32)
    A = te.placeholder((100,), name="A")
    B = te.compute((100,), lambda i: A[i], name="B")
    s = te.create_schedule(B.op)
    bx, tx = s[B].split(B.op.axis[0], nparts=32)
    _check(tvm.build(s, [A, B]), lambda a: a, (100,))

    # tile
    A = te.placeholder((m, n), name="A")
    B = te.compute((m, n), lambda i, j: A[i, j], name="B")

    s = te.create_schedule(B.op)
    xo, yo, xi, yi = s[B].tile(B.op.axis[0], B.op.axis[1], x_factor=10, y_factor=5)
    _check(tvm.build(s, [A, B]), lambda a: a, (13, 7))

    # fuse
    A = te.placeholder((m, n), name="A")
    B = te.compute((m, n), lambda i, j: A[i, j], name="B")

    s = te.create_schedule(B.op)
    # tile to four axes first: (i.outer, j.outer, i.inner, j.inner)
    xo, yo, xi, yi = s[B].tile(B.op.axis[0], B.op.axis[1], x_factor=10, y_factor=5)
    # then fuse (i.inner, j.inner) into one axis: (i.inner.j.inner.fused)
    fused = s[B].fuse(xi, yi)  # noqa: F841 (the tutorial names it)
    _check(tvm.build(s, [A, B]), lambda a: a, (23, 11))

    # reorder
    A = te.placeholder((m, n), name="A")
    B = te.compute((m, n), lambda i, j: A[i, j], name="B")

    s = te.create_schedule(B.op)
    # tile to four axes first: (i.outer, j.outer, i.inner, j.inner)
    xo, yo, xi, yi = s[B].tile(B.op.axis[0], B.op.axis[1], x_factor=10, y_factor=5)
    # then reorder the axes: (i.inner, j.outer, i.outer, j.inner)
    s[B].reorder(xi, yo, xo, yi)
    _check(tvm.build(s, [A, B]), lambda a: a, (21, 6))

    # bind
    A = te.placeholder((n,), name="A")
    B = te.compute(A.shape, lambda i: A[i] * 2, name="B")

    s = te.create_schedule(B.op)
    bx, tx = s[B].split(B.op.axis[0], factor=64)
    s[B].bind(bx, te.thread_axis("blockIdx.x"))
    s[B].bind(tx, te.thread_axis("threadIdx.x"))
    text = str(tvm.lower(s, [A, B], simple_mode=True))
    assert "blockIdx.x" in text and "threadIdx.x" in text
    assert "__global__" in tvm.build(s, [A, B], "cuda").get_source()

    # compute_at
    A = te.placeholder((m,), name="A")
    B = te.compute((m,), lambda i: A[i] + 1, name="B")
    C = te.compute((m,), lambda i: B[i] * 2, name="C")

    s = te.create_schedule(C.op)
    s[B].compute_at(s[C], C.op.axis[0])
    _check(tvm.build(s, [A, C]), lambda a: (a + 1) * 2, (19,))

    # compute_inline
    s = te.create_schedule(C.op)
    s[B].compute_inline()
    _check(tvm.build(s, [A, C]), lambda a: (a + 1) * 2, (19,))

    # compute_root
    s = te.create_schedule(C.op)
    s[B].compute_at(s[C], C.op.axis[0])
    s[B].compute_root()
    _check(tvm.build(s, [A, C]), lambda a: (a + 1) * 2, (19,))


def test_reduction_tutorial():
    n = te.var("n")
    m = te.var("m")
    A = te.placeholder((n, m), name="A")
    k = te.reduce_axis((0, m), "k")
    B = te.compute((n,), lambda i: te.sum(A[i, k], axis=k), name="B")

    s = te.create_schedule(B.op)
    text = str(tvm.lower(s, [A, B], simple_mode=True))
    assert "for k" in text

    ko, ki = s[B].split(B.op.reduce_axis[0], factor=16)
    xo, xi = s[B].split(B.op.axis[0], factor=32)
    _check_sum(tvm.build(s, [A, B]))

    s[B].bind(xo, te.thread_axis("blockIdx.x"))
    s[B].bind(xi, te.thread_axis("threadIdx.x"))
    assert "threadIdx.x" in str(tvm.lower(s, [A, B], simple_mode=True))

    # reduction factoring and parallelization
    s = te.create_schedule(B.op)
    ko, ki = s[B].split(B.op.reduce_axis[0], factor=16)
    BF = s.rfactor(B, ki)
    text = str(tvm.lower(s, [A, B], simple_mode=True))
    assert BF.name in text
    _check_sum(tvm.build(s, [A, B]))

    # describe reduction with commutative reducer
    n = te.var("n")
    m = te.var("m")
    product = te.comm_reducer(lambda x, y: x * y, lambda t: te.const(1, dtype=t),
                              name="product")
    A = te.placeholder((n, m), name="A")
    k = te.reduce_axis((0, m), name="k")
    B = te.compute((n,), lambda i: product(A[i, k], axis=k), name="B")
    f = tvm.build(te.create_schedule(B.op), [A, B])
    a = np.random.default_rng(0).uniform(0.5, 1.5, (5, 7)).astype("f4")
    b = np.zeros(5, "f4")
    f(a, b)
    np.testing.assert_allclose(b, a.prod(1), rtol=1e-5)


def test_tuple_inputs_tutorial():
    # describe batchwise computation
    n = te.var("n")
    m = te.var("m")
    A0 = te.placeholder((m, n), name="A0")
    A1 = te.placeholder((m, n), name="A1")
    B0, B1 = te.compute((m, n), lambda i, j: (A0[i, j] + 2, A1[i, j] * 3), name="B")

    # The generated IR code would be:
    s = te.create_schedule(B0.op)
    text = str(tvm.lower(s, [A0, A1, B0, B1], simple_mode=True))
    assert text.count("for ") == 2
    f = tvm.build(s, [A0, A1, B0, B1])
    rng = np.random.default_rng(3)
    for shape in ((1, 1), (7, 13), (40, 65)):
        a0, a1 = (rng.standard_normal(shape).astype("f4") for _ in range(2))
        b0, b1 = np.zeros(shape, "f4"), np.zeros(shape, "f4")
        f(a0, a1, b0, b1)
        np.testing.assert_allclose(b0, a0 + 2, rtol=1e-6)
        np.testing.assert_allclose(b1, a1 * 3, rtol=1e-6)

    # describe reduction with tuple inputs
    # x and y are the operands of reduction, both of them is a tuple of index
    # and value.
    def fcombine(x, y):
        lhs = tvm.tir.Select((x[1] >= y[1]), x[0], y[0])
        rhs = tvm.tir.Select((x[1] >= y[1]), x[1], y[1])
        return lhs, rhs

    # our identity element also need to be a tuple, so `fidentity` accepts
    # two types as inputs.
    def fidentity(t0, t1):
        return tvm.tir.const(-1, t0), tvm.te.min_value(t1)

    argmax = te.comm_reducer(fcombine, fidentity, name="argmax")

    # describe the reduction computation
    m = te.var("m")
    n = te.var("n")
    idx = te.placeholder((m, n), name="idx", dtype="int32")
    val = te.placeholder((m, n), name="val", dtype="int32")
    k = te.reduce_axis((0, n), "k")
    T0, T1 = te.compute((m,), lambda i: argmax((idx[i, k], val[i, k]), axis=k), name="T")

    # the generated IR code would be:
    s = te.create_schedule(T0.op)
    text = str(tvm.lower(s, [idx, val, T0, T1], simple_mode=True))
    assert "for k" in text
    f = tvm.build(s, [idx, val, T0, T1])
    for shape in ((1, 1), (7, 13), (40, 65)):
        v = rng.integers(-5, 5, shape).astype("i4")
        ix = np.tile(np.arange(shape[1], dtype="i4"), (shape[0], 1))
        t0, t1 = np.zeros(shape[0], "i4"), np.zeros(shape[0], "i4")
        f(ix, v, t0, t1)
        np.testing.assert_array_equal(t0, v.argmax(1))
        np.testing.assert_array_equal(t1, v.max(1))

    # schedule operation with tuple inputs
    n = te.var("n")
    m = te.var("m")
    A0 = te.placeholder((m, n), name="A0")
    B0, B1 = te.compute((m, n), lambda i, j: (A0[i, j] + 2, A0[i, j] * 3), name="B")
    A1 = te.placeholder((m, n), name="A1")
    C = te.compute((m, n), lambda i, j: A1[i, j] + B0[i, j], name="C")

    s = te.create_schedule(C.op)
    s[B0].compute_at(s[C], C.op.axis[0])
    # as you can see in the below generated IR code:
    text = str(tvm.lower(s, [A0, A1, C], simple_mode=True))
    assert "B_v0 = allocate(float32, [1, n], 'local')" in text
    assert "B_v1 = allocate(float32, [1, n], 'local')" in text
    f = tvm.build(s, [A0, A1, C])
    for shape in ((1, 1), (7, 13), (40, 65)):
        a0, a1 = (rng.standard_normal(shape).astype("f4") for _ in range(2))
        c = np.zeros(shape, "f4")
        f(a0, a1, c)
        np.testing.assert_allclose(c, a1 + (a0 + 2), rtol=1e-6)


def test_scan_tutorial():
    m = te.var("m")
    n = te.var("n")
    X = te.placeholder((m, n), name="X")
    s_state = te.placeholder((m, n))
    s_init = te.compute((1, n), lambda _, i: X[0, i])
    s_update = te.compute((m, n), lambda t, i: s_state[t - 1, i] + X[t, i])
    s_scan = tvm.te.scan(s_init, s_update, s_state, inputs=[X])

    # schedule the scan cell
    s = te.create_schedule(s_scan.op)
    num_thread = 256
    block_x = te.thread_axis("blockIdx.x")
    thread_x = te.thread_axis("threadIdx.x")
    xo, xi = s[s_init].split(s_init.op.axis[1], factor=num_thread)
    s[s_init].bind(xo, block_x)
    s[s_init].bind(xi, thread_x)
    xo, xi = s[s_update].split(s_update.op.axis[1], factor=num_thread)
    s[s_update].bind(xo, block_x)
    s[s_update].bind(xi, thread_x)
    assert "threadIdx.x" in str(tvm.lower(s, [X, s_scan], simple_mode=True))

    # build and verify: TVM keeps the step loop inside the kernel's bound loops; tensorlang
    # binds only outermost loops and says so, and the step loop moved inside them works
    with pytest.raises(te.ScheduleError, match="not among the outermost"):
        tvm.build(s, [X, s_scan], "cuda", name="myscan")
    s[s_update].reorder(xo, xi, s_update.op.axis[0])
    assert "__global__" in tvm.build(s, [X, s_scan], "cuda", name="myscan").get_source()
    s = te.create_schedule(s_scan.op)     # the same scan, on the CPU
    fscan = tvm.build(s, [X, s_scan], name="myscan")
    n = 1024
    m = 10
    a_np = np.random.uniform(size=(m, n)).astype(s_scan.dtype)
    b = np.zeros((m, n), dtype=s_scan.dtype)
    fscan(a_np, b)
    np.testing.assert_allclose(b, np.cumsum(a_np, axis=0), rtol=1e-5)

    # multi-stage scan cell
    m = te.var("m")
    n = te.var("n")
    X = te.placeholder((m, n), name="X")
    s_state = te.placeholder((m, n))
    s_init = te.compute((1, n), lambda _, i: X[0, i])
    s_update_s1 = te.compute((m, n), lambda t, i: s_state[t - 1, i] * 2, name="s1")
    s_update_s2 = te.compute((m, n), lambda t, i: s_update_s1[t, i] + X[t, i], name="s2")
    s_scan = tvm.te.scan(s_init, s_update_s2, s_state, inputs=[X])

    s = te.create_schedule(s_scan.op)
    xo, xi = s[s_update_s2].split(s_update_s2.op.axis[1], factor=32)
    # s1 reads the state: tensorlang substitutes it into the scan's recurrence, so it has
    # no stage to compute_at, and the refusal says so
    with pytest.raises(te.ScheduleError, match="s1 is part of scan scan's cell"):
        s[s_update_s1].compute_at(s[s_update_s2], xo)
    assert "i_outer" in str(tvm.lower(s, [X, s_scan], simple_mode=True))
    a_np = np.random.uniform(size=(6, 37)).astype("f4")
    b = np.zeros_like(a_np)
    tvm.build(s, [X, s_scan])(a_np, b)
    want = a_np.copy()
    for t in range(1, 6):
        want[t] = want[t - 1] * 2 + a_np[t]
    np.testing.assert_allclose(b, want, rtol=1e-5)

    # multiple states
    m = te.var("m")
    n = te.var("n")
    l = te.var("l")  # noqa: E741 (the tutorial's name)
    X = te.placeholder((m, n), name="X")
    s_state1 = te.placeholder((m, n))
    s_state2 = te.placeholder((m, l))
    s_init1 = te.compute((1, n), lambda _, i: X[0, i])
    s_init2 = te.compute((1, l), lambda _, i: 0.0)
    s_update1 = te.compute((m, n), lambda t, i: s_state1[t - 1, i] + X[t, i])
    s_update2 = te.compute((m, l), lambda t, i: s_state2[t - 1, i] + s_state1[t - 1, 0])
    with pytest.raises(NotImplementedError, match="several states"):
        s_scan1, s_scan2 = tvm.te.scan(
            [s_init1, s_init2], [s_update1, s_update2], [s_state1, s_state2], inputs=[X]
        )


def _check(f, fn, shape):
    a = np.random.default_rng(1).standard_normal(shape).astype("f4")
    out = np.zeros(shape, "f4")
    f(a, out)
    np.testing.assert_allclose(out, fn(a), rtol=1e-6)


def _check_sum(f):
    for shape in ((1, 1), (33, 17), (64, 48)):
        a = np.random.default_rng(2).standard_normal(shape).astype("f4")
        b = np.zeros(shape[0], "f4")
        f(a, b)
        np.testing.assert_allclose(b, a.sum(1), rtol=1e-4, atol=1e-5)


# ------------------------------------------------ "How to optimize GEMM on CPU" (opt_gemm)
def opt_gemm(M, K, N, bn=32, kfactor=4):
    """TVM's opt_gemm tutorial (gallery/how_to/optimize_operators/opt_gemm.py, its TE
    version), each stage's schedule as the tutorial writes it; returns {stage: (schedule,
    [A, B, C])}. Beside the import, `tvm.tir.indexmod` is `te.indexmod` (the namespace
    below) and packedB's shape is `N // bn` (the tutorial's `N / bn` is a float in Python
    3; later TVM versions write `//`)."""
    tvm = types.SimpleNamespace(build=te.build, lower=te.lower, tir=te)
    stages = {}

    # Algorithm
    k = te.reduce_axis((0, K), "k")
    A = te.placeholder((M, K), name="A")
    B = te.placeholder((K, N), name="B")
    C = te.compute((M, N), lambda m, n: te.sum(A[m, k] * B[k, n], axis=k), name="C")

    # Default schedule
    s = te.create_schedule(C.op)
    stages["baseline"] = (s, [A, B, C])

    # Blocking
    s = te.create_schedule(C.op)
    # Blocking by loop tiling
    mo, no, mi, ni = s[C].tile(C.op.axis[0], C.op.axis[1], bn, bn)
    (kaxis,) = s[C].op.reduce_axis
    ko, ki = s[C].split(kaxis, factor=kfactor)
    # Hoist reduction domain outside the blocking loop
    s[C].reorder(mo, no, ko, ki, mi, ni)
    stages["blocking"] = (s, [A, B, C])

    # Vectorization
    s = te.create_schedule(C.op)
    mo, no, mi, ni = s[C].tile(C.op.axis[0], C.op.axis[1], bn, bn)
    (kaxis,) = s[C].op.reduce_axis
    ko, ki = s[C].split(kaxis, factor=kfactor)
    s[C].reorder(mo, no, ko, ki, mi, ni)
    # Vectorization
    s[C].vectorize(ni)
    stages["vectorization"] = (s, [A, B, C])

    # Loop permutation
    s = te.create_schedule(C.op)
    mo, no, mi, ni = s[C].tile(C.op.axis[0], C.op.axis[1], bn, bn)
    (kaxis,) = s[C].op.reduce_axis
    ko, ki = s[C].split(kaxis, factor=kfactor)
    # re-ordering
    s[C].reorder(mo, no, ko, mi, ki, ni)
    s[C].vectorize(ni)
    stages["loop permutation"] = (s, [A, B, C])

    # Array packing
    # We have to re-write the algorithm slightly.
    packedB = te.compute((N // bn, K, bn),
                         lambda bigN, k, littleN: B[k, bigN * bn + littleN], name="packedB")
    C = te.compute((M, N),
                   lambda m, n: te.sum(A[m, k] * packedB[n // bn, k, tvm.tir.indexmod(n, bn)],
                                       axis=k),
                   name="C")
    s = te.create_schedule(C.op)
    mo, no, mi, ni = s[C].tile(C.op.axis[0], C.op.axis[1], bn, bn)
    (kaxis,) = s[C].op.reduce_axis
    ko, ki = s[C].split(kaxis, factor=kfactor)
    s[C].reorder(mo, no, ko, mi, ki, ni)
    s[C].vectorize(ni)
    bigN, _, littleN = s[packedB].op.axis
    s[packedB].vectorize(littleN)
    s[packedB].parallel(bigN)
    stages["array packing"] = (s, [A, B, C])

    # Write cache for blocks
    s = te.create_schedule(C.op)
    # Allocate write cache
    CC = s.cache_write(C, "global")
    mo, no, mi, ni = s[C].tile(C.op.axis[0], C.op.axis[1], bn, bn)
    # Write cache is computed at no
    s[CC].compute_at(s[C], no)
    # New inner axes
    mc, nc = s[CC].op.axis
    (kaxis,) = s[CC].op.reduce_axis
    ko, ki = s[CC].split(kaxis, factor=kfactor)
    s[CC].reorder(ko, mc, ki, nc)
    s[CC].vectorize(nc)
    # TODO: Add separation optimization
    s[CC].unroll(ki)
    bigN, _, littleN = s[packedB].op.axis
    s[packedB].vectorize(littleN)
    s[packedB].parallel(bigN)
    stages["write cache"] = (s, [A, B, C])

    # Parallel
    s = te.create_schedule(C.op)
    CC = s.cache_write(C, "global")
    mo, no, mi, ni = s[C].tile(C.op.axis[0], C.op.axis[1], bn, bn)
    s[CC].compute_at(s[C], no)
    mc, nc = s[CC].op.axis
    (kaxis,) = s[CC].op.reduce_axis
    ko, ki = s[CC].split(kaxis, factor=kfactor)
    s[CC].reorder(ko, mc, ki, nc)
    s[CC].vectorize(nc)
    s[CC].unroll(ki)
    # parallel
    s[C].parallel(mo)
    bigN, _, littleN = s[packedB].op.axis
    s[packedB].vectorize(littleN)
    s[packedB].parallel(bigN)
    stages["parallel"] = (s, [A, B, C])
    return stages, tvm


OPT_GEMM_STAGES = ("baseline", "blocking", "vectorization", "loop permutation",
                   "array packing", "write cache", "parallel")


def _gemm_inputs(M, K, N):
    rng = np.random.default_rng(M)
    return rng.random((M, K), dtype=np.float32), rng.random((K, N), dtype=np.float32)


def test_opt_gemm_tutorial_every_stage_matches_numpy():
    """M = K = N = 64, bn = 32 (the tutorial's factors, blocks that divide), and
    M, K, N = 37, 45, 64: rows and the reduction not divisible by the block or kfactor."""
    for M, K, N in ((64, 64, 64), (37, 45, 64)):
        stages, tvm = opt_gemm(M, K, N)
        assert tuple(stages) == OPT_GEMM_STAGES
        a, b = _gemm_inputs(M, K, N)
        for name, (s, args) in stages.items():
            func = tvm.build(s, args, target="llvm", name="mmult")
            c = np.full((M, N), np.nan, np.float32)
            func(a, b, c)
            np.testing.assert_allclose(c, a @ b, rtol=1e-5, err_msg=f"{name} at {M, K, N}")
        # the stages do what the tutorial says of them
        text = {name: str(tvm.lower(s, args, simple_mode=True))
                for name, (s, args) in stages.items()}
        assert "vectorized" not in text["blocking"] and "vectorized" in text["vectorization"]
        assert "packedB" in text["array packing"] and "C_global" in text["write cache"]
        # packedB's panels are parallel from array packing on; the row tiles at the last
        assert text["parallel"].count("# parallel") == text["write cache"].count("# parallel") + 1


def test_opt_gemm_tutorial_at_67_packs_b_only_where_bn_divides_n():
    """At M = K = N = 67 the stages before array packing match numpy; from array packing on
    the tutorial's packedB of N // bn = 2 panels lacks columns 64-66, which C reads: the
    declaration assumes bn divides N, and tensorlang refuses the read out of packedB's
    bounds at build, naming it, instead of reading past its end."""
    M = K = N = 67
    stages, tvm = opt_gemm(M, K, N)
    a, b = _gemm_inputs(M, K, N)
    for name in OPT_GEMM_STAGES[:4]:
        s, args = stages[name]
        c = np.full((M, N), np.nan, np.float32)
        tvm.build(s, args)(a, b, c)
        np.testing.assert_allclose(c, a @ b, rtol=1e-5, err_msg=name)
    for name in OPT_GEMM_STAGES[4:]:
        s, args = stages[name]
        with pytest.raises(te.TensorlangError, match="packedB"):
            tvm.build(s, args)(a, b, np.zeros((M, N), np.float32))


# ------------------------------------------- "External Tensor Functions" (extern tutorial)
def test_extern_tutorial():
    """TVM's extern tutorial line by line. Where it differs: `bias`, a float32 `te.var` in
    TVM, is a 0-d placeholder (tensorlang's scalar parameters are integer sizes), passed as
    a 0-d array; `tvm.nd.array(...)`/`.numpy()` are numpy arrays; the packed function's
    arguments are numpy arrays, so `my_tvm_addone` writes `y[:] = x + 1` where TVM's copies
    an NDArray (`tvm.nd.array(x.numpy() + 1).copyto(y)`)."""
    tvm = types.SimpleNamespace(build=te.build, tir=te, register_func=te.register_func,
                                contrib=te.contrib, testing=np.testing)

    n = 1024
    l = 128  # noqa: E741 (the tutorial's name)
    m = 235
    bias = te.placeholder((), dtype="float32", name="bias")
    A = te.placeholder((n, l), name="A")
    B = te.placeholder((l, m), name="B")
    C = te.extern(
        (n, m),
        [A, B],
        lambda ins, outs: tvm.tir.call_packed(
            "tvm.contrib.cblas.matmul", ins[0], ins[1], outs[0], False, False
        ),
        name="C",
    )
    D = te.compute(C.shape, lambda i, j: C[i, j] + bias, name="D")
    s = te.create_schedule(D.op)

    f = tvm.build(s, [A, B, D, bias], "llvm")
    a = np.random.uniform(size=(n, l)).astype(A.dtype)
    b = np.random.uniform(size=(l, m)).astype(B.dtype)
    d = np.zeros((n, m), dtype=D.dtype)
    bb = np.array(10.0, dtype="float32")
    f(a, b, d, bb)
    tvm.testing.assert_allclose(d, np.dot(a, b) + 10, rtol=1e-5)

    # Extern Contrib Wrappers
    cblas = tvm.contrib.cblas
    C = cblas.matmul(A, B)
    D = te.compute(C.shape, lambda i, j: C[i, j] + bias, name="D")
    s = te.create_schedule(D.op)
    f = tvm.build(s, [A, B, D, bias], "llvm")
    d = np.zeros((n, m), dtype=D.dtype)
    f(a, b, d, bb)
    tvm.testing.assert_allclose(d, np.dot(a, b) + 10, rtol=1e-5)

    # Hook Python Function as Extern
    @tvm.register_func("tvm.contrib.my_tvm_addone", override=True)
    def my_tvm_addone(x, y):
        print("my_tvm_addone signatures: %s, %s" % (type(x), type(y)))  # noqa: UP031
        y[:] = x + 1

    A = te.placeholder((n,), name="A")
    B = te.extern(
        A.shape,
        [A],
        lambda ins, outs: tvm.tir.call_packed("tvm.contrib.my_tvm_addone", ins[0], outs[0]),
        name="C",
    )
    s = te.create_schedule(B.op)
    f = tvm.build(s, [A, B], "llvm")
    a = np.random.uniform(size=(n,)).astype(A.dtype)
    b = np.random.uniform(size=(n,)).astype(B.dtype)
    f(a, b)
    tvm.testing.assert_allclose(b, a + 1, rtol=1e-5)
