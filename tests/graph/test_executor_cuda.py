"""Executor(target="cuda"): its default GPU schedules and device plan.

Without a GPU (CI), the plan's device arrays are numpy arrays and each kernel runs in the
loop-IR interpreter with CUDA semantics (threads as coroutines between barriers); the GPU
suite (tests/cuda) runs the same graphs for real. Results are compared with the CPU
executor and numpy."""

import numpy as np
import pytest

import tensorlang.graph as G
from tensorlang.graph import executor
from tensorlang.ir.interp import run_lowered

R = np.random.default_rng(5)


@pytest.fixture
def simulated(monkeypatch):
    """Executor(target="cuda") with host arrays and the interpreter for kernels."""
    monkeypatch.setattr(executor, "_cuda_context", lambda: None)

    def new(self, shape, dtype):
        self.arrays.append(np.zeros(shape, dtype))
        return len(self.arrays) - 1

    def set_(self, slot, value):
        self.arrays[slot][...] = value

    def run_cuda(self, plan, feeds):
        for i in plan.fed:
            plan.arrays[plan.slot_of[i]][...] = feeds[i]
        for st in plan.steps:
            run_lowered(st.kernel.lowered,
                        [plan.arrays[i] for i in st.inputs] + [plan.arrays[st.output]])
        return [feeds[o.id].copy() if o.op == "variable" else
                plan.arrays[plan.slot_of[o.id]].copy() for o in self.outputs]

    monkeypatch.setattr(executor._Plan, "_new", new)
    monkeypatch.setattr(executor._Plan, "_set", set_)
    monkeypatch.setattr(executor.Executor, "_run_cuda", run_cuda)


def _both(nodes, feed):
    want = G.Executor(nodes).run(feed)
    got = G.Executor(nodes, target="cuda").run(feed)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


@pytest.mark.slow
def test_mlp_training_step_runs_with_gpu_schedules(simulated):
    x, y = G.Variable("x", (9, 20)), G.Variable("y", (9, 3))
    w1, w2 = G.Variable("W1", (20, 70)), G.Variable("W2", (70, 3))
    loss = G.softmax_cross_entropy(G.relu(x @ w1) @ w2, y)
    g1, g2 = G.gradients(loss, [w1, w2])
    feed = {x: R.standard_normal((9, 20)).astype("float32"),
            y: np.eye(3, dtype="float32")[R.integers(0, 3, 9)],
            w1: (R.standard_normal((20, 70)) * 0.1).astype("float32"),
            w2: (R.standard_normal((70, 3)) * 0.1).astype("float32")}
    _both([loss, w1 - 0.1 * g1, w2 - 0.1 * g2], feed)


@pytest.mark.parametrize("build", ["softmax", "layer_norm", "mean", "batched_tb", "chain"])
def test_ops_run_with_gpu_schedules(simulated, build):
    a = G.Variable("a", (3, 5, 6))
    b = G.Variable("b", (3, 7, 6))
    av = R.standard_normal((3, 5, 6)).astype("float32")
    bv = R.standard_normal((3, 7, 6)).astype("float32")
    node = {"softmax": lambda: G.softmax(a),
            "layer_norm": lambda: G.layer_norm(a),
            "mean": lambda: G.mean(a, axis=1),
            "batched_tb": lambda: G.make("matmul", (a, b), ta=False, tb=True),
            "chain": lambda: G.tanh(a * 2.0 + 1.0) - G.exp(a)}[build]()
    _both([node], {a: av, b: bv})


def test_every_gpu_kernel_binds_its_loops():
    """A stage left unbound would run on one GPU thread: every kernel of the default GPU
    schedules launches more than one thread per block or more than one block."""
    members = (("matmul", (("ta", False), ("tb", True)), (("in", 0), ("in", 1))),
               ("relu", (), (("node", 0),)))
    mod, _ = executor.compile_group(members, ((33, 40), (50, 40)), ("float32", "float32"),
                                    "cuda")
    for launch in mod.cuda.launches:
        assert launch.threads > 1
    src = mod.get_source()
    assert "__shared__" in src and "__syncthreads" in src


@pytest.mark.parametrize("build,shape", [
    ("softmax", (3, 70)), ("softmax", (2, 3, 257)), ("layer_norm", (4, 100)),
    ("row_sum", (5, 130)), ("batch_sum", (150, 40)), ("row_max", (2, 64)),
])
def test_reductions_run_across_the_threads_of_a_block(simulated, build, shape):
    """Rows of 64 or more: softmax is one kernel, a block per row; sums and maxima (also
    layer norm's means, which the executor does not fuse yet: issue 14) combine across
    the threads of a block (tree in shared memory)."""
    a = G.Variable("a", shape)
    av = R.standard_normal(shape).astype("float32")
    node = {"softmax": lambda: G.softmax(a), "layer_norm": lambda: G.layer_norm(a),
            "row_sum": lambda: G.sum(a, axis=-1), "batch_sum": lambda: G.sum(a, axis=0),
            "row_max": lambda: G.max(a, axis=1)}[build]()
    _both([node], {a: av})
    ex = G.Executor([node], target="cuda")
    ex.run({a: av})
    (plan,) = ex._plans.values()
    kernels = [st.kernel for st in plan.steps]
    if build == "softmax":
        assert len(kernels) == 1
    text = "\n".join(str(k.lowered) for k in kernels)
    assert "_red = allocate" in text and "sync_threads()" in text   # a tree across threads


def test_gpu_matmul_tiles_fill_the_gpu():
    """Small matmuls (an MLP's) get smaller thread tiles so that the grid has enough blocks;
    large ones keep 4 x 4 outputs per thread."""
    from tensorlang.graph.executor import GPU_MIN_BLOCKS, _gpu_matmul_tiles

    assert _gpu_matmul_tiles(4096, 4096) == ((64, 64), (4, 4))
    for m, n in [(1024, 256), (1024, 10), (784, 256), (1, 1), (3, 5), (100, 1000)]:
        block, thread = _gpu_matmul_tiles(m, n)
        blocks = -(-m // block[0]) * -(-n // block[1])
        assert blocks >= GPU_MIN_BLOCKS or thread == (1, 1)
        assert block[0] % thread[0] == 0 and block[1] % thread[1] == 0


@pytest.mark.parametrize("log", [False, True])
def test_softmax_rows_with_nan_and_inf_across_gpu_threads(simulated, log):
    """The row maximum (nanmax: fmax across the threads of a block, NaN its identity) with
    NaN, +-inf and a row all NaN: the CPU executor's results, NaN in the same places."""
    xv = (R.standard_normal((5, 70)) * 4).astype("float32")
    xv[0, 3], xv[2, 10], xv[2, 11], xv[4, 69] = np.nan, np.inf, -np.inf, -np.inf
    xv[3, :] = np.nan
    x = G.Variable("x", xv.shape)
    node = G.log_softmax(x) if log else G.softmax(x)
    (want,) = G.Executor([node]).run({x: xv})
    (got,) = G.Executor([node], target="cuda").run({x: xv})
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
