"""Build time of a default-schedule 256x256 matmul, from `compute` to a callable kernel.

Each repetition runs in a fresh process (so no kernel cache and no warm LLVM), and reports the
median; a second build of the same kernel in the same process shows the cache.
Usage: python benchmarks/build_time.py [--reps 7]
"""

import argparse
import json
import statistics
import subprocess
import sys

CHILD = r"""
import time, json
t_import = time.perf_counter()
import numpy as np, tensorlang as tl
t0 = time.perf_counter()
A = tl.placeholder((256, 256), "float32", name="A")
B = tl.placeholder((256, 256), "float32", name="B")
k = tl.reduce_axis((0, 256), name="k")
C = tl.compute((256, 256), lambda i, j: tl.sum(A[i, k] * B[k, j], axis=k), name="C")
s = tl.create_schedule(C)
f = tl.build(s, [A, B, C])
t1 = time.perf_counter()
f2 = tl.build(tl.create_schedule(C), [A, B, C])
t2 = time.perf_counter()
a = np.ones((256, 256), "float32"); c = np.zeros_like(a); f(a, a, c); assert (c == 256).all()
print(json.dumps({"first_build_s": t1 - t0, "cached_build_s": t2 - t1,
                  "import_s": t0 - t_import}))
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=7)
    args = ap.parse_args()
    runs = []
    for _ in range(args.reps):
        out = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True,
                             check=True)
        runs.append(json.loads(out.stdout))
    for key in ("first_build_s", "cached_build_s", "import_s"):
        vals = [r[key] for r in runs]
        print(f"{key:16} median {statistics.median(vals):.3f} s   "
              f"(min {min(vals):.3f}, max {max(vals):.3f}, {len(vals)} processes)")


if __name__ == "__main__":
    main()
