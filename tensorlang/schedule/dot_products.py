"""Matmul and conv2d on a dot-product instruction (`tensorize`): the computations with their
operands packed as the instruction reads them, and their schedules. Tutorial 12,
`benchmarks/tensorize.py` and the tensorize tests build their kernels here.

- `packed_matmul`: C = A @ B with B packed as [N/lanes, K/depth, lanes, depth] (zeros past
  the edges: each lanes x depth block one 64-byte run), register tiles of rows x vecs
  vectors of sums, the block below them tensorized (or, without an instruction, the same
  nest with the lanes vectorized: the plain kernel). Its schedule, `dot_tile`, is also
  the graph's `G.matmul_integer`'s and the auto-scheduler's dot-product sketch's.
- `blocked_conv2d` (its schedule `schedule_blocked_conv`, also the graph's
  `G.conv_integer`'s): an int8 3x3 conv (pad 1) in the channel-blocked form, input
  [n, C/4, H+2, W+2, 4], weights [K/16, C/4, 3, 3, 16, 4], a local tile of `cols` columns x
  16 channels of int32 sums at each column tile (kept in registers), its 16 x 4 blocks on
  VNNI, the output unpacked to NCHW.
- `schedule_packed_dot`: the graph's packed matmul kernels (`G.matmul_integer`, a bfloat16
  `G.matmul`): `dot_tile` on D, with D's tile computed at each tile of a same-sized reader.
- `pack_conv_operands` and `channel_dot_tile`: a convolution written as plain loops, its
  operands packed into an instruction's layout by `pack` and its tile of cv x 16 channels
  x rn columns tensorized; the auto-scheduler's conv sketch draws the sizes, the graph's
  bfloat16 conv fixes them.
"""

from __future__ import annotations

from ..config import debug_print
from ..te.intrin import all as all_, if_then_else
from ..te.reduce import sum as sum_
from ..te.tensor import compute, placeholder, reduce_axis
from ..ir.expr import const
from .recipes import Apply, apply_or_raise, names
from .schedule import create_schedule


def packed_matmul(m: int, n: int, k: int, a_dtype: str, b_dtype: str, acc: str, lanes: int,
                  depth: int, intrin=None, rows: int = 4, vecs: int = 4,
                  block_bytes: int = 0):
    """(schedule, [A, B, C]) of C[i, j] = sum_k A[i, k] * B[k, j] in `acc` (see the module;
    `block_bytes`: see `dot_tile`)."""
    A = placeholder((m, k), a_dtype, name="A")
    B = placeholder((k, n), b_dtype, name="B")
    nb, kb = -(-n // lanes), -(-k // depth)
    Bp = compute((nb, kb, lanes, depth), lambda jo, ko, ji, ki: if_then_else(
        all_(ko * depth + ki < k, jo * lanes + ji < n), B[ko * depth + ki, jo * lanes + ji],
        const(0, b_dtype)), name="Bp")
    r = reduce_axis((0, k), name="k")
    C = compute((m, n), lambda i, j: sum_(
        A[i, r].astype(acc) * Bp[j // lanes, r // depth, j % lanes, r % depth].astype(acc),
        axis=r), name="C")
    s = create_schedule(C)
    s[Bp].parallel(Bp.op.axis[0])
    dot_tile(s[C], lanes, depth, intrin, rows, vecs,
             panels_per_block(k, lanes * vecs, Bp.dtype.itemsize, block_bytes))
    return s, [A, B, C]


def panels_per_block(k: int, cols: int, itemsize: int, block_bytes: int) -> int:
    """How many column panels (`cols` columns of B, all `k` rows) fit `block_bytes` (0: no
    blocking)."""
    return max(1, block_bytes // (k * cols * itemsize)) if block_bytes else 0


def dot_tile(st, lanes: int, depth: int, intrin=None, rows: int = 4, vecs: int = 4,
             per_block: int = 0, apply: Apply = apply_or_raise) -> bool:
    """The register tile of a dot-product stage `st` (C[..., i, j] = sum_k a[..., i, k] *
    b[..., j // lanes, k // depth, j % lanes, k % depth], b in an instruction's layout:
    `packed_matmul`'s, the auto-scheduler's `pack_dot_operands`'): `rows` x `vecs` vectors of
    `lanes` sums, the instruction's block (`lanes` x `depth`) below them tensorized onto
    `intrin`. Loops: the batch axes, (j.outer.outer: `per_block` column tiles a block, so
    that the row tiles read B's panels from L2; 0: none), i.outer, j.outer, k.outer,
    i.inner (unrolled), j.inner.outer (unrolled), j.inner.inner, k.inner. The row tiles run
    in parallel (the column tiles where there is one row tile). Without `intrin`, or where
    it is refused, the same nest runs with k.inner outside the lanes, vectorized. True when
    tensorized."""
    *batch, i, j = names(st.op.axis)
    (k,) = names(st.op.reduce_axis)
    extent = [int(a.extent.value) for a in st.op.axis]
    for ax, f in ((i, rows), (j, lanes * vecs), (k, depth)):
        apply(st, "split", ax, factor=f)
    apply(st, "split", f"{j}.inner", factor=lanes)
    outer = [f"{i}.outer", f"{j}.outer"]
    if per_block and -(-extent[-1] // (lanes * vecs)) > per_block:
        apply(st, "split", f"{j}.outer", factor=per_block)
        outer = [f"{j}.outer.outer", f"{i}.outer", f"{j}.outer.inner"]
    lanes_, depth_ = f"{j}.inner.inner", f"{k}.inner"
    tile = [f"{k}.outer", f"{i}.inner", f"{j}.inner.outer"]
    apply(st, "reorder", *batch, *outer, *tile, lanes_, depth_)
    apply(st, "unroll", f"{i}.inner")
    apply(st, "unroll", f"{j}.inner.outer")
    par = f"{i}.outer" if extent[-2] > rows else outer[-1]
    if batch:
        par = apply(st, "fuse", *batch, par) if par == outer[0] else batch[0]
    if par is not None:
        apply(st, "parallel", par)
    if intrin is not None and apply(st, "tensorize", lanes_, intrin) is not None:
        return True
    apply(st, "reorder", *tile, depth_, lanes_)
    apply(st, "vectorize", lanes_)
    return False


def schedule_packed_dot(s, D, out, lanes: int, depth: int, intrin=None, block_bytes: int = 0,
                        rows: int = 4, vecs: int = 4) -> None:
    """The graph's packed dot-product kernels' schedule (`G.matmul_integer`'s, a bfloat16
    matmul's): D[i, j] = sum_k a[i, k] * Bp[j / lanes, k / depth, lanes, depth] (Bp a
    stage named "Bp", or an input packed beforehand) in `dot_tile`'s register tiles, B's
    column panels in blocks of `block_bytes` outside the row tiles; `out`, a stage of D's
    size that reads it (a correction, a cast), computed a tile at a time with D's tile
    computed at it (read from L1); one of another size (D padded to whole blocks) after D,
    vectorized."""
    st = s[D]
    *batch, i, j = D.op.axis
    (r,) = D.op.reduce_axis
    m = int(D.shape[-2].value)
    Bp = next(t for t in D.op.input_tensors if len(t.shape) == 4 + len(batch))
    if any(x.op.output is Bp for x in s.stages):
        s[Bp].parallel(Bp.op.axis[0])
    kp = int(Bp.shape[-3].value) * depth
    per_block = panels_per_block(kp, lanes * vecs, Bp.dtype.itemsize, block_bytes)
    if out is D:
        dot_tile(st, lanes, depth, intrin, rows, vecs, per_block)
        return
    *ob, oi, oj = out.op.axis
    if [int(x.value) for x in D.shape] != [int(x.value) for x in out.shape]:
        dot_tile(st, lanes, depth, intrin, rows, vecs, per_block)
        s[out].vectorize(s[out].split(oj, factor=lanes)[1])
        if m > rows or ob:
            s[out].parallel(s[out].fuse(*ob, oi) if ob else oi)
        return
    oio, oii = s[out].split(oi, factor=rows)
    ojo, oji = s[out].split(oj, factor=lanes * vecs)
    if per_block and int(Bp.shape[-4].value) > per_block * vecs:
        ojb, ojo = s[out].split(ojo, factor=per_block)
        s[out].reorder(*ob, ojb, oio, ojo, oii, oji)
    else:
        s[out].reorder(*ob, oio, ojo, oii, oji)
    s[out].vectorize(s[out].split(oji, factor=lanes)[1])
    if ob:
        s[out].parallel(s[out].fuse(*ob) if len(ob) > 1 else ob[0])
    elif m > rows:
        s[out].parallel(oio)
    st.compute_at(s[out], ojo)
    jm, ji = st.split(j, factor=lanes)
    ko, ki = st.split(r, factor=depth)
    st.reorder(*batch, ko, i, jm, ji, ki)
    st.unroll(i)
    st.unroll(jm)
    if intrin is not None:
        st.tensorize(ji, intrin)
    else:
        st.reorder(*batch, ko, i, jm, ki, ji)
        st.vectorize(ji)


def blocked_conv2d(n: int, c: int, h: int, k: int, cols: int, intrin):
    """(schedule, [X, W, Y]) of an int8 3x3 conv, pad 1, X uint8 [n, c, h, h], W int8
    [k, c, 3, 3], Y int32 NCHW (see the module); c a multiple of 4, k of 16."""
    X = placeholder((n, c, h, h), "uint8", name="X")
    W = placeholder((k, c, 3, 3), "int8", name="W")
    Xp = compute((n, c // 4, h + 2, h + 2, 4), lambda b, cb, y, x, ci: if_then_else(
        all_(y >= 1, y <= h, x >= 1, x <= h), X[b, cb * 4 + ci, y - 1, x - 1],
        const(0, "uint8")), name="Xp")
    Wp = compute((k // 16, c // 4, 3, 3, 16, 4), lambda kb, cb, ry, rx, ki, ci:
                 W[kb * 16 + ki, cb * 4 + ci, ry, rx], name="Wp")
    cb, ry, rx, ci = (reduce_axis((0, e), name=nm)
                      for e, nm in ((c // 4, "cb"), (3, "ry"), (3, "rx"), (4, "ci")))
    Yp = compute((n, k // 16, h, h, 16), lambda b, kb, y, x, ki: sum_(
        Xp[b, cb, y + ry, x + rx, ci].astype("int32") * Wp[kb, cb, ry, rx, ki, ci].astype("int32"),
        axis=[cb, ry, rx, ci]), name="Yp")
    Y = compute((n, k, h, h), lambda b, o, y, x: Yp[b, o // 16, y, x, o % 16], name="Y")
    s = create_schedule(Y)
    schedule_blocked_conv(s, Xp, Yp, Y, cols, intrin)
    s[Wp].parallel(Wp.op.axis[0])
    return s, [X, W, Y]


def schedule_blocked_conv(s, Xp, Yp, Y, cols: int, intrin=None) -> None:
    """The channel-blocked conv's schedule (`blocked_conv2d`'s; the graph's
    `G.conv_integer`): `cols` columns x 16 output channels of sums in a local tile at each
    column tile of Yp [n, K/16, OH, OW, 16], its 16 x 4 blocks tensorized onto `intrin`
    (None: the 16 channels vectorized); the padded input Xp and the NCHW output Y in
    parallel over channel blocks and rows."""
    L = s.cache_write(Yp, "local")
    b, kb, y, x, ki = s[Yp].op.axis
    xo, xi = s[Yp].split(x, factor=cols)
    s[Yp].reorder(b, kb, y, xo, xi, ki)
    s[Yp].parallel(s[Yp].fuse(kb, y))
    s[Yp].vectorize(ki)
    s[L].compute_at(s[Yp], xo)
    lb, lkb, ly, lx, lki = s[L].op.axis
    lcb, lry, lrx, lci = s[L].op.reduce_axis
    s[L].unroll(lx)
    if intrin is not None:
        s[L].reorder(lb, lkb, ly, lcb, lry, lrx, lx, lki, lci)
        s[L].tensorize(lki, intrin)
    else:
        s[L].reorder(lb, lkb, ly, lcb, lry, lrx, lx, lci, lki)
        s[L].vectorize(lki)
    a = Xp.op.axis
    s[Xp].parallel(s[Xp].fuse(a[1], a[2]))
    s[Y].parallel(s[Y].fuse(Y.op.axis[1], Y.op.axis[2]))


def pack_conv_operands(s, st, x, w, c: str, wdim: int, lanes: int, depth: int,
                       apply: Apply = apply_or_raise) -> bool:
    """A convolution's operands in a dot-product instruction's layout, for `st`'s reads (the
    auto-scheduler's conv sketch, the graph's bfloat16 conv): the input read `x` (a Load)
    packed along the dimension its reduce axis `c` (the input channels) indexes, by the
    depth (a padded input stage inlined into the packing); the weights `w` (a tensor whose
    dimension `wdim` the output channels index, and another `c`) packed by two `pack`s into
    [K / lanes, C / depth, ..., lanes, depth], the first inlined, the storage reordered. Each
    packing in parallel. False when x's packing is refused (nothing was applied)."""
    from ..ir.expr import Load, Var
    from ..ir.visit import walk

    dc = next(d for d, i in enumerate(x.indices) if isinstance(i, Var) and i.name == c)
    xsrc = x.buffer
    xp = apply(s, "pack", xsrc, dc, depth, [st])
    if xp is None:
        return False
    if not any(xsrc is p for p in s.placeholders):
        apply(s[xsrc], "compute_inline")            # (a padded input: packed directly)
    apply(s[xp], "parallel", s[xp].op.axis[0].var.name)
    wl = next(e for e in walk(st.op.body) if isinstance(e, Load) and e.buffer is w)
    wc = next(d for d, i in enumerate(wl.indices) if isinstance(i, Var) and i.name == c)
    pack_blocks(s, st, w, wdim, wc, lanes, depth, apply=apply)
    return True


def pack_blocks(s, st, t, dl: int, dd: int, lanes: int, depth: int, others_first=False,
                apply: Apply = apply_or_raise):
    """Tensor `t`, read by stage `st`, in an instruction's blocks: dimension `dl` (the
    instruction's lanes) and `dd` (its depth) split into [dl / lanes, dd / depth, ...,
    lanes, depth] (zeros past the edges) by two `pack`s, the first inlined into the second
    and the second's storage reordered so a panel's blocks follow each other (the other
    dimensions after the two outer ones, or before them with `others_first`: a batch), its
    packing in parallel. The packed tensor, or None where the first pack is refused."""
    tp = apply(s, "pack", t, dl, lanes, [st])
    if tp is None:
        return None
    tpp = apply(s, "pack", tp, 1 + (dd if dd < dl else dd - 1), depth, [st])
    if tpp is None:
        return tp
    ax = [a.var.name for a in s[tpp].op.axis]          # [dd_o, dl_o, ..., lanes, depth]
    order = [*ax[2:-2], ax[1], ax[0]] if others_first else [ax[1], ax[0], *ax[2:-2]]
    tpp = apply(s[tpp], "reorder_storage", *order, *ax[-2:]) or tpp
    apply(s[tp], "compute_inline")
    apply(s[tpp], "parallel", s[tpp].op.axis[0].var.name)
    return tpp


def instruction(target, intrin, what: str, otherwise: str):
    """`intrin` where `target` has every CPU feature it needs, else None, and TL_DEBUG=1
    says that `what` runs `otherwise` (a schedule's plain fallback is never silent)."""
    missing = [f for f in intrin.impl.features if not target.has_feature(f)]
    if not missing:
        return intrin
    names = {"avx512vnni": "AVX512-VNNI", "avx512bf16": "AVX512-BF16"}
    debug_print(1, f"{what}: the target has no {', '.join(names.get(f, f) for f in missing)}; "
                   f"{otherwise}")
    return None


def channel_dot_tile(s, sums, out, v: str, j: str, c: str, lanes: int, depth: int, intrin,
                     cv: int, rn: int, apply: Apply = apply_or_raise) -> None:
    """A convolution's register tile on a dot-product instruction (operands packed by
    `pack_conv_operands`): stage `out` (the output, or a stage of its shape that reads the
    sums elementwise) in tiles of `cv` vectors of output channels `v` x `rn` columns `j`,
    written a vector of channels at a time; `sums` (a stage of the same axes whose storage
    is the schedule's: cache_write's local, or an intermediate) laid out with `v` last and
    computed at each tile, its input channels `c` split by the depth and its channels by
    the lanes, the reduction outside the unrolled columns and channel vectors, each lanes x
    depth block tensorized onto `intrin` (None, or where refused: the lanes vectorized);
    the tiles' outer loops fused and parallel."""
    axes = [a.var.name for a in out.op.axis]
    sums = s[apply(sums, "reorder_storage", *[a for a in axes if a != v], v) or
             sums.op.output]
    if apply(out, "tile", v, j, lanes * cv, rn) is None:
        return
    k = axes.index(v)
    pre, mid = axes[:k], axes[k + 1:-1]
    apply(out, "reorder", *pre, f"{v}.outer", *mid, f"{j}.outer", f"{j}.inner", f"{v}.inner")
    apply(out, "vectorize", f"{v}.inner")
    if apply(sums, "compute_at", out, f"{j}.outer") is not None:
        red = [a.var.name for a in sums.op.reduce_axis]
        outer = [a for a in axes if a not in (v, j)]
        # (the tile's channels split by the lanes: the instruction's axis counts from 0)
        if apply(sums, "split", c, factor=depth) is not None and \
                apply(sums, "split", v, factor=lanes) is not None:
            rest = [r for r in red if r != c]
            vo, vi = f"{v}.outer", f"{v}.inner"
            apply(sums, "reorder", *outer, f"{c}.outer", *rest, j, vo, vi, f"{c}.inner")
            apply(sums, "unroll", j)
            apply(sums, "unroll", vo)
            if intrin is None or apply(sums, "tensorize", vi, intrin) is None:
                apply(sums, "reorder", *outer, f"{c}.outer", *rest, j, vo, f"{c}.inner", vi)
                apply(sums, "vectorize", vi)
    f = apply(out, "fuse", *pre, f"{v}.outer", *mid) if pre or mid else f"{v}.outer"
    if f is not None:
        apply(out, "parallel", f)
