"""One SGD step of a 784-256-10 MLP (relu, softmax cross-entropy) at batch 128:
tensorlang's graph executor against a hand-written numpy step and torch on the CPU.

All three compute the same step: forward, backward and W <- W - lr * dL/dW, in float32.
Each system is timed in several rounds, taken in turn (the machine is shared and noisy);
a round reports the median step time, and the figure is the median over rounds.
Usage: python benchmarks/graph_mlp.py [--steps 50] [--rounds 5]
"""

import argparse
import statistics
import time

import numpy as np

B, N_IN, H, N_OUT, LR = 128, 784, 256, 10, 0.1


def median_ms(fn, steps: int) -> float:
    for _ in range(3):
        fn()
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(times)


def numpy_step(x, y, w1, w2):
    h = x @ w1
    r = np.maximum(h, 0)
    z = r @ w2
    z = z - z.max(axis=1, keepdims=True)
    p = np.exp(z)
    p /= p.sum(axis=1, keepdims=True)
    loss = -np.sum(y * np.log(p)) / len(x)
    dz = (p - y) / len(x)
    dw2 = r.T @ dz
    dr = dz @ w2.T
    dw1 = x.T @ (dr * (h > 0))
    return loss, w1 - LR * dw1, w2 - LR * dw2


def mlp_data(batch: int):
    """(x, y, W1, W2) as numpy arrays."""
    rng = np.random.default_rng(0)
    xv = rng.standard_normal((batch, N_IN)).astype("float32")
    yv = np.eye(N_OUT, dtype="float32")[rng.integers(0, N_OUT, batch)]
    w1v = (rng.standard_normal((N_IN, H)) * 0.05).astype("float32")
    w2v = (rng.standard_normal((H, N_OUT)) * 0.05).astype("float32")
    return xv, yv, w1v, w2v


def mlp_step(batch: int):
    """The step's graph at a batch size: (nodes [loss, W1', W2'], feed, (x, y, W1, W2) as
    numpy arrays). Also used by benchmarks/gpu/mlp.py."""
    import tensorlang.graph as G     # here: `tensorlang bench` runs torch's step elsewhere

    xv, yv, w1v, w2v = mlp_data(batch)
    x, y = G.Variable("x", (batch, N_IN)), G.Variable("y", (batch, N_OUT))
    w1, w2 = G.Variable("W1", (N_IN, H)), G.Variable("W2", (H, N_OUT))
    loss = G.softmax_cross_entropy(G.relu(x @ w1) @ w2, y)
    g1, g2 = G.gradients(loss, [w1, w2])
    feed = {x: xv, y: yv, w1: w1v, w2: w2v}
    return [loss, w1 - LR * g1, w2 - LR * g2], feed, (xv, yv, w1v, w2v)


def torch_step_fn(xv, yv, w1v, w2v):
    """torch's version of the step (autograd), or ImportError."""
    import torch

    tx, ty = torch.from_numpy(xv), torch.from_numpy(yv)
    tw1 = torch.from_numpy(w1v.copy()).requires_grad_()
    tw2 = torch.from_numpy(w2v.copy()).requires_grad_()

    def torch_step():
        out = torch.nn.functional.cross_entropy(torch.relu(tx @ tw1) @ tw2, ty.argmax(1))
        d1, d2 = torch.autograd.grad(out, [tw1, tw2])
        with torch.no_grad():
            return out, tw1 - LR * d1, tw2 - LR * d2
    return torch_step


def bench_system(system: str, batch: int = B):
    """(step function, check) of one system, for `tensorlang bench` (tensorlang is imported
    only for its own systems: the others may run in an interpreter without it).
    "tensorlang" writes the step's outputs into preallocated arrays (`run(..., out=)`),
    "tensorlang_new" gets new ones each step (`run(feed)`)."""
    xv, yv, w1v, w2v = mlp_data(batch)
    want = numpy_step(xv, yv, w1v, w2v)
    out = {}
    if system in ("tensorlang", "tensorlang_new"):
        import tensorlang.graph as G

        nodes, feed, _ = mlp_step(batch)
        ex = G.Executor(nodes)
        if system == "tensorlang":          # into preallocated outputs, run(..., out=)
            out["got"] = [np.empty_like(w) for w in want]

            def fn():
                ex.run(feed, out=out["got"])
        else:                               # new outputs each step, run(feed)
            def fn():
                out["got"] = ex.run(feed)
    elif system == "numpy":
        def fn():
            out["got"] = numpy_step(xv, yv, w1v, w2v)
    elif system == "torch":
        step = torch_step_fn(xv, yv, w1v, w2v)

        def fn():
            out["got"] = [v.detach().numpy() for v in step()]
    else:
        raise NotImplementedError(system)

    def check():
        for a, b in zip(out["got"], want):
            np.testing.assert_allclose(a, b, rtol=2e-3, atol=2e-5)
    return fn, check


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--rounds", type=int, default=5)
    opts = p.parse_args()
    steps = opts.steps
    import tensorlang.graph as G

    nodes, feed, (xv, yv, w1v, w2v) = mlp_step(B)
    ex = G.Executor(nodes)
    t0 = time.perf_counter()
    got = ex.run(feed)
    compile_s = time.perf_counter() - t0
    want = numpy_step(xv, yv, w1v, w2v)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=2e-3, atol=2e-5)

    systems = [("tensorlang", lambda: ex.run(feed)),
               ("numpy", lambda: numpy_step(xv, yv, w1v, w2v))]
    try:
        import torch

        systems.append((f"torch {torch.__version__} (CPU)", torch_step_fn(xv, yv, w1v, w2v)))
    except ImportError:
        systems.append(("torch", None))
    runs: dict[str, list[float]] = {name: [] for name, _ in systems}
    for _ in range(opts.rounds):
        for name, fn in systems:
            if fn is not None:
                runs[name].append(median_ms(fn, steps))
    rows = [(name, statistics.median(runs[name]) if runs[name] else float("nan"))
            for name, _ in systems]
    (plan,) = ex._plans.values()
    print(f"one SGD step, MLP {N_IN}-{H}-{N_OUT}, batch {B}, float32 (tensorlang: "
          f"{len(ex.order)} nodes in {len(plan.steps)} kernels, first run incl. compiling "
          f"{compile_s:.2f} s); median of {opts.rounds} rounds of {steps} steps")
    for name, ms in rows:
        lo, hi = (min(runs[name]), max(runs[name])) if runs[name] else (ms, ms)
        print(f"  {name:28} {ms:8.2f} ms   (rounds {lo:.2f} to {hi:.2f})"
              + ("   (not installed)" if ms != ms else ""))
    print(f"  tensorlang / numpy = {rows[0][1] / rows[1][1]:.2f}")


if __name__ == "__main__":
    main()
