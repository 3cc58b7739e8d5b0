"""target="cuda": CUDA C from the loop IR. Compile-only tests (nvcc -ptx, no GPU) run on
CI; tests marked `gpu` launch the kernels through pycuda and compare with numpy."""

import os
import shutil
import subprocess

import numpy as np
import pytest

import tensorlang as tl


def _has_gpu() -> bool:
    try:
        import pycuda.driver as drv

        drv.init()
        return drv.Device.count() > 0
    except Exception:  # noqa: BLE001 (no pycuda, no driver, no device)
        return False


GPU = pytest.mark.skipif(not _has_gpu(), reason="needs an NVIDIA GPU and pycuda")
# every GPU test runs both backends: CUDA C through nvcc, PTX through LLVM's NVPTX
BOTH = pytest.mark.parametrize("target", ["cuda", "nvptx"])


def vadd(factor=128, n=None):
    n = tl.var("n") if n is None else n
    A, B = tl.placeholder((n,), name="A"), tl.placeholder((n,), name="B")
    C = tl.compute((n,), lambda i: A[i] + B[i] * 2.0, name="C")
    s = tl.create_schedule(C)
    bo, bi = s[C].split(C.op.axis[0], factor=factor)
    s[C].bind(bo, "blockIdx.x")
    s[C].bind(bi, tl.thread_axis("threadIdx.x"))
    return s, [A, B, C], lambda a, b: a + b * np.float32(2.0)


def _sizes(shape):
    """(n, m, p): the given ints, or size variables."""
    return shape if shape is not None else (tl.var("n"), tl.var("m"), tl.var("p"))


def matmul(tile=16, dtype="float32", shape=None):
    n, m, p = _sizes(shape)
    A = tl.placeholder((n, p), dtype, name="A")
    B = tl.placeholder((p, m), dtype, name="B")
    k = tl.reduce_axis((0, p), name="k")
    C = tl.compute((n, m), lambda i, j: tl.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = tl.create_schedule(C)
    io, jo, ii, ji = s[C].tile(C.op.axis[0], C.op.axis[1], tile, tile)
    s[C].bind(io, "blockIdx.y")
    s[C].bind(jo, "blockIdx.x")
    s[C].bind(ii, "threadIdx.y")
    s[C].bind(ji, "threadIdx.x")
    return s, [A, B, C], lambda a, b: a @ b


def matmul_register_tiles(shape=None):
    """64 x 64 outputs per block, 16 x 16 threads, each thread a 4 x 4 tile accumulated in a
    local (register) buffer placed at the thread loop, with k outside the unrolled tile."""
    n, m, p = _sizes(shape)
    A = tl.placeholder((n, p), name="A")
    B = tl.placeholder((p, m), name="B")
    k = tl.reduce_axis((0, p), name="k")
    C = tl.compute((n, m), lambda i, j: tl.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = tl.create_schedule(C)
    CL = s.cache_write(C, "local")
    i, j = s[C].op.axis
    bi, bj, ti, tj = s[C].tile(i, j, 64, 64)
    tio, tii = s[C].split(ti, factor=4)
    tjo, tji = s[C].split(tj, factor=4)
    s[C].reorder(bi, bj, tio, tjo, tii, tji)
    for loop, tag in ((bi, "blockIdx.y"), (bj, "blockIdx.x"), (tio, "threadIdx.y"),
                      (tjo, "threadIdx.x")):
        s[C].bind(loop, tag)
    s[CL].compute_at(s[C], tjo)
    li, lj = s[CL].op.axis
    (lk,) = s[CL].op.reduce_axis
    s[CL].reorder(lk, li, lj)
    s[CL].unroll(li)
    s[CL].unroll(lj)
    return s, [A, B, C], lambda a, b: a @ b


def pipeline(n=None):
    """Two stages (exp, then a row sum per thread), float16 storage, an integer floor
    division and a data-dependent gather with its run-time check."""
    n = tl.var("n") if n is None else n
    X = tl.placeholder((n, 8), "float16", name="X")
    Idx = tl.placeholder((n,), "int32", name="I")
    E = tl.compute((n, 8), lambda i, j: tl.exp(X[i, j]), name="E")
    k = tl.reduce_axis(8, name="k")
    R = tl.compute((n,), lambda i: tl.sum(E[Idx[i], k].astype("float32"), axis=k), name="R")
    S = tl.compute((n,), lambda i: R[i] + (Idx[i] // 3).astype("float32"), name="S")
    s = tl.create_schedule(S)
    for T in (E, R, S):
        bo, bi = s[T].split(T.op.axis[0], factor=32)
        s[T].bind(bo, "blockIdx.x")
        s[T].bind(bi, "threadIdx.x")

    def ref(x, idx):
        e = np.exp(x.astype(np.float32)).astype(np.float16)
        return e[idx].astype(np.float32).sum(1) + (idx // 3).astype(np.float32)
    return s, [X, Idx, S], ref


def matmul_shared(tile=16, k_tile=16, shape=None):
    """16 x 16 threads, one output each; A's and B's k-slices of the block in shared memory,
    copied by all the block's threads (the k loop inside the thread loops)."""
    s, args, ref = matmul(tile, shape=shape)
    A, B, C = args
    AA = s.cache_read(A, "shared", [C])
    BB = s.cache_read(B, "shared", [C])
    io, jo, ii, ji = s[C].leaf_iter_vars[:4]
    ko, ki = s[C].split(C.op.reduce_axis[0], factor=k_tile)
    s[AA].compute_at(s[C], ko)
    s[BB].compute_at(s[C], ko)
    return s, args, ref


def matmul_shared_textbook(tile=16, k_tile=16, shape=None):
    """The textbook shared-memory matmul: per block, a loop over k-slices that copies A's
    and B's slices to shared memory, each element by the thread of its position (the
    copies' own loops bound to threadIdx), then accumulates over the slice."""
    s, args, ref = matmul(tile, shape=shape)
    A, B, C = args
    AA = s.cache_read(A, "shared", [C])
    BB = s.cache_read(B, "shared", [C])
    io, jo, ii, ji = s[C].leaf_iter_vars[:4]
    ko, ki = s[C].split(C.op.reduce_axis[0], factor=k_tile)
    s[C].reorder(io, jo, ko, ii, ji, ki)
    for X in (AA, BB):
        s[X].compute_at(s[C], ko)
        s[X].bind(s[X].op.axis[0], "threadIdx.y")
        s[X].bind(s[X].op.axis[1], "threadIdx.x")
    return s, args, ref


def sgemm(block=(64, 64), thread=(4, 4), k_tile=8, shape=None):
    """The library's SGEMM schedule: shared-memory k-slices and register tiles."""
    from tensorlang.schedule import gpu

    n, m, p = _sizes(shape)
    A = tl.placeholder((n, p), name="A")
    B = tl.placeholder((p, m), name="B")
    k = tl.reduce_axis((0, p), name="k")
    C = tl.compute((n, m), lambda i, j: tl.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = tl.create_schedule(C)
    gpu.matmul(s, C, block, thread, k_tile)
    return s, [A, B, C], lambda a, b: a @ b


def vadd_shared(n=None):
    """Each thread reads only the element it copied to shared memory: the barriers can go."""
    s, args, ref = vadd(64, n)
    A, B, C = args
    AA = s.cache_read(A, "shared", [C])
    s[AA].compute_at(s[C], s[C].leaf_iter_vars[1])
    s[AA].no_sync()
    return s, args, ref


CASES = {"vadd": vadd, "matmul": matmul, "matmul_register_tiles": matmul_register_tiles,
         "pipeline": pipeline, "matmul_shared": matmul_shared,
         "matmul_shared_textbook": matmul_shared_textbook, "sgemm": sgemm,
         "vadd_shared": vadd_shared}


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
@pytest.mark.parametrize("case", sorted(CASES))
def test_generated_cuda_compiles_with_nvcc(case, tmp_path):
    s, args, _ = CASES[case]()
    f = tl.build(s, args, target="cuda", name=f"tl_{case}")
    src = f.get_source()
    assert "__global__" in src and "__launch_bounds__" in src
    path = tmp_path / "k.cu"
    f.save(path)
    for variant in ([], ["-DTL_INDEX_64"]):     # 32- and 64-bit index arithmetic
        r = subprocess.run(["nvcc", "-ptx", "-arch=sm_90", "-std=c++17", *variant, "-o",
                            str(tmp_path / "k.ptx"), str(path)], capture_output=True,
                           text=True)
        assert r.returncode == 0, r.stderr
        assert os.path.getsize(tmp_path / "k.ptx") > 0


def test_building_for_cuda_needs_no_gpu_and_checks_geometry():
    s, args, _ = vadd(factor=2048)
    with pytest.raises(tl.ScheduleError, match="2048 threads per block; the limit is 1024"):
        tl.build(s, args, target="cuda")
    n = tl.var("n")
    A = tl.placeholder((n,), name="A")
    B = tl.compute((n,), lambda i: A[i] + 1.0, name="B")
    s = tl.create_schedule(B)
    s[B].bind(B.op.axis[0], "threadIdx.x")       # a symbolic number of threads
    with pytest.raises(tl.ScheduleError, match="constant extent"):
        tl.build(s, [A, B], target="cuda")
    with pytest.raises(tl.ScheduleError, match="constant extent"):
        tl.build(s, [A, B], target="nvptx")


@GPU
@pytest.mark.gpu
@pytest.mark.parametrize("size", [1, 127, 128, 1000, 4099])
@BOTH
def test_vector_add_on_the_gpu(size, target):
    s, args, ref = vadd()
    f = tl.build(s, args, target=target)
    rng = np.random.default_rng(size)
    a, b = rng.random(size, dtype=np.float32), rng.random(size, dtype=np.float32)
    c = np.zeros(size, np.float32)
    f(a, b, c)
    np.testing.assert_allclose(c, ref(a, b), rtol=1e-6)


@GPU
@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(1, 1, 1), (16, 16, 16), (37, 53, 29), (128, 96, 64),
                                   (130, 67, 200)])
@pytest.mark.parametrize("make", [matmul, matmul_register_tiles, matmul_shared,
                                  matmul_shared_textbook, sgemm])
@BOTH
def test_matmul_on_the_gpu(make, shape, target):
    n, m, p = shape
    s, args, ref = make()
    f = tl.build(s, args, target=target)
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, p)).astype(np.float32)
    b = rng.standard_normal((p, m)).astype(np.float32)
    c = np.zeros((n, m), np.float32)
    f(a, b, c)
    np.testing.assert_allclose(c, ref(a, b), rtol=1e-4, atol=1e-4)


@GPU
@pytest.mark.gpu
@pytest.mark.parametrize("size", [1, 63, 64, 1000])
@BOTH
def test_shared_copy_without_barriers_on_the_gpu(size, target):
    s, args, ref = vadd_shared()
    f = tl.build(s, args, target=target)
    if target == "cuda":
        assert "__syncthreads" not in f.get_source() and "__shared__" in f.get_source()
    else:     # LLVM forwards each thread's own store: the tile is gone altogether
        assert "bar.sync" not in f.get_source()
    a, b = np.arange(size, dtype=np.float32), np.ones(size, np.float32)
    c = np.zeros(size, np.float32)
    f(a, b, c)
    np.testing.assert_allclose(c, ref(a, b))


def wide_index(n=None):
    """An index whose intermediate value needs 64 bits though every buffer is small."""
    n = tl.var("n") if n is None else n
    A = tl.placeholder((5,), name="A")
    B = tl.compute((n,), lambda i: A[(i.astype("int64") * 3000000007) % 5], name="B")
    s = tl.create_schedule(B)
    bo, bi = s[B].split(B.op.axis[0], factor=32)
    s[B].bind(bo, "blockIdx.x")
    s[B].bind(bi, "threadIdx.x")
    return s, [A, B], lambda a, size: a[(np.arange(size, dtype=object) * 3000000007 % 5)
                                        .astype(np.int64)]


def test_index_arithmetic_is_32_bit_only_where_the_sizes_allow_it():
    from tensorlang.backends.cuda.index_width import fits_int32

    s, args, _ = sgemm()
    (launch,) = tl.build(s, args, target="cuda").cuda.launches
    assert "typedef int tl_idx;" in tl.build(s, args, target="cuda").get_source()
    assert fits_int32(launch, {"n": 4096, "m": 4096, "p": 4096})
    assert fits_int32(launch, {"n": 40000, "m": 40000, "p": 40000})    # 1.6e9 elements
    assert not fits_int32(launch, {"n": 50000, "m": 50000, "p": 8})     # 2.5e9 elements
    assert not fits_int32(launch, {"n": 2 ** 31 - 1, "m": 1, "p": 1})   # n + 15p overflows
    s, args, _ = wide_index()
    (launch,) = tl.build(s, args, target="cuda").cuda.launches
    assert not fits_int32(launch, {"n": 10})


@GPU
@pytest.mark.gpu
def test_the_64_bit_variant_runs_where_32_bits_would_overflow():
    s, args, ref = wide_index()
    f = tl.build(s, args, target="cuda")
    a = np.arange(5, dtype=np.float32) + 1
    b = np.zeros(70, np.float32)
    f(a, b)
    assert f.cuda.wide({"n": 70})
    np.testing.assert_array_equal(b, ref(a, 70))


@GPU
@pytest.mark.gpu
@BOTH
def test_pipeline_and_index_check_on_the_gpu(target):
    s, args, ref = pipeline()
    f = tl.build(s, args, target=target)
    rng = np.random.default_rng(1)
    x = rng.standard_normal((70, 8)).astype(np.float16)
    idx = rng.integers(0, 70, 70).astype(np.int32)
    out = np.zeros(70, np.float32)
    f(x, idx, out)
    np.testing.assert_allclose(out, ref(x, idx), rtol=2e-3, atol=2e-3)
    idx[33] = 70
    with pytest.raises(tl.IndexBoundsError) as err:
        f(x, idx, out)
    assert err.value.index == 70 and err.value.witness["i"] == 33


@GPU
@pytest.mark.gpu
@BOTH
def test_device_arrays_are_used_in_place(target):
    import pycuda.gpuarray as gpuarray

    s, args, ref = vadd()
    f = tl.build(s, args, target=target)
    a = np.arange(1000, dtype=np.float32)
    b = np.ones(1000, np.float32)
    da, db, dc = gpuarray.to_gpu(a), gpuarray.to_gpu(b), gpuarray.zeros(1000, np.float32)
    f(da, db, dc)
    np.testing.assert_allclose(dc.get(), ref(a, b))
    with pytest.raises(tl.TensorlangError, match="dimension 0"):
        f(da, db, gpuarray.zeros(999, np.float32))
    with pytest.raises(tl.TensorlangError, match="dtype"):
        f(da, db, gpuarray.zeros(1000, np.float64))
    with pytest.raises(tl.TensorlangError, match="overlaps"):
        f(da, db, da)


def test_a_call_without_pycuda_or_a_gpu_is_a_clear_error():
    if _has_gpu():
        pytest.skip("this machine has a GPU")
    s, args, _ = vadd()
    f = tl.build(s, args, target="cuda")
    a = np.ones(10, np.float32)
    with pytest.raises(tl.TensorlangError, match="pycuda"):
        f(a, a.copy(), np.zeros(10, np.float32))


# ----------------------------------------------------------------- shared memory (no GPU)
def test_shared_tiles_have_barriers_and_are_loaded_by_all_threads():
    s, args, _ = matmul_shared()
    text = str(tl.lower(s, args))
    assert text.count("sync_threads()") == 4 and "'shared'" in text
    src = tl.build(s, args, target="cuda").get_source()
    assert "__shared__ __align__(16) float A_shared[256];" in src and \
        "__shared__ __align__(16) float B_shared[256];" in src
    # the copies sit between two barriers, and both tiles are loaded before the k loop
    body = src[src.index("A_shared[256]"):]
    assert body.index("__syncthreads") < body.index("A_shared[((") < body.index("k_inner")


def test_sgemm_tiles_are_fetched_in_rounds_by_the_block():
    s, args, _ = sgemm()
    text = str(tl.lower(s, args))
    # a 64 x 8 tile over 256 threads in groups of 4 neighbours (one float4 each): 128
    # groups, so one round, taken by the first 128 threads
    assert "for A_shared_fetch_v in range(4):  # vectorized" in text
    assert "if i_inner_outer <= 7 and" in text
    src = tl.build(s, args, target="cuda").get_source()
    assert src.count("*(const float4 *)tl_vs") == 2   # A's and B's k-slices
    assert src.count("__syncthreads();") == 3     # before A, between A and B (one), after B


def test_no_sync_is_refused_with_the_racing_threads():
    s, args, _ = sgemm()
    A_shared = next(st for st in s.stages if st.id == "A_shared")
    with pytest.raises(tl.IllegalScheduleError, match="missing barrier") as err:
        A_shared.no_sync()
    w = err.value.witness
    assert w.source_loops != w.sink_loops           # two different threads
    assert {w.source_statement, w.sink_statement} == {"A_shared", "C_local"}
    assert "of the same block" in str(err.value)
    # the schedule is left as it was: it still builds, with its barriers
    assert tl.build(s, args, target="cuda").get_source().count("__syncthreads") == 3
    with pytest.raises(tl.ScheduleError, match="not in shared memory"):
        s[args[2]].no_sync()


def test_no_sync_is_accepted_when_each_thread_reads_its_own_copy():
    s, args, _ = vadd_shared()
    src = tl.build(s, args, target="cuda").get_source()
    assert "__syncthreads" not in src and "__shared__ __align__(16) float A_shared[64];" in src


def test_shared_tiles_do_not_build_for_the_cpu():
    s, args, _ = matmul_shared()
    with pytest.raises(tl.TensorlangError, match="cuda"):
        tl.build(s, args, target="llvm")


def _interpret(case, order, shape=(5, 67, 9)):
    from tensorlang.ir.interp import run_lowered

    s, args, ref = CASES[case]() if isinstance(case, str) else case
    low = tl.lower(s, args)
    rng = np.random.default_rng(3)
    if case != "pipeline" and len(args) == 3 and len(args[0].shape) == 2:   # a matmul
        n, m, p = shape
        ins = [rng.standard_normal((n, p)).astype(np.float32),
               rng.standard_normal((p, m)).astype(np.float32)]
        out = np.zeros((n, m), np.float32)
    elif case == "pipeline":
        ins = [rng.standard_normal((40, 8)).astype(np.float16),
               rng.integers(0, 40, 40).astype(np.int32)]
        out = np.zeros(40, np.float32)
    else:
        ins = [rng.standard_normal(70).astype(np.float32) for _ in range(2)]
        out = np.zeros(70, np.float32)
    run_lowered(low, [*ins, out], parallel_order=order)
    return out, ref(*ins)


@pytest.mark.parametrize("order", ["forward", "reverse"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_gpu_schedules_run_in_the_interpreter_with_cuda_semantics(case, order):
    """Blocks one after the other, threads as coroutines between barriers, run in index
    order and backwards: every GPU schedule gives numpy's result (sizes that do not divide
    the tiles: 5 x 67 outputs, k = 9 over k-slices of 8 and 16)."""
    got, want = _interpret(case, order)
    np.testing.assert_allclose(got, want, rtol=2e-3, atol=2e-3)


def test_the_race_a_refused_no_sync_names_is_real(monkeypatch):
    """With the race check switched off, the schedule that no_sync() is refused for gives a
    wrong result when its threads interleave as the witness says."""
    import tensorlang.polyhedral.races as races

    monkeypatch.setattr(races, "check_races", lambda *a, **k: None)
    s, args, ref = sgemm()
    next(st for st in s.stages if st.id == "A_shared").no_sync()
    wrong = [not np.allclose(*_interpret((s, args, ref), order), atol=1e-3)
             for order in ("forward", "reverse")]
    assert any(wrong)


def test_a_scheduled_shared_copy_is_not_implemented_yet():
    s, args, _ = matmul(16)
    A, B, C = args
    AA = s.cache_read(A, "shared", [C])
    ko, ki = s[C].split(C.op.reduce_axis[0], factor=16)
    s[AA].split(s[AA].op.axis[1], factor=4)
    with pytest.raises(NotImplementedError, match="distributed over the block's threads"):
        s[AA].compute_at(s[C], ko)


def test_shared_memory_over_the_limit_is_refused_at_build():
    s, args, _ = sgemm(block=(128, 128), thread=(8, 8), k_tile=64)   # 2 x 32 KiB
    with pytest.raises(tl.ScheduleError, match=r"65536 bytes of shared memory .* 49152"):
        tl.build(s, args, target="cuda")


def test_local_memory_and_registers_are_checked_when_compiled():
    from types import SimpleNamespace

    from tensorlang.backends.cuda.module import check_resources

    launch = SimpleNamespace(name="k", threads=1024)
    with pytest.raises(tl.ScheduleError, match="128 bytes of local memory per thread.*64"):
        check_resources(launch, SimpleNamespace(local_size_bytes=128, num_regs=32))
    check_resources(launch, SimpleNamespace(local_size_bytes=8, num_regs=32))  # a few spills
    with pytest.raises(tl.ScheduleError, match="128 registers x 1024 threads .* 65536"):
        check_resources(launch, SimpleNamespace(local_size_bytes=0, num_regs=128))
    check_resources(launch, SimpleNamespace(local_size_bytes=0, num_regs=64))


@GPU
@pytest.mark.gpu
@BOTH
def test_executor_runs_an_mlp_training_step_on_the_gpu(target):
    import tensorlang.graph as G

    rng = np.random.default_rng(2)
    x, y = G.Variable("x", (67, 40)), G.Variable("y", (67, 10))
    w1, w2 = G.Variable("W1", (40, 130)), G.Variable("W2", (130, 10))
    loss = G.softmax_cross_entropy(G.relu(x @ w1) @ w2, y)
    g1, g2 = G.gradients(loss, [w1, w2])
    nodes = [loss, w1 - 0.1 * g1, w2 - 0.1 * g2]
    feed = {x: rng.standard_normal((67, 40)).astype("float32"),
            y: np.eye(10, dtype="float32")[rng.integers(0, 10, 67)],
            w1: (rng.standard_normal((40, 130)) * 0.1).astype("float32"),
            w2: (rng.standard_normal((130, 10)) * 0.1).astype("float32")}
    ex = G.Executor(nodes, target=target)
    for _ in range(2):    # the second run reuses the plan and its device arrays
        got = ex.run(feed)
        want = G.Executor(nodes).run(feed)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)
