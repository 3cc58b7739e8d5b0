"""Cost of schedule edits on long pipelines (issue 40, item 12).

A chain of n elementwise stages T0 .. T(n-1) (64 floats each, T(k) = T(k-1) * 2 + 1):

- inline: compute_inline of every stage but the last, in order (each edit rewrites one
  reader and drops one stage); then the build of the inlined kernel (the first run's:
  later runs build the same kernel, which the compile cache holds);
- split+reorder: on a 2-D chain (16 x 64), the dependence analysis of the whole program
  (once per schedule, at its first check), then split and reorder the loops of the middle
  stage (two edits of one stage of the n);
- compute_at: every stage but the last computed at the loop of its reader, last first, so
  that stage k ends up nested n - k deep (its placed statements have a time dimension per
  loop around them); shorter chains, as this nesting is the cost.

Prints the median over `--reps` runs, per chain length, with the time per edit: an edit
that costs what it changes keeps the time per edit flat as n grows.
Usage: python benchmarks/edit_cost.py [--quick] [--reps 3] [--sizes 25,50,100,200]
       [--at-sizes 10,20,40]
"""

import argparse
import statistics
import time

import tensorlang as tl


def _step1(t):
    return lambda j: t[j] * 2.0 + 1.0


def _step2(t):
    return lambda i, j: t[i, j] * 2.0 + 1.0


def chain(n: int, shape=(64,)):
    A = tl.placeholder(shape, "float32", name="A")
    ts = [A]
    step = _step1 if len(shape) == 1 else _step2
    for k in range(n):
        ts.append(tl.compute(shape, step(ts[-1]), name=f"T{k}"))
    return ts


def inline(n: int) -> tuple[float, float]:
    ts = chain(n)
    s = tl.create_schedule(ts[-1])
    t0 = time.perf_counter()
    for t in ts[1:-1]:
        s[t].compute_inline()
    t1 = time.perf_counter()
    tl.build(s, [ts[0], ts[-1]])
    return t1 - t0, time.perf_counter() - t1


def compute_at(n: int) -> float:
    ts = chain(n)
    s = tl.create_schedule(ts[-1])
    t0 = time.perf_counter()
    for k in range(len(ts) - 2, 0, -1):
        s[ts[k]].compute_at(s[ts[k + 1]], ts[k + 1].op.axis[0])
    return time.perf_counter() - t0


def split_reorder(n: int) -> tuple[float, float]:
    ts = chain(n, (16, 64))
    s = tl.create_schedule(ts[-1])
    mid = ts[len(ts) // 2]
    t0 = time.perf_counter()
    _ = s.program.deps      # the first check's: the dependences of the whole program
    t1 = time.perf_counter()
    i, j = mid.op.axis
    jo, ji = s[mid].split(j, factor=8)
    s[mid].reorder(jo, i, ji)
    return t1 - t0, time.perf_counter() - t1


def median(fn, n: int, reps: int):
    runs = [fn(n) for _ in range(reps)]
    if isinstance(runs[0], tuple):
        return tuple(statistics.median(r[k] for r in runs) for k in range(len(runs[0])))
    return statistics.median(runs)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="short chains, one run each")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--sizes", default="25,50,100,200")
    ap.add_argument("--at-sizes", default="10,20,40")
    args = ap.parse_args()
    sizes = [25, 50] if args.quick else [int(x) for x in args.sizes.split(",")]
    at_sizes = [10, 20] if args.quick else [int(x) for x in args.at_sizes.split(",")]
    reps = 1 if args.quick else args.reps
    inline(5)       # imports, the JIT
    print(f"median of {reps} run(s) per row\n")
    print("| stages | inline all (s) | per edit (ms) | build (s) | dependences, 2-D chain (ms) "
          "| split+reorder one stage (ms) |")
    print("|---|---|---|---|---|---|")
    for n in sizes:
        runs = [inline(n) for _ in range(reps)]
        t_inl = statistics.median(r[0] for r in runs)
        t_build = runs[0][1]    # the first: later builds of the same kernel hit the cache
        t_deps, t_sr = median(split_reorder, n, reps)
        print(f"| {n} | {t_inl:.3f} | {1e3 * t_inl / (n - 1):.2f} | {t_build:.3f} "
              f"| {1e3 * t_deps:.1f} | {1e3 * t_sr:.1f} |", flush=True)
    print("\n| stages (nested compute_at) | compute_at all (s) | per edit (ms) |")
    print("|---|---|---|")
    for n in at_sizes:
        t_at = median(compute_at, n, reps)
        print(f"| {n} | {t_at:.3f} | {1e3 * t_at / (n - 1):.2f} |", flush=True)


if __name__ == "__main__":
    main()
