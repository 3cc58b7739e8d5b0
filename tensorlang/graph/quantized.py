"""Quantized integers in the graph: `quantize_linear`, `dequantize_linear` (ONNX's
QuantizeLinear and DequantizeLinear), `round` (halves to even), `matmul_integer` (ONNX's
MatMulInteger: uint8 or int8 operands, int32 sums, zero points) and `conv_integer` (ONNX's
ConvInteger, channel-blocked on the same instruction: see its docstring).

`matmul_integer` runs on the CPU's dot-product instruction where the target has it: AVX512
VNNI's `vpdpbusd` multiplies unsigned bytes by signed bytes, so the operands are brought to
that form first, exactly (a signed A is A + 128, an unsigned B is B - 128), and the zero
points and the shifts come back as a correction of the sums:

    sum_k (A - za)(B - zb) = A'.B' - zb' rowsum(A') - za' colsum(B') + K za' zb'

with A' = A + sa, B' = B - sb, za' = za + sa, zb' = zb - sb. The kernel: B' packed as the
instruction reads it (`schedule.dot_products`), register tiles of 4 rows x 4 vectors of sums
with the 16 x 4 block below them tensorized. A target without the instruction runs the same
packed nest with the lanes vectorized (TL_DEBUG=1 says so)."""

from __future__ import annotations

import numpy as np

import tensorlang as tl

from . import api
from .model_ops import _no_grad, _no_jvp, _retyped, cast
from .node import GraphError, Node
from .ops import _elementwise
from .registry import register_op
from ..config import debug_print
from ..schedule.dot_products import instruction, schedule_blocked_conv, schedule_packed_dot
from ..te.intrin import all as all_, if_then_else

LANES, DEPTH = 16, 4            # vpdpbusd: 16 int32 sums of 4 byte products each
ROWS, VECS = 4, 4               # a register tile: 4 rows x 4 vectors of sums
_QTYPES = ("uint8", "int8")


# ------------------------------------------------------------------------ round
def round(x):  # noqa: A001
    """Round to the nearest integer, halves to even (numpy's `round`)."""
    return api.make("round", (x,))


register_op("round", np.round, lambda s: tuple(s),
            lambda g, n: [api.zeros_like(g)], _no_jvp("round"), _elementwise(tl.round))


# ------------------------------------------------------------- quantize, dequantize
def _range(dtype: str) -> tuple[int, int]:
    info = np.iinfo(dtype)
    return int(info.min), int(info.max)


def quantize_linear(x, scale, zero_point=0, dtype: str = "uint8"):
    """ONNX's QuantizeLinear: `saturate(round(x / scale) + zero_point)` in `dtype` (uint8 or
    int8), halves rounded to even. `scale` and `zero_point` broadcast against `x` (a
    per-channel scale is shaped to its axis by the caller)."""
    dtype = str(np.dtype(dtype))
    if dtype not in _QTYPES:
        raise GraphError(f"quantize_linear: dtype must be uint8 or int8, got {dtype}")
    lo, hi = _range(dtype)
    q = round(api.div(x, scale)) + zero_point
    return cast(api.make("maximum", (api.make("minimum", (q, float(hi))), float(lo))), dtype)


def dequantize_linear(q, scale, zero_point=0):
    """ONNX's DequantizeLinear: `(q - zero_point) * scale` in float32 (the difference is
    exact: taken in int32)."""
    d = cast(q, "int32")
    if not (isinstance(zero_point, (int, np.integer)) and int(zero_point) == 0):
        d = d - cast(api._as_node(zero_point, None) if not isinstance(zero_point, Node)
                     else zero_point, "int32")
    return cast(d, "float32") * scale


# ---------------------------------------------------------------- matmul_integer
def _zero(z) -> bool:
    """Whether a zero point is absent or known to be all zeros."""
    if z is None:
        return True
    if isinstance(z, Node):
        return z.op == "constant" and not np.any(z.attr("value").array)
    return not np.any(np.asarray(z))


def matmul_integer(a, b, a_zero_point=None, b_zero_point=None):
    """ONNX's MatMulInteger: `sum_k (a[..., i, k] - a_zero_point) * (b[k, j] -
    b_zero_point)` in int32. `a` is uint8 or int8 of shape (..., M, K), `b` uint8 or int8 of
    (K, N); `a_zero_point` a scalar or one per row of A (M,), `b_zero_point` a scalar or one
    per column of B (N,), each of its operand's dtype. The int32 sums wrap, as the
    instruction's do."""
    a, b = api._as_node(a, None), api._as_node(b, None)
    for name, x in (("a", a), ("b", b)):
        if x.dtype not in _QTYPES:
            raise GraphError(f"matmul_integer: {name} must be uint8 or int8, got {x.dtype}")
    if b.shape is not None and len(b.shape) != 2:
        raise NotImplementedError(f"matmul_integer: b must be 2-D (K, N), got shape {b.shape} "
                                  "(a batched b is not supported)")
    if a.shape is None or b.shape is None:
        raise GraphError("matmul_integer: the operands' shapes must be known")
    if len(a.shape) < 2 or a.shape[-1] != b.shape[0]:
        raise GraphError(f"matmul_integer: a (..., M, K) and b (K, N) do not match: {a.shape} "
                         f"and {b.shape}")
    m, n = a.shape[-2], b.shape[1]
    zs, flags = [], {}
    for name, z, dt, size in (("a_zero_point", a_zero_point, a.dtype, m),
                              ("b_zero_point", b_zero_point, b.dtype, n)):
        flags[name] = False
        if z is None:
            continue
        if not isinstance(z, Node):
            arr = np.asarray(z)
            lo, hi = _range(dt)
            if arr.dtype.kind not in "iu" or arr.size and (arr.min() < lo or arr.max() > hi):
                raise GraphError(f"matmul_integer: {name} must hold {dt} values, got "
                                 f"{arr.dtype} {arr.tolist() if arr.size < 8 else ''}".rstrip())
            z = api.constant(arr.astype(dt))
        if z.dtype != dt:
            raise GraphError(f"matmul_integer: {name} must be {dt} (its operand's dtype), got "
                             f"{z.dtype}")
        if z.shape is None or tuple(z.shape) not in ((), (1,), (size,)):
            raise GraphError(f"matmul_integer: {name} must be a scalar or of shape ({size},), "
                             f"got {z.shape}")
        if _zero(z):
            continue
        flags[name] = True
        zs.append(api.reshape(z, ()) if tuple(z.shape) == (1,) else z)
    lead = tuple(a.shape[:-2])
    a2 = api.reshape(a, (int(np.prod(lead, dtype=np.int64)) * m, a.shape[-1])) if lead else a
    if lead and flags["a_zero_point"] and zs[0].shape == (m,):
        raise NotImplementedError("matmul_integer: a per-row a_zero_point with a batched a")
    ins, packed = (a2, b), None
    if b.op == "constant":
        # constant weights (a model's): packed here, once, with their column sums where the
        # correction needs them, instead of in every run
        k = b.shape[0]
        bv = b.attr("value").array
        packed = (k, n, 128 if b.dtype == "uint8" else 0)
        ins = (a2, api.constant(pack_b(bv), name=f"{b.name}_packed"))
        if flags["a_zero_point"] or a.dtype == "int8":
            colb = (bv.astype(np.int64) - packed[2]).sum(axis=0).astype(np.int32)
            ins += (api.constant(colb, name=f"{b.name}_colsums"),)
    node = api.make("matmul_integer", (*ins, *zs), a_zp=flags["a_zero_point"],
                    b_zp=flags["b_zero_point"], packed=packed)
    node = _retyped(node, "int32")
    return api.reshape(node, lead + (m, n)) if lead else node


def pack_b(b: np.ndarray) -> np.ndarray:
    """B (K, N) as the instruction reads it: B' = B - 128 for a uint8 B, as int8, in
    [N/16, K/4, 16, 4] blocks, zeros past the edges (the layout of the kernel's Bp stage)."""
    k, n = b.shape
    bs = (b.astype(np.int16) - (128 if b.dtype == np.uint8 else 0)).astype(np.int8)
    nb, kb = -(-n // LANES), -(-k // DEPTH)
    full = np.zeros((kb * DEPTH, nb * LANES), np.int8)
    full[:k, :n] = bs
    return np.ascontiguousarray(full.reshape(kb, DEPTH, nb, LANES).transpose(2, 0, 3, 1))


def _unpacked(bp: np.ndarray, packed) -> np.ndarray:
    k, n, shift = packed
    nb, kb = bp.shape[:2]
    full = bp.transpose(1, 3, 0, 2).reshape(kb * DEPTH, nb * LANES)[:k, :n]
    return full.astype(np.int64) + shift


def _mmi_ref(a, b, *zs, a_zp, b_zp, packed=None):
    zs = list(zs)
    if packed is not None:
        b = _unpacked(b, packed)
        if a_zp or a.dtype == np.int8:
            zs.pop(0)                   # the column sums
    za = zs.pop(0) if a_zp else 0
    zb = zs.pop(0) if b_zp else 0
    za = np.asarray(za, np.int64)
    za = za.reshape(-1, 1) if za.ndim else za
    d = (a.astype(np.int64) - za) @ (b.astype(np.int64) - np.asarray(zb, np.int64))
    return d.astype(np.int32)           # modulo 2**32, as the int32 sums wrap


def _mmi_shape(a, b, *zs, a_zp, b_zp, packed=None):
    return (a[0], b[1] if packed is None else packed[1])


def _mmi_te(ts, shapes, out, a_zp, b_zp, packed=None):
    """The kernel's stages (see the module): Ap (A' padded with zeros to whole 4 x 4
    blocks of rows and k, where A is signed or does not fill them), Bp (B' packed [N/16,
    K/4, 16, 4], zeros past the edges), D (the sums of products; over the padded sizes
    when A was padded or N is not a multiple of 16, so that every block is a whole use of
    the instruction), rowa / colb (the operands' sums, where the correction needs them)
    and out (D corrected, or its first m x n)."""
    A, B, *zs = ts
    colb = zs.pop(0) if packed is not None and (a_zp or A.dtype.name == "int8") else None
    za = zs.pop(0) if a_zp else None
    zb = zs.pop(0) if b_zp else None
    sa = 128 if A.dtype.name == "int8" else 0          # A' = A + sa: unsigned
    if packed is None:
        (m, k), n = shapes[0], shapes[1][1]
        sb = 128 if B.dtype.name == "uint8" else 0     # B' = B - sb: signed
    else:
        m, (k, n, sb) = shapes[0][0], packed
    nb, kb = -(-n // LANES), -(-k // DEPTH)
    aligned = m % ROWS == 0 and n % LANES == 0 and k % DEPTH == 0
    mp, np_, kp = (m, n, k) if aligned else (-(-m // ROWS) * ROWS, nb * LANES, kb * DEPTH)
    if sa or not aligned:
        a0 = A

        def a_unsigned(i, r):
            v = a0[i, r]
            return (v.astype("int32") + sa).astype("uint8") if sa else v
        A = tl.compute((mp, kp), lambda i, r: if_then_else(
            all_(i < m, r < k), a_unsigned(i, r), tl.const(0, "uint8")), name="Ap")

    def b_signed(r, j):
        v = B[r, j]
        return (v.astype("int32") - sb).astype("int8") if sb else v
    Bp = B if packed is not None else tl.compute(
        (nb, kb, LANES, DEPTH), lambda jo, ko, ji, ki: if_then_else(
            all_(ko * DEPTH + ki < k, jo * LANES + ji < n),
            b_signed(ko * DEPTH + ki, jo * LANES + ji), tl.const(0, "int8")), name="Bp")
    r = tl.reduce_axis((0, kp), name="k")
    D = tl.compute((mp, np_), lambda i, j: tl.sum(
        A[i, r].astype("int32") * Bp[j // LANES, r // DEPTH, j % LANES, r % DEPTH].astype("int32"),
        axis=r), name="D")

    def zero_point(z, shift, idx):
        if z is None:
            return tl.const(shift, "int32") if shift else None
        v = (z[idx] if len(z.shape) else z[()]).astype("int32")
        return v + shift if shift else v
    zae = lambda i: zero_point(za, sa, i)            # noqa: E731 (za' per row)
    zbe = lambda j: zero_point(zb, -sb, j)           # noqa: E731 (zb' per column)
    if zae(0) is None and zbe(0) is None and aligned:
        return D, "matmul_integer"
    terms = []
    if zbe(0) is not None:
        ra = tl.reduce_axis((0, kp), name="ka")
        rowa = tl.compute((m,), lambda i: tl.sum(A[i, ra].astype("int32"), axis=ra), name="rowa")
        terms.append(lambda i, j: zbe(j) * rowa[i])
    if zae(0) is not None:
        if colb is None:
            rb = tl.reduce_axis((0, k), name="kb")
            colb = tl.compute((n,), lambda j: tl.sum(b_signed(rb, j).astype("int32"),
                                                     axis=rb), name="colb")
        terms.append(lambda i, j: zae(i) * colb[j])

    def body(i, j):
        v = D[i, j]
        for t in terms:
            v = v - t(i, j)
        if zae(0) is not None and zbe(0) is not None:
            v = v + zae(i) * zbe(j) * k
        return v
    return tl.compute((m, n), body, name="out"), "matmul_integer"


register_op("matmul_integer", _mmi_ref, _mmi_shape, _no_grad("matmul_integer"),
            _no_jvp("matmul_integer"), _mmi_te)


def schedule_matmul_integer(s: tl.Schedule, out: tl.Tensor, target: tl.Target) -> None:
    """The kernel's schedule (see the module): D on `vpdpbusd` where `target` has
    AVX512-VNNI (`dot_products.schedule_packed_dot`), the operands' sums vectorized."""
    from ..intrin import x86

    stages = {st.op.name: st.op.output for st in s.stages}
    intrin = instruction(target, x86.vnni_u8s8_i32,
                         f"matmul_integer {tuple(int(x.value) for x in out.shape)}",
                         "the packed nest runs with its lanes vectorized")
    schedule_packed_dot(s, stages["D"], out, LANES, DEPTH, intrin, target.cache_bytes[1] // 2,
                        ROWS, VECS)
    for name in ("Ap", "rowa"):
        if name in stages:
            s[stages[name]].parallel(stages[name].op.axis[0])
    if "colb" in stages:        # B's rows one after the other, a vector of columns each
        cb = stages["colb"]
        cjo, cji = s[cb].split(cb.op.axis[0], factor=LANES * VECS)
        cv, cl = s[cb].split(cji, factor=LANES)
        s[cb].reorder(cjo, cb.op.reduce_axis[0], cv, cl)
        s[cb].vectorize(cl)
        s[cb].parallel(cjo)


# ---------------------------------------------------------------- conv_integer
CONV_COLS = range(14, 6, -1)    # output columns of a register tile: 14 .. 7 (int32 x 16)


def _conv_cols(ow: int) -> int:
    """The tile's columns: the width that wastes the fewest padded columns, the widest of
    those (14 for ResNet's 56, 28, 14; 7 for 7)."""
    return min(CONV_COLS, key=lambda c: (-(-ow // c) * c - ow, -c))


def pack_conv_weights(w: np.ndarray) -> np.ndarray:
    """OIHW int8 weights as [K/16, C/4, kh, kw, 16, 4] (zeros past K and C): the blocks
    `vpdpbusd` reads, 16 output channels of 4 input channels each."""
    k, c, kh, kw = w.shape
    kp, cp = -(-k // LANES) * LANES, -(-c // DEPTH) * DEPTH
    full = np.zeros((kp, cp, kh, kw), np.int8)
    full[:k, :c] = w
    return np.ascontiguousarray(full.reshape(kp // LANES, LANES, cp // DEPTH, DEPTH, kh, kw)
                                .transpose(0, 2, 4, 5, 1, 3))


def conv_integer(x, w, x_zero_point=None, w_zero_point=None, strides=(1, 1),
                 pads=(0, 0, 0, 0), dilations=(1, 1), groups: int = 1):
    """ONNX's ConvInteger: the 2-D convolution of `x - x_zero_point` (NCHW, uint8 or int8)
    with `w - w_zero_point` (OIHW, int8 or uint8) in int32, `pads` = (top, left, bottom,
    right); the padding is zero after the zero point is taken off.

    On AVX512-VNNI (the common case of a quantized CNN: no dilation, one group,
    int8 weights known when the graph is built, no weight zero point) it runs channel
    blocked on `vpdpbusd`: x as [n, C/4, H', W', 4] padded with its zero point, the weights
    packed once, register tiles of up to 14 columns x 16 output channels. Other cases
    run as the int32 convolution of the centred operands (TL_DEBUG=1 says which)."""
    from .model_ops import conv as general_conv

    x, w = api._as_node(x, None), api._as_node(w, None)
    for name, v in (("x", x), ("w", w)):
        if v.dtype not in _QTYPES:
            raise GraphError(f"conv_integer: {name} must be uint8 or int8, got {v.dtype}")
        if v.shape is None or len(v.shape) != 4:
            raise GraphError(f"conv_integer: {name} must be 4-D (NCHW / OIHW), got {v.shape}")
    strides, dilations = tuple(int(s) for s in strides), tuple(int(d) for d in dilations)
    pads, groups = tuple(int(p) for p in pads), int(groups)
    fast = (dilations == (1, 1) and groups == 1 and w.op == "constant"
            and w.dtype == "int8" and _zero(w_zero_point) and x.shape[1] == w.shape[1]
            and (x_zero_point is None or not isinstance(x_zero_point, Node)
                 or x_zero_point.op == "constant"))
    if not fast:
        debug_print(1, f"conv_integer {x.shape} * {w.shape}: the int32 convolution of the "
                       "centred operands (the VNNI kernel takes no dilation, one group, "
                       "constant int8 weights and no weight zero point)")

        def centred(v, z, per_channel):
            c = cast(v, "int32")
            if _zero(z):
                return c
            z = z if isinstance(z, Node) else api.constant(np.asarray(z, np.int32))
            z = cast(z, "int32")
            if per_channel and z.shape is not None and len(z.shape) == 1 and z.shape[0] > 1:
                z = api.reshape(z, (-1, 1, 1, 1))
            elif z.shape:
                z = api.reshape(z, ())
            return c - z
        return general_conv(centred(x, x_zero_point, False), centred(w, w_zero_point, True),
                            strides, pads, dilations, groups)
    zx = 0 if x_zero_point is None else int(np.asarray(
        x_zero_point.attr("value").array if isinstance(x_zero_point, Node)
        else x_zero_point).reshape(-1)[0])
    wv = w.attr("value").array
    shift = 128 if x.dtype == "int8" else 0             # x' = x + 128: unsigned
    zxe = zx + shift
    wsum = wv.astype(np.int64).sum(axis=(1, 2, 3)).astype(np.int32) * np.int32(zxe)
    ins = (x, api.constant(pack_conv_weights(wv), name=f"{w.name}_packed"))
    if zxe:
        ins += (api.constant(wsum, name=f"{w.name}_zero_point_sums"),)
    node = api.make("conv_integer", ins, kernel=tuple(wv.shape), pads=pads, strides=strides,
                    zero_point=zxe, shift=shift)
    return _retyped(node, "int32")


def _ci_geometry(x, kernel, pads, strides=(1, 1)):
    n, c, h, wd = x
    k, _, kh, kw = kernel
    oh = (h + pads[0] + pads[2] - kh) // strides[0] + 1
    ow = (wd + pads[1] + pads[3] - kw) // strides[1] + 1
    if h + pads[0] + pads[2] < kh or wd + pads[1] + pads[3] < kw:
        raise ValueError(f"a {kh}x{kw} window does not fit in {h}x{wd} padded by {pads}")
    return n, k, oh, ow


def _ci_ref(x, wp, *rest, kernel, pads, zero_point, shift, strides=(1, 1)):
    k, c, kh, kw = kernel
    w = wp.transpose(0, 4, 1, 5, 2, 3).reshape(wp.shape[0] * LANES, wp.shape[1] * DEPTH,
                                               kh, kw)[:k, :c].astype(np.int64)
    xs = x.astype(np.int64) + shift - zero_point
    xp = np.pad(xs, ((0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])))
    win = np.lib.stride_tricks.sliding_window_view(xp, (kh, kw), axis=(2, 3))
    win = win[:, :, ::strides[0], ::strides[1]]
    return np.einsum("ncijpq,ocpq->noij", win, w).astype(np.int32)


def _ci_shape(x, wp, *rest, kernel, pads, zero_point, shift, strides=(1, 1)):
    return _ci_geometry(x, kernel, pads, strides)


def _ci_te(ts, shapes, out, kernel, pads, zero_point, shift, strides=(1, 1)):
    """Xp (x' padded with its zero point, channels in blocks of 4, columns past the output's
    to a whole number of tiles), Yp (the sums, [n, K/16, OH, OW', 16]) and out (NCHW, the
    zero point's sums taken off)."""
    x, wp = ts[0], ts[1]
    wsum = ts[2] if zero_point else None
    n, c, h, wd = shapes[0]
    k, _, kh, kw = kernel
    _, _, oh, ow = _ci_geometry(shapes[0], kernel, pads, strides)
    sh, sw = strides
    cols = _conv_cols(ow)
    owp = -(-ow // cols) * cols
    cb_, kb_ = int(shapes[1][1]), int(shapes[1][0])

    def x_unsigned(b, ch, y, xx):
        v = x[b, ch, y, xx]
        return (v.astype("int32") + shift).astype("uint8") if shift else v
    Xp = tl.compute((n, cb_, (oh - 1) * sh + kh, (owp - 1) * sw + kw, DEPTH),
                    lambda b, cb, y, xx, ci:
                    if_then_else(
                        all_(cb * DEPTH + ci < c, y >= pads[0], y < pads[0] + h,
                             xx >= pads[1], xx < pads[1] + wd),
                        x_unsigned(b, cb * DEPTH + ci, y - pads[0], xx - pads[1]),
                        if_then_else(cb * DEPTH + ci < c, tl.const(zero_point, "uint8"),
                                     tl.const(0, "uint8"))), name="Xp")
    rc = [tl.reduce_axis((0, e), name=nm)
          for e, nm in ((cb_, "cb"), (kh, "ry"), (kw, "rx"), (DEPTH, "ci"))]
    Yp = tl.compute((n, kb_, oh, owp, LANES), lambda b, kb, y, xx, ki: tl.sum(
        Xp[b, rc[0], y * sh + rc[1], xx * sw + rc[2], rc[3]].astype("int32")
        * wp[kb, rc[0], rc[1], rc[2], ki, rc[3]].astype("int32"), axis=rc), name="Yp")

    def body(b, o, y, xx):
        v = Yp[b, o // LANES, y, xx, o % LANES]
        return v - wsum[o] if wsum is not None else v
    return tl.compute((n, k, oh, ow), body, name="out"), "conv_integer"


register_op("conv_integer", _ci_ref, _ci_shape, _no_grad("conv_integer"),
            _no_jvp("conv_integer"), _ci_te)


def schedule_conv_integer(s: tl.Schedule, out: tl.Tensor, target: tl.Target) -> None:
    """The channel-blocked conv's schedule: each row of tiles (cols columns x 16 output
    channels of int32 sums) in a local tile kept in registers, its 16 x 4 blocks on
    `vpdpbusd` where `target` has AVX512-VNNI (else the 16 channels vectorized); the rows
    of each block of channels in parallel."""
    from ..intrin import x86

    stages = {st.op.name: st.op.output for st in s.stages}
    intrin = instruction(target, x86.vnni_u8s8_i32,
                         f"conv_integer {tuple(int(v.value) for v in out.shape)}",
                         "the channel-blocked nest runs with its 16 channels vectorized")
    schedule_blocked_conv(s, stages["Xp"], stages["Yp"], out,
                          _conv_cols(int(out.shape[3].value)), intrin)
