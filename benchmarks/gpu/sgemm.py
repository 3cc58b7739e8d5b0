"""SGEMM on the GPU, step by step, against cuBLAS (torch.matmul, TF32 off) in one run.

The steps are those of tutorials/06_cuda.py: one output per thread; 16 x 16 tiles of A and B
in shared memory; then the library schedule `tensorlang.schedule.gpu.matmul` (shared k-slices
and a register tile per thread) in a few tile shapes. Kernel time only (CUDA events around
the launches), median of `--reps` calls after two warm-ups; every result is checked against
cuBLAS's. Each step is built for both GPU targets: CUDA C through nvcc ("cuda") and PTX
through LLVM's NVPTX backend ("nvptx").
Usage: python benchmarks/gpu/sgemm.py [--size 4096] [--reps 5] [--target cuda|nvptx]
"""

import argparse
import os
import sys

import numpy as np

import tensorlang as tl
from tensorlang.schedule import gpu

sys.path.insert(0, os.path.dirname(__file__))
from first_kernels import fetch, launch_time, torch_time  # noqa: E402


def declare():
    M, N, K = tl.var("M"), tl.var("N"), tl.var("K")
    X = tl.placeholder((M, K), name="X")
    Y = tl.placeholder((K, N), name="Y")
    k = tl.reduce_axis((0, K), name="k")
    Z = tl.compute((M, N), lambda i, j: tl.sum(X[i, k] * Y[k, j], axis=k), name="Z")
    return X, Y, Z


def naive():
    X, Y, Z = declare()
    s = tl.create_schedule(Z)
    io, jo, ii, ji = s[Z].tile(Z.op.axis[0], Z.op.axis[1], 16, 16)
    for loop, tag in ((io, "blockIdx.y"), (jo, "blockIdx.x"), (ii, "threadIdx.y"),
                      (ji, "threadIdx.x")):
        s[Z].bind(loop, tag)
    return s, [X, Y, Z]


def shared16():
    s, args = naive()
    X, Y, Z = args
    XS = s.cache_read(X, "shared", [Z])
    YS = s.cache_read(Y, "shared", [Z])
    ko, ki = s[Z].split(Z.op.reduce_axis[0], factor=16)
    s[XS].compute_at(s[Z], ko)
    s[YS].compute_at(s[Z], ko)
    return s, args


def library(block, thread, k_tile):
    def make():
        X, Y, Z = declare()
        s = tl.create_schedule(Z)
        gpu.matmul(s, Z, block, thread, k_tile)
        return s, [X, Y, Z]
    return make


STEPS = [
    ("16x16 threads, one output each", naive),
    ("+ 16x16 tiles of A and B in shared memory", shared16),
    ("gpu.matmul 64x64 block, 4x4 per thread, k 8", library((64, 64), (4, 4), 8)),
    ("gpu.matmul 128x128 block, 8x8 per thread, k 8", library((128, 128), (8, 8), 8)),
    ("gpu.matmul 128x64 block, 8x4 per thread, k 16", library((128, 64), (8, 4), 16)),
]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", type=int, default=4096)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--target", choices=["cuda", "nvptx"], action="append")
    a = ap.parse_args()
    import pycuda.autoinit  # noqa: F401
    import torch

    m = a.size
    print(f"device: {torch.cuda.get_device_name()}; SGEMM {m}^3 fp32")
    x = np.random.rand(m, m).astype(np.float32)
    y = np.random.rand(m, m).astype(np.float32)
    tx, ty = torch.from_numpy(x).cuda(), torch.from_numpy(y).cuda()
    torch.backends.cuda.matmul.allow_tf32 = False
    ref = (tx @ ty).cpu().numpy()
    tt = torch_time(lambda: tx @ ty, reps=a.reps)
    flops = 2 * m ** 3 / 1e12
    print(f"{'cuBLAS (torch.matmul)':60s} {flops / tt:6.1f} TFLOPS")
    for label, make in STEPS:
        for target in a.target or ["cuda", "nvptx"]:
            s, args = make()
            f = tl.build(s, args, target=target)
            t, dev = launch_time(f, [x, y, np.zeros((m, m), np.float32)],
                                 {"M": m, "N": m, "K": m}, reps=a.reps)
            z = fetch(dev[2], np.zeros((m, m), np.float32))
            np.testing.assert_allclose(z, ref, rtol=1e-3, atol=1e-2)
            print(f"{label + ' [' + target + ']':60s} {flops / t:6.1f} TFLOPS   "
                  f"{tt / t:.3f} x cuBLAS")


if __name__ == "__main__":
    main()
