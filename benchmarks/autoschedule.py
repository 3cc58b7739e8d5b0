"""The auto-scheduler against the hand schedules, operator by operator, in one process.

For each operator: `tl.auto_schedule` with a tuning budget (searching, measuring its best
predicted candidates and mutating the fastest), against the best hand schedule in the
repository — the graph executor's default schedule for the ops it has (register-blocked
matmuls and convolutions, per-row softmax and layer norm, vector reductions), a schedule
written here for the others — and the declared loop nest. Printed: milliseconds, the
auto/hand ratio, the tuning time, and the Spearman correlation between the cost model's
predictions and measured times: over the candidates the search measured (its best
predicted ones and their mutants, which differ little) and over `--rho-sample` candidates
sampled at random (the model's ranking of schedules it did not pick).

With `--halide-python PY` (an interpreter with the `halide` wheel), Halide's Mullapudi2016
and Adams2019 autoschedulers run the operators that benchmarks/halide_autoschedule.py
defines (the matmuls, the column sum, the transposed copy, the blur), each in its own
process: a plugin that crashes (Mullapudi2016 and Adams2019 on the column sum, here) is a
blank cell, not a failed run.

The model-only columns are the graph executor's default: `tl.auto_schedule` without
measuring, seeded with the hand schedule (kept unless a candidate is predicted
`search.MODEL_MARGIN` times faster), its kernel timed beside the others, and its search's
seconds.

Usage: python benchmarks/autoschedule.py [--budget 30] [--quick] [--ops matmul,blur,...]
       [--halide-python PY] [--samples DIR]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import numpy as np

import tensorlang as tl
from tensorlang.graph.ops import OPS
from tensorlang.autoschedule import search

R = np.random.default_rng(0)


def _graph_op(op, shapes, **attrs):
    """(inputs, output) of a graph op's TE definition, and a hand schedule: the executor's."""
    from tensorlang.graph.executor import compile_op

    ins = [tl.placeholder(s, "float32", name=f"in{k}") for k, s in enumerate(shapes)]
    out_shape = tuple(OPS[op].shape(*shapes, **attrs))
    out, _ = OPS[op].te(ins, list(shapes), out_shape, **attrs)

    def hand(schedules="hand"):
        mod, used = compile_op(op, tuple(sorted(attrs.items())), tuple(shapes),
                               ("float32",) * len(shapes), schedules)
        return mod, used
    # the executor's default: its model-only choice seeded with the hand schedule
    hand.model = lambda: hand("model")
    return ins, out, hand


def _model(ins, out, seed: tl.Schedule, name: str = "model"):
    """The kernel the executor's default would build: model-only, `seed` (the hand
    schedule) among the candidates."""
    s = tl.auto_schedule(out, measure_on_host=False, seeds=[seed])
    return tl.build(s, [*ins, out], name=name), list(range(len(ins)))


def _te_op(build, hand_schedule):
    ins, out = build()

    def schedule():
        s = tl.create_schedule(out)
        hand_schedule(s, out)
        return s

    def hand():
        return tl.build(schedule(), [*ins, out], name="hand"), list(range(len(ins)))

    hand.model = lambda: _model(ins, out, schedule())
    return ins, out, hand


def blur(n):
    def build():
        X = tl.placeholder((n + 2, n + 2), "float32", name="X")
        # "* (1/3)", not "/ 3": Halide compiles a division by a constant float as this
        # multiplication (not IEEE division; tensorlang divides), so both compute this
        third = 1.0 / 3.0
        bx = tl.compute((n + 2, n), lambda i, j: (X[i, j] + X[i, j + 1] + X[i, j + 2]) * third,
                        name="bx")
        by = tl.compute((n, n), lambda i, j: (bx[i, j] + bx[i + 1, j] + bx[i + 2, j]) * third,
                        name="by")
        return [X], by

    def hand(s, by):         # Halide's tutorial schedule: bx per strip of rows, vectors
        bx = by.op.input_tensors[0]
        yo, yi = s[by].split(by.op.axis[0], factor=32)
        xo, xi = s[by].split(by.op.axis[1], factor=16)
        s[by].reorder(yo, yi, xo, xi)
        s[by].vectorize(xi)
        s[by].parallel(yo)
        s[bx].compute_at(s[by], yo)
        s[bx].vectorize(s[bx].split(s[bx].op.axis[1], factor=16)[1])
    return _te_op(build, hand)


def heat(n, steps):
    def build():
        X = tl.placeholder((n,), "float32", name="X")
        U = tl.recurrence((steps, n), lambda u, t, i: tl.if_then_else(
            t == 0, X[i], tl.if_then_else(
                tl.all(i >= 1, i <= n - 2),
                (u[t - 1, i - 1] + u[t - 1, i] + u[t - 1, i + 1]) * (1.0 / 3.0),
                u[t - 1, i])), dtype="float32", name="U")
        return [X], U

    def hand(s, U):           # each time step's row in vectors (t carries the dependence)
        s[U].vectorize(s[U].split(U.op.axis[1], factor=16)[1])
    return _te_op(build, hand)


def iir(m, n):
    def build():
        X = tl.placeholder((m, n), "float32", name="X")
        Y = tl.recurrence((m, n), lambda y, i, j: X[i, j] + tl.if_then_else(
            j >= 1, 0.5 * y[i, j - 1], 0.0), dtype="float32", name="Y")
        return [X], Y

    def hand(s, Y):           # rows are independent: vectors across rows, rows in parallel
        i, j = Y.op.axis
        io, ii = s[Y].split(i, factor=16)
        s[Y].reorder(io, j, ii)
        s[Y].vectorize(ii)
        s[Y].parallel(io)
    return _te_op(build, hand)


def wavefront(n):
    def build():
        X = tl.placeholder((n, n), "float32", name="X")
        U = tl.recurrence((n, n), lambda u, i, j: X[i, j] + 0.5 * (
            tl.if_then_else(i >= 1, u[i - 1, j], 0.0) +
            tl.if_then_else(j >= 1, u[i, j - 1], 0.0)), dtype="float32", name="U")
        return [X], U

    def hand(s, U):           # 32 x 64 tiles, anti-diagonals of tiles in parallel
        io, jo, ii, ji = s[U].tile("i", "j", 32, 64)
        s[U].skew(io, jo, factor=1)
        s[U].reorder(jo, io)
        s[U].parallel(io)
    return _te_op(build, hand)


def depthwise(c, h):
    def build():
        X = tl.placeholder((1, c, h + 2, h + 2), "float32", name="X")
        W = tl.placeholder((c, 3, 3), "float32", name="W")
        ry, rx = tl.reduce_axis((0, 3), name="ry"), tl.reduce_axis((0, 3), name="rx")
        Y = tl.compute((1, c, h, h), lambda b, k, i, j: tl.sum(
            X[b, k, i + ry, j + rx] * W[k, ry, rx], axis=[ry, rx]), name="Y")
        return [X, W], Y

    def hand(s, Y):
        b, k, i, j = Y.op.axis
        jo, ji = s[Y].split(j, factor=16)
        s[Y].reorder(b, k, i, jo, *Y.op.reduce_axis, ji)
        s[Y].vectorize(ji)
        s[Y].parallel(s[Y].fuse(b, k))
    return _te_op(build, hand)


def operators(quick: bool) -> dict:
    q = quick
    return {
        "matmul 512": lambda: _graph_op("matmul", [(64, 64), (64, 64)] if q else
                                        [(512, 512), (512, 512)], ta=False, tb=False),
        "matmul 127x781x253": lambda: _graph_op("matmul", [(13, 17), (17, 25)] if q else
                                                [(127, 781), (781, 253)], ta=False, tb=False),
        "batched matmul 8x128": lambda: _graph_op("matmul", [(2, 16, 16), (2, 16, 16)] if q else
                                                  [(8, 128, 128), (8, 128, 128)],
                                                  ta=False, tb=False),
        "conv2d 64->64 3x3 28x28": lambda: _graph_op(
            "conv2d", [(1, 4, 8, 8), (4, 4, 3, 3)] if q else [(1, 64, 28, 28), (64, 64, 3, 3)],
            stride=1, padding=1),
        "depthwise 3x3 64x56x56": lambda: depthwise(4 if q else 64, 8 if q else 56),
        "softmax 1024x1024": lambda: _graph_op("softmax", [(16, 40)] if q else [(1024, 1024)],
                                               axis=-1),
        "column sum 2048x2048": lambda: _graph_op("sum", [(40, 24)] if q else [(2048, 2048)],
                                                  axis=(0,), keepdims=False),
        "transposed copy 2048": lambda: _graph_op("transpose", [(24, 40)] if q else
                                                  [(2048, 2048)], axes=(1, 0)),
        "blur 3x3 1024": lambda: blur(30 if q else 1024),
        "heat stencil 64 steps x 4096": lambda: heat(64 if q else 4096, 8 if q else 64),
        "IIR filter 1024x1024": lambda: iir(16 if q else 1024, 20 if q else 1024),
        "2-D recurrence 1024x1024": lambda: wavefront(24 if q else 1024),
        "layer norm 1024x1024": lambda: _layer_norm(q),
    }


def _layer_norm(quick: bool):
    """Layer norm as the executor fuses it (one kernel, row by row)."""
    import tensorlang.graph as G
    from tensorlang.graph.executor import default_schedules

    shape = (16, 40) if quick else (1024, 1024)
    x = G.Variable("x", shape)
    ((_, s_hand),) = default_schedules([G.layer_norm(x)], schedules="hand")
    out = s_hand.outputs[0]
    ins = list(s_hand.placeholders)

    def hand():
        return tl.build(s_hand, [*ins, out], name="hand_ln"), list(range(len(ins)))
    hand.model = lambda: _model(ins, out, s_hand, "model_ln")
    # the graph lifts eps into a scalar input: it gets its value, not a random one (a
    # negative draw makes rows NaN and others ill-conditioned, where two correct summation
    # orders differ by 0.2 %)
    hand.constants = {k: 1e-5 for k, t in enumerate(ins) if not t.shape}
    return ins, out, hand


def run_one(name, make, budget: float, rho_n: int = 0, samples: str | None = None) -> dict:
    ins, out, hand = make()
    arrays = [R.standard_normal([int(x.value) for x in t.shape]).astype("float32") for t in ins]
    for k, v in getattr(hand, "constants", {}).items():
        arrays[k] = np.array(v, "float32")
    res = np.zeros([int(x.value) for x in out.shape], "float32")
    mod, used = hand()
    hand_args = [arrays[k] for k in used]
    mod(*hand_args, res)
    want = res.copy()
    t0 = time.perf_counter()
    s = tl.auto_schedule(out, budget_s=budget)
    tune_s = time.perf_counter() - t0
    f = tl.build(s, [*ins, out], name="auto")
    got = np.zeros_like(res)
    f(*arrays, got)
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-3)
    t0 = time.perf_counter()
    fm, used_m = hand.model()
    model_s = time.perf_counter() - t0
    model_args, model_out = [arrays[k] for k in used_m], np.zeros_like(res)
    fm(*model_args, model_out)
    np.testing.assert_allclose(model_out, want, rtol=1e-3, atol=1e-3)
    naive = tl.build(tl.create_schedule(out), [*ins, out], name="naive")
    naive_out = np.zeros_like(res)
    t_hand, t_auto, t_model, t_naive = search.time_in_turn(
        [lambda: mod(*hand_args, res), lambda: f(*arrays, got),
         lambda: fm(*model_args, model_out), lambda: naive(*arrays, naive_out)], rounds=5)
    rho = s.auto.spearman
    return {"op": name, "auto_ms": 1e3 * t_auto, "hand_ms": 1e3 * t_hand,
            "model_ms": 1e3 * t_model, "model_s": model_s,
            "naive_ms": 1e3 * t_naive, "tune_s": tune_s, "rho": rho,
            "candidates": len(s.auto.candidates),
            **dict(zip(("rho_sample", "rho_repeat"),
                       model_rho(out, rho_n, keep=_sample_path(samples, name))
                       if rho_n else (None, None)))}


def _sample_path(folder: str | None, name: str) -> str | None:
    if not folder:
        return None
    import os
    import re

    os.makedirs(folder, exist_ok=True)
    return os.path.join(folder, re.sub(r"[^A-Za-z0-9]+", "_", name).strip("_") + ".json")


def _rho(a, b) -> float | None:
    return search.AutoResult("", "", [search.Candidate([], p, m) for p, m in zip(a, b)]).spearman


def model_rho(out, n: int, seed: int = 7,
              keep: str | None = None) -> tuple[float | None, float | None]:
    """Spearman correlation between the cost model's predictions and measured times over
    `n` candidates sampled at random (the declared loop nest among them): the model's
    ranking of schedules it did not choose, not only of the search's best ones. The
    candidates are timed twice (each time all of them in turn); the second number is the
    correlation of the two timings with each other — how well the machine itself ranks
    them, the ceiling for the model's (near-equal candidates swap places between runs on
    a noisy machine). `keep`: a JSON file for the sample (each candidate's trace, predicted
    seconds and both timings), to study the model offline."""
    import json
    import random

    rng = random.Random(seed)
    cands = {"": tl.create_schedule(out)}
    for _ in range(6 * n):
        if len(cands) >= n:
            break
        s = search.sample(out, "llvm", rng)
        if search.lowers(s):
            cands.setdefault(s.trace_text(), s)
    first = search.measure_many(list(cands.values()), "llvm", rounds=3)     # in turn
    second = search.measure_many(list(cands.values()), "llvm", rounds=3)
    best = [min(a, b) for a, b in zip(first, second)]
    pred = [search.predict(s, "llvm") for s in cands.values()]
    if keep:
        with open(keep, "w") as fh:
            json.dump({"traces": list(cands), "predicted": pred, "first": first,
                       "second": second, "best": best}, fh)
    return _rho(pred, best), _rho(first, second)


def halide(py: str, name: str, quick: bool) -> dict:
    """{scheduler: ms} for one operator from Halide's autoschedulers (empty when the
    operator has no Halide version or the process fails)."""
    import json
    import pathlib
    import subprocess

    helper = pathlib.Path(__file__).with_name("halide_autoschedule.py")
    cmd = [py, str(helper), "--ops", name] + (["--quick"] if quick else [])
    best: dict = {}
    for _ in range(2):          # two processes, the best of each (the VM's slow spells)
        try:
            res = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if res.returncode != 0 or not res.stdout.strip():
            continue
        for k, v in json.loads(res.stdout.strip().splitlines()[-1]).get(name, {}).items():
            if isinstance(v, (int, float)):
                best[k] = min(v, best.get(k, v))
    return best


def main(argv=None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--budget", type=float, default=30.0, help="tuning seconds per operator")
    ap.add_argument("--quick", action="store_true", help="tiny sizes and budgets (CI)")
    ap.add_argument("--ops", default="", help="comma-separated substrings of operator names")
    ap.add_argument("--halide-python", default=None,
                    help="an interpreter with the halide wheel, for its autoschedulers")
    ap.add_argument("--rho-sample", type=int, default=16,
                    help="random candidates measured for the model's Spearman rho (0: none)")
    ap.add_argument("--samples", default=None,
                    help="a folder: keep each operator's random sample there (JSON: traces, "
                         "predicted seconds, both timings) for study offline")
    a = ap.parse_args(argv)
    if "TL_CACHE_DIR" not in os.environ:    # the executor's model choices: searched here,
        os.environ["TL_CACHE_DIR"] = tempfile.mkdtemp(prefix="autoschedule-")  # not read
    ops = operators(a.quick)
    want = [w for w in a.ops.split(",") if w]
    rows = []
    for name, make in ops.items():
        if want and not any(w in name for w in want):
            continue
        rows.append(run_one(name, make, 2.0 if a.quick else a.budget,
                            min(a.rho_sample, 4) if a.quick else a.rho_sample, a.samples))
        r = rows[-1]
        r["halide"] = halide(a.halide_python, name, a.quick) if a.halide_python else {}
        print(f"  {name}: auto {r['auto_ms']:.3f} ms, hand {r['hand_ms']:.3f} ms, model "
              f"{r['model_ms']:.3f} ms", flush=True)
    print("| operator | declared ms | hand ms | auto ms | auto / hand speed | Halide "
          "Mullapudi2016 ms | Halide Adams2019 ms | tuning s | candidates | Spearman rho (search) "
          "| Spearman rho (random sample) | rho of two timings (random sample) | model-only ms "
          "| model-only / hand speed | model-only s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")

    def f2(v):
        return "—" if v is None else f"{v:.2f}"
    for r in rows:
        hal = [r["halide"].get(k) for k in ("Mullapudi2016", "Adams2019")]
        hal_s = ["—" if v is None else f"{v:.3f}" for v in hal]
        print(f"| {r['op']} | {r['naive_ms']:.3f} | {r['hand_ms']:.3f} | {r['auto_ms']:.3f} | "
              f"{r['hand_ms'] / r['auto_ms']:.2f} | {hal_s[0]} | {hal_s[1]} | "
              f"{r['tune_s']:.0f} | {r['candidates']} | {f2(r['rho'])} | "
              f"{f2(r['rho_sample'])} | {f2(r['rho_repeat'])} | {r['model_ms']:.3f} | "
              f"{r['hand_ms'] / r['model_ms']:.2f} | {r['model_s']:.1f} |")
    return rows


if __name__ == "__main__":
    main()
