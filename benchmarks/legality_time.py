"""Time of the exact legality checks: a 6-primitive schedule of a 3-D stage.

The stage is a time-stepped 2-D stencil (a recurrence over t, i, j with symbolic sizes);
the schedule is skew, skew, tile, split, reorder, parallel — each primitive is checked
exactly against every dependence when it is applied. Reports the median over repetitions of
the whole sequence (dependence analysis included, computed on first use) and per primitive.
Usage: python benchmarks/legality_time.py [--reps 15]
"""

import argparse
import statistics
import time

import tensorlang as tl


def stencil():
    T, n, m = tl.var("T"), tl.var("n"), tl.var("m")
    x = tl.placeholder((n, m), dtype="float32", name="x")

    def body(u, t, i, j):
        inner = (i > 0) & (i < n - 1) & (j > 0) & (j < m - 1)
        avg = (u[t - 1, i - 1, j] + u[t - 1, i + 1, j] + u[t - 1, i, j - 1]
               + u[t - 1, i, j + 1] + u[t - 1, i, j]) * 0.2
        return tl.if_then_else(t == 0, x[i, j], tl.if_then_else(inner, avg, u[t - 1, i, j]))
    return x, tl.recurrence((T, n, m), body, dtype="float32", name="u")


def schedule_once():
    x, u = stencil()
    t0 = time.perf_counter()
    s = tl.create_schedule(u)
    t1 = time.perf_counter()
    st = s[u]
    steps = []
    for call in (lambda: st.skew("t", "i"), lambda: st.skew("t", "j"),
                 lambda: st.tile("i", "j", 16, 16), lambda: st.split("t", factor=4),
                 lambda: st.reorder("t.outer", "i.outer", "j.outer", "t.inner"),
                 lambda: st.parallel("j.outer")):
        a = time.perf_counter()
        try:
            call()
        except tl.IllegalScheduleError:
            pass  # refused schedules are checked just as exactly
        steps.append(time.perf_counter() - a)
    return t1 - t0, steps, s


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=15)
    args = ap.parse_args()
    schedule_once()  # warm imports
    totals, creates, per = [], [], []
    for _ in range(args.reps):
        c, steps, s = schedule_once()
        creates.append(c)
        totals.append(sum(steps))
        per.append(steps)
    print(f"create_schedule (model, accesses): median {1e3 * statistics.median(creates):.1f} ms")
    print(f"6 checked primitives on a 3-D stage: median {1e3 * statistics.median(totals):.1f} ms"
          " (goal <= 50 ms)")
    names = ["skew(t,i)", "skew(t,j)", "tile(i,j,16,16)", "split(t,4)", "reorder", "parallel"]
    for k, name in enumerate(names):
        print(f"  {name:16s} {1e3 * statistics.median(p[k] for p in per):6.1f} ms")
    print("final schedule:\n" + s.trace_text())


if __name__ == "__main__":
    main()
