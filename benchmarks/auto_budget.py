"""The auto-scheduler keeps its budget: `tl.auto_schedule` of a float32 matmul (default
1024^2) with `budget_s` (default 60), in one process beside numpy (OpenBLAS).

Prints the wall time of the call against its budget, the chosen trace, the candidates
measured and capped, its GFLOPS and numpy's (2·n^3 / t; each the median call of rounds
taken in turn, so a slow spell of a shared machine slows both alike) and the target's
CPU. Acceptance: the call within budget + 10 %, the schedule at least numpy's speed.
Usage: python benchmarks/auto_budget.py [--n 1024] [--budget 60] [--rounds 5]
"""

import argparse
import os
import statistics
import time

import numpy as np

import tensorlang as tl
from gemm import median_s  # benchmarks/gemm.py: the median of calls over a minimum time




def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=1024)
    p.add_argument("--budget", type=float, default=60.0)
    p.add_argument("--rounds", type=int, default=5)
    opts = p.parse_args()
    n = opts.n
    A = tl.placeholder((n, n), "float32", name="A")
    B = tl.placeholder((n, n), "float32", name="B")
    k = tl.reduce_axis((0, n), name="k")
    C = tl.compute((n, n), lambda i, j: tl.sum(A[i, k] * B[k, j], axis=k), name="C")

    t0 = time.perf_counter()
    s = tl.auto_schedule(C, budget_s=opts.budget)
    wall = time.perf_counter() - t0
    res = s.auto
    measured = [c for c in res.candidates if c.measured is not None]
    print(f"cpu: {tl.Target.parse('llvm').cpu}, {os.cpu_count()} cores")
    print(f"auto_schedule {n}^2 float32 matmul: {wall:.2f} s of a {opts.budget:g} s budget "
          f"({wall / opts.budget:.2f}x); {len(res.candidates)} candidates, "
          f"{len(measured)} measured, {sum(c.capped for c in measured)} capped")
    print("chosen trace:")
    print(s.trace_text() or "(the declared loop nest)")

    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    c = np.zeros((n, n), np.float32)
    f = tl.build(s, [A, B, C], name="mm_auto")
    f(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-3, atol=1e-2)
    ours, numpy_ = [], []
    for r in range(opts.rounds):              # in turn, the order alternating
        pair = [(ours, lambda: f(a, b, c)), (numpy_, lambda: np.matmul(a, b))]
        for times, fn in pair if r % 2 == 0 else pair[::-1]:
            times.append(median_s(fn))
    flops = 2.0 * n ** 3
    t_ours, t_np = statistics.median(ours), statistics.median(numpy_)
    print(f"tensorlang: {t_ours * 1e3:.3f} ms, {flops / t_ours / 1e9:.1f} GFLOPS")
    print(f"numpy:      {t_np * 1e3:.3f} ms, {flops / t_np / 1e9:.1f} GFLOPS")
    ok_time, ok_speed = wall <= 1.1 * opts.budget, t_ours <= t_np
    print(f"ratio to numpy: {t_np / t_ours:.2f}x; within budget + 10 %: {ok_time}; "
          f">= numpy: {ok_speed}")


if __name__ == "__main__":
    main()
