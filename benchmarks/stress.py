"""Stress: threads, a busy neighbour and two tuning processes at once. Counts wrong results,
errors that name the wrong thing, crashes and hangs (the goal: zero of each).

Phases, each in a fresh child process under a time limit (a crash or a hang is counted
there, not lost with the parent):

- `build`: N threads build and run their first parallel kernels at the same moment (the
  pool and the JIT start under them);
- `shared`: N threads x M runs of one shared `G.Executor` (a small MLP layer, fused, and
  the same graph unfused: every run writes intermediates), each run checked against numpy;
- `private`: the same with one Executor per thread;
- `kernel`: N threads x M calls of one shared kernel with index checks, each call given a
  bad index of its own thread's: the error must name that index;
- `tune`: two processes tuning the same matmul at once into one tuning log (budget
  `--budget` seconds each): both return a schedule that computes the right product, and
  every record in the log is plausible (a finite positive time); the records of the
  declared loop nest are counted (the symptom of disturbed measurements: both processes
  once recorded it).

With `--busy K` (default: one per core), K processes spinning in Python run beside every
phase. Printed: the CPU, then per phase the runs, wrong results, wrong errors, crashes and
hangs, and its time.

Usage: python benchmarks/stress.py [--threads 4] [--runs 200] [--busy K] [--budget 8]
       python benchmarks/stress.py --phase NAME ...   (one phase; JSON on stdout)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

PHASES = ("build", "shared", "private", "kernel", "tune")


def _cpu() -> str:
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


def _threads(n: int, fn) -> list:
    """fn(k) in n threads released together; the exceptions raised."""
    gate, errors = threading.Barrier(n), []

    def body(k):
        try:
            gate.wait()
            fn(k)
        except BaseException as e:      # noqa: BLE001 (counted)
            errors.append(repr(e))
    ts = [threading.Thread(target=body, args=(k,)) for k in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return errors


def _mlp():
    import tensorlang.graph as G

    x = G.Variable("x", (64, 96), "float32")
    w = G.Variable("w", (96, 48), "float32")
    b = G.Variable("b", (48,), "float32")
    y = G.softmax(G.relu(G.matmul(x, w) + b), axis=-1)
    return x, w, b, y


def _mlp_ref(a, w, b):
    h = np.maximum(a @ w + b, 0)
    e = np.exp(h - h.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def phase_build(n: int, runs: int) -> dict:
    import tensorlang as tl

    wrong = []

    def work(k):
        size = 4096 + 64 * k            # a kernel of its own per thread
        A = tl.placeholder((size,), "float32", name="A")
        B = tl.compute((size,), lambda i: A[i] * 2.0 + float(k), name="B")
        s = tl.create_schedule(B)
        o, i = s[B].split(B.op.axis[0], factor=64)
        s[B].parallel(o)
        s[B].vectorize(i)
        f = tl.build(s, [A, B])
        a = np.arange(size, dtype="f4")
        out = np.empty_like(a)
        for _ in range(max(runs // 10, 1)):
            f(a, out)
            if not np.array_equal(out, a * 2 + k):
                wrong.append(k)
    errors = _threads(n, work)
    return {"runs": n * max(runs // 10, 1), "wrong": len(wrong), "errors": errors}


def _executor_phase(n: int, runs: int, shared: bool) -> dict:
    import tensorlang.graph as G

    x, w, b, y = _mlp()
    rng = np.random.default_rng(0)
    feeds = [(rng.standard_normal((64, 96)).astype("f4"),
              rng.standard_normal((96, 48)).astype("f4") * 0.1,
              rng.standard_normal(48).astype("f4")) for _ in range(8)]
    refs = [_mlp_ref(*f) for f in feeds]
    one = [G.Executor([y]), G.Executor([y], fuse=False)] if shared else None
    wrong = []

    def work(k):
        exs = one or [G.Executor([y]), G.Executor([y], fuse=False)]
        for r in range(runs):
            j = (k * 7 + r) % len(feeds)
            a, ww, bb = feeds[j]
            got = exs[r % 2].run({x: a, w: ww, b: bb})[0]
            if not np.allclose(got, refs[j], rtol=1e-4, atol=1e-6):
                wrong.append((k, r))
    errors = _threads(n, work)
    return {"runs": n * runs, "wrong": len(wrong), "errors": errors}


def phase_kernel(n: int, runs: int) -> dict:
    import tensorlang as tl

    m = tl.var("m")
    A = tl.placeholder((m,), "float32", name="A")
    Idx = tl.placeholder((256,), "int64", name="I")
    B = tl.compute((256,), lambda i: A[Idx[i]], name="B")
    s = tl.create_schedule(B)
    o, i = s[B].split(B.op.axis[0], factor=16)
    s[B].parallel(o)
    f = tl.build(s, [A, Idx, B])
    a = np.arange(100, dtype="f4")
    misnamed, wrong = [], []

    def work(k):
        for r in range(runs):
            idx = (np.arange(256) * (k + 1)) % 100
            out = np.empty(256, "f4")
            if r % 2:
                f(a, idx, out)
                if not np.array_equal(out, a[idx]):
                    wrong.append((k, r))
                continue
            idx[(r * 13 + k) % 256] = 1000 + k
            try:
                f(a, idx, out)
                misnamed.append((k, r, "no error"))
            except tl.IndexBoundsError as e:
                if e.index != 1000 + k:
                    misnamed.append((k, r, e.index))
    errors = _threads(n, work)
    return {"runs": n * runs, "wrong": len(wrong), "misnamed": len(misnamed),
            "errors": errors}


TUNER = """
import json, sys
import numpy as np
import tensorlang as tl
n = 192
A = tl.placeholder((n, n), "float32", name="A")
B = tl.placeholder((n, n), "float32", name="B")
k = tl.reduce_axis((0, n), "k")
C = tl.compute((n, n), lambda i, j: tl.sum(A[i, k] * B[k, j], axis=k), name="C")
s = tl.auto_schedule(C, budget_s=float(sys.argv[1]), log=sys.argv[2], seed=int(sys.argv[3]))
f = tl.build(s, [A, B, C])
rng = np.random.default_rng(0)
a, b = (rng.standard_normal((n, n)).astype("f4") for _ in range(2))
c = np.empty((n, n), "f4")
f(a, b, c)
print(json.dumps({"right": bool(np.allclose(c, a @ b, rtol=1e-3, atol=1e-3))}))
"""


def phase_tune(budget: float) -> dict:
    with tempfile.TemporaryDirectory() as d:
        log = os.path.join(d, "tuning.jsonl")
        script = os.path.join(d, "tuner.py")
        with open(script, "w") as fh:
            fh.write(TUNER)
        env = {**os.environ, "TL_CACHE_DIR": d}
        procs = [subprocess.Popen([sys.executable, script, str(budget), log, str(seed)],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                  env=env) for seed in (1, 2)]
        outs = [p.communicate(timeout=budget * 4 + 120) for p in procs]
        crashes = sum(p.returncode != 0 for p in procs)
        right = sum(json.loads(o.strip().splitlines()[-1])["right"] for o, _ in outs
                    if o.strip())
        records = []
        if os.path.exists(log):
            for line in open(log, encoding="utf-8", errors="replace"):
                try:
                    records.append(json.loads(line))
                except ValueError:
                    records.append(None)
        implausible = sum(1 for r in records if not isinstance(r, dict) or
                          not isinstance(r.get("time"), (int, float)) or
                          not 0 < r["time"] < float("inf"))
        declared = sum(1 for r in records if isinstance(r, dict) and not r.get("trace"))
        return {"runs": 2, "wrong": 2 - crashes - right, "crashes": crashes,
                "records": len(records), "implausible records": implausible,
                "declared nest records": declared,
                "errors": [e[-400:] for _, e in outs if e.strip() and "Traceback" in e]}


def run_phase(name: str, args) -> dict:
    t0 = time.perf_counter()
    if name == "build":
        out = phase_build(args.threads, args.runs)
    elif name == "shared":
        out = _executor_phase(args.threads, args.runs, True)
    elif name == "private":
        out = _executor_phase(args.threads, args.runs, False)
    elif name == "kernel":
        out = phase_kernel(args.threads, args.runs)
    else:
        out = phase_tune(args.budget)
    out["seconds"] = round(time.perf_counter() - t0, 1)
    return out


def _busy(k: int) -> list:
    procs = []
    for c in range(k):
        p = subprocess.Popen([sys.executable, "-c", "while True: pass"])
        if hasattr(os, "sched_setaffinity"):
            try:
                os.sched_setaffinity(p.pid, {c % (os.cpu_count() or 1)})
            except OSError:
                pass
        procs.append(p)
    return procs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--busy", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--budget", type=float, default=8.0)
    ap.add_argument("--limit", type=float, default=900.0, help="seconds a phase may take")
    ap.add_argument("--phase", choices=PHASES)
    ap.add_argument("--phases", default=",".join(PHASES))
    args = ap.parse_args()
    if args.phase:
        print(json.dumps(run_phase(args.phase, args)))
        return
    print(f"CPU: {_cpu()}, {os.cpu_count()} cores; {args.threads} threads x {args.runs} runs; "
          f"{args.busy} busy processes beside every phase")
    rows = []
    busy = _busy(args.busy)
    try:
        for name in args.phases.split(","):
            cmd = [sys.executable, __file__, "--phase", name, "--threads", str(args.threads),
                   "--runs", str(args.runs), "--budget", str(args.budget)]
            t0 = time.perf_counter()
            try:
                r = subprocess.run(cmd, capture_output=True, text=True, timeout=args.limit)
                hung = False
            except subprocess.TimeoutExpired:
                r, hung = None, True
            res = {"runs": "-", "wrong": "-", "seconds": round(time.perf_counter() - t0, 1)}
            crashed = 0
            if r is not None and r.returncode == 0 and r.stdout.strip():
                res = json.loads(r.stdout.strip().splitlines()[-1])
            elif r is not None:
                crashed = 1
                print(f"{name}: exit status {r.returncode}\n{r.stderr[-1500:]}")
            rows.append((name, res, crashed + res.get("crashes", 0), int(hung)))
    finally:
        for p in busy:
            p.kill()
    print("\n| phase | runs | wrong results | errors naming another call | exceptions | "
          "crashes | hangs | seconds | notes |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, res, crashed, hung in rows:
        notes = ""
        if name == "tune" and "records" in res:
            notes = (f"{res['records']} records in the shared log, "
                     f"{res['implausible records']} implausible, "
                     f"{res['declared nest records']} of the declared nest")
        print(f"| {name} | {res['runs']} | {res['wrong']} | {res.get('misnamed', '-')} | "
              f"{len(res.get('errors', []))} | {crashed} | {hung} | {res['seconds']} | "
              f"{notes} |")
    for name, res, _, _ in rows:
        for e in res.get("errors", [])[:3]:
            print(f"{name}: {e}")


if __name__ == "__main__":
    main()
