"""A model's compile time through tensorlang: from `Backend.prepare` to the first result, in
a first process (an empty kernel cache) and a second one (the kernel cache the first
filled), each round in a fresh cache folder. The tuning log of the user's cache
(`config.cache_dir()`) is copied into it unless `--cold-log`, so the first process
measures compiling, not the model-only searches of kernels never seen (`--cold-log`
measures those too).

Usage: python benchmarks/onnx_compile_time.py [--model resnet50] [--rounds 3]
       [--jobs 2] [--threads 2] [--cold-log]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time


def child(name: str) -> dict:
    import onnx

    from tensorlang.graph import kernel_cache as KC
    from tensorlang.onnx.zoo import light_model_path, model_input, with_random_weights
    import tensorlang.onnx as TO

    m = with_random_weights(onnx.load(light_model_path(name)))
    _, x = model_input(m)
    t0 = time.perf_counter()
    TO.Backend.prepare(m).run([x])
    return dict(seconds=time.perf_counter() - t0, **KC.COUNTS)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="resnet50")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--cold-log", action="store_true")
    p.add_argument("--child", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.child:
        print(json.dumps(child(a.child)))
        return 0
    from tensorlang.config import cache_dir

    log = os.path.join(cache_dir(), "tuning.jsonl")
    first, second = [], []
    for _ in range(a.rounds):
        folder = tempfile.mkdtemp(prefix="tl-compile-time-")
        try:
            if not a.cold_log and os.path.exists(log):
                shutil.copy(log, os.path.join(folder, "tuning.jsonl"))
            env = dict(os.environ, TL_CACHE_DIR=folder, TL_KERNEL_CACHE="1",
                       TL_COMPILE_JOBS=str(a.jobs), TL_NUM_THREADS=str(a.threads))
            for got in (first, second):
                out = subprocess.run([sys.executable, __file__, "--child", a.model],
                                     capture_output=True, text=True, env=env)
                if out.returncode:
                    print(out.stderr[-2000:], file=sys.stderr)
                    raise SystemExit(f"{a.model} failed")
                r = json.loads(out.stdout.strip().splitlines()[-1])
                print(json.dumps(r), flush=True)
                got.append(r["seconds"])
        finally:
            shutil.rmtree(folder, ignore_errors=True)
    for what, ts in (("first process", first), ("second process", second)):
        print(f"{a.model} {what} (jobs {a.jobs}): median {statistics.median(ts):.2f} s, "
              f"min {min(ts):.2f}, max {max(ts):.2f} over {len(ts)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
