"""`tensorlang bench`: the CPU kernels of the performance goals, each against its peers, in
separate processes taken in turn, written as a Markdown table and a chart.

Kernels (full size / `--quick` size): matmul 512^3, 1000^3, 1024^3, 2048^3, 4096^3 and
127x781x253 (GFLOPS), the fused
elementwise E = D + (A+B)*C over 2^24 floats (GB/s: 4 reads and a write), softmax and layer
norm over the rows of 4096 x 1024 (GB/s: a read and a write), conv2d 1x64x56x56 -> 64 with
3x3 filters (GFLOPS; the filter a constant everywhere: TVM and Halide take it packed
beforehand, tensorlang's executor packs a constant filter once per plan), and one SGD
step of benchmarks/graph_mlp.py's MLP (steps/s).

Systems: tensorlang (the graph executor's default schedules, as a user of `G.Executor`
meets them, writing into preallocated outputs with `run(..., out=)`), tensorlang_new (the
same executor returning a new output array each call, `run(feed)`: its memory from the
executor's array cache, as torch's from its caching allocator), numpy, torch, TVM and
Halide. TVM and Halide run the matmul, the elementwise kernel, softmax and conv2d with the
schedules in peers.py (the structure their tutorials and apps teach: packed, register
-blocked matmuls; rfactored row reductions computed per row; conv2d: TVM's conv2d_NCHWc
with its x86 schedule, Halide's apps/conv_layer schedule), into preallocated outputs;
numpy and torch allocate their results as their users do. A peer that is not installed
is left blank, and `--peer-python` names another interpreter for them (and for torch when
it is not installed beside tensorlang) (their wheels may want other numpy
versions than tensorlang's environment). Every system runs in a fresh process (one system's
spinning thread pool cannot steal the next one's cores), each result is checked against
numpy, and the figure is the best of `--rounds` rounds: the shared VMs this runs on slow a
process down by up to 2x for seconds at a time (a neighbour on the core), for every system
alike, and the best round is the machine's own speed.

The machine's own limits come first: the FMA peak (an LLVM loop of independent fused
multiply-adds on the widest vector registers, one per core) and the stream bandwidth (numpy
copies and adds in every core); each kernel is also stated as a fraction of the one that bounds it.

Usage: tensorlang bench OUT_DIR [--quick] [--rounds 3] [--kernels matmul,softmax,...]
       python -m tensorlang.benchmarking.bench --worker KERNEL SYSTEM [--quick]   (one
       measurement, JSON)
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np

# the folder that holds the tensorlang package (a checkout's root, beside benchmarks/)
_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _aligned(a: np.ndarray) -> np.ndarray:
    """`a` copied to memory that starts on a 64-byte boundary. numpy's arrays start 16
    bytes past one, so every vector of a row straddles two cache lines; TVM copies its
    inputs into its own aligned arrays, so every system here gets aligned ones (a
    memory-bound row kernel: about 18 % apart, layer norm measured in one process).
    (`backends.runtime.aligned_empty`'s twin: this file also runs as a script in the
    peers' interpreter, where tensorlang's own dependencies need not be installed.)"""
    buf = np.empty(a.nbytes + 64, np.uint8)
    off = (-buf.ctypes.data) % 64
    out = buf[off:off + a.nbytes].view(a.dtype).reshape(a.shape)
    out[...] = a
    return out

SYSTEMS = ("tensorlang", "tensorlang_new", "numpy", "torch", "tvm", "halide")
PEERS = ("tvm", "halide")
OURS = ("tensorlang", "tensorlang_new")      # the rest are the peers compared against
LABELS = {"tensorlang": "tensorlang (out=)", "tensorlang_new": "tensorlang (new outputs)"}


def _time(fn, min_calls: int = 5, min_s: float = 0.3) -> float:
    """The median time of single calls (after one warm-up call)."""
    fn()
    times: list[float] = []
    end = time.perf_counter() + min_s
    while len(times) < min_calls or time.perf_counter() < end:
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _threads() -> int:
    return os.cpu_count() or 1


# ------------------------------------------------------------------------- the kernels
class Kernel:
    """One benchmark: `setup(system, quick)` returns (fn, check) or raises ImportError
    when the system is not installed, NotImplementedError when it has no version here."""

    name = ""
    unit = ""          # GFLOPS, GB/s or steps/s: higher is better
    bound = ""         # "flops" or "bandwidth": the peak it is a fraction of
    systems = ("tensorlang", "tensorlang_new", "numpy", "torch")   # those it has a version for

    def amount(self, quick: bool) -> float:
        """FLOPs, bytes or steps per call."""
        raise NotImplementedError

    def size(self, quick: bool) -> str:
        raise NotImplementedError

    def setup(self, system: str, quick: bool):
        raise NotImplementedError


class Matmul(Kernel):
    unit, bound = "GFLOPS", "flops"
    systems = SYSTEMS

    def __init__(self, name, m, k, n):
        self.name, self.mkn = name, (m, k, n)

    def dims(self, quick):
        return (64, 48, 80) if quick else self.mkn

    def size(self, quick):
        return "x".join(map(str, self.dims(quick)))

    def amount(self, quick):
        m, k, n = self.dims(quick)
        return 2.0 * m * k * n

    def setup(self, system, quick):
        m, k, n = self.dims(quick)
        rng = np.random.default_rng(0)
        a = _aligned(rng.standard_normal((m, k)).astype("float32"))
        b = _aligned(rng.standard_normal((k, n)).astype("float32"))
        c = _aligned(np.zeros((m, n), "float32"))
        out = {"c": c}

        def check():
            np.testing.assert_allclose(out["c"], a @ b, rtol=1e-3, atol=1e-3 * np.sqrt(k))
        if system in OURS:
            import tensorlang.graph as G

            x, y = G.Variable("a", (m, k), "float32"), G.Variable("b", (k, n), "float32")
            ex = G.Executor([x @ y])
            return _ours(system, ex, {x: a, y: b}, out, "c"), check
        if system == "numpy":
            return (lambda: np.matmul(a, b, out=c)), check
        if system == "torch":
            import torch

            torch.set_num_threads(_threads())
            ta, tb, tc = (torch.from_numpy(v) for v in (a, b, c))
            return (lambda: torch.mm(ta, tb, out=tc)), check
        if system in PEERS:
            return _peer("matmul", system, a, b, c, check=check)
        raise NotImplementedError(system)


class Elementwise(Kernel):
    name, unit, bound = "E = D + (A+B)*C", "GB/s", "bandwidth"
    systems = SYSTEMS

    def n(self, quick):
        return 1 << 12 if quick else 1 << 24

    def size(self, quick):
        return f"2^{self.n(quick).bit_length() - 1}"

    def amount(self, quick):
        return 5.0 * 4 * self.n(quick)   # bytes: four reads and a write

    def setup(self, system, quick):
        n = self.n(quick)
        rng = np.random.default_rng(0)
        A, B, C, D = (_aligned(rng.random(n, dtype=np.float32)) for _ in range(4))
        E = _aligned(np.zeros(n, np.float32))
        out = {"e": E}

        def check():
            np.testing.assert_allclose(out["e"], D + (A + B) * C, rtol=1e-6)
        if system in OURS:
            import tensorlang.graph as G

            vs = [G.Variable(s, (n,), "float32") for s in "ABCD"]
            ex = G.Executor([vs[3] + (vs[0] + vs[1]) * vs[2]])
            return _ours(system, ex, dict(zip(vs, (A, B, C, D))), out, "e"), check
        if system == "numpy":
            def fn():
                np.add(A, B, out=E)
                np.multiply(E, C, out=E)
                np.add(E, D, out=E)
            return fn, check
        if system == "torch":
            import torch

            torch.set_num_threads(_threads())
            tA, tB, tC, tD, tE = (torch.from_numpy(v) for v in (A, B, C, D, E))
            tmp = torch.empty_like(tA)

            def fn():
                torch.add(tA, tB, out=tmp)
                torch.mul(tmp, tC, out=tmp)
                torch.add(tmp, tD, out=tE)
            return fn, check
        if system in PEERS:
            return _peer("elementwise", system, A, B, C, D, E, check=check)
        raise NotImplementedError(system)


class Rows(Kernel):
    """softmax or layer norm over the rows of a matrix."""

    unit, bound = "GB/s", "bandwidth"

    systems = SYSTEMS

    def __init__(self, name, op):
        self.name, self.op = name, op

    def dims(self, quick):
        return (64, 96) if quick else (4096, 1024)

    def size(self, quick):
        return "x".join(map(str, self.dims(quick)))

    def amount(self, quick):
        r, c = self.dims(quick)
        return 2.0 * 4 * r * c

    def reference(self, x):
        if self.op == "softmax":
            e = np.exp(x - x.max(1, keepdims=True))
            return e / e.sum(1, keepdims=True)
        return (x - x.mean(1, keepdims=True)) / np.sqrt(x.var(1, keepdims=True) + 1e-5)

    def setup(self, system, quick):
        r, c = self.dims(quick)
        x = _aligned(np.random.default_rng(0).standard_normal((r, c)).astype("float32"))
        out = {}

        def check():
            np.testing.assert_allclose(out["y"], self.reference(x.astype("f8")),
                                       rtol=1e-4, atol=1e-5)
        if system in OURS:
            import tensorlang.graph as G

            v = G.Variable("x", (r, c), "float32")
            ex = G.Executor([G.softmax(v, axis=-1) if self.op == "softmax"
                             else G.layer_norm(v)])
            out["y"] = _aligned(np.empty_like(x))
            return _ours(system, ex, {v: x}, out, "y"), check
        if system == "numpy":
            def fn():
                out["y"] = self.reference(x)
            return fn, check
        if system == "torch":
            import torch

            torch.set_num_threads(_threads())
            tx = torch.from_numpy(x)
            op = (lambda: torch.softmax(tx, 1)) if self.op == "softmax" else \
                (lambda: torch.nn.functional.layer_norm(tx, (c,)))

            def fn():
                out["y"] = op().numpy()
            return fn, check
        if system in PEERS:
            y = _aligned(np.empty_like(x))
            out["y"] = y
            return _peer(self.op, system, x, y, check=check)
        raise NotImplementedError(system)


class Conv2d(Kernel):
    name, unit, bound = "conv2d 3x3", "GFLOPS", "flops"
    systems = SYSTEMS

    def dims(self, quick):
        return (1, 8, 12, 8) if quick else (1, 64, 56, 64)   # n, c, h = w, k

    def size(self, quick):
        n, c, h, k = self.dims(quick)
        return f"{n}x{c}x{h}x{h}->{k}"

    def amount(self, quick):
        n, c, h, k = self.dims(quick)
        return 2.0 * n * k * c * 9 * h * h

    def setup(self, system, quick):
        n, c, h, k = self.dims(quick)
        rng = np.random.default_rng(0)
        x = _aligned(rng.standard_normal((n, c, h, h)).astype("float32"))
        w = _aligned((rng.standard_normal((k, c, 3, 3)) * 0.1).astype("float32"))
        out = {}

        def check():
            xp = np.pad(x.astype("f8"), ((0, 0), (0, 0), (1, 1), (1, 1)))
            win = np.lib.stride_tricks.sliding_window_view(xp, (3, 3), axis=(2, 3))
            want = np.einsum("ncijpq,ocpq->noij", win, w.astype("f8"))
            np.testing.assert_allclose(out["y"], want, rtol=1e-3, atol=1e-3)
        if system in OURS:
            import tensorlang.graph as G

            # the filter a constant, as in a network (and as TVM's and Halide's kernels
            # take it packed beforehand): the executor packs it once per plan
            vx = G.Variable("x", x.shape, "float32")
            ex = G.Executor([G.conv2d(vx, G.constant(w), padding=1)])
            out["y"] = _aligned(np.empty((n, k, h, h), np.float32))
            return _ours(system, ex, {vx: x}, out, "y"), check
        if system == "numpy":
            wm = w.reshape(k, -1)

            def fn():      # im2col + one matmul (OpenBLAS)
                xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
                cols = np.lib.stride_tricks.sliding_window_view(xp, (3, 3), axis=(2, 3))
                cols = cols.transpose(0, 1, 4, 5, 2, 3).reshape(n, c * 9, h * h)
                out["y"] = np.matmul(wm, cols).reshape(n, k, h, h)
            return fn, check
        if system == "torch":
            import torch

            torch.set_num_threads(_threads())
            tx, tw = torch.from_numpy(x), torch.from_numpy(w)

            def fn():
                out["y"] = torch.nn.functional.conv2d(tx, tw, padding=1).numpy()
            return fn, check
        if system in PEERS:
            y = _aligned(np.empty((n, k, h, h), np.float32))
            out["y"] = y
            return _peer("conv2d", system, x, w, y, check=check)
        raise NotImplementedError(system)


class MlpStep(Kernel):
    name, unit, bound = "MLP SGD step", "steps/s", ""

    def size(self, quick):
        return "batch 16" if quick else "batch 128, 784-256-10"

    def amount(self, quick):
        return 1.0

    def setup(self, system, quick):
        import importlib.util

        path = os.path.join(_ROOT, "benchmarks", "graph_mlp.py")
        if not os.path.exists(path):
            raise NotImplementedError("benchmarks/graph_mlp.py is not next to the package")
        spec = importlib.util.spec_from_file_location("graph_mlp", path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return mod.bench_system(system, batch=16 if quick else mod.B)


MATMULS = [Matmul(f"matmul {n}", n, n, n) for n in (512, 1000, 1024, 2048, 4096)] + [
    Matmul("matmul 127x781x253", 127, 781, 253)]
KERNELS = {k.name: k for k in (
    *MATMULS,
    Elementwise(), Rows("softmax rows", "softmax"), Rows("layer norm rows", "layer_norm"),
    Conv2d(), MlpStep())}
SHORT = {"matmul": [k.name for k in MATMULS], "elementwise": ["E = D + (A+B)*C"],
         "softmax": ["softmax rows"], "layer_norm": ["layer norm rows"],
         "conv2d": ["conv2d 3x3"], "mlp": ["MLP SGD step"]}


def _ours(system: str, ex, feed: dict, out: dict, key: str):
    """The call that times tensorlang's executor: into the preallocated `out[key]` with
    `run(..., out=)` (as numpy's out=, TVM's and Halide's outputs), or (tensorlang_new)
    `run(feed)` returning a new array each call, kept in `out[key]` for the check (the
    previous call's array is let go of there, as a loop of calls does)."""
    if system == "tensorlang":
        given = [out[key]]
        return lambda: ex.run(feed, out=given)

    def fresh():
        out[key] = ex.run(feed)[0]
    return fresh


# -------------------------------------------------------------------------- the peers
def _then(fetch, check):
    """Run `fetch` (copy a peer's output back; not timed) before `check`."""
    def both():
        if fetch is not None:
            fetch()
        check()
    return both


def _peer(kernel: str, system: str, *arrays, check):
    """(fn, check) of TVM's or Halide's version of a kernel (peers.py)."""
    if __package__:
        from . import peers
    else:               # this file run as a script by another interpreter (--peer-python):
        import peers    # its folder is first on sys.path
    fn, fetch = getattr(peers, f"{system}_{kernel}")(*arrays)
    return fn, _then(fetch, check)


# ------------------------------------------------------------------ machine and workers
def peak_flops(seconds: float = 0.3) -> tuple[float, int]:
    """Single-precision FMA peak of this machine (FLOP/s, all cores) and the vector width
    (bits) it used: an LLVM loop of 16 independent fused multiply-adds on the widest
    vectors of the host CPU, one thread per core."""
    import ctypes
    import threading

    import llvmlite.binding as llvm

    from ..target import Target

    host = Target.parse("llvm")
    lanes = host.vector_lanes("float32")
    vt = f"<{lanes} x float>"
    acc = 16
    body = "\n".join(f"  %a{i}.n = call {vt} @llvm.fmuladd.v{lanes}f32({vt} %a{i}, {vt} %x, "
                     f"{vt} %y)" for i in range(acc))
    phis = "\n".join(f"  %a{i} = phi {vt} [ %init, %entry ], [ %a{i}.n, %loop ]"
                     for i in range(acc))
    sums = "\n".join(f"  %s{i} = fadd {vt} %s{i - 1}, %a{i}.n" for i in range(1, acc))
    ir_text = f"""
declare {vt} @llvm.fmuladd.v{lanes}f32({vt}, {vt}, {vt})
define float @peak(i64 %n, float %seed) {{
entry:
  %v0 = insertelement {vt} undef, float %seed, i32 0
  %init = shufflevector {vt} %v0, {vt} undef, <{lanes} x i32> zeroinitializer
  %x = fadd {vt} %init, %init
  %y = fsub {vt} %init, %x
  br label %loop
loop:
  %i = phi i64 [ 0, %entry ], [ %i.n, %loop ]
{phis}
{body}
  %i.n = add i64 %i, 1
  %done = icmp eq i64 %i.n, %n
  br i1 %done, label %exit, label %loop
exit:
  %s0 = fadd {vt} %a0.n, zeroinitializer
{sums}
  %r = extractelement {vt} %s{acc - 1}, i32 0
  ret float %r
}}
"""
    from ..backends.llvm.jit import parse_and_optimise
    from ..backends.llvm.target import new_target_machine, target_machine

    mod = parse_and_optimise(ir_text, target_machine(host))
    engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), new_target_machine(host))
    engine.add_object_file(llvm.ObjectFileRef.from_data(target_machine(host).emit_object(mod)))
    engine.finalize_object()
    fn = ctypes.CFUNCTYPE(ctypes.c_float, ctypes.c_int64, ctypes.c_float)(
        engine.get_function_address("peak"))
    fn(1000, 1.0)
    iters = 1 << 16
    t0 = time.perf_counter()
    fn(iters, 1.0)
    once = time.perf_counter() - t0
    iters = max(iters, int(iters * seconds / max(once, 1e-9)))
    threads = [threading.Thread(target=fn, args=(iters, 1.0)) for _ in range(_threads())]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - t0
    return iters * acc * lanes * 2 * len(threads) / elapsed, lanes * 32


def stream_bandwidth(mbytes: int = 256) -> float:
    """Streaming bandwidth, bytes/s: the best of numpy copies (a read and a write counted)
    and numpy adds (two reads and a write) running in every core at once."""
    import threading

    n = mbytes * (1 << 20) // 4 // _threads()
    arrays = [(np.ones(n, np.float32), np.ones(n, np.float32), np.empty(n, np.float32))
              for _ in range(_threads())]
    best = 0.0
    for moved, op in ((2, lambda a, b, c: np.copyto(c, a)),
                      (3, lambda a, b, c: np.add(a, b, out=c))):
        for _ in range(3):
            threads = [threading.Thread(target=lambda p=p, op=op: [op(*p) for _ in range(5)])
                       for p in arrays]
            t0 = time.perf_counter()
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            best = max(best, 5 * moved * 4 * n * len(arrays) / (time.perf_counter() - t0))
    return best


def worker(kernel: str, system: str, quick: bool) -> dict:
    """One measurement in this process: {"value": ...} or {"skip": why}."""
    k = KERNELS[kernel]
    if system not in k.systems:
        return {"skip": f"no {system} version here"}
    try:
        fn, check = k.setup(system, quick)
    except ImportError as e:
        return {"skip": f"not installed ({e.name})"}
    except NotImplementedError as e:
        return {"skip": f"no {system} version here{': ' + str(e) if str(e) != system else ''}"}
    fn()
    check()
    t = _time(fn, min_s=0.05 if quick else 0.5)
    value = k.amount(quick) / t
    if k.unit in ("GFLOPS", "GB/s"):
        value /= 1e9
    return {"value": value}


def _absent(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is None


def _run_worker(kernel, system, quick, python, timeout) -> dict:
    # another interpreter (--peer-python) runs this file itself: tensorlang's own
    # dependencies need not be installed there
    entry = ["-m", "tensorlang.benchmarking.bench"] if python == sys.executable else \
        [os.path.abspath(__file__)]
    cmd = [python, *entry, "--worker", kernel, system] + (["--quick"] if quick else [])
    env = dict(os.environ)
    env.setdefault("TVM_NUM_THREADS", str(_threads()))
    env["PYTHONPATH"] = _ROOT + os.pathsep + env.get("PYTHONPATH", "")
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return {"skip": f"timed out after {timeout} s"}
    lines = [x for x in p.stdout.splitlines() if x.startswith("{")]
    if p.returncode != 0 or not lines:
        tail = (p.stderr.strip().splitlines() or [f"exit status {p.returncode}"])[-1]
        return {"error": tail[:200]}
    return json.loads(lines[-1])


def machine() -> str:
    cpu = "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"{cpu}, {_threads()} cores"


def run(out_dir: str, quick: bool = False, rounds: int = 3, kernels=None,
        peer_python: str | None = None, progress=print) -> str:
    """Measure, write OUT_DIR/RESULTS.md and OUT_DIR/bench.png, return the table."""
    names = list(KERNELS) if not kernels else [n for s in kernels for n in SHORT.get(s, [s])]
    for n in names:
        if n not in KERNELS:
            raise ValueError(f"bench: unknown kernel {n!r}; choose from {', '.join(SHORT)}")
    os.makedirs(out_dir, exist_ok=True)
    flops, bits = peak_flops(0.05 if quick else 0.3)
    bw = stream_bandwidth(16 if quick else 256)
    progress(f"machine: {machine()}; FMA peak {flops / 1e9:.0f} GFLOPS ({bits}-bit vectors), "
             f"stream bandwidth {bw / 1e9:.1f} GB/s")
    results: dict[tuple, list] = {}
    notes: dict[tuple, str] = {}
    for r in range(rounds):
        for n in names:
            for system in SYSTEMS:
                if notes.get((n, system), "").startswith(("not installed", "no ")):
                    continue
                python = peer_python if peer_python and (system in PEERS or (
                    system == "torch" and _absent("torch"))) else sys.executable
                got = _run_worker(n, system, quick, python, 120 if quick else 600)
                if "value" in got:
                    results.setdefault((n, system), []).append(got["value"])
                else:
                    notes[(n, system)] = got.get("skip") or "error: " + got["error"]
                progress(f"  round {r + 1}/{rounds} {n:20s} {system:10s} "
                         f"{got.get('value', 0):10.2f} {got.get('skip', got.get('error', ''))}")
    table = _table(names, quick, results, notes, flops, bw, bits)
    with open(os.path.join(out_dir, "RESULTS.md"), "w") as f:
        f.write(table)
    _chart(names, quick, results, flops, bw, os.path.join(out_dir, "bench.png"))
    return table


def _table(names, quick, results, notes, flops, bw, bits) -> str:
    from ..target import Target

    t = Target.parse("llvm")
    lines = [f"# tensorlang bench ({time.strftime('%Y-%m-%d')})", "",
             f"Machine: {machine()}; target {t.cpu} with {bits}-bit vectors. Measured FMA "
             f"peak {flops / 1e9:.0f} GFLOPS, stream bandwidth {bw / 1e9:.1f} GB/s "
             "(the best of numpy copies and adds in every core).", "",
             "Best of the rounds (the VM slows whole processes at times); every system in its "
             "own process, taken in turn; higher is better. tensorlang (out=) writes into "
             "preallocated outputs, tensorlang (new outputs) returns a new array each call "
             "(`run(feed)`, its memory from the executor's array cache). Ratio: tensorlang "
             "(out=), and (new outputs), / the best of "
             "the other systems measured. Paired: the median over the rounds of that ratio "
             "within each round (the systems of a round run minutes apart at most, so a "
             "slow or fast phase of the machine — its DRAM bandwidth moved between ~45 and "
             "~88 GB/s within minutes on a Zen 5 VM — counts for all of them alike, where "
             "the best rounds may come from different phases); the same for new outputs.", "",
             "| kernel | size | unit | " + " | ".join(LABELS.get(s, s) for s in SYSTEMS) +
             " | tensorlang / best other | new outputs / best other "
             "| paired, median of the rounds | new outputs, paired "
             "| tensorlang, fraction of peak |",
             "|" + "---|" * (len(SYSTEMS) + 8)]
    foot = []
    for n in names:
        k = KERNELS[n]
        med = {s: max(v) for (kn, s), v in results.items() if kn == n}   # the best round
        cells = []
        for s in SYSTEMS:
            if s in med:
                cells.append(f"{med[s]:.1f}")
            else:
                note = notes.get((n, s), "")
                cells.append("—" if note.startswith(("not installed", "no ")) else "error")
                if note and not note.startswith(("not installed", "no ")):
                    foot.append(f"- {n}, {s}: {note}")
        others = [v for s, v in med.items() if s not in OURS]
        ratio, ratio_new = (f"{med[s] / max(others):.2f}" if others and s in med else "—"
                            for s in OURS)
        paired, paired_new = _paired(results, n), _paired(results, n, "tensorlang_new")
        peak = {"flops": flops / 1e9, "bandwidth": bw / 1e9}.get(k.bound)
        frac = f"{med['tensorlang'] / peak:.2f}" if peak and "tensorlang" in med else "—"
        lines.append(f"| {n} | {k.size(quick)} | {k.unit} | " + " | ".join(cells) +
                     f" | {ratio} | {ratio_new} | {paired} | {paired_new} | {frac} |")
    if foot:
        lines += ["", "Notes:"] + sorted(set(foot))
    return "\n".join(lines) + "\n"


def _paired(results, n, ours: str = "tensorlang") -> str:
    """The median over the rounds of `ours` (tensorlang: out=; tensorlang_new: new outputs)
    / the best other system (not tensorlang) in that round; "—" unless every system
    measured has a value in every round (an error in one round would pair values of
    different rounds)."""
    mine = results.get((n, ours))
    others = [v for (kn, s), v in results.items() if kn == n and s not in OURS]
    if not mine or not others or any(len(v) != len(mine) for v in others):
        return "—"
    ratios = sorted(mine[r] / max(v[r] for v in others) for r in range(len(mine)))
    mid = len(ratios) // 2
    return f"{ratios[mid] if len(ratios) % 2 else (ratios[mid - 1] + ratios[mid]) / 2:.2f}"


def _chart(names, quick, results, flops, bw, path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(10, 4.5))
    width = 0.8 / len(SYSTEMS)
    for j, s in enumerate(SYSTEMS):
        xs, ys = [], []
        for i, n in enumerate(names):
            k = KERNELS[n]
            peak = {"flops": flops / 1e9, "bandwidth": bw / 1e9}.get(k.bound)
            if (n, s) in results and peak:
                xs.append(i + (j - len(SYSTEMS) / 2) * width + width / 2)
                ys.append(max(results[(n, s)]) / peak)
        if xs:
            ax.bar(xs, ys, width, label=LABELS.get(s, s))
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels([n for n in names], rotation=15, fontsize=8)
    ax.set_ylabel("fraction of the machine's peak (FMA or stream bandwidth)")
    ax.set_title(f"tensorlang bench{' (quick sizes)' if quick else ''}: {machine()}")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None) -> int:
    import argparse

    p = argparse.ArgumentParser(prog="tensorlang bench", description=__doc__.splitlines()[0])
    p.add_argument("--worker", nargs=2, metavar=("KERNEL", "SYSTEM"))
    p.add_argument("--quick", action="store_true")
    a = p.parse_args(argv)
    if a.worker:
        print(json.dumps(worker(a.worker[0], a.worker[1], a.quick)))
        return 0
    p.print_help()
    return 0


if __name__ == "__main__":
    sys.exit(main())
