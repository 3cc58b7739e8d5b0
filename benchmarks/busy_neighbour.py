"""A BERT-style encoder layer through the graph executor beside busy processes: does the
thread pool give way, or does it fight the neighbour for the cores?

The layer (d 768, sequence 128, 12 heads, feed-forward 3072, float32) is written with `G`
ops: the Q, K and V projections with biases, the heads split by reshape and transpose,
softmax(Q K^T / 8) V, the output projection, a residual and a layer norm with scale and
shift, a tanh-GELU feed-forward block, a residual and a layer norm again (21 kernels).

Measured: the time of one run of the layer, idle and then beside `--busy` processes that
spin in Python (`while True: pass`, one pinned to each core by default), each with the
pool's threads (TL_NUM_THREADS unset: one per core) and with TL_NUM_THREADS=1. Every
measurement is a fresh process (it compiles the kernels, then runs the layer `--runs`
times) and the two thread counts are taken in turn, `--rounds` times; the busy processes
are started before the busy rounds and killed at the end. Printed: the CPU, then per
condition the median over the rounds of each process's median run time (and the range of
the rounds), and, with the pool, the workers that took part in a parallel loop (on
average) and the time a run's launching thread waited for workers after its own tasks
(`pool_stats`).
The pool should never be slower than one thread, busy or not.

Usage: python benchmarks/busy_neighbour.py [--rounds 3] [--runs 40] [--busy N]
       python benchmarks/busy_neighbour.py --worker   (one measurement, JSON)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np

D, SEQ, HEADS, FF = 768, 128, 12, 3072


def gelu(x):
    """GELU, tanh form (BERT's)."""
    import tensorlang.graph as G

    return 0.5 * x * (1.0 + G.tanh(0.7978845608 * (x + 0.044715 * x * x * x)))


def encoder(d: int = D, seq: int = SEQ, heads: int = HEADS, ff: int = FF, seed: int = 0):
    """(the layer's output node, a feed of random inputs and weights)."""
    import tensorlang.graph as G

    dh = d // heads
    shapes = {"wq": (d, d), "wk": (d, d), "wv": (d, d), "wo": (d, d), "w1": (d, ff),
              "w2": (ff, d), "bq": (d,), "bk": (d,), "bv": (d,), "bo": (d,), "b1": (ff,),
              "b2": (d,), "g1": (d,), "s1": (d,), "g2": (d,), "s2": (d,)}
    x = G.Variable("x", (seq, d))
    p = {k: G.Variable(k, s) for k, s in shapes.items()}

    def heads_of(t):                                  # (seq, d) -> (heads, seq, dh)
        return G.transpose(G.reshape(t, (seq, heads, dh)), (1, 0, 2))

    def norm(t, g, s):
        return G.layer_norm(t) * g + s

    q, k, v = (heads_of(x @ p["w" + n] + p["b" + n]) for n in "qkv")
    att = G.softmax((q @ G.transpose(k, (0, 2, 1))) * (1.0 / np.sqrt(dh)), axis=-1) @ v
    att = G.reshape(G.transpose(att, (1, 0, 2)), (seq, d))
    h = norm(x + att @ p["wo"] + p["bo"], p["g1"], p["s1"])
    y = norm(h + gelu(h @ p["w1"] + p["b1"]) @ p["w2"] + p["b2"], p["g2"], p["s2"])
    rng = np.random.default_rng(seed)
    feed = {x: rng.standard_normal((seq, d)).astype("float32")}
    for name, s in shapes.items():
        if len(s) == 2:
            value = rng.standard_normal(s) / np.sqrt(s[0])
        elif name[0] == "g":
            value = 1.0 + 0.1 * rng.standard_normal(s)
        else:
            value = 0.1 * rng.standard_normal(s)
        feed[p[name]] = value.astype("float32")
    return y, feed


def reference(feed_by_name: dict, d: int = D, seq: int = SEQ, heads: int = HEADS):
    """The layer in numpy (float64), from the feed's arrays by Variable name."""
    f = {k: v.astype("float64") for k, v in feed_by_name.items()}
    dh = d // heads

    def heads_of(t):
        return t.reshape(seq, heads, dh).transpose(1, 0, 2)

    def norm(t, g, s):
        m = t.mean(-1, keepdims=True)
        return (t - m) / np.sqrt(((t - m) ** 2).mean(-1, keepdims=True) + 1e-5) * g + s

    x = f["x"]
    q, k, v = (heads_of(x @ f["w" + n] + f["b" + n]) for n in "qkv")
    s = q @ k.transpose(0, 2, 1) / np.sqrt(dh)
    e = np.exp(s - s.max(-1, keepdims=True))
    att = (e / e.sum(-1, keepdims=True)) @ v
    att = att.transpose(1, 0, 2).reshape(seq, d)
    h = norm(x + att @ f["wo"] + f["bo"], f["g1"], f["s1"])
    u = h @ f["w1"] + f["b1"]
    g = 0.5 * u * (1 + np.tanh(0.7978845608 * (u + 0.044715 * u ** 3)))
    return norm(h + g @ f["w2"] + f["b2"], f["g2"], f["s2"])


def worker(runs: int) -> dict:
    """Compile the layer, check it against numpy, time `runs` runs in this process."""
    import tensorlang.graph as G
    from tensorlang.backends.llvm.pool import pool_stats, pool_threads

    y, feed = encoder()
    ex = G.Executor([y])
    got = ex.run(feed)[0]
    want = reference({k.name: v for k, v in feed.items()})
    np.testing.assert_allclose(got, want, rtol=2e-3, atol=2e-3)
    for _ in range(3):
        ex.run(feed)
    before = pool_stats()
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        ex.run(feed)
        times.append(time.perf_counter() - t0)
    after = pool_stats()
    regions = after["regions"] - before["regions"]
    return {"ms": 1e3 * statistics.median(times), "mean_ms": 1e3 * statistics.fmean(times),
            "threads": pool_threads() or 1, "kernels": len(ex.kernels),
            "entries": (after["entries"] - before["entries"]) / regions if regions else 0.0,
            "wait_ms": 1e-6 * (after["wait_ns"] - before["wait_ns"]) / runs}


def measure(threads: str | None, runs: int) -> dict:
    env = dict(os.environ)
    env.pop("TL_NUM_THREADS", None)
    if threads is not None:
        env["TL_NUM_THREADS"] = threads
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    p = subprocess.run([sys.executable, os.path.abspath(__file__), "--worker", "--runs",
                        str(runs)], capture_output=True, text=True, env=env, timeout=900)
    lines = [x for x in p.stdout.splitlines() if x.startswith("{")]
    if p.returncode != 0 or not lines:
        raise RuntimeError(f"worker failed (exit status {p.returncode}):\n{p.stderr[-2000:]}")
    return json.loads(lines[-1])


def start_busy(n: int) -> list[subprocess.Popen]:
    """n processes spinning in Python, process k pinned to core k mod the cores."""
    cores = sorted(os.sched_getaffinity(0))
    procs = []
    for k in range(n):
        code = f"import os; os.sched_setaffinity(0, {{{cores[k % len(cores)]}}})\n" \
               "while True: pass"
        procs.append(subprocess.Popen([sys.executable, "-c", code]))
    return procs


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--runs", type=int, default=40)
    ap.add_argument("--busy", type=int, default=len(os.sched_getaffinity(0)),
                    help="busy processes (default: one per core)")
    ap.add_argument("--worker", action="store_true")
    a = ap.parse_args()
    if a.worker:
        print(json.dumps(worker(a.runs)))
        return
    cores = len(os.sched_getaffinity(0))
    print(f"CPU: {cpu_name()}, {cores} cores; encoder layer d {D}, sequence {SEQ}, "
          f"{HEADS} heads, feed-forward {FF}, float32; {a.runs} runs a process, "
          f"{a.rounds} rounds, each condition in its own processes, taken in turn")
    results: dict[tuple, list[dict]] = {}
    busy: list[subprocess.Popen] = []
    try:
        for cond in ("idle", "busy"):
            if cond == "busy":
                busy = start_busy(a.busy)
                time.sleep(0.5)
            for _ in range(a.rounds):
                for threads in (None, "1"):
                    got = measure(threads, a.runs)
                    results.setdefault((cond, threads), []).append(got)
                    print(f"  {cond:5s} {'pool' if threads is None else '1 thread':8s} "
                          f"{got['ms']:8.2f} ms (mean {got['mean_ms']:.2f})", flush=True)
    finally:
        for p in busy:
            p.kill()
        for p in busy:
            p.wait()
    print("\n| condition | threads | ms per run, median of rounds | rounds' range "
          "| workers joining a parallel loop | ms a run waited for workers |")
    print("|---|---|---|---|---|---|")
    for (cond, threads), rs in results.items():
        ms = [r["ms"] for r in rs]
        label = f"pool ({rs[0]['threads']})" if threads is None else "TL_NUM_THREADS=1"
        joined, waited = (f"{statistics.median(r['entries'] for r in rs):.2f}",
                          f"{statistics.median(r['wait_ms'] for r in rs):.2f}") \
            if threads is None else ("—", "—")
        where = f"beside {a.busy} busy processes" if cond == "busy" else "idle"
        print(f"| {where} | {label} | {statistics.median(ms):.2f} | {min(ms):.2f}-"
              f"{max(ms):.2f} | {joined} | {waited} |")
    for cond in ("idle", "busy"):
        pool = statistics.median(r["ms"] for r in results[(cond, None)])
        one = statistics.median(r["ms"] for r in results[(cond, "1")])
        print(f"{cond}: pool / one thread = {pool / one:.2f}")


if __name__ == "__main__":
    main()
