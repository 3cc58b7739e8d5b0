"""TVM's tutorial "How to optimize GEMM on CPU" (opt_gemm), stage by stage, in tensorlang
beside TVM's own same stage.

The stages of apache/tvm gallery/how_to/optimize_operators/opt_gemm.py, with its factors
(bn = 32, kfactor = 4), C = A·B, float32:
  0 baseline        the declared loop nest
  1 blocking        32 x 32 tiles of C, k split by 4 and hoisted out of the tile
  2 vectorization   + the tile's inner column loop vectorized
  3 loop permutation  (mo, no, ko, mi, ki, ni)
  4 array packing   + B packed to packedB[N/bn][K][bn] (its columns vectorized, its panels
                    in parallel)
  5 write cache     a cache_write tile of C at (mo, no), its k loop split (ko, mc, ki, nc),
                    ki unrolled, nc vectorized
  6 parallel        + the row tiles (mo) in parallel
tensorlang's port is `tensorlang_stage`, written line by line from the tutorial's TE code
(tensorlang keeps TE's schedule API: `s[C].tile`, `s.cache_write`, ...). TVM 0.27 no longer
has TE schedules; `tvm_stage` is the same schedule in its s_tir API (the port in the CPU
anchors' gemm.py): TIR asks for `decompose_reduction` where TE made the init nest itself.

Each (stage, system) runs in a fresh process, the two systems taken in turn, for
`--rounds` rounds; every result is checked against numpy. A figure is the best round
(the shared VMs this runs on slow whole processes down at times); "paired" is the median
over the rounds of tensorlang / TVM within a round. TVM runs in `--peer-python` (its wheel
may want another numpy than tensorlang's environment), with TVM_NUM_THREADS set to the
cores (TVM's pool takes one thread on a 2-vCPU VM otherwise).

Usage: python benchmarks/opt_gemm.py [--n 1024] [--rounds 3] [--stages 0,1,...,6]
                                     [--peer-python /path/to/python]
       python benchmarks/opt_gemm.py --worker SYSTEM STAGE N     (one measurement, JSON)
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

BN, KFACTOR = 32, 4
STAGES = ("baseline", "blocking", "vectorization", "loop permutation", "array packing",
          "write cache", "parallel")


# ------------------------------------------------------------------------- tensorlang
def tensorlang_stage(n: int, stage: int, bn: int = BN, kfactor: int = KFACTOR):
    """(schedule, [A, B, C]) of the tutorial's stage `stage` (0-6) at M = K = N = n. Where
    bn does not divide n, packedB's last panel reads zeros past B's last column (the
    tutorial's declaration assumes it divides)."""
    import tensorlang as tl

    M = K = N = n
    k = tl.reduce_axis((0, K), name="k")
    A = tl.placeholder((M, K), name="A")
    B = tl.placeholder((K, N), name="B")
    if stage < 4:
        C = tl.compute((M, N), lambda m, j: tl.sum(A[m, k] * B[k, j], axis=k), name="C")
    else:
        if N % bn == 0:
            packedB = tl.compute((N // bn, K, bn),
                                 lambda bigN, kk, littleN: B[kk, bigN * bn + littleN],
                                 name="packedB")
        else:
            packedB = tl.compute((-(-N // bn), K, bn), lambda bigN, kk, littleN: tl.if_then_else(
                bigN * bn + littleN < N, B[kk, bigN * bn + littleN], 0.0), name="packedB")
        C = tl.compute((M, N), lambda m, j: tl.sum(
            A[m, k] * packedB[j // bn, k, tl.indexmod(j, bn)], axis=k), name="C")
    s = tl.create_schedule(C)
    if stage == 0:
        return s, [A, B, C]
    if stage <= 4:
        mo, no, mi, ni = s[C].tile(C.op.axis[0], C.op.axis[1], bn, bn)
        (kaxis,) = s[C].op.reduce_axis
        ko, ki = s[C].split(kaxis, factor=kfactor)
        if stage <= 2:
            s[C].reorder(mo, no, ko, ki, mi, ni)
        else:
            s[C].reorder(mo, no, ko, mi, ki, ni)
        if stage >= 2:
            s[C].vectorize(ni)
    else:
        CC = s.cache_write(C, "global")
        mo, no, mi, ni = s[C].tile(C.op.axis[0], C.op.axis[1], bn, bn)
        s[CC].compute_at(s[C], no)
        mc, nc = s[CC].op.axis
        (kaxis,) = s[CC].op.reduce_axis
        ko, ki = s[CC].split(kaxis, factor=kfactor)
        s[CC].reorder(ko, mc, ki, nc)
        s[CC].vectorize(nc)
        s[CC].unroll(ki)
        if stage == 6:
            s[C].parallel(mo)
    if stage >= 4:
        bigN, _, littleN = s[packedB].op.axis
        s[packedB].vectorize(littleN)
        s[packedB].parallel(bigN)
    return s, [A, B, C]


def _tensorlang_fn(n, stage, a, b, c):
    import tensorlang as tl

    s, args = tensorlang_stage(n, stage)
    f = tl.build(s, args)
    return (lambda: f(a, b, c)), None


# ---------------------------------------------------------------------------------- TVM
def tvm_stage(n: int, stage: int, bn: int = BN, kfactor: int = KFACTOR):
    """The tutorial's stage as an s_tir.Schedule (n divisible by bn from stage 4 on)."""
    import tvm
    from tvm import s_tir, te

    M = K = N = n
    k = te.reduce_axis((0, K), "k")
    A = te.placeholder((M, K), name="A")
    B = te.placeholder((K, N), name="B")
    if stage < 4:
        C = te.compute((M, N), lambda m, j: te.sum(A[m, k] * B[k, j], axis=k), name="C")
    else:
        packedB = te.compute((N // bn, K, bn),
                             lambda bigN, kk, littleN: B[kk, bigN * bn + littleN],
                             name="packedB")
        C = te.compute((M, N), lambda m, j: te.sum(
            A[m, k] * packedB[j // bn, k, tvm.tirx.indexmod(j, bn)], axis=k), name="C")
    sch = s_tir.Schedule(te.create_prim_func([A, B, C]))
    if stage == 0:
        return sch
    bC = sch.get_sblock("C")
    if stage <= 4:
        m, j, kk = sch.get_loops(bC)
        mo, mi = sch.split(m, [None, bn])
        no, ni = sch.split(j, [None, bn])
        ko, ki = sch.split(kk, [None, kfactor])
        if stage <= 2:
            sch.reorder(mo, no, ko, ki, mi, ni)
        else:
            sch.reorder(mo, no, ko, mi, ki, ni)
        if stage >= 2:
            sch.vectorize(ni)
        init = sch.decompose_reduction(bC, ko)      # TE emitted the init nest by itself
        if stage >= 2:
            sch.vectorize(sch.get_loops(init)[-1])
    else:
        CC = sch.cache_write(bC, 0, "global")       # the write-back block, s[C] in TE
        m, j = sch.get_loops(CC)
        mo, mi = sch.split(m, [None, bn])
        no, ni = sch.split(j, [None, bn])
        sch.reorder(mo, no, mi, ni)
        sch.compute_at(bC, no)                      # s[CC].compute_at(s[C], no)
        mc, nc, kk = sch.get_loops(bC)[-3:]
        ko, ki = sch.split(kk, [None, kfactor])
        sch.reorder(ko, mc, ki, nc)
        sch.vectorize(nc)
        sch.unroll(ki)
        if stage == 6:
            sch.parallel(mo)
        init = sch.decompose_reduction(bC, ko)
        sch.vectorize(sch.get_loops(init)[-1])
    if stage >= 4:
        bigN, _, littleN = sch.get_loops(sch.get_sblock("packedB"))
        sch.vectorize(littleN)
        sch.parallel(bigN)
    return sch


def _tvm_fn(n, stage, a, b, c):
    import tvm
    from tvm.target import codegen

    target = tvm.target.Target({"kind": "llvm", "mcpu": codegen.llvm_get_system_cpu(),
                                "num-cores": os.cpu_count() or 1})
    f = tvm.compile(tvm_stage(n, stage).mod, target=target)["main"]
    dev = tvm.cpu()
    ta, tb, tc = (tvm.runtime.tensor(v, dev) for v in (a, b, c))
    return (lambda: f(ta, tb, tc)), (lambda: np.copyto(c, tc.numpy()))


# ------------------------------------------------------------------------------ workers
def _aligned(a: np.ndarray) -> np.ndarray:
    """`a` copied to memory that starts on a 64-byte boundary (as TVM's own arrays do)."""
    buf = np.empty(a.nbytes + 64, np.uint8)
    off = (-buf.ctypes.data) % 64
    out = buf[off:off + a.nbytes].view(a.dtype).reshape(a.shape)
    out[...] = a
    return out


def worker(system: str, stage: int, n: int, min_s: float = 0.5) -> dict:
    """GFLOPS of one stage in this process: the median of single calls, after a check
    against numpy."""
    rng = np.random.default_rng(0)
    a = _aligned(rng.random((n, n), dtype=np.float32))
    b = _aligned(rng.random((n, n), dtype=np.float32))
    c = _aligned(np.zeros((n, n), np.float32))
    t0 = time.perf_counter()
    fn, fetch = (_tensorlang_fn if system == "tensorlang" else _tvm_fn)(n, stage, a, b, c)
    build_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    fn()
    first = time.perf_counter() - t0
    if fetch is not None:
        fetch()
    np.testing.assert_allclose(c, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4 * n)
    calls = 3 if first > 0.5 else 10     # the early stages take seconds a call
    times: list[float] = []
    end = time.perf_counter() + (0 if first > 0.5 else min_s)
    while len(times) < calls or time.perf_counter() < end:
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return {"gflops": 2.0 * n ** 3 / statistics.median(times) / 1e9, "build_s": build_s}


def _run(system: str, stage: int, n: int, python: str, timeout: float = 600) -> dict:
    env = dict(os.environ)
    env.setdefault("TVM_NUM_THREADS", str(os.cpu_count() or 1))
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if system == "tensorlang":
        env["PYTHONPATH"] = repo + os.pathsep + env.get("PYTHONPATH", "")
    cmd = [python, os.path.abspath(__file__), "--worker", system, str(stage), str(n)]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout} s"}
    lines = [x for x in p.stdout.splitlines() if x.startswith("{")]
    if p.returncode != 0 or not lines:
        tail = (p.stderr.strip().splitlines() or [f"exit status {p.returncode}"])[-1]
        return {"error": tail[:200]}
    return json.loads(lines[-1])


def cpu_name() -> str:
    """The CPU's model name, with its family and model numbers (a VM may call it only
    "AMD EPYC")."""
    info: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                info.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    name = info.get("model name", "unknown CPU")
    if "cpu family" in info and "model" in info:
        name += f" (family {info['cpu family']}, model {info['model']})"
    return name


def main(argv=None) -> list[dict]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--worker", nargs=3, metavar=("SYSTEM", "STAGE", "N"))
    p.add_argument("--n", type=int, default=1024)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--stages", default="0,1,2,3,4,5,6")
    p.add_argument("--peer-python", default=sys.executable,
                   help="the interpreter with TVM installed")
    a = p.parse_args(argv)
    if a.worker:
        print(json.dumps(worker(a.worker[0], int(a.worker[1]), int(a.worker[2]))))
        return []
    stages = [int(x) for x in a.stages.split(",")]
    print(f"opt_gemm, {a.n}^3 float32, {cpu_name()}, {os.cpu_count()} cores; best of "
          f"{a.rounds} rounds, each (stage, system) in a fresh process, taken in turn")
    got: dict[tuple, list] = {}
    errors: dict[tuple, str] = {}
    for r in range(a.rounds):
        for st in stages:
            for system, python in (("tensorlang", sys.executable), ("tvm", a.peer_python)):
                res = _run(system, st, a.n, python)
                if "gflops" in res:
                    got.setdefault((st, system), []).append(res["gflops"])
                else:
                    errors[(st, system)] = res["error"]
                print(f"  round {r + 1}: stage {st} {system:10s} "
                      f"{res.get('gflops', 0):8.2f} GFLOPS {res.get('error', '')}",
                      file=sys.stderr, flush=True)
    print(f"{'stage':24s} {'tensorlang':>10s} {'TVM':>8s} {'ratio':>6s} {'paired':>7s}")
    rows = []
    for st in stages:
        mine, theirs = got.get((st, "tensorlang")), got.get((st, "tvm"))
        row = {"stage": st, "tensorlang": max(mine) if mine else None,
               "tvm": max(theirs) if theirs else None}
        ratio = paired = None
        if mine and theirs:
            ratio = row["tensorlang"] / row["tvm"]
            if len(mine) == len(theirs):
                paired = statistics.median(x / y for x, y in zip(mine, theirs))
        row.update(ratio=ratio, paired=paired)
        rows.append(row)

        def cell(v, w, f=".1f"):
            return f"{v:{w}{f}}" if v is not None else f"{'error':>{w}s}"
        print(f"{f'{st} {STAGES[st]}':24s} {cell(row['tensorlang'], 10)} "
              f"{cell(row['tvm'], 8)} {cell(ratio, 6, '.2f')} {cell(paired, 7, '.2f')}")
    for (st, system), msg in sorted(errors.items()):
        print(f"  stage {st}, {system}: {msg}")
    return rows


if __name__ == "__main__":
    main()
