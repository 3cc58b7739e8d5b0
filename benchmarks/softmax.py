"""Row softmax through the graph executor against numpy and torch (CPU), in one process,
alternating rounds. GB/s counts one read and one write of the matrix.
Usage: python benchmarks/softmax.py [--rows 4096] [--cols 1024] [--rounds 5]
"""

import argparse
import statistics
import time

import numpy as np

import tensorlang.graph as G


def best_s(fn, reps=5):
    fn()
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return min(ts)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=4096)
    ap.add_argument("--cols", type=int, default=1024)
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    x = G.Variable("x", (a.rows, a.cols))
    ex = G.Executor([G.softmax(x)])
    xv = np.random.default_rng(0).standard_normal((a.rows, a.cols)).astype("float32")

    def numpy_softmax():
        e = np.exp(xv - xv.max(1, keepdims=True))
        return e / e.sum(1, keepdims=True)
    np.testing.assert_allclose(ex.run({x: xv})[0], numpy_softmax(), rtol=1e-5, atol=1e-7)
    systems = [("tensorlang Executor", lambda: ex.run({x: xv})), ("numpy", numpy_softmax)]
    try:
        import torch

        tx = torch.from_numpy(xv)
        systems.append((f"torch {torch.__version__} (CPU)", lambda: torch.softmax(tx, 1)))
    except ImportError:
        pass
    runs = {name: [] for name, _ in systems}
    for _ in range(a.rounds):
        for name, fn in systems:
            runs[name].append(best_s(fn))
    gb = 2 * 4 * a.rows * a.cols / 1e9
    print(f"softmax over rows, {a.rows}x{a.cols} float32, median of {a.rounds} rounds")
    for name, _ in systems:
        print(f"  {name:28s} {gb / statistics.median(runs[name]):7.2f} GB/s")


if __name__ == "__main__":
    main()
