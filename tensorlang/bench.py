"""`tensorlang bench`: the CPU kernels of the performance goals, each against its peers, in
separate processes taken in turn, written as a Markdown table and a chart.

Kernels (full size / `--quick` size): matmul 1024^3 and 127x781x253 (GFLOPS), the fused
elementwise E = D + (A+B)*C over 2^24 floats (GB/s: 4 reads and a write), softmax and layer
norm over the rows of 4096 x 1024 (GB/s: a read and a write), conv2d 1x64x56x56 -> 64 with
3x3 filters (GFLOPS), and one SGD step of benchmarks/graph_mlp.py's MLP (steps/s).

Systems: tensorlang (the graph executor's default schedules, as a user of `G.Executor`
meets them, writing into preallocated outputs with `run(..., out=)`), numpy, torch, TVM and
Halide. TVM and Halide run the matmul, the elementwise kernel, softmax and conv2d with the
schedules written out below (the structure their tutorials and apps teach: packed, register
-blocked matmuls; rfactored row reductions computed per row; register-blocked direct
convolution), into preallocated outputs; numpy and torch allocate their results as their
users do. A peer that is not installed is left blank, and
`--peer-python` names another interpreter for them (their wheels may want other numpy
versions than tensorlang's environment). Every system runs in a fresh process (one system's
spinning thread pool cannot steal the next one's cores), each result is checked against
numpy, and the figure is the median over `--rounds` rounds.

The machine's own limits come first: the FMA peak (an LLVM loop of independent fused
multiply-adds on the widest vector registers, one per core) and the stream bandwidth (numpy
copies and adds in every core); each kernel is also stated as a fraction of the one that bounds it.

Usage: tensorlang bench OUT_DIR [--quick] [--rounds 3] [--kernels matmul,softmax,...]
       python -m tensorlang.bench --worker KERNEL SYSTEM [--quick]   (one measurement, JSON)
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np

SYSTEMS = ("tensorlang", "numpy", "torch", "tvm", "halide")
PEERS = ("tvm", "halide")


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
    systems = ("tensorlang", "numpy", "torch")     # the systems it has a version for

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
        a = rng.standard_normal((m, k)).astype("float32")
        b = rng.standard_normal((k, n)).astype("float32")
        c = np.zeros((m, n), "float32")

        def check():
            np.testing.assert_allclose(c, a @ b, rtol=1e-3, atol=1e-3 * np.sqrt(k))
        if system == "tensorlang":
            import tensorlang.graph as G

            x, y = G.Variable("a", (m, k), "float32"), G.Variable("b", (k, n), "float32")
            ex = G.Executor([x @ y])
            return (lambda: ex.run({x: a, y: b}, out=[c])), check   # as numpy's out=
        if system == "numpy":
            return (lambda: np.matmul(a, b, out=c)), check
        if system == "torch":
            import torch

            torch.set_num_threads(_threads())
            ta, tb, tc = (torch.from_numpy(v) for v in (a, b, c))
            return (lambda: torch.mm(ta, tb, out=tc)), check
        if system in PEERS:
            fn, fetch = (_tvm_matmul if system == "tvm" else _halide_matmul)(a, b, c)
            return fn, _then(fetch, check)
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
        A, B, C, D = (rng.random(n, dtype=np.float32) for _ in range(4))
        E = np.zeros(n, np.float32)
        out = {"e": E}

        def check():
            np.testing.assert_allclose(out["e"], D + (A + B) * C, rtol=1e-6)
        if system == "tensorlang":
            import tensorlang.graph as G

            vs = [G.Variable(s, (n,), "float32") for s in "ABCD"]
            ex = G.Executor([vs[3] + (vs[0] + vs[1]) * vs[2]])
            feed = dict(zip(vs, (A, B, C, D)))

            return (lambda: ex.run(feed, out=[E])), check        # as numpy's out=
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
            fn, fetch = (_tvm_elementwise if system == "tvm" else _halide_elementwise)(
                A, B, C, D, E)
            return fn, _then(fetch, check)
        raise NotImplementedError(system)


class Rows(Kernel):
    """softmax or layer norm over the rows of a matrix."""

    unit, bound = "GB/s", "bandwidth"

    @property
    def systems(self):
        return SYSTEMS if self.op == "softmax" else ("tensorlang", "numpy", "torch")

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
        x = np.random.default_rng(0).standard_normal((r, c)).astype("float32")
        out = {}

        def check():
            np.testing.assert_allclose(out["y"], self.reference(x.astype("f8")),
                                       rtol=1e-4, atol=1e-5)
        if system == "tensorlang":
            import tensorlang.graph as G

            v = G.Variable("x", (r, c), "float32")
            ex = G.Executor([G.softmax(v, axis=-1) if self.op == "softmax"
                             else G.layer_norm(v)])
            out["y"] = np.empty_like(x)
            return (lambda: ex.run({v: x}, out=[out["y"]])), check   # as TVM's, Halide's
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
            y = np.empty_like(x)
            out["y"] = y
            fn, fetch = (_tvm_softmax if system == "tvm" else _halide_softmax)(x, y)
            return fn, _then(fetch, check)
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
        x = rng.standard_normal((n, c, h, h)).astype("float32")
        w = (rng.standard_normal((k, c, 3, 3)) * 0.1).astype("float32")
        out = {}

        def check():
            xp = np.pad(x.astype("f8"), ((0, 0), (0, 0), (1, 1), (1, 1)))
            win = np.lib.stride_tricks.sliding_window_view(xp, (3, 3), axis=(2, 3))
            want = np.einsum("ncijpq,ocpq->noij", win, w.astype("f8"))
            np.testing.assert_allclose(out["y"], want, rtol=1e-3, atol=1e-3)
        if system == "tensorlang":
            import tensorlang.graph as G

            vx, vw = G.Variable("x", x.shape, "float32"), G.Variable("w", w.shape, "float32")
            ex = G.Executor([G.conv2d(vx, vw, padding=1)])
            out["y"] = np.empty((n, k, h, h), np.float32)
            return (lambda: ex.run({vx: x, vw: w}, out=[out["y"]])), check
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
            y = np.empty((n, k, h, h), np.float32)
            out["y"] = y
            fn, fetch = (_tvm_conv2d if system == "tvm" else _halide_conv2d)(x, w, y)
            return fn, _then(fetch, check)
        raise NotImplementedError(system)


class MlpStep(Kernel):
    name, unit, bound = "MLP SGD step", "steps/s", ""

    def size(self, quick):
        return "batch 16" if quick else "batch 128, 784-256-10"

    def amount(self, quick):
        return 1.0

    def setup(self, system, quick):
        import importlib.util

        here = os.path.dirname(os.path.abspath(__file__))
        path = os.path.join(os.path.dirname(here), "benchmarks", "graph_mlp.py")
        if not os.path.exists(path):
            raise NotImplementedError("benchmarks/graph_mlp.py is not next to the package")
        spec = importlib.util.spec_from_file_location("graph_mlp", path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return mod.bench_system(system, batch=16 if quick else mod.B)


KERNELS = {k.name: k for k in (
    Matmul("matmul 1024", 1024, 1024, 1024), Matmul("matmul 127x781x253", 127, 781, 253),
    Elementwise(), Rows("softmax rows", "softmax"), Rows("layer norm rows", "layer_norm"),
    Conv2d(), MlpStep())}
SHORT = {"matmul": ["matmul 1024", "matmul 127x781x253"], "elementwise": ["E = D + (A+B)*C"],
         "softmax": ["softmax rows"], "layer_norm": ["layer norm rows"],
         "conv2d": ["conv2d 3x3"], "mlp": ["MLP SGD step"]}


# -------------------------------------------------------------------------- the peers
def _then(fetch, check):
    """Run `fetch` (copy a peer's output back; not timed) before `check`."""
    def both():
        if fetch is not None:
            fetch()
        check()
    return both


def _tvm_target():
    import tvm

    from tvm.target import codegen

    return tvm.target.Target({"kind": "llvm", "mcpu": codegen.llvm_get_system_cpu(),
                              "num-cores": _threads()})


def _tvm_run(sch, arrays, out):
    import tvm

    lib = tvm.compile(sch.mod, target=_tvm_target())
    f = lib["main"]
    dev = tvm.cpu()
    args = [tvm.runtime.tensor(v, dev) for v in arrays]

    def fn():
        f(*args)

    def check():
        np.copyto(out, args[-1].numpy())
    return fn, check


def _tvm_elementwise(A, B, C, D, E):
    from tvm import s_tir, te

    n = len(A)
    ts = [te.placeholder((n,), name=s) for s in "ABCD"]
    out = te.compute((n,), lambda i: ts[3][i] + (ts[0][i] + ts[1][i]) * ts[2][i], name="E")
    sch = s_tir.Schedule(te.create_prim_func([*ts, out]))
    (i,) = sch.get_loops(sch.get_sblock("E"))
    io, ii, iv = sch.split(i, [None, 64, 16])
    sch.parallel(io)
    sch.vectorize(iv)
    return _tvm_run(sch, [A, B, C, D, E], E)


def _tvm_matmul(a, b, c, bm=8, bn=32):
    """The structure of TVM's opt_gemm tutorial at its end (B packed in panels of bn columns,
    cache_write at the tile, the k loop outside unrolled rows and vector columns, the
    outer tile loop parallel), with the tile shrunk to a register tile bm x bn."""
    import tvm
    from tvm import s_tir, te

    m, k = a.shape
    n = b.shape[1]
    A, B = te.placeholder((m, k), name="A"), te.placeholder((k, n), name="B")
    panels = -(-n // bn)
    packed = te.compute((panels, k, bn), lambda p, kk, q: te.if_then_else(
        p * bn + q < n, B[kk, p * bn + q], tvm.tirx.const(0.0, "float32")), name="packedB")
    r = te.reduce_axis((0, k), name="k")
    C = te.compute((m, n), lambda i, j: te.sum(
        A[i, r] * packed[j // bn, r, tvm.tirx.indexmod(j, bn)], axis=r), name="C")
    sch = s_tir.Schedule(te.create_prim_func([A, B, C]))
    blk = sch.get_sblock("C")
    cc = sch.cache_write(blk, 0, "global")
    i, j = sch.get_loops(cc)
    io, ii = sch.split(i, [None, bm])
    jo, ji = sch.split(j, [None, bn])
    sch.reorder(io, jo, ii, ji)
    sch.compute_at(blk, jo)
    mc, nc, kk = sch.get_loops(blk)[-3:]
    sch.reorder(kk, mc, nc)
    sch.unroll(mc)
    sch.vectorize(nc)
    sch.parallel(io)
    init = sch.decompose_reduction(blk, kk)
    il = sch.get_loops(init)
    sch.unroll(il[-2])
    sch.vectorize(il[-1])
    sch.vectorize(ji)
    p, _, q = sch.get_loops(sch.get_sblock("packedB"))
    sch.vectorize(q)
    sch.parallel(p)
    return _tvm_run(sch, [a, b, c], c)


def _tvm_softmax(x, y, vec=16):
    """Row softmax as TVM's topi writes it (max, exponentials, their sum, the quotient),
    scheduled as a TVM user would on a CPU: both reductions rfactored into vector lanes,
    everything per row computed at the output's row loop, rows in parallel."""
    from tvm import s_tir, te

    m, n = x.shape
    X = te.placeholder((m, n), name="X")
    k1, k2 = te.reduce_axis((0, n), "k1"), te.reduce_axis((0, n), "k2")
    mx = te.compute((m,), lambda i: te.max(X[i, k1], axis=k1), name="mx")
    ex = te.compute((m, n), lambda i, j: te.exp(X[i, j] - mx[i]), name="ex")
    sm = te.compute((m,), lambda i: te.sum(ex[i, k2], axis=k2), name="sm")
    Y = te.compute((m, n), lambda i, j: ex[i, j] / sm[i], name="Y")
    sch = s_tir.Schedule(te.create_prim_func([X, Y]))
    rfs = []
    for name in ("mx", "sm"):
        _, k = sch.get_loops(sch.get_sblock(name))
        _, ki = sch.split(k, [None, vec])
        rfs.append(sch.rfactor(ki, 0))
    i, j = sch.get_loops(sch.get_sblock("Y"))
    for blk in (sch.get_sblock("sm"), rfs[1], sch.get_sblock("ex"), sch.get_sblock("mx"),
                rfs[0]):                 # each block's consumers are under i already
        sch.compute_at(blk, i)
    sch.parallel(i)
    sch.vectorize(sch.split(j, [None, vec])[1])
    sch.vectorize(sch.split(sch.get_loops(sch.get_sblock("ex"))[-1], [None, vec])[1])
    for rf in rfs:
        lp = sch.get_loops(rf)
        sch.reorder(lp[-1], lp[-2])
        sch.vectorize(lp[-2])
        sch.decompose_reduction(rf, lp[-1])
    return _tvm_run(sch, [x, y], y)


def _halide_softmax(x, y, vec=16, rows=64):
    """The same structure in Halide: per row (split into parallel groups of rows), the
    maximum and the sum over 16-lane vector partials (rfactor), the exponentials kept."""
    import halide as hl

    m, n = x.shape
    X = hl.ImageParam(hl.Float(32), 2, "X")          # X(j, i): j is the column
    j, i, io, ii, u = (hl.Var(v) for v in ("j", "i", "io", "ii", "u"))
    r = hl.RDom([(0, n)], "r")
    mx, ex, sm, Y = hl.Func("mx"), hl.Func("ex"), hl.Func("sm"), hl.Func("Y")
    mx[i] = hl.f32(float("-inf"))
    mx[i] = hl.max(mx[i], X[r.x, i])
    ex[j, i] = hl.exp(X[j, i] - mx[i])
    sm[i] = hl.f32(0)
    sm[i] += ex[r.x, i]
    Y[j, i] = ex[j, i] / sm[i]
    Y.split(i, io, ii, min(rows, m)).parallel(io).vectorize(j, vec)
    ex.compute_at(Y, ii).vectorize(j, vec)
    for f in (mx, sm):
        f.compute_at(Y, ii)
        ro, ri = hl.RVar("ro"), hl.RVar("ri")
        inter = f.update().split(r.x, ro, ri, vec).rfactor(ri, u)
        inter.compute_at(Y, ii).vectorize(u, vec).update().vectorize(u, vec)
    Y.bound(j, 0, n).bound(i, 0, m)
    Y.compile_jit(hl.get_jit_target_from_environment())
    X.set(hl.Buffer(x))
    ob = hl.Buffer(y)
    return (lambda: Y.realize(ob)), None


def _tvm_conv2d(x, w, y, kt=4, vec=16, nv=4):
    """Direct NCHW conv2d (pad 1) with the register-blocked schedule tensorlang's executor
    uses, written for TVM: kt output channels x nv vectors of columns accumulate in a
    cache_write tile over (c, kh, kw), the padded input its own vectorised stage, channel
    tiles in parallel."""
    import tvm
    from tvm import s_tir, te

    nb, c, h, wd = x.shape
    k = w.shape[0]
    X = te.placeholder(x.shape, name="X")
    W = te.placeholder(w.shape, name="W")
    P = te.compute((nb, c, h + 2, wd + 2), lambda a, b, i, j: te.if_then_else(
        te.all(i >= 1, i <= h, j >= 1, j <= wd), X[a, b, i - 1, j - 1],
        tvm.tirx.const(0.0, "float32")), name="P")
    rc, ry, rx = (te.reduce_axis((0, c), "rc"), te.reduce_axis((0, 3), "ry"),
                  te.reduce_axis((0, 3), "rx"))
    Y = te.compute((nb, k, h, wd), lambda a, o, i, j: te.sum(
        P[a, rc, i + ry, j + rx] * W[o, rc, ry, rx], axis=[rc, ry, rx]), name="Y")
    sch = s_tir.Schedule(te.create_prim_func([X, W, Y]))
    blk = sch.get_sblock("Y")
    cc = sch.cache_write(blk, 0, "global")
    a, o, i, j = sch.get_loops(cc)
    # TVM reorders only loops with no guard between them: the column tile divides the
    # width (56 -> 56, a vector of 56 lanes that LLVM splits into 4 registers)
    jt = max(d for d in range(1, min(vec * nv, wd) + 1) if wd % d == 0)
    oo, oi = sch.split(o, [None, kt])
    jo, ji = sch.split(j, [None, jt])
    sch.reorder(a, oo, i, jo, oi, ji)
    sch.compute_at(blk, jo)
    *_, lo, lj, lc, ly, lx = sch.get_loops(blk)
    sch.reorder(lc, ly, lx, lo, lj)
    sch.unroll(lo)
    sch.vectorize(lj)
    sch.vectorize(ji)
    sch.parallel(oo)                     # before decompose_reduction, as TVM requires
    sch.decompose_reduction(blk, lc)
    pa, pb, pi, pj = sch.get_loops(sch.get_sblock("P"))
    sch.parallel(sch.fuse(pa, pb))
    return _tvm_run(sch, [x, w, y], y)


def _halide_conv2d(x, w, y, kt=4, vec=16, nv=4):
    """The same conv in Halide: a kt x (nv vectors) tile of outputs accumulated over
    (c, kh, kw) at each tile, output-channel tiles in parallel, zero padding as a
    boundary condition."""
    import halide as hl

    nb, c, h, wd = x.shape
    k = w.shape[0]
    X = hl.ImageParam(hl.Float(32), 4, "X")            # X(j, i, c, n)
    W = hl.ImageParam(hl.Float(32), 4, "W")            # W(kw, kh, c, k)
    j, i, o, n, ji, oi = (hl.Var(v) for v in ("j", "i", "o", "n", "ji", "oi"))
    r = hl.RDom([(0, 3), (0, 3), (0, c)], "r")
    pad = hl.BoundaryConditions.constant_exterior(X, 0.0)
    acc = hl.Func("acc")
    acc[j, i, o, n] = 0.0
    acc[j, i, o, n] += pad[j + r.x - 1, i + r.y - 1, r.z, n] * W[r.x, r.y, r.z, o]
    Y = hl.Func("Y")
    Y[j, i, o, n] = acc[j, i, o, n]
    tw = min(vec * nv, wd)
    vec = min(vec, tw)
    Y.split(j, j, ji, tw).split(o, o, oi, min(kt, k)).reorder(ji, oi, j, i, o, n) \
        .vectorize(ji, vec).parallel(o)
    acc.compute_at(Y, j).vectorize(j, vec)
    acc.update().reorder(j, o, r.x, r.y, r.z).vectorize(j, vec).unroll(j).unroll(o)
    Y.bound(j, 0, wd).bound(i, 0, h).bound(o, 0, k).bound(n, 0, nb)
    Y.compile_jit(hl.get_jit_target_from_environment())
    X.set(hl.Buffer(x))
    W.set(hl.Buffer(w))
    ob = hl.Buffer(y)
    return (lambda: Y.realize(ob)), None


def _halide_elementwise(A, B, C, D, E):
    import halide as hl

    ins = [hl.ImageParam(hl.Float(32), 1, s) for s in "ABCD"]
    x, xo, xi = hl.Var("x"), hl.Var("xo"), hl.Var("xi")
    f = hl.Func("E")
    f[x] = ins[3][x] + (ins[0][x] + ins[1][x]) * ins[2][x]
    f.split(x, xo, xi, min(1 << 14, len(A))).parallel(xo).vectorize(xi, 16)
    f.compile_jit(hl.get_jit_target_from_environment())
    for p, v in zip(ins, (A, B, C, D)):
        p.set(hl.Buffer(v))
    ob = hl.Buffer(E)
    return (lambda: f.realize(ob)), None


def _halide_matmul(a, b, c, tx=32, ty=32, ry=8, vec=16):
    """The schedule of Halide's test/performance/matrix_multiplication.cpp, with B packed in
    panels of tx columns (as TVM's packedB) and AVX-512 vectors."""
    import halide as hl

    m, k = a.shape
    n = b.shape[1]
    pa, pb = hl.ImageParam(hl.Float(32), 2, "A"), hl.ImageParam(hl.Float(32), 2, "B")
    x, y, xi, yi, yii, xy, xo = (hl.Var(v) for v in ("x", "y", "xi", "yi", "yii", "xy", "xo"))
    r = hl.RDom([(0, k)], "k")
    bp = hl.Func("Bp")
    bp[x, y, xo] = pb[hl.min(xo * tx + x, n - 1), y]
    mm = hl.Func("mm")
    mm[x, y] = 0.0
    mm[x, y] += pa[r, y] * bp[x % tx, r, x / tx]
    out = hl.Func("C")
    out[x, y] = mm[x, y]
    tx_, ty_ = min(tx, n), min(ty, m)
    out.tile(x, y, xi, yi, tx_, ty_).fuse(x, y, xy).parallel(xy) \
        .split(yi, yi, yii, min(ry, ty_)).vectorize(xi, vec).unroll(xi).unroll(yii)
    mm.compute_at(out, yi).vectorize(x, vec).unroll(y)
    mm.update(0).reorder(x, y, r).vectorize(x, vec).unroll(x).unroll(y).unroll(r, 2)
    bp.compute_root().bound(x, 0, tx).vectorize(x, vec).unroll(x).parallel(xo)
    out.bound(x, 0, n).bound(y, 0, m)
    out.compile_jit(hl.get_jit_target_from_environment())
    pa.set(hl.Buffer(a))
    pb.set(hl.Buffer(b))
    ob = hl.Buffer(c)
    return (lambda: out.realize(ob)), None


# ------------------------------------------------------------------ machine and workers
def peak_flops(seconds: float = 0.3) -> tuple[float, int]:
    """Single-precision FMA peak of this machine (FLOP/s, all cores) and the vector width
    (bits) it used: an LLVM loop of 16 independent fused multiply-adds on the widest
    vectors of the host CPU, one thread per core."""
    import ctypes
    import threading

    import llvmlite.binding as llvm

    from .target import Target

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
    from .backends.llvm.jit import parse_and_optimise
    from .backends.llvm.target import new_target_machine, target_machine

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


def copy_bandwidth(mbytes: int = 256) -> float:
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


def _run_worker(kernel, system, quick, python, timeout) -> dict:
    # another interpreter (--peer-python) runs this file itself: tensorlang's own
    # dependencies need not be installed there
    entry = ["-m", "tensorlang.bench"] if python == sys.executable else \
        [os.path.abspath(__file__)]
    cmd = [python, *entry, "--worker", kernel, system] + (["--quick"] if quick else [])
    env = dict(os.environ)
    env.setdefault("TVM_NUM_THREADS", str(_threads()))
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = here + os.pathsep + env.get("PYTHONPATH", "")
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
    bw = copy_bandwidth(16 if quick else 256)
    progress(f"machine: {machine()}; FMA peak {flops / 1e9:.0f} GFLOPS ({bits}-bit vectors), "
             f"stream bandwidth {bw / 1e9:.1f} GB/s")
    results: dict[tuple, list] = {}
    notes: dict[tuple, str] = {}
    for r in range(rounds):
        for n in names:
            for system in SYSTEMS:
                if notes.get((n, system), "").startswith(("not installed", "no ")):
                    continue
                python = peer_python if system in PEERS and peer_python else sys.executable
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
    from .target import Target

    t = Target.parse("llvm")
    lines = [f"# tensorlang bench ({time.strftime('%Y-%m-%d')})", "",
             f"Machine: {machine()}; target {t.cpu} with {bits}-bit vectors. Measured FMA "
             f"peak {flops / 1e9:.0f} GFLOPS, stream bandwidth {bw / 1e9:.1f} GB/s "
             "(the best of numpy copies and adds in every core).", "",
             "Median over rounds; every system in its own process, taken in turn; higher is "
             "better. Ratio: tensorlang / the best of the other systems measured.", "",
             "| kernel | size | unit | " + " | ".join(SYSTEMS) +
             " | tensorlang / best other | tensorlang, fraction of peak |",
             "|" + "---|" * (len(SYSTEMS) + 5)]
    foot = []
    for n in names:
        k = KERNELS[n]
        med = {s: statistics.median(v) for (kn, s), v in results.items() if kn == n}
        cells = []
        for s in SYSTEMS:
            if s in med:
                cells.append(f"{med[s]:.1f}")
            else:
                note = notes.get((n, s), "")
                cells.append("—" if note.startswith(("not installed", "no ")) else "error")
                if note and not note.startswith(("not installed", "no ")):
                    foot.append(f"- {n}, {s}: {note}")
        others = [v for s, v in med.items() if s != "tensorlang"]
        ratio = f"{med['tensorlang'] / max(others):.2f}" if others and "tensorlang" in med \
            else "—"
        peak = {"flops": flops / 1e9, "bandwidth": bw / 1e9}.get(k.bound)
        frac = f"{med['tensorlang'] / peak:.2f}" if peak and "tensorlang" in med else "—"
        lines.append(f"| {n} | {k.size(quick)} | {k.unit} | " + " | ".join(cells) +
                     f" | {ratio} | {frac} |")
    if foot:
        lines += ["", "Notes:"] + sorted(set(foot))
    return "\n".join(lines) + "\n"


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
                ys.append(statistics.median(results[(n, s)]) / peak)
        if xs:
            ax.bar(xs, ys, width, label=s)
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
