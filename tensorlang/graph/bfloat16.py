"""bfloat16 matmuls and convolutions in the graph: float32 sums on the CPU's dot-product
instruction.

`G.matmul` of two bfloat16 operands sums its products in float32 (as torch's and oneDNN's
bfloat16 matmuls do) and rounds the result to bfloat16 once. Its kernel: A (transposed,
padded to whole blocks where needed) as it is, B packed as AVX512-BF16's `vdpbf16ps` reads
it ([N/16, K/2, 16, 2], zeros past the edges), D = the float32 sums in `dot_products`'
register tiles with the 16 x 2 block below them tensorized, and the rounded output computed
a tile at a time from D's tile in L1 (`dot_products.schedule_packed_dot`). A target without
AVX512-BF16 runs the same nest with its lanes vectorized; `TL_DEBUG=1` says so.

`G.conv2d` of bfloat16 operands is channel-blocked the same way (`conv2d_te`): x padded
with zeros, channels in pairs ([n, C/2, H', W', 2]), the weights packed into [K/16, C/2, kh,
kw, 16, 2], register tiles of 7 to 14 output columns x 16 channels of float32 sums with
their 16 x 2 blocks on `vdpbf16ps` (`dot_products.schedule_blocked_conv`, the int8 conv's
schedule), the output rounded to bfloat16 in NCHW.
"""

from __future__ import annotations

import tensorlang as tl

from ..config import debug_print
from ..schedule.dot_products import schedule_blocked_conv, schedule_packed_dot
from ..te.intrin import all as all_, if_then_else

LANES, DEPTH = 16, 2            # vdpbf16ps: 16 float32 sums of 2 bfloat16 products each
ROWS, VECS = 4, 4               # a register tile: 4 rows x 4 vectors of sums
KIND = "matmul_bf16"
CONV_KIND = "conv_bf16"


def matmul_te(A, B, sa, sb, out: tuple, ta: bool, tb: bool):
    """(the output tensor, KIND) of a bfloat16 matmul (see the module); `sa`, `sb` the
    operands' shapes (batch dimensions broadcast as numpy's), `out` the result's."""
    from .ops import _read_batch

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
    if target.has_feature("avx512bf16"):
        from ..intrin import x86
        return x86.bf16_dot_f32
    debug_print(1, f"{what}: the target has no AVX512-BF16; the packed nest runs with its "
                   "lanes vectorized")
    return None


def conv2d_te(ts, shapes, out: tuple, stride: int, padding: int):
    """(the output tensor, CONV_KIND) of `G.conv2d` of bfloat16 x (NCHW) and w (OIHW): see
    the module."""
    from .quantized import _conv_cols

    x, w = ts
    n, c, h, wd = shapes[0]
    k, _, kh, kw = shapes[1]
    oh, ow = out[2:]
    cols = _conv_cols(ow)
    owp = -(-ow // cols) * cols
    cb_, kb_ = -(-c // DEPTH), -(-k // LANES)
    zero = tl.const(0, "bfloat16")
    Xp = tl.compute((n, cb_, (oh - 1) * stride + kh, (owp - 1) * stride + kw, DEPTH),
                    lambda b, cb, y, xx, ci: if_then_else(
                        all_(cb * DEPTH + ci < c, y >= padding, y < padding + h,
                             xx >= padding, xx < padding + wd),
                        x[b, cb * DEPTH + ci, y - padding, xx - padding], zero), name="Xp")
    Wp = tl.compute((kb_, cb_, kh, kw, LANES, DEPTH), lambda kb, cb, ry, rx, ki, ci:
                    if_then_else(all_(kb * LANES + ki < k, cb * DEPTH + ci < c),
                                 w[kb * LANES + ki, cb * DEPTH + ci, ry, rx], zero), name="Wp")
    rc = [tl.reduce_axis((0, e), name=nm)
          for e, nm in ((cb_, "cb"), (kh, "ry"), (kw, "rx"), (DEPTH, "ci"))]
    Yp = tl.compute((n, kb_, oh, owp, LANES), lambda b, kb, y, xx, ki: tl.sum(
        Xp[b, rc[0], y * stride + rc[1], xx * stride + rc[2], rc[3]].astype("float32")
        * Wp[kb, rc[0], rc[1], rc[2], ki, rc[3]].astype("float32"), axis=rc), name="Yp")
    return tl.compute(out, lambda b, o, y, xx: Yp[b, o // LANES, y, xx, o % LANES].astype(
        "bfloat16"), name="out"), CONV_KIND


def schedule_conv_bf16(s: tl.Schedule, out: tl.Tensor, target: tl.Target) -> None:
    """The bfloat16 conv's schedule: the int8 conv's (`schedule_blocked_conv`) on
    `vdpbf16ps` where `target` has AVX512-BF16; the weights' packing in parallel."""
    from .quantized import _conv_cols

    stages = {st.op.name: st.op.output for st in s.stages}
    intrin = _intrin(target, f"bfloat16 conv2d {tuple(int(v.value) for v in out.shape)}")
    s[stages["Wp"]].parallel(stages["Wp"].op.axis[0])
    schedule_blocked_conv(s, stages["Xp"], stages["Yp"], out,
                          _conv_cols(int(out.shape[3].value)), intrin)
