"""One SGD step of the 784-256-10 MLP of benchmarks/graph_mlp.py at batch 1024 on the GPU:
G.Executor(target="cuda") (default GPU schedules, tensors on the device between kernels)
against torch eager on the same GPU, in one run. Both take host arrays and return host
arrays, so both times include the copies in and out; median of 20 steps after warm-up.
Usage: python benchmarks/gpu/mlp.py [--batch 1024]
"""

import argparse
import statistics
import time

import numpy as np

import tensorlang.graph as G

N_IN, H, N_OUT, LR = 784, 256, 10, 0.1


def median_ms(fn, steps=20):
    fn()
    fn()
    times = []
    for _ in range(steps):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=1024)
    B = ap.parse_args().batch
    import torch

    rng = np.random.default_rng(0)
    xv = rng.standard_normal((B, N_IN)).astype("float32")
    yv = np.eye(N_OUT, dtype="float32")[rng.integers(0, N_OUT, B)]
    w1v = (rng.standard_normal((N_IN, H)) * 0.05).astype("float32")
    w2v = (rng.standard_normal((H, N_OUT)) * 0.05).astype("float32")
    x, y = G.Variable("x", (B, N_IN)), G.Variable("y", (B, N_OUT))
    w1, w2 = G.Variable("W1", (N_IN, H)), G.Variable("W2", (H, N_OUT))
    loss = G.softmax_cross_entropy(G.relu(x @ w1) @ w2, y)
    g1, g2 = G.gradients(loss, [w1, w2])
    nodes = [loss, w1 - LR * g1, w2 - LR * g2]
    feed = {x: xv, y: yv, w1: w1v, w2: w2v}
    ex = G.Executor(nodes, target="cuda")
    t0 = time.perf_counter()
    got = ex.run(feed)
    compile_s = time.perf_counter() - t0
    want = G.Executor(nodes).run(feed)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=2e-3, atol=2e-5)
    dev = torch.device("cuda")
    torch.backends.cuda.matmul.allow_tf32 = False

    def torch_step():
        tx, ty = torch.from_numpy(xv).to(dev), torch.from_numpy(yv).to(dev)
        tw1 = torch.from_numpy(w1v).to(dev).requires_grad_()
        tw2 = torch.from_numpy(w2v).to(dev).requires_grad_()
        out = torch.nn.functional.cross_entropy(torch.relu(tx @ tw1) @ tw2, ty.argmax(1))
        d1, d2 = torch.autograd.grad(out, [tw1, tw2])
        with torch.no_grad():
            return out.cpu(), (tw1 - LR * d1).cpu(), (tw2 - LR * d2).cpu()
    t_tl = median_ms(lambda: ex.run(feed))
    t_torch = median_ms(torch_step)
    (plan,) = ex._plans.values()
    print(f"device: {torch.cuda.get_device_name()}; one SGD step, MLP {N_IN}-{H}-{N_OUT}, "
          f"batch {B}, float32, host arrays in and out")
    print(f"  tensorlang Executor(cuda): {t_tl:8.2f} ms ({len(plan.steps)} kernels; first run "
          f"incl. compiling {compile_s:.1f} s)")
    print(f"  torch {torch.__version__} eager:      {t_torch:8.2f} ms")
    print(f"  torch / tensorlang = {t_torch / t_tl:.2f}")


if __name__ == "__main__":
    main()
