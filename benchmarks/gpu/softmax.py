"""Softmax over the rows of a 4096 x 4096 float32 matrix on the GPU, against torch.softmax
(and Triton's fused softmax from the anchors) in one run.

tensorlang's kernel is `schedule.gpu.rows`: one block per row, the row max and the sum
reduced across the block's threads (a tree in shared memory), then the outputs on the
same threads: one kernel. With a symbolic row length the row is read three times (the
second and third reads hit the cache); with the constant 4096 ("row cached") it is copied
to shared memory once, in 16-byte vectors, and read there. Built for both GPU targets. GB/s
counts one read and one write of the matrix; kernel time only (CUDA events), median of
`--reps` after two warm-ups; results checked against torch's.
Usage: python benchmarks/gpu/softmax.py [--rows 4096] [--cols 4096]
"""

import argparse
import os
import sys

import numpy as np

import tensorlang as tl
from tensorlang.schedule import gpu

sys.path.insert(0, os.path.dirname(__file__))
from first_kernels import fetch, launch_time, torch_time  # noqa: E402


def softmax(threads, m=None):
    """With a constant row length `m`, `gpu.rows` copies each row to shared memory first
    (one read from global memory); with a symbolic one it reads the row three times."""
    n, m = tl.var("n"), (tl.var("m") if m is None else m)
    X = tl.placeholder((n, m), name="X")
    k1 = tl.reduce_axis((0, m), name="k1")
    M = tl.compute((n,), lambda i: tl.max(X[i, k1], axis=k1), name="M")
    k2 = tl.reduce_axis((0, m), name="k2")
    S = tl.compute((n,), lambda i: tl.sum(tl.exp(X[i, k2] - M[i]), axis=k2), name="S")
    Y = tl.compute((n, m), lambda i, j: tl.exp(X[i, j] - M[i]) / S[i], name="Y")
    s = tl.create_schedule(Y)
    gpu.rows(s, Y, threads)
    return s, [X, Y]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=4096)
    ap.add_argument("--cols", type=int, default=4096)
    ap.add_argument("--reps", type=int, default=10)
    a = ap.parse_args()
    import pycuda.autoinit  # noqa: F401
    import torch

    n, m = a.rows, a.cols
    print(f"device: {torch.cuda.get_device_name()}; softmax rows {n} x {m} float32")
    x = np.random.default_rng(0).standard_normal((n, m)).astype(np.float32)
    tx = torch.from_numpy(x).cuda()
    ref = torch.softmax(tx, dim=1).cpu().numpy()
    gb = 2 * n * m * 4 / 1e9
    tt = torch_time(lambda: torch.softmax(tx, dim=1), reps=a.reps)
    print(f"{'torch.softmax':44s} {gb / tt:7.0f} GB/s (each line below is beside torch "
          "timed again just before it)")
    for threads, cached in ((128, False), (256, False), (512, False), (128, True),
                            (256, True), (512, True)):
        for target in ("cuda", "nvptx"):
            s, args = softmax(threads, m if cached else None)
            f = tl.build(s, args, target=target)
            tt = torch_time(lambda: torch.softmax(tx, dim=1), reps=a.reps)
            t, dev = launch_time(f, [x, np.zeros((n, m), np.float32)], {"n": n, "m": m},
                                 reps=a.reps)
            y = fetch(dev[1], np.zeros((n, m), np.float32))
            np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-6)
            label = f"gpu.rows, {threads} threads{', row cached' if cached else ''} [{target}]"
            print(f"{label:44s} {gb / t:7.0f} GB/s   {tt / t:.2f} x torch "
                  f"({gb / tt:.0f} GB/s)")


if __name__ == "__main__":
    main()
