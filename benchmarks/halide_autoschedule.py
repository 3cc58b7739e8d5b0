"""Halide's autoschedulers on benchmarks/autoschedule.py's operators, in an interpreter with
the `halide` wheel (it ships Mullapudi2016, Li2018, Adams2019 and Anderson2021 as plugins).
Imports no tensorlang: benchmarks/autoschedule.py runs it with --halide-python and reads
the JSON it prints (milliseconds per operator and autoscheduler; null where one fails).

Usage: python benchmarks/halide_autoschedule.py [--quick] [--ops matmul,blur,...]
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np

SCHEDULERS = ("Mullapudi2016", "Adams2019")


def _matmul(hl, m, k, n):
    A, B = hl.ImageParam(hl.Float(32), 2, "A"), hl.ImageParam(hl.Float(32), 2, "B")
    i, j = hl.Var("i"), hl.Var("j")
    r = hl.RDom([(0, k)], "r")
    C = hl.Func("C")
    C[j, i] = hl.f32(0)
    C[j, i] += A[r.x, i] * B[j, r.x]                 # numpy a[i, k] is A(k, i)
    A.set_estimates([(0, k), (0, m)])
    B.set_estimates([(0, n), (0, k)])
    C.set_estimates([(0, n), (0, m)])
    rng = np.random.default_rng(0)
    return C, {A: rng.standard_normal((m, k)).astype("f4"),
               B: rng.standard_normal((k, n)).astype("f4")}, (m, n)


def _blur(hl, h):
    X = hl.ImageParam(hl.Float(32), 2, "X")
    x, y = hl.Var("x"), hl.Var("y")
    bx, by = hl.Func("bx"), hl.Func("by")
    third = 1.0 / 3.0              # what Halide makes of "/ 3" anyway (autoschedule.py)
    bx[x, y] = (X[x, y] + X[x + 1, y] + X[x + 2, y]) * third
    by[x, y] = (bx[x, y] + bx[x, y + 1] + bx[x, y + 2]) * third
    X.set_estimates([(0, h + 2), (0, h + 2)])
    by.set_estimates([(0, h), (0, h)])
    return by, {X: np.random.default_rng(0).standard_normal((h + 2, h + 2)).astype("f4")}, \
        (h, h)


def _transpose(hl, n):
    X = hl.ImageParam(hl.Float(32), 2, "X")
    x, y = hl.Var("x"), hl.Var("y")
    Y = hl.Func("Y")
    Y[x, y] = X[y, x] * 2
    X.set_estimates([(0, n), (0, n)])
    Y.set_estimates([(0, n), (0, n)])
    return Y, {X: np.random.default_rng(0).standard_normal((n, n)).astype("f4")}, (n, n)


def _colsum(hl, n):
    X = hl.ImageParam(hl.Float(32), 2, "X")
    x = hl.Var("x")
    r = hl.RDom([(0, n)], "r")
    Y = hl.Func("Y")
    Y[x] = hl.f32(0)
    Y[x] += X[x, r.x]
    X.set_estimates([(0, n), (0, n)])
    Y.set_estimates([(0, n)])
    return Y, {X: np.random.default_rng(0).standard_normal((n, n)).astype("f4")}, (n,)


def operators(quick: bool) -> dict:
    return {
        "matmul 512": lambda hl: _matmul(hl, *((64, 64, 64) if quick else (512, 512, 512))),
        "matmul 127x781x253": lambda hl: _matmul(hl, *((13, 17, 25) if quick else
                                                      (127, 781, 253))),
        "column sum 2048x2048": lambda hl: _colsum(hl, 40 if quick else 2048),
        "transposed copy 2048": lambda hl: _transpose(hl, 40 if quick else 2048),
        "blur 3x3 1024": lambda hl: _blur(hl, 30 if quick else 1024),
    }


def run(name: str, make, scheduler: str) -> float | None:
    import halide as hl

    out, inputs, shape = make(hl)
    target = hl.get_jit_target_from_environment()
    p = hl.Pipeline(out)
    p.apply_autoscheduler(target, hl.AutoschedulerParams(
        scheduler, {"parallelism": str(os.cpu_count() or 1)}))
    p.compile_jit(target)
    for param, arr in inputs.items():
        param.set(hl.Buffer(arr))
    res = np.zeros(shape, "f4")
    buf = hl.Buffer(res)
    p.realize(buf)
    t0 = time.perf_counter()
    p.realize(buf)
    reps = max(1, int(0.02 / max(time.perf_counter() - t0, 1e-7)))
    best = float("inf")
    for _ in range(5):         # as benchmarks/autoschedule.py times tensorlang's kernels
        t0 = time.perf_counter()
        for _ in range(reps):
            p.realize(buf)
        best = min(best, (time.perf_counter() - t0) / reps)
    return 1e3 * best


def main(argv=None) -> dict:
    import halide as hl

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--ops", default="")
    a = ap.parse_args(argv)
    lib = os.path.join(os.path.dirname(hl.__file__), "lib64")   # the wheel's plugins
    for s in SCHEDULERS:
        hl.load_plugin(os.path.join(lib, f"libautoschedule_{s.lower()}.so"))
    want = [w for w in a.ops.split(",") if w]
    out: dict = {}
    for name, make in operators(a.quick).items():
        if want and not any(w in name for w in want):
            continue
        out[name] = {}
        for s in SCHEDULERS:
            try:
                out[name][s] = run(name, make, s)
            except Exception as e:  # noqa: BLE001 (a plugin that fails is reported, not fatal)
                out[name][s] = None
                out[name][s + " error"] = str(e).splitlines()[0][:200]
    print(json.dumps(out))
    return out


if __name__ == "__main__":
    main()
