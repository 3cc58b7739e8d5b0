"""Graph ops that imported models use beyond the hand-written layer set (`tensorlang.onnx`):
constant padding, the general convolution (asymmetric pads, strides and dilations per axis,
groups), pooling with padding, elementwise minimum/maximum/comparisons/select, erf, abs,
casts and gathers along an axis. Each has its numpy reference, shape rule and TE definition
as every op in `ops.OPS`; the gradients of the inference-only ones (general convolution and
pooling, gather, comparisons) raise `NotImplementedError` naming the op.
"""

from __future__ import annotations

import numpy as np

import tensorlang as tl

from . import shapes as S
from .node import Node
from ..config import debug_print
from . import api
from .ops import _elementwise, _read, _unbroadcast
from .registry import register_op


def _no_grad(op: str):
    def grad(g, n):
        raise NotImplementedError(f"the gradient of {op} is not implemented (an inference op "
                                  "of imported models)")
    return grad


def _no_jvp(op: str):
    def jvp(n, t):
        raise NotImplementedError(f"the forward-mode derivative of {op} is not implemented")
    return jvp


# ------------------------------------------------------------------------- padding
def _pad_shape(s, pads, value):
    if len(pads) != len(s) or any(len(p) != 2 or p[0] < 0 or p[1] < 0 for p in pads):
        raise ValueError(f"pads must be one non-negative (begin, end) pair per dimension, "
                         f"got {pads}")
    return tuple(d + a + b for d, (a, b) in zip(s, pads))


def _pad_ref(x, pads, value):
    return np.pad(x, pads, constant_values=value).astype(x.dtype)


def _pad_te(ts, shapes, out, pads, value):
    x, shp = ts[0], shapes[0]

    def body(*i):
        inside = [c for d, (a, _) in enumerate(pads) if a or pads[d][1]
                  for c in (i[d] >= a, i[d] < a + shp[d])]
        src = x[tuple(i[d] - a for d, (a, _) in enumerate(pads))]
        return tl.if_then_else(tl.all(*inside), src, tl.const(value, x.dtype)) if inside \
            else src
    return tl.compute(out, body, name="out"), "elementwise"


def _pad_grad(g, n):
    x = n.inputs[0]
    for d, (a, _) in enumerate(n.attr("pads")):
        g = api.slice(g, d, a, a + x.shape[d])
    return [g]


register_op("pad", _pad_ref, _pad_shape, _pad_grad,
            lambda n, t: None if t[0] is None else pad(t[0], n.attr("pads"), 0.0), _pad_te)


def pad(x, pads, value: float = 0.0):
    """`x` with `pads[d] = (before, after)` elements of `value` around dimension d."""
    pads = tuple((int(a), int(b)) for a, b in pads)
    return api.make("pad", (x,), pads=pads, value=float(value))


# --------------------------------------------------------- the general convolution
def _conv_geometry(x, w, strides, pads, dilations, groups):
    if len(x) != 4 or len(w) != 4:
        raise ValueError("conv takes x in NCHW and w in OIHW (4 dimensions each)")
    if x[1] != w[1] * groups or w[0] % groups:
        raise ValueError(f"x has {x[1]} channels, w expects {w[1]} per group in {groups} "
                         f"groups of {w[0]} output channels")
    out = [x[0], w[0]]
    for d in range(2):
        k = (w[2 + d] - 1) * dilations[d] + 1
        o = (x[2 + d] + pads[d] + pads[2 + d] - k) // strides[d] + 1
        if o < 1:
            raise ValueError(f"a window of {k} does not fit in {x[2 + d]} (pads {pads})")
        out.append(o)
    return tuple(out)


def _conv_ref(x, w, strides, pads, dilations, groups):
    n, c, h, wd = x.shape
    k, cg, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])))
    _, _, oh, ow = _conv_geometry(x.shape, w.shape, strides, pads, dilations, groups)
    out = np.zeros((n, k, oh, ow), np.result_type(x, w))
    kg = k // groups
    for g in range(groups):
        xs = xp[:, g * cg:(g + 1) * cg]
        for p in range(kh):
            for q in range(kw):
                win = xs[:, :, p * dilations[0]:p * dilations[0] + strides[0] * (oh - 1) + 1:
                         strides[0],
                         q * dilations[1]:q * dilations[1] + strides[1] * (ow - 1) + 1:
                         strides[1]]
                out[:, g * kg:(g + 1) * kg] += np.einsum(
                    "nchw,oc->nohw", win, w[g * kg:(g + 1) * kg, :, p, q])
    return out.astype(np.result_type(x, w))


def _conv_padded(x, shape, pads):
    """The input with `pads` = (top, left, bottom, right) zeros around its planes."""
    if not any(pads):
        return x
    nb, c, h, wd = shape
    return tl.compute((nb, c, h + pads[0] + pads[2], wd + pads[1] + pads[3]),
                      lambda a, b, y, z: tl.if_then_else(
                          tl.all(y >= pads[0], y < h + pads[0], z >= pads[1], z < wd + pads[1]),
                          x[a, b, y - pads[0], z - pads[1]], tl.const(0.0, x.dtype)),
                      name="xpad")


def _conv_te(ts, shapes, out, strides, pads, dilations, groups):
    # kind "conv2d": the conv heads a group with its elementwise epilogue (bias, relu) as
    # conv2d does; on CPUs the executor replaces this form by `conv_grouped_te` and its
    # register-blocked schedule
    x, w = ts
    (_, c, h, wd), (k, cg, kh, kw) = shapes
    kg = k // groups
    xp = _conv_padded(x, shapes[0], pads)
    rc, rp, rq = (tl.reduce_axis((0, cg), "rc"), tl.reduce_axis((0, kh), "rp"),
                  tl.reduce_axis((0, kw), "rq"))

    def body(n, o, i, j):
        ch = rc if groups == 1 else (o // kg) * cg + rc
        return tl.sum(xp[n, ch, i * strides[0] + rp * dilations[0],
                         j * strides[1] + rq * dilations[1]] * w[o, rc, rp, rq],
                      axis=[rc, rp, rq])
    return tl.compute(out, body, name="out"), "conv2d"


def _columns_by_stride(x, shape, pads, stride: int):
    """The padded input with its columns dealt into `stride` phases:
    [n, c, h + pads, stride, ceil((w + pads) / stride)], phase r holding the padded columns
    r, r + stride, ... A tap at column j * stride + q then reads phase q % stride at
    j + q // stride: along the output columns, a contiguous vector instead of a gather."""
    nb, c, h, wd = shape
    top, left = pads[0], pads[1]
    hp, wp = h + pads[0] + pads[2], wd + pads[1] + pads[3]
    zero = tl.const(0.0, x.dtype)

    def body(n, b, y, r, z):
        col = z * stride + r
        inside = [col < wp, col >= left, col < wd + left]
        if pads[0] or pads[2]:
            inside += [y >= top, y < h + top]
        return tl.if_then_else(tl.all(*inside), x[n, b, y - top, col - left], zero)
    return tl.compute((nb, c, hp, stride, -(-wp // stride)), body, name="xpad")


def conv_grouped_te(ts, shapes, out, strides, pads, dilations, groups):
    """The general convolution with its group as an axis of its own: computed into
    [n, groups, K/groups, oh, ow] (NCHW's memory order, the channels split in two axes),
    the NCHW output read from it. A tile of one group's output channels then reads one
    group's input channels, the same for all its rows (the index of the 4-D form,
    (o // (K/groups)) * C/groups + c, differs per output channel): the CPU executor's
    register-blocked form of the general conv (`cpu_schedules._block_conv_groups`). With
    a column stride, the padded input's columns are dealt by phase (`_columns_by_stride`)
    so that every tap reads contiguous vectors along the output columns."""
    x, w = ts
    (nb, _, _, _), (k, cg, kh, kw) = shapes
    kg = k // groups
    _, _, oh, ow = out
    (sh, sw), (dh, dw) = strides, dilations
    rc, rp, rq = (tl.reduce_axis((0, cg), "rc"), tl.reduce_axis((0, kh), "rp"),
                  tl.reduce_axis((0, kw), "rq"))
    if sw > 1:
        xp = _columns_by_stride(x, shapes[0], pads, sw)

        def read(n, ch, i, j):
            q = rq * dw
            return xp[n, ch, i * sh + rp * dh, q % sw, j + q // sw]
    else:
        xp = _conv_padded(x, shapes[0], pads)

        def read(n, ch, i, j):
            return xp[n, ch, i * sh + rp * dh, j + rq * dw]
    grouped = tl.compute((nb, groups, kg, oh, ow), lambda n, g, og, i, j: tl.sum(
        read(n, g * cg + rc, i, j) * w[g * kg + og, rc, rp, rq], axis=[rc, rp, rq]),
        name="conv_grouped")
    return tl.compute(out, lambda n, o, i, j: grouped[n, o // kg, o % kg, i, j],
                      name="out"), "conv2d"


register_op("conv", _conv_ref, _conv_geometry, _no_grad("conv"), _no_jvp("conv"), _conv_te)


def conv(x, w, strides=(1, 1), pads=(0, 0, 0, 0), dilations=(1, 1), groups: int = 1):
    """The general 2-D convolution (ONNX's Conv): NCHW input, OIHW weights of C/groups input
    channels each, `pads` = (top, left, bottom, right). A conv with equal strides and
    symmetric pads, no dilation and one group is `conv2d` (the executor's fast schedules)."""
    strides, dilations = tuple(int(s) for s in strides), tuple(int(d) for d in dilations)
    pads, groups = tuple(int(p) for p in pads), int(groups)
    if groups == 1 and dilations == (1, 1) and strides[0] == strides[1] and \
            len(set(pads)) == 1:
        return api.conv2d(x, w, stride=strides[0], padding=pads[0])
    # the general form: on CPUs, the executor's register tiles per group
    # (`conv_grouped_te`), not conv2d's channel-blocked ones
    debug_print(1, f"conv: groups={groups}, strides={strides}, pads={pads}, dilations="
                   f"{dilations} take the general convolution, not conv2d")
    return api.make("conv", (x, w), strides=strides, pads=pads, dilations=dilations,
                    groups=groups)


# ------------------------------------------------------------- pooling with padding
def _pool_geometry(x, kind, kernel, strides, pads, count_pad, dilations):
    nd = len(kernel)
    if len(x) != nd + 2:
        raise ValueError(f"pooling over {nd} spatial dimensions takes x of {nd + 2} "
                         "(N, C and those)")
    out = [x[0], x[1]]
    for d in range(nd):
        k = (kernel[d] - 1) * dilations[d] + 1
        o = (x[2 + d] + pads[d] + pads[nd + d] - k) // strides[d] + 1
        if o < 1:
            raise ValueError(f"a window of {k} does not fit in {x[2 + d]}")
        out.append(o)
    return tuple(out)


def _pool_ref(x, kind, kernel, strides, pads, count_pad, dilations):
    nd = len(kernel)
    fill = -np.inf if kind == "max" else 0.0
    widths = [(0, 0), (0, 0)] + [(pads[d], pads[nd + d]) for d in range(nd)]
    xp = np.pad(x.astype("f8"), widths, constant_values=fill)
    ones = np.pad(np.ones(x.shape[2:]), widths[2:])
    shape = _pool_geometry(x.shape, kind, kernel, strides, pads, count_pad, dilations)
    out = np.empty(shape)
    for o in np.ndindex(*shape[2:]):
        sl = tuple(slice(o[d] * strides[d], o[d] * strides[d] + (kernel[d] - 1) *
                         dilations[d] + 1, dilations[d]) for d in range(nd))
        win = xp[(slice(None), slice(None)) + sl]
        axes = tuple(range(2, 2 + nd))
        if kind == "max":
            out[(...,) + o] = win.max(axis=axes)
        else:
            cnt = np.prod(kernel) if count_pad else ones[sl].sum()
            out[(...,) + o] = win.sum(axis=axes) / cnt
    return out.astype(x.dtype)


def _pool_te(ts, shapes, out, kind, kernel, strides, pads, count_pad, dilations):
    x, size = ts[0], shapes[0][2:]
    nd = len(kernel)
    r = [tl.reduce_axis((0, kernel[d]), f"r{d}") for d in range(nd)]

    def at(o):
        return [o[d] * strides[d] + r[d] * dilations[d] - pads[d] for d in range(nd)]

    def inside(p):
        return tl.all(*[c for d in range(nd) for c in (p[d] >= 0, p[d] < size[d])])
    padded = any(pads)
    reduce = tl.max if kind == "max" else tl.sum

    def window(n, c, *o):
        p = at(o)
        if padded:
            return reduce(x[(n, c, *p)], axis=r, where=inside(p))
        return reduce(x[(n, c, *p)], axis=r)
    if kind == "max":
        return tl.compute(out, lambda *i: window(*i), name="out"), "conv"
    s = tl.compute(out, lambda *i: window(*i), name="psum")
    if count_pad or not padded:
        return tl.compute(out, lambda *i: s[i] * (1.0 / int(np.prod(kernel))),
                          name="out"), "conv"
    one = tl.const(1.0, x.dtype)
    cnt = tl.compute(out[2:], lambda *o: tl.sum(one, axis=r, where=inside(at(o))),
                     name="pcount")          # the window's elements inside the input
    return tl.compute(out, lambda *i: s[i] / cnt[i[2:]], name="out"), "conv"


register_op("pool", _pool_ref, _pool_geometry, _no_grad("pool"), _no_jvp("pool"), _pool_te)


def pool(x, kind: str, kernel, strides=None, pads=None, count_pad: bool = False,
         dilations=None):
    """Max or average pooling over windows of `kernel` (one size per spatial dimension of
    x = (N, C, spatial...)), their taps `dilations` apart, with `pads` = (the starts of
    each spatial dimension, then the ends): max ignores the padding; average divides by
    the window's elements inside the input unless `count_pad` (ONNX's count_include_pad)."""
    if kind not in ("max", "avg"):
        raise tl.TensorlangError(f"pool: kind must be 'max' or 'avg', got {kind!r}")
    kernel = tuple(int(k) for k in kernel)
    nd = len(kernel)
    strides = kernel if strides is None else tuple(int(s) for s in strides)
    pads = (0,) * (2 * nd) if pads is None else tuple(int(p) for p in pads)
    dilations = (1,) * nd if dilations is None else tuple(int(d) for d in dilations)
    if len(strides) != nd or len(pads) != 2 * nd or len(dilations) != nd:
        raise tl.TensorlangError(f"pool: a {nd}-D kernel takes {nd} strides and dilations "
                                 f"and {2 * nd} pads, got {strides}, {dilations}, {pads}")
    return api.make("pool", (x,), kind=kind, kernel=kernel, strides=strides, pads=pads,
                     count_pad=bool(count_pad), dilations=dilations)


# --------------------------------------------------- elementwise: min, max, select, ...
def _binary(name, ref, fn, grad):
    register_op(name, ref, lambda a, b: S.broadcast(a, b), grad, _no_jvp(name),
                _elementwise(fn))


def _pick(first: bool):
    """The adjoints of minimum/maximum: g goes to the operand chosen (the first on ties)."""
    def grad(g, n):
        a, b = n.inputs
        ge = api.make("greater_equal" if first else "less_equal", (a, b))
        return _unbroadcast([g * ge, g * (1.0 - ge)], n)
    return grad


_binary("maximum", lambda a, b: np.maximum(a, b), tl.maximum, _pick(True))
_binary("minimum", lambda a, b: np.minimum(a, b), tl.minimum, _pick(False))

_COMPARE = {"less": (np.less, lambda a, b: a < b),
            "greater": (np.greater, lambda a, b: a > b),
            "less_equal": (np.less_equal, lambda a, b: a <= b),
            "greater_equal": (np.greater_equal, lambda a, b: a >= b)}
for _name, (_np, _tl) in _COMPARE.items():
    _binary(_name, lambda a, b, f=_np: f(a, b).astype(np.result_type(a, b)),
            lambda a, b, f=_tl: tl.if_then_else(f(a, b), 1, 0).astype(
                np.result_type(str(a.dtype), str(b.dtype)).name),   # the node's dtype
            lambda g, n: [None, None])


def _where_te(ts, shapes, out, **_):
    def body(*i):
        c, a, b = (_read(t, s, out, i) for t, s in zip(ts, shapes))
        zero = tl.const(0, c.dtype)
        return tl.if_then_else(c != zero, a.astype(_dtype(ts)), b.astype(_dtype(ts)))
    return tl.compute(out, body, name="out"), "elementwise"


def _dtype(ts):
    a, b = ts[1].dtype, ts[2].dtype
    return str(np.result_type(str(a), str(b)))


register_op("where", lambda c, a, b: np.where(c != 0, a, b).astype(np.result_type(a, b)),
            lambda c, a, b: S.broadcast(c, a, b),
            lambda g, n: [None,
                          api.sum_like(api.make("where", (n.inputs[0], g, 0.0)), n.inputs[1]),
                          api.sum_like(api.make("where", (n.inputs[0], 0.0, g)), n.inputs[2])],
            _no_jvp("where"), _where_te)


def where(cond, a, b):
    """`a` where `cond` is nonzero, else `b` (numpy broadcasting)."""
    node = api.make("where", (cond, a, b))
    return _retyped(node, np.result_type(*[i.dtype for i in node.inputs[1:]]).name)


def _retyped(node, dtype: str):
    """`node` with another dtype (ops whose result type is not numpy's of all inputs)."""
    if node.dtype == dtype:
        return node
    return Node(node.op, node.inputs, node.kwargs, node.shape, dtype, node.name)


def maximum(a, b):
    return api.make("maximum", (a, b))


def minimum(a, b):
    return api.make("minimum", (a, b))


def compare(op: str, a, b):
    """1 where `a op b` holds, else 0, in the operands' dtype (op: less, greater,
    less_equal, greater_equal; `equal` is `G.equal`)."""
    if op not in _COMPARE:
        raise tl.TensorlangError(f"compare: op must be one of {sorted(_COMPARE)}, got {op!r}")
    return api.make(op, (a, b))


def _erf_ref(x):
    from math import erf
    return np.vectorize(erf, otypes=[x.dtype])(x) if x.size else x.copy()


register_op("erf", _erf_ref, lambda s: tuple(s),
            lambda g, n: [g * (2.0 / np.sqrt(np.pi)) * api.exp(-n.inputs[0] * n.inputs[0])],
            _no_jvp("erf"), _elementwise(tl.erf))
register_op("abs", np.abs, lambda s: tuple(s),
            lambda g, n: [g * (api.make("greater_equal", (n.inputs[0], 0.0)) * 2.0 - 1.0)],
            _no_jvp("abs"), _elementwise(tl.abs))


def erf(x):
    return api.make("erf", (x,))


def abs(x):  # noqa: A001
    return api.make("abs", (x,))


# ----------------------------------------------------------------------- casts
_CASTS = ("float32", "float64", "bfloat16", "int64", "int32", "int16", "int8", "uint8")


def _cast_te(ts, shapes, out, dtype):
    x = ts[0]
    return tl.compute(out, lambda *i: x[i].astype(dtype), name="out"), "elementwise"


register_op("cast", lambda x, dtype: x.astype(dtype), lambda s, dtype: tuple(s),
            lambda g, n: [cast(g, n.inputs[0].dtype)], _no_jvp("cast"), _cast_te)


def cast(x, dtype: str):
    """`x` converted to `dtype` (float32, float64, bfloat16, int64, int32, int16, int8 or
    uint8), as numpy's `astype`: float to int truncates, integers wrap, float to bfloat16
    rounds to nearest even. A float out of the integer's
    range has no defined result (numpy's neither): clip it first (`quantize_linear` does)."""
    dtype = str(np.dtype(dtype))
    if dtype not in _CASTS:
        raise tl.TensorlangError(f"cast: dtype must be one of {_CASTS}, got {dtype}")
    return api._cast(x, dtype)


# ----------------------------------------------------------------------- gather
def _gather_shape(x, idx, axis):
    ax = S.axes(axis, len(x))[0]
    return tuple(x[:ax]) + tuple(idx) + tuple(x[ax + 1:])


def _gather_ref(x, idx, axis):
    idx = np.where(idx < 0, idx + x.shape[axis], idx)
    return np.take(x, idx.astype(np.int64), axis=axis)


def _gather_te(ts, shapes, out, axis):
    x, idx = ts
    ax = S.axes(axis, len(shapes[0]))[0]
    k = len(shapes[1])
    n = shapes[0][ax]

    def body(*i):
        j = idx[i[ax:ax + k]] if k else idx[()]
        j = tl.if_then_else(j < 0, j + n, j)
        return x[i[:ax] + (j,) + i[ax + k:]]
    return tl.compute(out, body, name="out"), "elementwise"


register_op("gather", _gather_ref, _gather_shape, _no_grad("gather"), _no_jvp("gather"),
            _gather_te)


def gather(x, indices, axis: int = 0):
    """numpy's take along `axis`: the elements of `x` at the int64 `indices` (negative ones
    count from the end); an index out of range is the kernel's index error."""
    node = api.make("gather", (x, indices), axis=int(axis))
    if node.inputs[1].dtype != "int64":
        raise tl.TensorlangError(f"gather: indices must be int64, got {node.inputs[1].dtype}")
    return _retyped(node, node.inputs[0].dtype)
