"""ONNX models through tensorlang against onnxruntime (CPU): the light zoo with random
weights (`tensorlang.onnx.zoo`) and a BERT-style encoder layer (d 768, 12 heads, seq 128,
batch 1). Each system runs in its own process, in turn; times are the median of single
calls after a warm-up. tensorlang's compile time (file to first result) is reported too.

Usage: python benchmarks/onnx_models.py [--models resnet50,squeezenet,bert] [--rounds 2]
       [--threads 2]
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


def bert_encoder(d=768, heads=12, ff=3072, seed=0):
    """The BERT-style layer (`tensorlang.onnx.zoo.bert_layer`) at BERT-base size."""
    from tensorlang.onnx.zoo import bert_layer

    return bert_layer(np.random.default_rng(seed), d=d, heads=heads, ff=ff)


def load(name: str):
    import onnx

    from tensorlang.onnx.zoo import light_model_path, model_input, with_random_weights

    if name == "bert":
        m = bert_encoder()
        x = np.random.default_rng(1).standard_normal((1, 128, 768)).astype(np.float32)
        return m, "x", x
    m = with_random_weights(onnx.load(light_model_path(name)))
    inp, x = model_input(m)
    return m, inp, x


def measure(system: str, name: str, threads: int, calls: int) -> dict:
    """Run in this process: the compile (tensorlang) or session (onnxruntime) time and the
    median of `calls` single calls."""
    m, inp, x = load(name)
    t0 = time.perf_counter()
    if system == "tensorlang":
        import tensorlang.onnx as TO

        rep = TO.Backend.prepare(m)
        rep.run([x])
        fn = lambda: rep.run([x])       # noqa: E731
    else:
        import onnxruntime as ort

        opts = ort.SessionOptions()
        opts.intra_op_num_threads = threads
        s = ort.InferenceSession(m.SerializeToString(), opts,
                                 providers=["CPUExecutionProvider"])
        s.run(None, {inp: x})
        fn = lambda: s.run(None, {inp: x})      # noqa: E731
    first = time.perf_counter() - t0
    fn()
    ts = []
    for _ in range(calls):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return {"first_s": first, "ms": 1e3 * statistics.median(ts), "best_ms": 1e3 * min(ts)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default="squeezenet,shufflenet,resnet50,bert")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--calls", type=int, default=20)
    p.add_argument("--one", nargs=2, help=argparse.SUPPRESS)     # SYSTEM MODEL (a child)
    a = p.parse_args(argv)
    if a.one:
        print(json.dumps(measure(a.one[0], a.one[1], a.threads, a.calls)))
        return 0
    # the kernel cache off: "file to first result" is a compile every round (a second
    # process's, from the cache: benchmarks/onnx_compile_time.py)
    env = dict(os.environ, TL_NUM_THREADS=str(a.threads), OMP_NUM_THREADS=str(a.threads),
               TL_KERNEL_CACHE="0")
    rows = []
    for name in a.models.split(","):
        res: dict[str, list] = {"tensorlang": [], "onnxruntime": []}
        for _ in range(a.rounds):
            for system in res:
                out = subprocess.run([sys.executable, __file__, "--one", system, name,
                                      "--threads", str(a.threads), "--calls", str(a.calls)],
                                     capture_output=True, text=True, env=env)
                if out.returncode:
                    print(out.stderr[-2000:], file=sys.stderr)
                    raise SystemExit(f"{system} {name} failed")
                res[system].append(json.loads(out.stdout.strip().splitlines()[-1]))
        tl_ms = min(r["ms"] for r in res["tensorlang"])
        ort_ms = min(r["ms"] for r in res["onnxruntime"])
        first = min(r["first_s"] for r in res["tensorlang"])
        rows.append((name, tl_ms, ort_ms, ort_ms / tl_ms, first))
        print(f"{name}: tensorlang {tl_ms:.2f} ms, onnxruntime {ort_ms:.2f} ms "
              f"({ort_ms / tl_ms:.2f}x), tensorlang file to first result {first:.1f} s",
              flush=True)
    print("\n| model | tensorlang ms | onnxruntime ms | speedup | tensorlang compile s |")
    print("|---|---|---|---|---|")
    for name, t, o, r, f in rows:
        print(f"| {name} | {t:.2f} | {o:.2f} | {r:.2f} | {f:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
