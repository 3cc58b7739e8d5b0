"""Non-temporal (streaming) stores: which kernels get them, and results at every alignment."""

import numpy as np
import pytest

import tensorlang as tl
from tensorlang.backends.llvm import host_target

HOST = host_target()
X86 = HOST.arch in ("x86_64", "amd64")


def _big() -> int:
    """Elements per array so that three float32 arrays outgrow what the host's caches keep
    (1.5x `Target.stream_store_bytes`)."""
    return HOST.stream_store_bytes // 8 + 5      # not a multiple of a vector


def _axpy(n, target="llvm"):
    # (not test_targets.vector_axpy: its A * 3 + B rounds differently once contracted into
    # a multiply-add; times 2 is exact, so every target compares equal to numpy)
    A = tl.placeholder((n,), "float32", name="A")
    B = tl.placeholder((n,), "float32", name="B")
    C = tl.compute((n,), lambda i: A[i] * 2.0 + B[i], name="C")
    s = tl.create_schedule(C)
    lanes = tl.Target.parse(target).vector_lanes("float32")
    o, i = s[C].split(C.op.axis[0], factor=lanes)
    s[C].vectorize(i)
    s[C].parallel(o)
    return tl.build(s, [A, B, C], target=target)


@pytest.mark.skipif(not X86, reason="non-temporal stores are emitted for x86 only")
@pytest.mark.parametrize("target", ["llvm", "llvm -mcpu=x86-64", "llvm -mcpu=x86-64-v3"])
def test_a_large_output_streams_and_is_right_at_every_alignment(target):
    n = _big()
    f = _axpy(n, target)
    assert "!nontemporal" in f.get_source()
    assert "movntps" in f.get_source("asm")
    assert "sfence" in f.get_source("asm")      # ordered before another thread reads
    rng = np.random.default_rng(1)
    a, b = rng.random(n, dtype=np.float32), rng.random(n, dtype=np.float32)
    base = np.zeros(n + 64, np.float32)
    for off in (0, 1, 2, 3, 4, 8, 12, 16):     # 4-byte steps: whole, 16-byte and no alignment
        c = base[off:off + n]
        c[:] = -1.0
        f(a, b, c)
        np.testing.assert_array_equal(c, a * np.float32(2.0) + b)


def test_a_kernel_inside_the_caches_stores_plainly():
    f = _axpy(1000)
    assert "nontemporal" not in f.get_source()


def test_an_array_the_kernel_reads_back_is_not_streamed():
    n = _big()
    A = tl.placeholder((n, 2), "float32", name="A")
    k = tl.reduce_axis((0, 2), name="k")
    C = tl.compute((n,), lambda i: tl.sum(A[i, k], axis=k), name="C")   # C read in its update
    s = tl.create_schedule(C)
    f = tl.build(s, [A, C])
    assert "nontemporal" not in f.get_source()
    a = np.random.default_rng(2).random((n, 2), dtype=np.float32)
    c = np.empty(n, np.float32)
    f(a, c)
    np.testing.assert_allclose(c, a.sum(1), rtol=1e-6)


@pytest.mark.parametrize("cpu, llc", [("znver4", True), ("znver5", True),
                                      ("sapphirerapids", False), ("x86-64", False)])
def test_what_the_caches_keep_is_the_targets(cpu, llc):
    # AMD Zen's L3 takes what the L2s let go at ~30 bytes a cycle a core: an output that
    # fits it stays there (streamed, a 24 MiB copy ran 1.4x slower on Zen 5); elsewhere a
    # line past the L2s costs a read for ownership over a narrow path, and streams
    t = tl.Target.parse(f"llvm -mcpu={cpu}")
    l1, l2, last = t.cache_bytes
    assert t.stream_store_bytes == (last if llc else l2 * t.cores)
    def streams(n):
        A = tl.placeholder((n,), "float32", name="A")
        B = tl.placeholder((n,), "float32", name="B")
        C = tl.compute((n,), lambda i: A[i] * 2.0 + B[i], name="C")
        s = tl.create_schedule(C)
        o, i = s[C].split(C.op.axis[0], factor=16)
        s[C].vectorize(i)
        return "!nontemporal" in tl.build(s, [A, B, C], target=f"llvm -mcpu={cpu}").get_source()

    assert streams((l2 * t.cores + last) // 2 // 12) == (not llc)    # between the two rules
    assert streams(last // 8 + 5)                  # past the last level: every x86 streams


def test_cross_targets_other_than_x86_store_plainly():
    f = _axpy(_big(), "llvm -mtriple=aarch64-linux-gnu")
    assert "nontemporal" not in f.get_source()


def test_the_executor_streams_its_large_elementwise_output():
    import tensorlang.graph as G

    n = _big()
    a, b = (G.Variable(s, (n,), "float32") for s in "ab")
    ex = G.Executor([a * b + a])
    x, y = (np.random.default_rng(3).random(n, dtype=np.float32) for _ in range(2))
    got, = ex.run({a: x, b: y})
    np.testing.assert_allclose(got, x * y + x, rtol=1e-6)
    src = ex.kernels[0].module.get_source()
    assert ("!nontemporal" in src) == X86


@pytest.mark.slow
def test_a_matmul_tile_written_back_row_by_row_is_not_streamed():
    # each row of the register tile is a run of a few vectors: streamed, the lines it
    # leaves open at once made the executor's 1024^3 matmul slower (294 -> 258 GFLOPS)
    import tensorlang.graph as G

    n = 1024
    a, b = G.Variable("a", (n, n), "float32"), G.Variable("b", (n, n), "float32")
    ex = G.Executor([a @ b])
    x = np.random.default_rng(4).random((n, n), dtype=np.float32)
    got, = ex.run({a: x, b: x})
    np.testing.assert_allclose(got, x @ x, rtol=1e-3)
    assert "nontemporal" not in ex.kernels[0].module.get_source()


def test_the_run_is_measured_through_the_loops_that_continue_it():
    from tensorlang.backends.llvm.stream import _runs
    from tensorlang.schedule.lower import lower

    n = _big()
    A = tl.placeholder((n, 64), "float32", name="A")
    C = tl.compute((n, 64), lambda i, j: A[i, j] + 1.0, name="C")
    s = tl.create_schedule(C)
    jo, ji = s[C].split(C.op.axis[1], factor=16)
    s[C].vectorize(ji)
    runs = _runs(lower(s, [A, C]).body)
    assert list(runs.values()) == [[64 * n]]      # rows of 4 vectors, rows after rows
    s = tl.create_schedule(C)
    i, j = C.op.axis
    s[C].reorder(j, i)                            # vector along i: a column, a gather
    io, ii = s[C].split(i, factor=16)
    s[C].vectorize(ii)
    (got,) = _runs(lower(s, [A, C]).body).values()
    assert got and set(got) == {0}                # (the split's tail: a second store)


@pytest.mark.slow
def test_a_kernel_with_local_buffers_stores_plainly():
    # layer norm's rows are read again through its row statistics: streamed, it was slower
    # (44-46 -> 38-40 GB/s at 4096 x 1024)
    import tensorlang.graph as G

    x = G.Variable("x", (_big() // 1024 + 1, 1024), "float32")
    ex = G.Executor([G.layer_norm(x)])
    xv = np.random.default_rng(5).random(x.shape, dtype=np.float32)
    got, = ex.run({x: xv})
    mu = xv.mean(1, keepdims=True)
    want = (xv - mu) / np.sqrt(xv.var(1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-4)
    assert all("nontemporal" not in k.module.get_source() for k in ex.kernels)
