"""Do the tutorials' timings repeat? Each tutorial that prints timings runs twice, in fresh
processes one after the other, and every figure of the first run is paired with the same
figure (the same line, the same place in it) of the second.

A figure is what `tl.testing.benchmark` prints — ``"41.2 GFLOPS (38.0-43.1 over 5
rounds)"`` (`BenchmarkResult.rate`: the median round, then the slowest and fastest) or
``"median 0.1099 ms (min 0.0952, max 0.1240; ...)"`` (its `str`) — or a tutorial's own
``"0.412 ms (0.398-0.440)"`` (median, fastest-slowest). A pair repeats when one run's
median lies within the other run's printed spread (min to max). The table lists every
pair; the exit status is 1 when a figure does not repeat.

Timing: run it on a quiet machine (nothing else running), as the tutorials' figures are.

Usage: python benchmarks/tutorial_figures.py [--tutorials 02,05,09,10,11] [--out FILE.md]
"""

from __future__ import annotations

import argparse
import os
import pathlib
import re
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
TUTORIALS = ("02", "05", "09", "10", "11")     # the CPU tutorials that print timings
NUM = r"(\d+(?:\.\d+)?)"
# (pattern, which groups are median, low, high)
FORMS = (
    (re.compile(NUM + r" ([A-Za-z/]+) \(" + NUM + "-" + NUM + r" over \d+ rounds\)"),
     (1, 3, 4)),
    (re.compile(r"median " + NUM + r" ms \(min " + NUM + ", max " + NUM + ";"), (1, 2, 3)),
    (re.compile(NUM + r" ms \(" + NUM + "-" + NUM + r"\)"), (1, 2, 3)),
)


def figures(text: str) -> list[tuple[str, float, float, float]]:
    """(label, median, low, high) of every figure in a tutorial's output, in order; the
    label is the line's text before the figure (with its place when a line has several)."""
    out, last = [], ""
    for line in text.splitlines():
        spans = []
        for pattern, (m, a, b) in FORMS:
            for hit in pattern.finditer(line):
                if any(s < hit.end() and hit.start() < e for s, e, _ in spans):
                    continue            # (a rate's text is matched by one form only)
                vals = [float(hit.group(g)) for g in (m, a, b)]
                spans.append((hit.start(), hit.end(), vals))
        spans.sort()
        for k, (_, _, (med, a, b)) in enumerate(spans):
            # a figure alone on its line is labelled by the line of text before it
            label = line[:spans[0][0]].strip() or last[:60]
            if len(spans) > 1:
                label += f" [{k + 1}]"
            out.append((label, med, min(a, b), max(a, b)))
        if not spans and line.strip():
            last = line.strip()
    return out


def probe() -> float:
    """The machine's speed just now: its FMA peak over both cores, GFLOPS
    (`tensorlang bench`'s probe). A figure that does not repeat while this moved alike was
    the machine's phase (a neighbour on the host), not the kernel's."""
    from tensorlang.benchmarking.bench import peak_flops

    return peak_flops(0.5)[0] / 1e9


def run(tutorial: pathlib.Path) -> tuple[str, float, float]:
    speed = probe()
    t = time.perf_counter()
    p = subprocess.run([sys.executable, str(tutorial)], capture_output=True, text=True,
                       cwd=ROOT, env=dict(os.environ), timeout=1800)
    if p.returncode:
        raise SystemExit(f"{tutorial.name} failed:\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")
    return p.stdout, time.perf_counter() - t, speed


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tutorials", default=",".join(TUTORIALS))
    ap.add_argument("--out", default=None, help="also write the table to this file")
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    import tensorlang as tl

    host = tl.Target.parse("llvm")
    lines = [f"Tutorial figures, each tutorial run twice in turn on {host.cpu} "
             f"({host.cores} threads), {time.strftime('%Y-%m-%d')}", "",
             "The machine's FMA peak (GFLOPS, both cores) was probed just before each run: "
             "a figure that moves with it moved with the machine.", "",
             "| tutorial | figure | run 1: median (min-max) | run 2: median (min-max) "
             "| repeats | FMA peak before run 1 / run 2 |", "|---|---|---|---|---|---|"]
    bad = 0
    for tag in args.tutorials.split(","):
        path = next((ROOT / "tutorials").glob(f"{tag.strip()}_*.py"))
        (one, t1, p1), (two, t2, p2) = run(path), run(path)
        f1, f2 = figures(one), figures(two)
        if [f[0] for f in f1] != [f[0] for f in f2]:
            raise SystemExit(f"{path.name}: the two runs print different figures:\n"
                             f"{[f[0] for f in f1]}\n{[f[0] for f in f2]}")
        for (label, m1, a1, b1), (_, m2, a2, b2) in zip(f1, f2):
            ok = a1 <= m2 <= b1 or a2 <= m1 <= b2
            bad += not ok
            lines.append(f"| {path.stem} | {label.replace('|', '/')} | {m1:g} ({a1:g}-{b1:g}) "
                         f"| {m2:g} ({a2:g}-{b2:g}) | {'yes' if ok else '**no**'} "
                         f"| {p1:.0f} / {p2:.0f} |")
        print(f"{path.name}: {len(f1)} figures, {t1:.0f} s and {t2:.0f} s", file=sys.stderr,
              flush=True)
    lines += ["", f"{bad} of the figures did not repeat." if bad else
              "Every figure repeated within its printed spread."]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        pathlib.Path(args.out).write_text(text)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
