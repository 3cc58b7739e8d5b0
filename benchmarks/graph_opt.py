"""Graph optimisation, measured: each workload runs unoptimised (one kernel per graph node,
no rewrites) and optimised (`G.optimize` with the exact passes plus the opt-in ones that
apply, then the executor's fusion), in one process, taken in turn. Printed per workload:
kernels before and after, the rules that fired, milliseconds per run and the speedup; the
outputs of both are checked against each other first.

Workloads: the MLP's SGD step (784-256-10, batch 128), a transformer block's forward and
backward pass (attention, layer norm, MLP; batch 32 x 32 tokens x 64), and a ResNet basic
block at inference (conv-bn-relu-conv-bn + identity, relu; 1 x 64 x 28 x 28, constant
weights and statistics, so batch norm folds into the convolutions).

Usage: python benchmarks/graph_opt.py [--quick] [--rounds 5]
"""

from __future__ import annotations

import argparse
import collections
import pathlib
import statistics
import sys
import time

import numpy as np

import tensorlang.graph as G
from tensorlang.graph.rewrite import DEFAULT_PASSES, rewrite

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from graph_mlp import mlp_step  # noqa: E402

R = np.random.default_rng(0)


def transformer(quick: bool):
    b, t, d = (2, 4, 8) if quick else (32, 32, 64)
    x, y = G.Variable("x", (b, t, d)), G.Variable("y", (b, 10))
    shp = {"wq": (d, d), "wk": (d, d), "wv": (d, d), "wo": (d, d), "w1": (d, 2 * d),
           "w2": (2 * d, d), "out": (d, 10)}
    p = {k: G.Variable(k, s) for k, s in shp.items()}
    q, k, v = x @ p["wq"], x @ p["wk"], x @ p["wv"]
    att = G.softmax((q @ G.transpose(k, (0, 2, 1))) * (1.0 / np.sqrt(d)), axis=-1) @ v
    h = G.layer_norm(x + att @ p["wo"])
    h = G.layer_norm(h + G.relu(h @ p["w1"]) @ p["w2"])
    loss = G.softmax_cross_entropy(G.mean(h, axis=1) @ p["out"], y)
    grads = G.gradients(loss, list(p.values()))
    feed = {x: R.standard_normal((b, t, d)).astype("f4"),
            y: np.eye(10, dtype="f4")[R.integers(0, 10, b)],
            **{p[k]: (R.standard_normal(s) / np.sqrt(s[0])).astype("f4") for k, s in shp.items()}}
    return [loss, *grads], feed, ()


def resnet_block(quick: bool):
    c, hw = (4, 6) if quick else (64, 28)
    x = G.Variable("x", (1, c, hw, hw))

    def conv_bn(h):
        w = G.constant((R.standard_normal((c, c, 3, 3)) * np.sqrt(2 / (9 * c))).astype("f4"))
        stats = [R.uniform(0.5, 2, c), R.standard_normal(c) * 0.1,
                 R.standard_normal(c) * 0.1, R.uniform(0.5, 2, c)]
        return G.batch_norm(G.conv2d(h, w, padding=1),
                            *(G.constant(s.astype("f4")) for s in stats))
    y = G.relu(conv_bn(G.relu(conv_bn(x))) + x)
    return [y], {x: R.standard_normal((1, c, hw, hw)).astype("f4")}, ("conv_bn",)


def mlp(quick: bool):
    nodes, feed, _ = mlp_step(8 if quick else 128)
    return nodes, feed, ()


WORKLOADS = {"MLP SGD step": mlp, "transformer block fwd+bwd": transformer,
             "ResNet basic block (inference)": resnet_block}


def median_ms(fn, runs: int) -> float:
    fn()
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(times)


def measure(name: str, quick: bool, rounds: int) -> dict:
    nodes, feed, extra = WORKLOADS[name](quick)
    opt, fired = rewrite(nodes, (*DEFAULT_PASSES, *extra))
    before, after = G.Executor(nodes, fuse=False), G.Executor(opt)
    want, got = before.run(feed), after.run(feed)
    for w, g in zip(want, got):
        np.testing.assert_allclose(g, w, rtol=1e-3, atol=1e-4 * max(1.0, np.abs(w).max()))
    runs = 3 if quick else 20
    tb, ta = [], []
    for _ in range(rounds):           # taken in turn: the machine's drift hits both
        tb.append(median_ms(lambda: before.run(feed), runs))
        ta.append(median_ms(lambda: after.run(feed), runs))
    rules = collections.Counter(f.rule for f in fired)
    return {"workload": name, "kernels": (len(before.kernels), len(after.kernels)),
            "ms": (statistics.median(tb), statistics.median(ta)), "rules": dict(rules)}


def main(argv=None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="tiny sizes (CI: it runs)")
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args(argv)
    rows = [measure(name, a.quick, 1 if a.quick else a.rounds) for name in WORKLOADS]
    print("| workload | kernels unoptimised | kernels optimised | ms unoptimised | "
          "ms optimised | speedup | rules fired |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        (kb, ka), (tb, ta) = r["kernels"], r["ms"]
        rules = ", ".join(f"{k} x{v}" for k, v in sorted(r["rules"].items())) or "—"
        print(f"| {r['workload']} | {kb} | {ka} | {tb:.3f} | {ta:.3f} | {tb / ta:.2f}x | "
              f"{rules} |")
    return rows


if __name__ == "__main__":
    main()
