"""The converters of ONNX's quantized operators (QuantizeLinear, DequantizeLinear,
DynamicQuantizeLinear, MatMulInteger, QLinearMatMul, ConvInteger, QLinearConv) and Round,
registered in `converters.CONVERTERS` like the others: uint8 and int8 data, the integer
products on `G.matmul_integer` / `G.conv_integer`, rescaling in float64 as ONNX's
reference does."""

from __future__ import annotations

import numpy as np

from .. import graph as G
from ..config import debug_print
from ..graph import model_ops as M
from ..graph.node import Node
from .converters import _axis, _conv_params, _node, _shape, converter
from .dtypes import ONNXImportError


@converter("Round")
def _round(ctx, n, ins, a):
    return [G.round(_node(ins[0]))]


_QUANT = {"uint8", "int8"}


def _per_axis(v, nd: int, axis, what: str):
    """A scale or zero point shaped to broadcast along `axis` of an nd-dimensional tensor:
    a scalar stays; a 1-D one (one per slice of `axis`) gets ones around it."""
    shape = _shape(v, what)
    if len(shape) == 0 or shape == (1,) and nd != 1:
        return G.reshape(v, ()) if isinstance(v, Node) else np.asarray(v).reshape(())
    if len(shape) != 1:
        raise NotImplementedError(f"{what} of shape {shape}: blocked quantization is not "
                                  "supported (a scalar or one per slice of the axis)")
    axis = _axis(axis, nd)
    new = [1] * nd
    new[axis] = shape[0]
    return G.reshape(v, tuple(new)) if isinstance(v, Node) else np.asarray(v).reshape(new)


def _blocked(a: dict, what: str) -> None:
    if int(a.get("block_size", 0)):
        raise NotImplementedError(f"{what}: block_size (blocked quantization) is not supported")


def _qtype(z, a: dict, what: str) -> str:
    """The quantized type of a QuantizeLinear: its zero point's, else `output_dtype`, else
    uint8; only uint8 and int8 are computed."""
    if z is not None:
        if isinstance(z, Node) and z.dtype not in _QUANT:
            raise NotImplementedError(f"{what}: a zero point of type {z.dtype} (uint8 and int8 "
                                      "are supported)")
        dt = str(np.asarray(z).dtype) if isinstance(z, np.ndarray) else z.dtype
    elif int(a.get("output_dtype", 0)):
        from .dtypes import _TYPES
        dt = _TYPES.get(int(a["output_dtype"]), ("?",))[0]
    else:
        dt = "uint8"
    if dt not in _QUANT:
        raise NotImplementedError(f"{what}: quantizing to {dt} is not supported (uint8 and "
                                  "int8)")
    return dt


def _float_scale(v, what: str):
    if isinstance(v, np.ndarray) and v.dtype != np.float32:
        raise NotImplementedError(f"{what}: a scale of type {v.dtype} (float32 is supported)")
    if isinstance(v, Node) and v.dtype != "float32":
        raise NotImplementedError(f"{what}: a scale of type {v.dtype} (float32 is supported)")
    return v


@converter("QuantizeLinear")
def _quantize(ctx, n, ins, a):
    x = _node(ins[0])
    _blocked(a, "QuantizeLinear")
    if x.dtype != "float32":
        raise NotImplementedError(f"QuantizeLinear of a {x.dtype} input (float32 is supported)")
    nd = len(_shape(x))
    axis = a.get("axis", 1)
    z = ins[2] if len(ins) > 2 else None
    dt = _qtype(z, a, "QuantizeLinear")
    scale = _per_axis(_float_scale(ins[1], "QuantizeLinear"), nd, axis, "the scale")
    zp = 0 if z is None else _per_axis(z, nd, axis, "the zero point")
    if isinstance(zp, np.ndarray):
        zp = zp.astype(np.float32)
    elif isinstance(zp, Node):
        zp = M.cast(zp, "float32")
    return [G.quantize_linear(x, _node(scale), zp, dt)]


@converter("DequantizeLinear")
def _dequantize(ctx, n, ins, a):
    x = _node(ins[0])
    _blocked(a, "DequantizeLinear")
    nd = len(_shape(x))
    axis = a.get("axis", 1)
    z = ins[2] if len(ins) > 2 else None
    scale = _per_axis(_float_scale(ins[1], "DequantizeLinear"), nd, axis, "the scale")
    zp = 0 if z is None else _node(_per_axis(z, nd, axis, "the zero point"))
    return [G.dequantize_linear(x, _node(scale), zp)]


def _q_operand(v, what: str):
    """A quantized operand as a uint8 or int8 node (an array known at import keeps its
    type)."""
    if isinstance(v, np.ndarray):
        if v.dtype.name not in _QUANT:
            raise NotImplementedError(f"{what} of type {v.dtype} (uint8 and int8 are supported)")
        return G.constant(v)
    v = _node(v, what)
    if v.dtype not in _QUANT:
        raise NotImplementedError(f"{what} of type {v.dtype} (uint8 and int8 are supported)")
    return v


def _q_zero(v, like: Node, what: str):
    """A zero point of MatMulInteger / QLinearMatMul: None, or an array or node of the
    operand's type (a scalar, or one per row of A / column of B)."""
    if v is None:
        return None
    if isinstance(v, np.ndarray):
        v = v.astype(like.dtype) if v.dtype.kind in "iu" else v
        return v.reshape(()) if v.size == 1 else v
    v = _q_operand(v, what)
    return G.reshape(v, ()) if _shape(v) == (1,) else v


def _integer_matmul(a_, b_, za, zb, what: str):
    a_, b_ = _q_operand(a_, f"{what}'s A"), _q_operand(b_, f"{what}'s B")
    sa, sb = _shape(a_), _shape(b_)
    if len(sb) != 2:        # a batched B: the differences' int32 matmul (no VNNI kernel)
        debug_print(1, f"{what}: B of shape {sb} is batched; the int32 matmul runs, not the "
                       "dot-product instruction's kernel")
        a_c = M.cast(a_, "int32")
        za_ = _q_zero(za, a_, f"{what}'s a_zero_point")
        zb_ = _q_zero(zb, b_, f"{what}'s b_zero_point")
        if za_ is not None:
            za_ = np.asarray(za_, np.int32) if isinstance(za_, np.ndarray) else \
                M.cast(za_, "int32")
            a_c = a_c - (G.reshape(_node(za_), (-1, 1)) if len(_shape(za_)) == 1 else za_)
        b_c = M.cast(b_, "int32")
        if zb_ is not None:
            b_c = b_c - (np.asarray(zb_, np.int32) if isinstance(zb_, np.ndarray) else
                         M.cast(zb_, "int32"))
        return G.matmul(a_c, b_c)
    if len(sa) == 1:
        a_ = G.reshape(a_, (1, sa[0]))
    out = G.matmul_integer(a_, b_, _q_zero(za, a_, f"{what}'s a_zero_point"),
                           _q_zero(zb, b_, f"{what}'s b_zero_point"))
    return G.reshape(out, (sb[1],)) if len(sa) == 1 else out


@converter("MatMulInteger")
def _matmul_integer(ctx, n, ins, a):
    ins = list(ins) + [None] * (4 - len(ins))
    return [_integer_matmul(ins[0], ins[1], ins[2], ins[3], "MatMulInteger")]


@converter("QLinearMatMul")
def _qlinear_matmul(ctx, n, ins, a):
    """y = saturate(round(sums * (a_scale * b_scale / y_scale)) + y_zero_point), the sums
    in int32 (`matmul_integer`) and the rescale in float64, as ONNX's reference."""
    qa, sa, za, qb, sb, zb, sy, zy = (list(ins) + [None] * 8)[:8]
    sums = _integer_matmul(qa, qb, za, zb, "QLinearMatMul")
    for s_, w in ((sa, "a_scale"), (sb, "b_scale"), (sy, "y_scale")):
        if s_ is None or _shape(s_, w) not in ((), (1,)):
            raise NotImplementedError(f"QLinearMatMul: a per-row or per-column {w} (a scalar "
                                      "scale is supported)")
        _float_scale(s_, f"QLinearMatMul's {w}")
    if all(isinstance(s_, np.ndarray) for s_ in (sa, sb, sy)):
        mult = G.constant(np.asarray(sa.reshape(()) * sb.reshape(()) / sy.reshape(()),
                                     np.float32).astype(np.float64))
    else:
        mult = M.cast(_node(sa) * _node(sb) / _node(sy), "float64")
    dt = _qtype(zy, {}, "QLinearMatMul's y_zero_point") if zy is not None else \
        _q_operand(qa, "QLinearMatMul's A").dtype
    v = M.cast(sums, "float64") * G.reshape(mult, ())
    if zy is not None:
        v = v + (G.constant(np.asarray(zy, np.float64).reshape(())) if
                 isinstance(zy, np.ndarray) else M.cast(G.reshape(zy, ()), "float64"))
    lo, hi = (0, 255) if dt == "uint8" else (-128, 127)
    v = G.round(v)
    return [M.cast(M.minimum(M.maximum(v, float(lo)), float(hi)), dt)]


@converter("DynamicQuantizeLinear")
def _dynamic_quantize(ctx, n, ins, a):
    """uint8 with a scale and zero point from the tensor's range (which always holds 0), as
    ONNX's reference computes them."""
    x = _node(ins[0])
    if x.dtype != "float32":
        raise NotImplementedError(f"DynamicQuantizeLinear of a {x.dtype} input (float32)")
    hi = M.maximum(G.max(x), 0.0)
    lo = M.minimum(-G.max(-x), 0.0)
    span = hi - lo
    scale = M.where(G.equal(span, 0.0), 1.0, span) / 255.0
    zp = G.round(M.minimum(M.maximum(0.0 - lo / scale, 0.0), 255.0))
    y = M.minimum(M.maximum(G.round(x / scale) + zp, 0.0), 255.0)
    return [M.cast(y, "uint8"), scale, M.cast(zp, "uint8")]


def _integer_conv(ctx, n, x, w, zx, zw, a, what: str):
    """`G.conv_integer` of the operands (VNNI's channel-blocked kernel for a stride-1,
    one-group conv of constant int8 weights; else the int32 conv of the centred operands)."""
    xs, ws = _shape(x, f"{what}'s input"), _shape(w, f"{what}'s weights")
    if len(ws) != 4:
        raise NotImplementedError(f"{what} over {len(ws) - 2} spatial dimensions (2 supported)")
    strides, pads, dil = _conv_params(ctx, n, a, xs, ws[2:])
    xq, wq = _q_operand(x, f"{what}'s x"), _q_operand(w, f"{what}'s w")
    if zx is not None and _shape(zx, f"{what}'s x_zero_point") not in ((), (1,)):
        raise NotImplementedError(f"{what}: a per-channel x_zero_point (a scalar is supported)")
    zx = None if zx is None else (np.asarray(zx).reshape(()) if isinstance(zx, np.ndarray)
                                  else G.reshape(_q_operand(zx, "x_zero_point"), ()))
    if zw is not None and not isinstance(zw, np.ndarray):
        zw = _q_operand(zw, f"{what}'s w_zero_point")
    return G.conv_integer(xq, wq, zx, zw, strides, pads, dil, int(a.get("group", 1)))


@converter("ConvInteger")
def _conv_integer(ctx, n, ins, a):
    ins = list(ins) + [None] * (4 - len(ins))
    return [_integer_conv(ctx, n, ins[0], ins[1], ins[2], ins[3], a, "ConvInteger")]


@converter("QLinearConv")
def _qlinear_conv(ctx, n, ins, a):
    """y = saturate(round((conv + B) * (x_scale * w_scale / y_scale) + y_zero_point)), the
    conv in int32 and the rescale in float64, as ONNX's reference (a per-channel w_scale
    and w_zero_point: one per output channel)."""
    qx, sx, zx, qw, sw, zw, sy, zy, bias = (list(ins) + [None] * 9)[:9]
    acc = _integer_conv(ctx, n, qx, qw, zx, zw, a, "QLinearConv")
    if bias is not None:
        acc = acc + G.reshape(_node(bias) if not isinstance(bias, np.ndarray) else
                              G.constant(np.asarray(bias, np.int32)), (1, -1, 1, 1))
    for s_, w_ in ((sx, "x_scale"), (sw, "w_scale"), (sy, "y_scale")):
        if s_ is None:
            raise ONNXImportError(f"QLinearConv: {w_} is missing")
        _float_scale(s_, f"QLinearConv's {w_}")
    known = all(isinstance(s_, np.ndarray) for s_ in (sx, sw, sy))
    if known:
        mult = np.asarray(sx.reshape(()) * sw / sy.reshape(()), np.float32).astype(np.float64)
        mult = G.constant(mult.reshape((1, -1, 1, 1)) if mult.size > 1 else mult.reshape(()))
    else:
        ws_ = _node(sw)
        ws_ = G.reshape(ws_, (1, -1, 1, 1)) if len(_shape(ws_)) == 1 and _shape(ws_)[0] > 1 \
            else G.reshape(ws_, ())
        mult = M.cast(G.reshape(_node(sx), ()) * ws_ / G.reshape(_node(sy), ()), "float64")
    dt = _qtype(zy, {}, "QLinearConv's y_zero_point") if zy is not None else \
        _q_operand(qx, "QLinearConv's x").dtype
    v = M.cast(acc, "float64") * mult
    if zy is not None:
        v = v + (G.constant(np.asarray(zy, np.float64).reshape(())) if
                 isinstance(zy, np.ndarray) else M.cast(G.reshape(zy, ()), "float64"))
    lo, hi = (0, 255) if dt == "uint8" else (-128, 127)
    return [M.cast(G.round(M.minimum(M.maximum(v, float(lo)), float(hi))), dt)]
