"""TVM and Halide versions of `tensorlang bench`'s kernels (the peers).

Each function takes numpy arrays (inputs, then the preallocated output), builds the kernel
with the schedule written out in it, and returns (fn, fetch): one timed call, and what
copies the result back into the output before it is checked (None when the peer writes
the output array in place). Imported only in the worker process of a peer, which may run
in another interpreter (`--peer-python`), so nothing here imports tensorlang.
"""

from __future__ import annotations

import numpy as np


def _threads() -> int:
    import os

    return os.cpu_count() or 1


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


def tvm_elementwise(A, B, C, D, E):
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


def tvm_matmul(a, b, c, bm=8, bn=32):
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


def _tvm_rows(sch, reductions, attach, vec):
    """Row reductions (block names) rfactored into `vec` vector lanes; the blocks in
    `attach` (names, or indexes of the rfactored blocks; readers first) computed at the
    output Y's row loop, which runs in parallel, Y's columns in vectors."""
    rfs = []
    for name in reductions:
        _, k = sch.get_loops(sch.get_sblock(name))
        _, ki = sch.split(k, [None, vec])
        rfs.append(sch.rfactor(ki, 0))
    i, j = sch.get_loops(sch.get_sblock("Y"))
    for blk in attach:                   # each block's consumers are under i already
        sch.compute_at(rfs[blk] if isinstance(blk, int) else sch.get_sblock(blk), i)
    sch.parallel(i)
    sch.vectorize(sch.split(j, [None, vec])[1])
    for rf in rfs:
        lp = sch.get_loops(rf)
        sch.reorder(lp[-1], lp[-2])
        sch.vectorize(lp[-2])
        sch.decompose_reduction(rf, lp[-1])


def tvm_softmax(x, y, vec=16):
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
    _tvm_rows(sch, ("mx", "sm"), ("sm", 1, "ex", "mx", 0), vec)
    sch.vectorize(sch.split(sch.get_loops(sch.get_sblock("ex"))[-1], [None, vec])[1])
    return _tvm_run(sch, [x, y], y)


def _halide_rows(Y, reductions, X, x, y, r, loops, vec):
    """The per-row reductions computed at Y's row loop, each over vector partials
    (rfactor), then Y compiled and bound to the arrays: (fn, None)."""
    import halide as hl

    i, j, ii, u = loops
    m, n = x.shape
    for f in reductions:
        f.compute_at(Y, ii)
        ro, ri = hl.RVar("ro"), hl.RVar("ri")
        inter = f.update().split(r.x, ro, ri, vec).rfactor(ri, u)
        inter.compute_at(Y, ii).vectorize(u, vec).update().vectorize(u, vec)
    Y.bound(j, 0, n).bound(i, 0, m)
    Y.compile_jit(hl.get_jit_target_from_environment())
    X.set(hl.Buffer(x))
    ob = hl.Buffer(y)
    return (lambda: Y.realize(ob)), None


def halide_softmax(x, y, vec=16, rows=64):
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
    return _halide_rows(Y, (mx, sm), X, x, y, r, (i, j, ii, u), vec)


def tvm_layer_norm(x, y, vec=16, eps=1e-5):
    """Layer norm over rows (two passes: the mean, then the mean square deviation; the
    quotient by the square root, as the reference), scheduled like `tvm_softmax`: both
    sums rfactored into vector lanes, everything per row at the output's row loop."""
    from tvm import s_tir, te

    m, n = x.shape
    X = te.placeholder((m, n), name="X")
    k1, k2 = te.reduce_axis((0, n), "k1"), te.reduce_axis((0, n), "k2")
    s1 = te.compute((m,), lambda i: te.sum(X[i, k1], axis=k1), name="s1")
    s2 = te.compute((m,), lambda i: te.sum((X[i, k2] - s1[i] / n) * (X[i, k2] - s1[i] / n),
                                           axis=k2), name="s2")
    Y = te.compute((m, n), lambda i, j: (X[i, j] - s1[i] / n) / te.sqrt(s2[i] / n + eps),
                   name="Y")
    sch = s_tir.Schedule(te.create_prim_func([X, Y]))
    _tvm_rows(sch, ("s1", "s2"), ("s2", 1, "s1", 0), vec)
    return _tvm_run(sch, [x, y], y)


def halide_layer_norm(x, y, vec=16, rows=64, eps=1e-5):
    """The same in Halide: per row, the two sums over 16-lane vector partials (rfactor),
    rows in parallel groups."""
    import halide as hl

    m, n = x.shape
    X = hl.ImageParam(hl.Float(32), 2, "X")          # X(j, i): j is the column
    j, i, io, ii, u = (hl.Var(v) for v in ("j", "i", "io", "ii", "u"))
    r = hl.RDom([(0, n)], "r")
    s1, s2, Y = hl.Func("s1"), hl.Func("s2"), hl.Func("Y")
    s1[i] = hl.f32(0)
    s1[i] += X[r.x, i]
    s2[i] = hl.f32(0)
    s2[i] += (X[r.x, i] - s1[i] / n) * (X[r.x, i] - s1[i] / n)
    Y[j, i] = (X[j, i] - s1[i] / n) / hl.sqrt(s2[i] / n + hl.f32(eps))
    Y.split(i, io, ii, min(rows, m)).parallel(io).vectorize(j, vec)
    return _halide_rows(Y, (s1, s2), X, x, y, r, (i, j, ii, u), vec)


def tvm_conv2d(x, w, y, block=16, reg_n=28):
    """TVM's tuned x86 conv2d: topi.nn.conv2d_NCHWc with the AVX-512 fallback config of
    its (removed) x86 schedule, ported to s_tir as in shared/anchors/cpu/conv.py — input
    channels and output channels in blocks of 16, reg_n output columns (the largest
    divisor of the width up to 28) in registers per tile, parallel over (channel block,
    output row). NCHW in and out: the data packing and the output unpacking run inside the
    timed function; the kernel is packed beforehand (a constant in a network, as after
    TVM's AlterOpLayout). Falls back to block 8 when 16 does not divide the channels."""
    from tvm import s_tir, te, topi

    nb, c, h, wd = x.shape
    k = w.shape[0]
    while block > 1 and (c % block or k % block):
        block //= 2
    reg_n = max(d for d in range(1, min(reg_n, wd) + 1) if wd % d == 0)
    X = te.placeholder(x.shape, name="X")
    packed = te.compute((nb, c // block, h, wd, block),
                        lambda n, cc, i, j, cb: X[n, cc * block + cb, i, j], name="data_vec")
    Wk = te.placeholder((k // block, c // block, 3, 3, block, block), name="kernel_vec")
    with _tvm_target():                   # topi.nn.conv2d_NCHWc reads the current target
        conv = topi.nn.conv2d_NCHWc(packed, Wk, (1, 1), (1, 1), (1, 1), f"NCHW{block}c",
                                    f"NCHW{block}c", "float32")
    Y = te.compute((nb, k, h, wd), lambda n, o, i, j: conv[n, o // block, i, j, o % block],
                   name="out")
    sch = s_tir.Schedule(te.create_prim_func([X, Wk, Y]))
    pad = sch.get_sblock("data_pad")
    pn, pc, pi, _, pb = sch.get_loops(pad)
    sch.vectorize(pb)
    sch.parallel(sch.fuse(pn, pc, pi))
    dn, dc, di, _, _ = sch.get_loops(sch.get_sblock("data_vec"))
    sch.parallel(sch.fuse(dn, dc, di))
    cblk = sch.get_sblock("conv2d_NCHWc")
    wb = sch.cache_write(cblk, 0, "global")
    on, oc, oi, oj = sch.get_loops(sch.get_sblock("out"))
    ojo, oji = sch.split(oj, [None, reg_n])
    oco, oci = sch.split(oc, [None, block])
    sch.reorder(oco, oi, ojo, oji, oci)
    rows = sch.fuse(on, oco, oi)
    sch.vectorize(oci)
    sch.parallel(rows)
    sch.compute_at(wb, rows)             # TIR moves one block: the write-back first
    wj, _ = sch.get_loops(wb)[-2:]
    wjo, _ = sch.split(wj, [None, reg_n])
    sch.vectorize(sch.get_loops(wb)[-1])
    sch.compute_at(cblk, wjo)
    j_, ob, ic, kh, kw = sch.get_loops(cblk)[-5:]
    ico, ici = sch.split(ic, [None, block])
    sch.reorder(ico, kh, kw, ici, j_, ob)
    sch.vectorize(ob)
    sch.unroll(j_)
    sch.decompose_reduction(cblk, ico)
    sch.vectorize(sch.get_loops(sch.get_sblock("conv2d_NCHWc_init"))[-1])
    wpk = np.ascontiguousarray(w.reshape(k // block, block, c // block, block, 3, 3)
                               .transpose(0, 2, 4, 5, 3, 1))
    return _tvm_run(sch, [x, wpk, y], y)


def halide_conv2d(x, w, y, vec=16, tile_w=1, tile_h=14):
    """The conv in Halide with the CPU schedule of Halide's apps/conv_layer: the input
    repacked channels-innermost and zero-padded (its own parallel pass), each tile of
    `tile_h` pixels x `tile_w` vectors of output channels accumulated in registers over
    (c, kw, kh) with the filter's output channels contiguous (packed offline, as TVM's
    kernel is), then one pass back to NCHW. conv_layer's AVX-512 tile is 4 vectors x 5
    pixels; 1 x 14 measured fastest here (2-core Zen 4, 56^2 64->64: 1x14 210, 1x28 211,
    2x14 207, 4x4 209, 4x5 203, 1x8 157 GFLOPS), so that is the default."""
    import halide as hl

    nb, c, h, wd = x.shape
    k = w.shape[0]
    X = hl.ImageParam(hl.Float(32), 4, "X")            # X(j, i, c, n): NCHW
    Wt = hl.ImageParam(hl.Float(32), 4, "Wt")          # Wt(o, kw, kh, c)
    xx, yy, cc, n, co, ci, xo, xi = (hl.Var(v) for v in
                                     ("x", "y", "c", "n", "co", "ci", "xo", "xi"))
    pad = hl.BoundaryConditions.constant_exterior(X, 0.0)
    inp = hl.Func("inp")
    inp[cc, xx, yy, n] = pad[xx - 1, yy - 1, cc, n]    # channels innermost, padded
    r = hl.RDom([(0, c), (0, 3), (0, 3)], "r")
    conv = hl.Func("conv")
    conv[cc, xx, yy, n] = 0.0
    conv[cc, xx, yy, n] += Wt[cc, r.y, r.z, r.x] * inp[r.x, xx + r.y, yy + r.z, n]
    res = hl.Func("res")
    res[cc, xx, yy, n] = conv[cc, xx, yy, n]
    Y = hl.Func("Y")
    Y[xx, yy, cc, n] = res[cc, xx, yy, n]
    inp.compute_root().vectorize(cc, vec).parallel(yy)
    res.compute_root().split(cc, co, ci, vec * tile_w).split(xx, xo, xi, tile_h) \
        .reorder(ci, xi, xo, yy, n, co).vectorize(ci, vec).unroll(ci).unroll(xi) \
        .parallel(yy).parallel(n).parallel(co)
    conv.compute_at(res, xo).vectorize(cc, vec).unroll(cc).unroll(xx).unroll(yy)
    conv.update().reorder(cc, xx, yy, r.x, r.y, r.z, n).vectorize(cc, vec).unroll(cc) \
        .unroll(xx).unroll(yy).unroll(r.x, 2)
    Y.split(xx, xo, xi, vec).reorder(xi, cc, xo, yy, n).vectorize(xi).parallel(yy)
    res.bound(cc, 0, k).bound(xx, 0, wd)
    Y.bound(xx, 0, wd).bound(yy, 0, h).bound(cc, 0, k).bound(n, 0, nb)
    Y.compile_jit(hl.get_jit_target_from_environment())
    wt = np.ascontiguousarray(w.transpose(1, 2, 3, 0))   # numpy (c, kh, kw, o)
    X.set(hl.Buffer(x))
    Wt.set(hl.Buffer(wt))
    ob = hl.Buffer(y)
    return (lambda wt=wt: Y.realize(ob)), None           # wt: the Buffer does not own it


def halide_elementwise(A, B, C, D, E):
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


def halide_matmul(a, b, c, tx=32, ty=32, ry=8, vec=16):
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
