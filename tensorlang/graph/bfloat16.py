"""bfloat16 matmuls and convolutions in the graph: float32 sums on the CPU's dot-product
instruction.

`G.matmul` of two bfloat16 operands sums its products in float32 (as torch's and oneDNN's
bfloat16 matmuls do) and rounds the result to bfloat16 once. Its kernel: A (transposed,
padded to whole blocks where needed) as it is, B packed as AVX512-BF16's `vdpbf16ps` reads
it ([N/16, K/2, 16, 2], zeros past the edges), D = the float32 sums in `dot_products`'
register tiles with the 16 x 2 block below them tensorized, and the rounded output computed
a tile at a time from D's tile in L1 (`dot_products.schedule_packed_dot`). A target without
AVX512-BF16 runs the same nest with its lanes vectorized; `TL_DEBUG=1` says so.

`G.conv2d` of bfloat16 operands (`conv2d_te`): x padded with zeros and packed with its
channels in pairs, the weights packed into [K/16, C/2, kh, kw, 16, 2], tiles of 2 x 16
output channels (1 x 16 below 32) by as many columns as fit the registers, their float32
sums on `vdpbf16ps` (`dot_products.channel_dot_tile`: the auto-scheduler's conv sketch with
these sizes), the output rounded to bfloat16 from each tile.
"""

from __future__ import annotations

import tensorlang as tl

from ..schedule.dot_products import instruction, schedule_packed_dot
from ..te.intrin import all as all_, if_then_else

LANES, DEPTH = 16, 2            # vdpbf16ps: 16 float32 sums of 2 bfloat16 products each
ROWS, VECS = 4, 4               # a register tile: 4 rows x 4 vectors of sums
KIND = "matmul_bf16"
CONV_KIND = "conv_bf16"


def matmul_te(A, B, sa, sb, out: tuple, ta: bool, tb: bool):
    """(the output tensor, KIND) of a bfloat16 matmul (see the module); `sa`, `sb` the
    operands' shapes (batch dimensions broadcast as numpy's), `out` the result's."""
    from .shapes import read_batch as _read_batch

    nb_ = len(out) - 2
    m, n = out[-2:]
    k = sa[-2] if ta else sa[-1]
    nb, kb = -(-n // LANES), -(-k // DEPTH)
    aligned = m % ROWS == 0 and n % LANES == 0 and k % DEPTH == 0
    mp, np_, kp = (m, n, k) if aligned else (-(-m // ROWS) * ROWS, nb * LANES, kb * DEPTH)
    batch = tuple(out[:-2])
    zero = tl.const(0, "bfloat16")

    def a_at(bi, i, r):
        return A[_read_batch(sa, bi, nb_) + ((r, i) if ta else (i, r))]

    def b_at(bi, r, j):
        return B[_read_batch(sb, bi, nb_) + ((j, r) if tb else (r, j))]
    if ta or not aligned:       # A's rows along k, padded with zeros to whole blocks
        Ap = tl.compute(batch + (mp, kp), lambda *x: if_then_else(
            all_(x[-2] < m, x[-1] < k), a_at(x[:-2], x[-2], x[-1]), zero), name="Ap")

        def a_read(bi, i, r):
            return Ap[bi + (i, r)]
    else:
        a_read = a_at
    Bp = tl.compute(batch + (nb, kb, LANES, DEPTH), lambda *x: if_then_else(
        all_(x[-3] * DEPTH + x[-1] < k, x[-4] * LANES + x[-2] < n),
        b_at(x[:-4], x[-3] * DEPTH + x[-1], x[-4] * LANES + x[-2]), zero), name="Bp")
    r = tl.reduce_axis((0, kp), name="k")
    D = tl.compute(batch + (mp, np_), lambda *x: tl.sum(
        a_read(x[:-2], x[-2], r).astype("float32") *
        Bp[x[:-2] + (x[-1] // LANES, r // DEPTH, x[-1] % LANES, r % DEPTH)].astype("float32"),
        axis=r), name="D")
    return tl.compute(out, lambda *x: D[x].astype("bfloat16"), name="out"), KIND


def schedule_matmul_bf16(s: tl.Schedule, out: tl.Tensor, target: tl.Target) -> None:
    """The kernel's schedule (see the module): D on `vdpbf16ps` where `target` has
    AVX512-BF16, the rounded output a tile at a time; A's and B's copies in parallel."""
    stages = {st.op.name: st.op.output for st in s.stages}
    intrin = _intrin(target, f"bfloat16 matmul {tuple(int(x.value) for x in out.shape)}")
    if "Ap" in stages:
        s[stages["Ap"]].parallel(stages["Ap"].op.axis[0])
    schedule_packed_dot(s, stages["D"], out, LANES, DEPTH, intrin, target.cache_bytes[1] // 2,
                        ROWS, VECS)


def _intrin(target: tl.Target, what: str):
    from ..intrin import x86

    return instruction(target, x86.bf16_dot_f32, what,
                       "the packed nest runs with its lanes vectorized")


def conv2d_te(ts, shapes, out: tuple, stride: int, padding: int):
    """(the output tensor, CONV_KIND) of `G.conv2d` of bfloat16 x (NCHW) and w (OIHW): the
    float32 sums Y of the padded input's products, rounded to bfloat16 (see the module)."""
    x, w = ts
    n, c, h, wd = shapes[0]
    k, _, kh, kw = shapes[1]
    zero = tl.const(0, "bfloat16")
    Xpad = tl.compute((n, c, h + 2 * padding, wd + 2 * padding), lambda b, ch, y, xx:
                      if_then_else(all_(y >= padding, y < padding + h, xx >= padding,
                                        xx < padding + wd),
                                   x[b, ch, y - padding, xx - padding], zero), name="Xpad")
    rc = tl.reduce_axis((0, c), name="rc")
    ry, rx = tl.reduce_axis((0, kh), name="ry"), tl.reduce_axis((0, kw), name="rx")
    Y = tl.compute(out, lambda b, o, y, xx: tl.sum(
        Xpad[b, rc, y * stride + ry, xx * stride + rx].astype("float32") *
        w[o, rc, ry, rx].astype("float32"), axis=[rc, ry, rx]), name="Y")
    return tl.compute(out, lambda b, o, y, xx: Y[b, o, y, xx].astype("bfloat16"),
                      name="out"), CONV_KIND


def conv_tile(k: int, ow: int, registers: int) -> tuple[int, int]:
    """(vectors of 16 output channels, output columns) of the bfloat16 conv's tile: two
    vectors of channels where there are 32 (each column's broadcast serves both), then the
    most columns that divide the width and fit the registers with them."""
    from ..schedule.recipes import tile_columns

    cv = 2 if k >= 2 * LANES else 1
    fits = [r for r in tile_columns(ow, registers) if cv * r + cv + 2 <= registers]
    return cv, fits[-1] if fits else max(1, min(ow, (registers - 2 - cv) // cv, 8))


def schedule_conv_bf16(s: tl.Schedule, out: tl.Tensor, target: tl.Target) -> None:
    """The bfloat16 conv's schedule: its operands packed as `vdpbf16ps` reads them and
    tiles of `conv_tile`'s size on it, where `target` has AVX512-BF16
    (`dot_products.pack_conv_operands`, `channel_dot_tile`: the auto-scheduler's conv
    sketch with these sizes); the rounded output written from each tile."""
    from ..ir.expr import Load
    from ..ir.visit import walk
    from ..schedule.dot_products import channel_dot_tile, pack_conv_operands

    intrin = _intrin(target, f"bfloat16 conv2d {tuple(int(v.value) for v in out.shape)}")
    stages = {st.op.name: st for st in s.stages}
    Y = stages["Y"]
    x = next(e for e in walk(Y.op.body) if isinstance(e, Load) and e.buffer.name == "Xpad")
    w = next(e.buffer for e in walk(Y.op.body) if isinstance(e, Load) and e.buffer is not x.buffer)
    pack_conv_operands(s, Y, x, w, "rc", 0, LANES, DEPTH)
    k, ow = int(out.shape[1].value), int(out.shape[3].value)
    cv, rn = conv_tile(k, ow, target.vector_registers)
    channel_dot_tile(s, s[Y.op.output], s[out], "o", "xx", "rc", LANES, DEPTH, intrin, cv, rn)

