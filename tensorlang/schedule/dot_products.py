"""Matmul and conv2d on a dot-product instruction (`tensorize`): the computations with their
operands packed as the instruction reads them, and their schedules. Tutorial 12,
`benchmarks/tensorize.py` and the tensorize tests build their kernels here.

- `packed_matmul`: C = A @ B with B packed as [N/lanes, K/depth, lanes, depth] (zeros past
  the edges: each lanes x depth block one 64-byte run), register tiles of rows x vecs
  vectors of sums, the block below them tensorized (or, without an instruction, the same
  nest with the lanes vectorized: the plain kernel).
- `blocked_conv2d` (its schedule `schedule_blocked_conv`, also the graph's
  `G.conv_integer`'s): an int8 3x3 conv (pad 1) in the channel-blocked form, input
  [n, C/4, H+2, W+2, 4], weights [K/16, C/4, 3, 3, 16, 4], a local tile of `cols` columns x
  16 channels of int32 sums at each column tile (kept in registers), its 16 x 4 blocks on
  VNNI, the output unpacked to NCHW.
"""

from __future__ import annotations

from ..te.intrin import all as all_, if_then_else
from ..te.reduce import sum as sum_
from ..te.tensor import compute, placeholder, reduce_axis
from ..ir.expr import const
from .schedule import create_schedule


def packed_matmul(m: int, n: int, k: int, a_dtype: str, b_dtype: str, acc: str, lanes: int,
                  depth: int, intrin=None, rows: int = 4, vecs: int = 4):
    """(schedule, [A, B, C]) of C[i, j] = sum_k A[i, k] * B[k, j] in `acc` (see the module)."""
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
    i, j = C.op.axis
    io, ii = s[C].split(i, factor=rows)
    jo, ji = s[C].split(j, factor=lanes * vecs)
    jm, ji = s[C].split(ji, factor=lanes)
    ko, ki = s[C].split(r, factor=depth)
    s[C].reorder(io, jo, ko, ii, jm, ji, ki)
    s[C].unroll(ii)
    s[C].unroll(jm)
    s[C].parallel(io)
    s[Bp].parallel(Bp.op.axis[0])
    if intrin is not None:
        s[C].tensorize(ji, intrin)
    else:                        # the plain kernel: the lanes vectorized, k innermost
        s[C].reorder(io, jo, ko, ii, jm, ki, ji)
        s[C].vectorize(ji)
    return s, [A, B, C]


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
