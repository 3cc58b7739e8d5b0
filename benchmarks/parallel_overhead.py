"""Fork-join overhead of the thread pool: the time of one parallel region with no work.

Builds a kernel whose parallel loop has one iteration per thread and an empty-ish body, calls
it many times and subtracts the time of the same kernel with a serial loop (ctypes call and
argument checks are in both). Usage: python benchmarks/parallel_overhead.py [--calls 20000]
Set TL_NUM_THREADS to choose the pool size (default: the number of cores).
"""

import argparse
import statistics
import time

import numpy as np

import tensorlang as tl
from tensorlang.backends.llvm.pool import pool_threads


def kernel(parallel: bool, regions: int):
    n = tl.var("n")
    A = tl.placeholder((n,), name="A")
    B = tl.compute((regions, n), lambda r, i: A[i] + r.astype("float32"), name="B")
    s = tl.create_schedule(B)
    if parallel:
        s[B].parallel(B.op.axis[1])  # one parallel region per r
    return tl.build(s, [A, B])


def per_call(f, a, b, calls):
    for _ in range(100):
        f(a, b)
    reps = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(calls):
            f(a, b)
        reps.append((time.perf_counter() - t0) / calls)
    return statistics.median(reps)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=20000)
    args = ap.parse_args()
    regions = 10
    par, ser = kernel(True, regions), kernel(False, regions)
    threads = pool_threads()
    a = np.ones(threads, np.float32)
    b = np.zeros((regions, threads), np.float32)
    tp = per_call(par, a, b, args.calls // regions)
    ts = per_call(ser, a, b, args.calls // regions)
    assert np.allclose(b, 1 + np.arange(regions)[:, None])
    print(f"threads in the pool: {threads} (workers + caller)")
    print(f"call with {regions} serial loops:   {1e6 * ts:8.2f} us")
    print(f"call with {regions} parallel loops: {1e6 * tp:8.2f} us")
    print(f"fork-join overhead per parallel region: {1e6 * (tp - ts) / regions:.2f} us "
          "(goal <= 20 us)")


if __name__ == "__main__":
    main()
