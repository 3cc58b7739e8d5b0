"""Reductions across the threads of a block (ir/gpu_block.py): `bind` of a reduce loop to
threadIdx, the tree in shared memory, a block's phases (softmax in one kernel). CI runs the
kernels in the interpreter with CUDA semantics (threads as coroutines between barriers, in
index order and backwards) and compiles them for both GPU targets; the `gpu` tests run
them on the device."""

import shutil
import subprocess

import numpy as np
import pytest

import tensorlang as tl
from tensorlang.ir.interp import run_lowered
from tensorlang.schedule import gpu

from .test_cuda import BOTH, GPU


def _sizes(shape):
    """(n, m): the given ints, or size variables."""
    return shape if shape is not None else (tl.var("n"), tl.var("m"))


def row_reduce(reducer="sum", threads=64, shape=None):
    n, m = _sizes(shape)
    A = tl.placeholder((n, m), name="A")
    k = tl.reduce_axis((0, m), name="k")
    fn = {"sum": tl.sum, "max": tl.max, "min": tl.min, "prod": tl.prod}[reducer]
    B = tl.compute((n,), lambda i: fn(A[i, k], axis=k), name="B")
    s = tl.create_schedule(B)
    ko, ki = s[B].split(k, factor=threads)
    s[B].reorder(B.op.axis[0], ki, ko)
    s[B].bind(B.op.axis[0], "blockIdx.x")
    s[B].bind(ki, "threadIdx.x")
    ref = {"sum": np.sum, "max": np.max, "min": np.min, "prod": np.prod}[reducer]
    return s, [A, B], lambda a: ref(a, axis=1)


def column_sum(shape=None):
    """32 outputs per block on threadIdx.x, the reduction over 8 threads of threadIdx.y
    (one tree per column)."""
    n, m = _sizes(shape)
    A = tl.placeholder((n, m), name="A")
    k = tl.reduce_axis((0, n), name="k")
    B = tl.compute((m,), lambda j: tl.sum(A[k, j], axis=k), name="B")
    s = tl.create_schedule(B)
    gpu.reduce(s, B)
    return s, [A, B], lambda a: a.sum(0)


def softmax(threads=64, m=None, n=None, cache=True):
    """One kernel, a block per row: the row max and the sum across the block's threads,
    then the outputs on the same threads (three phases, barriers between). With a constant
    row length `m` the row is copied to shared memory first (`gpu.rows`' cache, unless
    `cache` is False)."""
    n, m = (tl.var("n") if n is None else n), (tl.var("m") if m is None else m)
    X = tl.placeholder((n, m), name="X")
    k1 = tl.reduce_axis((0, m), name="k1")
    M = tl.compute((n,), lambda i: tl.max(X[i, k1], axis=k1), name="M")
    k2 = tl.reduce_axis((0, m), name="k2")
    S = tl.compute((n,), lambda i: tl.sum(tl.exp(X[i, k2] - M[i]), axis=k2), name="S")
    Y = tl.compute((n, m), lambda i, j: tl.exp(X[i, j] - M[i]) / S[i], name="Y")
    s = tl.create_schedule(Y)
    gpu.rows(s, Y, threads, cache=cache)

    def ref(x):
        e = np.exp(x - x.max(1, keepdims=True))
        return e / e.sum(1, keepdims=True)
    return s, [X, Y], ref


CASES = {"sum": row_reduce, "max": lambda: row_reduce("max"),
         "min": lambda: row_reduce("min", 48), "prod": lambda: row_reduce("prod", 7),
         "column_sum": column_sum, "softmax": softmax,
         "softmax_odd_threads": lambda: softmax(33)}
SHAPES = [(1, 1), (3, 7), (2, 64), (5, 70), (4, 257)]


def _data(case, shape):
    rng = np.random.default_rng(sum(shape))
    a = rng.standard_normal(shape).astype(np.float32)
    if case == "prod":
        a = (0.9 + 0.2 * rng.random(shape)).astype(np.float32)
    return a


@pytest.mark.parametrize("order", ["forward", "reverse"])
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("case", sorted(CASES))
def test_cross_thread_reductions_in_the_interpreter(case, shape, order):
    s, args, ref = CASES[case]()
    low = tl.lower(s, args)
    a = _data(case, shape)
    out = np.zeros(ref(a).shape, np.float32)
    run_lowered(low, [a, out], parallel_order=order)
    np.testing.assert_allclose(out, ref(a), rtol=2e-5, atol=1e-5)


@pytest.mark.parametrize("case", sorted(CASES))
def test_cross_thread_reductions_compile_for_both_targets(case, tmp_path):
    s, args, _ = CASES[case]()
    cu = tl.build(s, args, target="cuda")
    src = cu.get_source()
    assert "__syncthreads" in src and "__shared__" in src
    assert len(cu.cuda.launches) == 1            # softmax included: one kernel
    ptx = tl.build(s, args, target="nvptx").get_source()
    assert "bar.sync" in ptx
    if shutil.which("nvcc"):
        cu.save(tmp_path / "k.cu")
        r = subprocess.run(["nvcc", "-ptx", "-arch=sm_90", "-std=c++17", "-o",
                            str(tmp_path / "k.ptx"), str(tmp_path / "k.cu")],
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stderr


CACHED = [(64, 256), (64, 70), (33, 132), (64, 4096), (256, 1)]


@pytest.mark.parametrize("order", ["forward", "reverse"])
@pytest.mark.parametrize("threads,m", CACHED)
def test_rows_keeps_a_constant_row_in_shared_memory(threads, m, order):
    """The row is read from global memory once (a shared copy, 16-byte vectors where the
    row allows), the reductions and the outputs read the copy."""
    s, args, ref = softmax(threads, m)
    low = tl.lower(s, args)
    text = str(low)
    assert f"X_shared = allocate(float32, [1, {m}], 'shared')" in text
    assert text.count("X[") == 1                       # the copy's read only
    vector = m % 4 == 0 and m >= 4 * threads
    assert ("# vectorized" in text) == vector
    if vector:
        assert "*(const float4 *)" in tl.build(s, args, target="cuda").get_source()
        assert "ld.global.v4" in tl.build(s, args, target="nvptx").get_source()
    for n in (1, 3):
        a = _data("softmax", (n, m))
        out = np.zeros((n, m), np.float32)
        run_lowered(low, [a, out], parallel_order=order)
        np.testing.assert_allclose(out, ref(a), rtol=2e-5, atol=1e-6)


def test_rows_cache_can_be_turned_off_and_skips_long_rows():
    n = tl.var("n")
    X = tl.placeholder((n, 10000), name="X")        # 40 kB: over gpu.ROW_CACHE_BYTES
    k = tl.reduce_axis((0, 10000), name="k")
    M = tl.compute((n,), lambda i: tl.max(X[i, k], axis=k), name="M")
    Y = tl.compute((n, 10000), lambda i, j: X[i, j] - M[i], name="Y")
    s = tl.create_schedule(Y)
    gpu.rows(s, Y, 128)
    assert "X_shared" not in str(tl.lower(s, [X, Y]))
    s, args, _ = softmax(64, 256)
    s2 = tl.create_schedule(args[1])
    gpu.rows(s2, args[1], 64, cache=False)
    assert "X_shared" not in str(tl.lower(s2, args))


def test_the_tree_works_for_any_thread_count():
    from tensorlang.ir.stmt import Barrier, For, LoopKind
    from tensorlang.ir.visit import walk_stmt

    for threads, levels in ((64, 6), (48, 6), (7, 3)):
        s, args, _ = row_reduce("sum", threads)
        body = tl.lower(s, args).body
        loops = [x for x in walk_stmt(body) if isinstance(x, For) and
                 x.kind is LoopKind.GPU_THREAD]
        assert [int(x.extent.value) for x in loops] == [threads]
        # a barrier after the partial sums are stored, after each level, after the result
        bars = [x for x in walk_stmt(body) if isinstance(x, Barrier)]
        assert len(bars) == levels + 3
        # levels of 32 values or fewer are within warp 0: __syncwarp when the threads are
        # whole warps along threadIdx.x
        warp = sum(x.scope == "warp" for x in bars)
        assert warp == (6 if threads == 64 else 0)


def test_warp_barriers_only_where_warps_are_whole():
    s, args, _ = row_reduce("sum", 64)
    assert "__syncwarp();" in tl.build(s, args, target="cuda").get_source()
    assert "bar.warp.sync" in tl.build(s, args, target="nvptx").get_source()
    s, args, _ = column_sum()           # the tree runs along threadIdx.y: block barriers
    assert "__syncwarp" not in tl.build(s, args, target="cuda").get_source()


def test_what_cannot_run_across_threads_is_refused():
    # a reduction over blocks: refused, with rfactor as the advice
    n, m = tl.var("n"), tl.var("m")
    A = tl.placeholder((n, m), name="A")
    k = tl.reduce_axis((0, m), name="k")
    B = tl.compute((n,), lambda i: tl.sum(A[i, k], axis=k), name="B")
    s = tl.create_schedule(B)
    ko, ki = s[B].split(k, factor=64)
    with pytest.raises(tl.IllegalScheduleError, match="rfactor"):
        s[B].bind(ko, "blockIdx.x")
    # a recurrence (not a reduction) over threads: refused with the witness
    X = tl.placeholder((n,), name="X")
    P = tl.recurrence((n,), lambda P, i: tl.if_then_else(i == 0, X[i], P[i - 1] + X[i]),
                      name="P")
    s = tl.create_schedule(P)
    with pytest.raises(tl.IllegalScheduleError, match="P\\[i=1\\] reads P\\[0\\]"):
        s[P].bind(P.op.axis[0], "threadIdx.x")
    # an argmax (two accumulators) across threads: not implemented, said plainly
    V = tl.placeholder((n, m), name="V")
    r = tl.reduce_axis((0, m), name="r")
    I = tl.compute((n,), lambda i: tl.argmax(V[i, r], axis=r), name="I")
    s = tl.create_schedule(I)
    ro, ri = s[I].split(r, factor=32)
    s[I].reorder(I.op.axis[0], ri, ro)
    s[I].bind(I.op.axis[0], "blockIdx.x")
    s[I].bind(ri, "threadIdx.x")
    with pytest.raises(NotImplementedError, match="across threads"):
        tl.lower(s, [V, I])


@GPU
@pytest.mark.gpu
@BOTH
@pytest.mark.parametrize("shape", [(1, 1), (5, 70), (300, 1000), (3, 4099)])
@pytest.mark.parametrize("case", sorted(CASES))
def test_cross_thread_reductions_on_the_gpu(case, shape, target):
    s, args, ref = CASES[case]()
    f = tl.build(s, args, target=target)
    a = _data(case, shape)
    if case == "prod":
        a = a[:, :50].copy() if a.shape[1] > 50 else a
    out = np.zeros(ref(a).shape, np.float32)
    f(a, out)
    np.testing.assert_allclose(out, ref(a), rtol=1e-4, atol=1e-5)


@GPU
@pytest.mark.gpu
@BOTH
@pytest.mark.parametrize("threads,m", CACHED + [(256, 4096), (128, 1000), (256, 4099)])
def test_cached_rows_on_the_gpu(threads, m, target):
    """A softmax whose row is copied to shared memory (float4 where the row allows), on
    the device, with a row count that is not a multiple of anything."""
    s, args, ref = softmax(threads, m)
    f = tl.build(s, args, target=target)
    a = _data("softmax", (7, m))
    out = np.zeros((7, m), np.float32)
    f(a, out)
    np.testing.assert_allclose(out, ref(a), rtol=1e-4, atol=1e-6)
    # device views that start 4 bytes past a 16-byte boundary: the lane-by-lane path
    torch = pytest.importorskip("torch")
    tb = torch.zeros(7 * m + 1, device="cuda")[1:].view(7, m)
    tb.copy_(torch.from_numpy(a))
    to = torch.zeros(7 * m + 1, device="cuda")[1:].view(7, m)
    f(tb, to)
    np.testing.assert_allclose(to.cpu().numpy(), ref(a), rtol=1e-4, atol=1e-6)
