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
