"""One SGD step of the 784-256-10 MLP of benchmarks/graph_mlp.py at batch 1024 on the GPU:
G.Executor(target="cuda") (default GPU schedules, tensors on the device between kernels)
against torch eager on the same GPU, in one run. Both take host arrays and return host
arrays, so both times include the copies in and out; median of 20 steps after warm-up.
Usage: python benchmarks/gpu/mlp.py [--batch 1024]
"""

import argparse
import os
import statistics
import sys
import time

import numpy as np

import tensorlang.graph as G

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from graph_mlp import LR, mlp_step  # noqa: E402


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

    nodes, feed, (xv, yv, w1v, w2v) = mlp_step(B)
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
    print(f"device: {torch.cuda.get_device_name()}; one SGD step, MLP 784-256-10, "
          f"batch {B}, float32, host arrays in and out")
    print(f"  tensorlang Executor(cuda): {t_tl:8.2f} ms ({len(plan.steps)} kernels; first run "
          f"incl. compiling {compile_s:.1f} s)")
    print(f"  torch {torch.__version__} eager:      {t_torch:8.2f} ms")
    print(f"  torch / tensorlang = {t_torch / t_tl:.2f}")


if __name__ == "__main__":
    main()
