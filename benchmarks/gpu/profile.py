"""Launch one of the issue-13 kernels a few times, nothing else, for Nsight Compute.

    ncu --set detailed -k regex:tl_ -c 1 python benchmarks/gpu/profile.py sgemm
    ncu --set detailed -k regex:tl_ -c 1 python benchmarks/gpu/profile.py softmax
    ncu python benchmarks/gpu/profile.py mlp          # every kernel of the executor's steps

`sgemm`: 4096^3 with the schedule of the SGEMM table's last row (128 x 64 block, 8 x 4 per
thread, k-slices of 16); `softmax`: 4096 x 4096, `gpu.rows` with 256 threads and the row
cached in shared memory; `mlp`: two SGD steps of benchmarks/gpu/mlp.py through
`G.Executor(target="cuda")`. The sgemm and softmax kernels' names start with `tl_`.
"""

import argparse
import os
import sys

import numpy as np

import tensorlang as tl

sys.path.insert(0, os.path.dirname(__file__))
from first_kernels import launch_time  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("kernel", choices=["sgemm", "softmax", "mlp"])
    ap.add_argument("--target", choices=["cuda", "nvptx"], default="cuda")
    a = ap.parse_args()
    import pycuda.autoinit  # noqa: F401

    rng = np.random.default_rng(0)
    if a.kernel == "sgemm":
        from sgemm import library

        s, args = library((128, 64), (8, 4), 16)()
        f = tl.build(s, args, target=a.target, name="tl_sgemm")
        n = 4096
        x, y = (rng.standard_normal((n, n)).astype(np.float32) for _ in range(2))
        t, _ = launch_time(f, [x, y, np.zeros((n, n), np.float32)],
                           {"M": n, "N": n, "K": n}, reps=1)
        print(f"sgemm {2 * n ** 3 / t / 1e12:.1f} TFLOPS")
    elif a.kernel == "softmax":
        from softmax import softmax

        s, args = softmax(256, 4096)
        f = tl.build(s, args, target=a.target, name="tl_softmax")
        n = 4096
        x = rng.standard_normal((n, n)).astype(np.float32)
        t, _ = launch_time(f, [x, np.zeros((n, n), np.float32)], {"n": n, "m": n}, reps=1)
        print(f"softmax {2 * n * n * 4 / t / 1e9:.0f} GB/s")
    else:
        import tensorlang.graph as G

        sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
        from graph_mlp import mlp_step

        nodes, feed, _ = mlp_step(1024)
        ex = G.Executor(nodes, target=a.target)
        for _ in range(2):
            ex.run(feed)


if __name__ == "__main__":
    main()
