"""One converter per ONNX operator type: ``CONVERTERS[op_type](ctx, node, inputs, attrs)``
returns the node's outputs (graph nodes, or numpy arrays where they are known at import).
`inputs` holds, per input, a graph node, a numpy array (known at import) or None (an omitted
optional input). Nodes whose inputs are all known never reach a converter: `fold` evaluates
them with ONNX's reference implementation."""

from __future__ import annotations

import numpy as np

from .. import graph as G
from ..graph import model_ops as M
from ..graph.node import Node
from ..config import debug_print
from .dtypes import ONNXImportError, ValueNeededError, as_graph_array, graph_dtype


def fold(node, ins, opset: int) -> list:
    """The outputs of a node whose inputs are all known, by onnx.reference at the model's
    opset."""
    from onnx import TensorProto, helper as oh
    from onnx.reference import ReferenceEvaluator

    names = [i for i in node.input]
    feeds = {n: v for n, v in zip(names, ins) if n}
    # the node in a model of the opset: given a bare node, the evaluator takes the newest
    # version of the operator whatever `opsets` says (Unsqueeze 13's axes input for an
    # Unsqueeze 9 whose axes are an attribute)
    outs = [n for n in node.output if n]
    g = oh.make_graph([node], "fold", [
        oh.make_tensor_value_info(n, TensorProto.UNDEFINED, None) for n in feeds], [
        oh.make_tensor_value_info(n, TensorProto.UNDEFINED, None) for n in outs])
    ref = ReferenceEvaluator(oh.make_model(g, opset_imports=[oh.make_opsetid("", opset)]))
    got = dict(zip(outs, ref.run(None, feeds)))
    return [np.asarray(got[n]) if n else None for n in node.output]   # "": an omitted output


# ------------------------------------------------------------------------- helpers
def _node(v, what="input"):
    if isinstance(v, Node):
        return v
    if isinstance(v, np.ndarray):
        return G.constant(as_graph_array(v, what))
    raise ONNXImportError(f"{what} is missing")


def _const(v, what: str) -> np.ndarray:
    if isinstance(v, np.ndarray):
        return v
    raise ValueNeededError(f"{what} must be known at import (a constant or computed from shapes); "
                     "a value computed at run time is not supported")


def _shape(v, what="the input") -> tuple:
    if isinstance(v, np.ndarray):
        return v.shape
    if v.shape is None:
        raise ONNXImportError(f"{what} has a symbolic shape here; pass from_onnx(..., "
                              "shapes={...}) or run it through Backend, which imports per "
                              "input shape")
    return tuple(v.shape)


def _ints(v) -> list[int]:
    return [int(x) for x in np.asarray(v).reshape(-1)]


def _str(a: dict, key: str, default: str) -> str:
    """A string attribute (onnx.helper gives bytes)."""
    v = a.get(key, default)
    return v.decode() if isinstance(v, bytes) else v


def _axis(a, nd):
    a = int(a)
    if not -nd <= a < nd:
        raise ONNXImportError(f"axis {a} is out of range for {nd} dimensions")
    return a % nd


CONVERTERS: dict = {}


def converter(*names):
    def reg(fn):
        for n in names:
            CONVERTERS[n] = fn
        return fn
    return reg


# ---------------------------------------------------------------------- identities
@converter("Identity")
def _identity(ctx, n, ins, a):
    return [ins[0]]


@converter("Dropout")
def _dropout(ctx, n, ins, a):
    x = ins[0]
    if len(ins) > 2 and ins[2] is not None and bool(_const(ins[2], "training_mode")):
        ratio = float(_const(ins[1], "ratio")) if len(ins) > 1 and ins[1] is not None \
            else 0.5
        if ratio != 0.0:
            raise NotImplementedError("Dropout in training mode (random masks) is not "
                                      "supported; inference only")
    mask = None
    if len(n.output) > 1 and n.output[1]:
        mask = np.ones(_shape(x), bool)
    return [x, mask]


@converter("Constant")
def _constant(ctx, n, ins, a):
    return fold(n, [], ctx.opset)


# ----------------------------------------------------------------------- elementwise
_BINARY = {"Add": lambda x, y: x + y, "Sub": lambda x, y: x - y, "Mul": lambda x, y: x * y,
           "Pow": lambda x, y: G.power(x, y)}


@converter(*_BINARY)
def _binary(ctx, n, ins, a):
    x, y = (_node(v) for v in ins[:2])
    out = _BINARY[n.op_type](x, y)
    if n.op_type == "Pow" and out.dtype != x.dtype:
        out = M.cast(out, x.dtype)         # ONNX's Pow keeps the base's type
    return [out]


@converter("Div")
def _div(ctx, n, ins, a):
    x, y = (_node(v) for v in ins[:2])
    if x.dtype == "int64" and y.dtype == "int64":
        # ONNX's integer quotient truncates toward zero: the float64 quotient cast back
        # (exact while the operands are below 2**53)
        return [M.cast(x / y, "int64")]
    return [x / y]


@converter("Sum", "Mean", "Max", "Min")
def _variadic(ctx, n, ins, a):
    xs = [_node(v) for v in ins]
    out = xs[0]
    for x in xs[1:]:
        out = {"Sum": lambda p, q: p + q, "Mean": lambda p, q: p + q,
               "Max": M.maximum, "Min": M.minimum}[n.op_type](out, x)
    if n.op_type == "Mean":
        out = out / float(len(xs))
    return [out]


_UNARY = {"Relu": G.relu, "Sigmoid": G.sigmoid, "Tanh": G.tanh, "Exp": G.exp, "Log": G.log,
          "Sqrt": G.sqrt, "Neg": G.neg, "Abs": M.abs, "Erf": M.erf,
          "Reciprocal": lambda x: 1.0 / x}


@converter(*_UNARY)
def _unary(ctx, n, ins, a):
    return [_UNARY[n.op_type](_node(ins[0]))]


@converter("LeakyRelu")
def _leaky(ctx, n, ins, a):
    x = _node(ins[0])
    alpha = float(a.get("alpha", 0.01))
    return [M.where(M.compare("greater_equal", x, 0.0), x, x * alpha)]


@converter("Elu")
def _elu(ctx, n, ins, a):
    x = _node(ins[0])
    alpha = float(a.get("alpha", 1.0))
    return [M.where(M.compare("greater", x, 0.0), x, (G.exp(M.minimum(x, 0.0)) - 1.0) * alpha)]


@converter("HardSigmoid")
def _hard_sigmoid(ctx, n, ins, a):
    x = _node(ins[0])
    return [M.maximum(M.minimum(x * float(a.get("alpha", 0.2)) + float(a.get("beta", 0.5)),
                                1.0), 0.0)]


@converter("Gelu")
def _gelu(ctx, n, ins, a):
    x = _node(ins[0])
    if _str(a, "approximate", "none") == "tanh":
        return [x * 0.5 * (1.0 + G.tanh((x + x * x * x * 0.044715) * float(np.sqrt(2 / np.pi))))]
    return [x * 0.5 * (1.0 + M.erf(x * float(1 / np.sqrt(2))))]


@converter("Clip")
def _clip(ctx, n, ins, a):
    x = _node(ins[0])
    lo = a.get("min") if ctx.opset < 11 else (ins[1] if len(ins) > 1 else None)
    hi = a.get("max") if ctx.opset < 11 else (ins[2] if len(ins) > 2 else None)
    if lo is not None:
        x = M.maximum(x, lo if isinstance(lo, Node) else _node(np.asarray(lo, x.dtype)))
    if hi is not None:
        x = M.minimum(x, hi if isinstance(hi, Node) else _node(np.asarray(hi, x.dtype)))
    return [x]


_COMPARE = {"Less": "less", "Greater": "greater", "LessOrEqual": "less_equal",
            "GreaterOrEqual": "greater_equal"}


@converter(*_COMPARE, "Equal")
def _compare(ctx, n, ins, a):
    x, y = (_node(v) for v in ins[:2])
    if n.op_type == "Equal":
        return [G.equal(x, y)]
    return [M.compare(_COMPARE[n.op_type], x, y)]


@converter("Not")
def _not(ctx, n, ins, a):
    return [1 - _node(ins[0])]


@converter("Where")
def _where(ctx, n, ins, a):
    c, x, y = (_node(v) for v in ins[:3])
    return [M.where(c, x, y)]


@converter("Cast")
def _cast(ctx, n, ins, a):
    x = _node(ins[0])
    to = graph_dtype(int(a["to"]), f"Cast {n.name} to")
    if to in ("uint8", "int8") and x.dtype.startswith("float"):
        x = M.cast(x, "int64")      # through int64: an out-of-range value wraps, as before
    return [M.cast(x, to)]


# -------------------------------------------------------------------- linear algebra
@converter("MatMul")
def _matmul(ctx, n, ins, a):
    x, y = (_node(v) for v in ins[:2])
    sx, sy = _shape(x), _shape(y)
    if len(sx) == 1:
        x = G.reshape(x, (1, sx[0]))
    if len(sy) == 1:
        y = G.reshape(y, (sy[0], 1))
    out = G.matmul(x, y)
    if len(sx) == 1 or len(sy) == 1:
        so = _shape(out)
        keep = so[:-2] + ((so[-2],) if len(sx) > 1 else ()) + ((so[-1],) if len(sy) > 1 else ())
        out = G.reshape(out, keep)
    return [out]


@converter("Gemm")
def _gemm(ctx, n, ins, a):
    A, B = ins[0], ins[1]
    if isinstance(A, np.ndarray) and a.get("transA", 0):
        A = A.T
    elif a.get("transA", 0):
        A = G.transpose(A)
    if isinstance(B, np.ndarray) and a.get("transB", 0):
        B = np.ascontiguousarray(B.T)    # weights transposed once, at import
    elif a.get("transB", 0):
        B = G.transpose(B)
    out = G.matmul(_node(A), _node(B))
    alpha, beta = float(a.get("alpha", 1.0)), float(a.get("beta", 1.0))
    if alpha != 1.0:
        out = out * alpha
    if len(ins) > 2 and ins[2] is not None:
        C = ins[2]
        if isinstance(C, np.ndarray) and beta != 1.0:
            C, beta = C * beta, 1.0
        out = out + (_node(C) * beta if beta != 1.0 else _node(C))
    return [out]


# ------------------------------------------------------------ convolution and pools
def _conv_params(ctx, n, a, x_shape, k_shape):
    nd = len(k_shape)
    strides = list(a.get("strides", [1] * nd))
    dil = list(a.get("dilations", [1] * nd))
    pads = list(a.get("pads", [0] * (2 * nd)))
    auto = _str(a, "auto_pad", "NOTSET")
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        pads = [0] * (2 * nd)
        for d in range(nd):
            size = x_shape[2 + d]
            out = -(-size // strides[d])
            k = (k_shape[d] - 1) * dil[d] + 1
            total = max(0, (out - 1) * strides[d] + k - size)
            lo = total // 2 if auto == "SAME_UPPER" else total - total // 2
            pads[d], pads[nd + d] = lo, total - lo
    elif auto == "VALID":
        pads = [0] * (2 * nd)
    return strides, pads, dil


def _as_2d(a: dict) -> dict:
    """A 1-D window's attributes as those of a (1, k) window."""
    a = dict(a)
    if "kernel_shape" in a:
        a["kernel_shape"] = [1] + list(a["kernel_shape"])
    for key in ("strides", "dilations"):
        if key in a:
            a[key] = [1] + list(a[key])
    if "pads" in a:
        a["pads"] = [0, a["pads"][0], 0, a["pads"][1]]
    return a


@converter("Conv")
def _conv(ctx, n, ins, a):
    x, w = ins[0], ins[1]
    xs = _shape(x, "Conv's input")
    ws = _shape(w, "Conv's weights")
    if len(xs) == 3 and len(ws) == 3:        # (N, C, L) as (N, C, 1, L)
        x = G.reshape(_node(x), xs[:2] + (1, xs[2]))
        w = w.reshape(ws[:2] + (1, ws[2])) if isinstance(w, np.ndarray) else \
            G.reshape(w, ws[:2] + (1, ws[2]))
        (y,) = _conv(ctx, n, [x, w] + list(ins[2:]), _as_2d(a))
        ctx.convs.pop(n.output[0], None)
        ys = _shape(y)
        return [G.reshape(y, ys[:2] + (ys[3],))]
    if len(ws) != 4:
        raise NotImplementedError(f"Conv over {len(ws) - 2} spatial dimensions (1 and 2 "
                                  "supported)")
    strides, pads, dil = _conv_params(ctx, n, a, xs, ws[2:])
    groups = int(a.get("group", 1))
    out = M.conv(_node(x), _node(w), strides, pads, dil, groups)
    b = ins[2] if len(ins) > 2 else None
    if isinstance(w, np.ndarray) and (b is None or isinstance(b, np.ndarray)):
        # weights known at import: a batch norm reading only this conv folds into it
        ctx.convs[n.output[0]] = (x, w, b, strides, pads, dil, groups)
    if b is not None:
        out = out + G.reshape(_node(b), (1, -1, 1, 1))
    return [out]


@converter("BatchNormalization")
def _batch_norm(ctx, n, ins, a):
    x, scale, bias, mean, var = ins[:5]
    eps = float(a.get("epsilon", 1e-5))
    if int(a.get("training_mode", 0)):
        raise NotImplementedError("BatchNormalization in training mode (inference only)")
    params = (scale, bias, mean, var)
    conv = ctx.convs.get(n.input[0])
    if conv is not None and ctx.consumers.get(n.input[0], 0) == 1 and \
            all(isinstance(p, np.ndarray) for p in params):
        cx, w, b, strides, pads, dil, groups = conv
        s = (scale / np.sqrt(var + eps)).astype(w.dtype)
        w2 = (w * s.reshape(-1, 1, 1, 1)).astype(w.dtype)
        b2 = ((np.zeros_like(mean) if b is None else b) - mean) * s + bias
        out = M.conv(_node(cx), _node(w2), strides, pads, dil, groups)
        return [out + G.reshape(_node(b2.astype(w.dtype)), (1, -1, 1, 1))]
    nd = len(_shape(x))
    shp = (1, -1) + (1,) * (nd - 2)
    if all(isinstance(p, np.ndarray) for p in params):
        s = scale / np.sqrt(var + eps)
        return [_node(x) * _node(s.reshape(shp)) + _node((bias - mean * s).reshape(shp))]
    sc, bi, mu, va = (G.reshape(_node(p), shp) for p in params)
    return [(_node(x) - mu) * (sc / G.sqrt(va + eps)) + bi]


def _pool(ctx, n, ins, a, kind):
    x = _node(ins[0])
    xs = _shape(x, f"{n.op_type}'s input")
    k = list(a["kernel_shape"])
    nd = len(k)
    if len(n.output) > 1 and n.output[1]:
        raise NotImplementedError("MaxPool's Indices output")
    strides, pads, dil = _conv_params(ctx, n, a, xs, k)
    count_pad = bool(a.get("count_include_pad", 0))
    if int(a.get("ceil_mode", 0)):
        # the last window may start past the floor's: more padding at the end, where the
        # window starts inside the input or its start padding (ONNX's rule)
        if kind == "avg" and count_pad:
            raise NotImplementedError("AveragePool with ceil_mode=1 and count_include_pad=1")
        for d in range(nd):
            span = (k[d] - 1) * dil[d] + 1
            size = xs[2 + d] + pads[d] + pads[nd + d]
            out = -(-(size - span) // strides[d]) + 1
            if (out - 1) * strides[d] >= xs[2 + d] + pads[d]:
                out -= 1
            pads[nd + d] += max(0, (out - 1) * strides[d] + span - size)
    return [M.pool(x, kind, k, strides, pads, count_pad, dil)]


@converter("MaxPool")
def _maxpool(ctx, n, ins, a):
    return _pool(ctx, n, ins, a, "max")


@converter("AveragePool")
def _avgpool(ctx, n, ins, a):
    return _pool(ctx, n, ins, a, "avg")


@converter("GlobalAveragePool", "GlobalMaxPool")
def _global_pool(ctx, n, ins, a):
    x = _node(ins[0])
    axes = tuple(range(2, len(_shape(x))))
    f = G.mean if n.op_type == "GlobalAveragePool" else G.max
    return [f(x, axis=axes, keepdims=True)]


@converter("LRN")
def _lrn(ctx, n, ins, a):
    x = _node(ins[0])
    size = int(a["size"])
    alpha, beta, bias = float(a.get("alpha", 1e-4)), float(a.get("beta", 0.75)), \
        float(a.get("bias", 1.0))
    shp = _shape(x)
    c = shp[1]
    lo, hi = (size - 1) // 2, size - 1 - (size - 1) // 2
    sq = M.pad(x * x, [(0, 0), (lo, hi)] + [(0, 0)] * (len(shp) - 2))
    s = G.slice(sq, 1, 0, c)
    for k in range(1, size):
        s = s + G.slice(sq, 1, k, k + c)
    return [x / G.power(s * (alpha / size) + bias, beta)]


# --------------------------------------------------------------- normalisation, softmax
@converter("Softmax", "LogSoftmax")
def _softmax(ctx, n, ins, a):
    x = _node(ins[0])
    shp = _shape(x)
    f = G.softmax if n.op_type == "Softmax" else G.log_softmax
    if ctx.opset >= 13:
        return [f(x, axis=_axis(a.get("axis", -1), len(shp)))]
    ax = _axis(a.get("axis", 1), len(shp))      # opset < 13: over the flattened tail
    if ax == len(shp) - 1:
        return [f(x, axis=-1)]
    rows = int(np.prod(shp[:ax], dtype=np.int64))
    flat = G.reshape(x, (rows, -1))
    return [G.reshape(f(flat, axis=-1), shp)]


@converter("LayerNormalization")
def _layer_norm(ctx, n, ins, a):
    x = _node(ins[0])
    shp = _shape(x)
    ax = _axis(a.get("axis", -1), len(shp))
    eps = float(a.get("epsilon", 1e-5))
    stats = len(n.output) > 1 and any(n.output[1:])
    axes = tuple(range(ax, len(shp)))
    if ax == len(shp) - 1 and not stats:
        y = G.layer_norm(x, eps)
    else:
        mean = G.mean(x, axis=axes, keepdims=True)
        d = x - mean
        std = G.sqrt(G.mean(d * d, axis=axes, keepdims=True) + eps)
        y = d / std
    y = y * _node(ins[1])
    if len(ins) > 2 and ins[2] is not None:
        y = y + _node(ins[2])
    return [y] + ([mean, 1.0 / std] if stats else [])


# --------------------------------------------------------------------- reductions
def _reduce_axes(ctx, n, ins, a, nd):
    if "axes" in a:
        axes = list(a["axes"])
    elif len(ins) > 1 and ins[1] is not None:
        axes = _ints(_const(ins[1], f"{n.op_type}'s axes"))
    else:
        axes = None
    if axes is not None and not axes:
        axes = None if not int(a.get("noop_with_empty_axes", 0)) else []
    if axes is None:
        return tuple(range(nd))
    return tuple(sorted(_axis(x, nd) for x in axes))


@converter("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceSumSquare",
           "ReduceL2", "ReduceL1", "ReduceLogSumExp")
def _reduce(ctx, n, ins, a):
    x = _node(ins[0])
    nd = len(_shape(x))
    axes = _reduce_axes(ctx, n, ins, a, nd)
    keep = bool(int(a.get("keepdims", 1)))
    if axes == ():
        return [x]
    op = n.op_type
    if op == "ReduceSum":
        return [G.sum(x, axis=axes, keepdims=keep)]
    if op == "ReduceMean":
        return [G.mean(x, axis=axes, keepdims=keep)]
    if op == "ReduceMax":
        return [G.max(x, axis=axes, keepdims=keep)]
    if op == "ReduceMin":
        return [-G.max(-x, axis=axes, keepdims=keep)]
    if op == "ReduceSumSquare":
        return [G.sum(x * x, axis=axes, keepdims=keep)]
    if op == "ReduceL2":
        return [G.sqrt(G.sum(x * x, axis=axes, keepdims=keep))]
    if op == "ReduceL1":
        return [G.sum(M.abs(x), axis=axes, keepdims=keep)]
    m = G.max(x, axis=axes, keepdims=True)
    s = G.log(G.sum(G.exp(x - m), axis=axes, keepdims=True)) + m
    return [s if keep else G.reshape(s, [d for i, d in enumerate(_shape(s)) if i not in axes])]


# ---------------------------------------------------------------------- shapes
@converter("Shape")
def _shape_op(ctx, n, ins, a):
    shp = np.array(_shape(ins[0], "Shape's input"), np.int64)
    start, end = a.get("start", 0), a.get("end", None)
    return [shp[start:end]]


@converter("Size")
def _size(ctx, n, ins, a):
    return [np.array(int(np.prod(_shape(ins[0], "Size's input"))), np.int64)]


@converter("Reshape")
def _reshape(ctx, n, ins, a):
    x = ins[0]
    shp = _shape(x)
    new = _ints(_const(ins[1], "Reshape's shape"))
    allow_zero = int(a.get("allowzero", 0))
    new = [shp[i] if s == 0 and not allow_zero else s for i, s in enumerate(new)]
    return [G.reshape(_node(x), new)]


@converter("Flatten")
def _flatten(ctx, n, ins, a):
    x = ins[0]
    shp = _shape(x)
    ax = int(a.get("axis", 1))
    ax = ax % len(shp) if ax < 0 else ax
    rows = int(np.prod(shp[:ax], dtype=np.int64))
    return [G.reshape(_node(x), (rows, int(np.prod(shp[ax:], dtype=np.int64))))]


@converter("Transpose")
def _transpose(ctx, n, ins, a):
    perm = a.get("perm")
    return [G.transpose(_node(ins[0]), None if perm is None else list(perm))]


@converter("Squeeze")
def _squeeze(ctx, n, ins, a):
    x = ins[0]
    shp = _shape(x)
    axes = a.get("axes") if "axes" in a else (_ints(_const(ins[1], "Squeeze's axes"))
                                              if len(ins) > 1 and ins[1] is not None else None)
    if axes is None:
        keep = [s for s in shp if s != 1]
    else:
        ax = {_axis(x_, len(shp)) for x_ in axes}
        keep = [s for i, s in enumerate(shp) if i not in ax]
    return [G.reshape(_node(x), keep)]


@converter("Unsqueeze")
def _unsqueeze(ctx, n, ins, a):
    x = ins[0]
    shp = list(_shape(x))
    axes = a.get("axes") if "axes" in a else _ints(_const(ins[1], "Unsqueeze's axes"))
    nd = len(shp) + len(axes)
    for ax in sorted(_axis(x_, nd) for x_ in axes):
        shp.insert(ax, 1)
    return [G.reshape(_node(x), shp)]


@converter("Expand")
def _expand(ctx, n, ins, a):
    x = _node(ins[0])
    shape = _ints(_const(ins[1], "Expand's shape"))
    target = tuple(np.broadcast_shapes(_shape(x), tuple(shape)))
    return [x if target == _shape(x) else G.broadcast_to(x, target)]


@converter("Concat")
def _concat(ctx, n, ins, a):
    xs = [v for v in ins if v is not None and _shape(v) != (0,) and 0 not in _shape(v)]
    nd = len(_shape(xs[0]))
    return [G.concat([_node(v) for v in xs], axis=_axis(a["axis"], nd))]


@converter("Split")
def _split(ctx, n, ins, a):
    x = ins[0]
    shp = _shape(x)
    ax = _axis(a.get("axis", 0), len(shp))
    if "split" in a:
        sizes = list(a["split"])
    elif len(ins) > 1 and ins[1] is not None:
        sizes = _ints(_const(ins[1], "Split's split"))
    else:
        k = int(a.get("num_outputs", len(n.output)))
        step = -(-shp[ax] // k)
        sizes = [min(step, shp[ax] - i * step) for i in range(k)]
    outs, start = [], 0
    for s in sizes:
        if s == 0:            # an empty piece: a known empty array (graphs hold no empty tensors)
            outs.append(np.zeros(shp[:ax] + (0,) + shp[ax + 1:], _np_dtype(x)))
        else:
            outs.append(G.slice(_node(x), ax, start, start + s))
        start += s
    return outs


def _np_dtype(v):
    return v.dtype if isinstance(v, np.ndarray) else np.dtype(v.dtype)


@converter("Slice")
def _slice(ctx, n, ins, a):
    x = ins[0]
    shp = _shape(x)
    if ctx.opset < 10:
        starts, ends = list(a["starts"]), list(a["ends"])
        axes = list(a.get("axes", range(len(starts))))
        steps = [1] * len(starts)
    else:
        starts, ends = _ints(_const(ins[1], "starts")), _ints(_const(ins[2], "ends"))
        axes = _ints(_const(ins[3], "axes")) if len(ins) > 3 and ins[3] is not None \
            else list(range(len(starts)))
        steps = _ints(_const(ins[4], "steps")) if len(ins) > 4 and ins[4] is not None \
            else [1] * len(starts)
    out = _node(x)
    for st, en, ax, sp in zip(starts, ends, axes, steps):
        ax = _axis(ax, len(shp))
        idx = range(shp[ax])[slice(st, en, sp)]
        if sp == 1:
            out = G.slice(out, ax, idx.start, max(idx.start, idx.stop)) if len(idx) else None
        else:
            out = M.gather(out, G.constant(np.array(list(idx), np.int64)), ax) if len(idx) \
                else None
        if out is None:
            raise NotImplementedError("a Slice with no elements (empty tensors)")
    return [out]


@converter("Gather")
def _gather(ctx, n, ins, a):
    x, idx = ins[0], ins[1]
    ax = _axis(a.get("axis", 0), len(_shape(x)))
    if isinstance(idx, np.ndarray):
        idx = idx.astype(np.int64)
        if idx.size == 1 and idx.ndim <= 1 and isinstance(x, Node):
            i = int(idx.reshape(-1)[0]) % _shape(x)[ax]
            out = G.slice(x, ax, i, i + 1)
            shp = list(_shape(out))
            if idx.ndim == 0:
                shp.pop(ax)
            return [G.reshape(out, shp)]
    return [M.gather(_node(x), _node(idx), ax)]


@converter("ConstantOfShape")
def _constant_of_shape(ctx, n, ins, a):
    return fold(n, [_const(ins[0], "ConstantOfShape's shape")], ctx.opset)


@converter("Pad")
def _pad(ctx, n, ins, a):
    x = ins[0]
    shp = _shape(x)
    mode = _str(a, "mode", "constant")
    if mode not in ("constant", "edge", "reflect", "wrap"):
        raise NotImplementedError(f"Pad mode {mode!r}")
    if ctx.opset < 11:
        pads, value, axes = list(a["pads"]), float(a.get("value", 0.0)), None
    else:
        pads = _ints(_const(ins[1], "Pad's pads"))
        value = float(_const(ins[2], "Pad's value").reshape(-1)[0]) \
            if len(ins) > 2 and ins[2] is not None else 0.0
        axes = _ints(_const(ins[3], "Pad's axes")) if len(ins) > 3 and ins[3] is not None \
            else None
    axes = list(range(len(shp))) if axes is None else [_axis(x_, len(shp)) for x_ in axes]
    k = len(axes)
    per = [(0, 0)] * len(shp)
    for i, ax in enumerate(axes):
        per[ax] = (pads[i], pads[k + i])
    if any(p < 0 for pair in per for p in pair):
        raise NotImplementedError("negative pads (cropping)")
    if mode == "constant":
        return [M.pad(_node(x), per, value)]
    out = _node(x)
    for ax, (lo, hi) in enumerate(per):       # the other modes: a gather of each axis
        if lo or hi:
            size = shp[ax]
            i = np.arange(-lo, size + hi)
            if mode == "edge":
                i = np.clip(i, 0, size - 1)
            elif mode == "wrap":
                i = i % size
            else:
                if size == 1:
                    raise NotImplementedError("Pad mode 'reflect' of an axis of 1 element")
                period = 2 * (size - 1)
                i = np.abs((i + period * (1 + lo // period)) % period)
                i = np.where(i >= size, period - i, i)
            out = M.gather(out, G.constant(i.astype(np.int64)), ax)
    return [out]


# ------------------------------------------------------------------------ quantized
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
