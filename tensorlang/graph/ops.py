"""The ops' rules, registered in `registry.OPS`: per op, side by side, its numpy reference,
shape rule, gradient rule (in graph ops, so gradients of gradients work), JVP rule and TE
definition.

Rules:
- ``grad(g, node)`` returns one adjoint node (or None: zero) per input of `node`, given the
  adjoint `g` of its output.
- ``jvp(node, tangents)`` returns the output's tangent (or None: zero) given one tangent (or
  None) per input.
- ``te(tensors, shapes, out_shape, **attrs)`` returns (output tensor, schedule kind) for
  concrete input shapes; the executor schedules by kind (see executor.default_schedule).
"""

from __future__ import annotations


import numpy as np

import tensorlang as tl

from . import api
from . import shapes as S
from .registry import OPS, OpDef, register_op  # noqa: F401 (OPS, OpDef: the ops' API)
from ..te.reduce import shift_max


def _add_t(a, b):
    """Sum of two optional tangents/adjoints."""
    if a is None:
        return b
    if b is None:
        return a
    return a + b


# ============================================================ TE helpers
def _read(t, shp, out_shape, idx):
    """t (shape `shp`) read at output index `idx`, with numpy broadcasting."""
    off = len(out_shape) - len(shp)
    return t[tuple(0 if shp[d] == 1 and out_shape[off + d] != 1 else idx[off + d]
                   for d in range(len(shp)))]


def _elementwise(fn):
    def te(ts, shapes, out, **_):
        return tl.compute(out, lambda *i: fn(*[_read(t, s, out, i) for t, s in zip(ts, shapes)]),
                          name="out"), "elementwise"
    return te


def _zero(t):
    return tl.const(0.0, t.dtype)


# ============================================================ elementwise
def _unbroadcast(pairs, node):
    return [None if g is None else api.sum_like(g, x) for g, x in zip(pairs, node.inputs)]


def _binary(name, ref, fn, grad, jvp):
    register_op(name, ref, S.broadcast, grad, jvp, _elementwise(fn))


def _fit(t, node):
    return None if t is None else api.broadcast_like(t, node)


_binary("add", np.add, lambda a, b: a + b,
        lambda g, n: _unbroadcast([g, g], n),
        lambda n, t: _fit(_add_t(t[0], t[1]), n))
_binary("sub", np.subtract, lambda a, b: a - b,
        lambda g, n: _unbroadcast([g, -g], n),
        lambda n, t: _fit(_add_t(t[0], None if t[1] is None else -t[1]), n))
_binary("mul", np.multiply, lambda a, b: a * b,
        lambda g, n: _unbroadcast([g * n.inputs[1], g * n.inputs[0]], n),
        lambda n, t: _fit(_add_t(None if t[0] is None else t[0] * n.inputs[1],
                                 None if t[1] is None else n.inputs[0] * t[1]), n))
_binary("div", np.divide, lambda a, b: a / b,
        lambda g, n: _unbroadcast([g / n.inputs[1], -g * n / n.inputs[1]], n),
        lambda n, t: _fit(_add_t(None if t[0] is None else t[0] / n.inputs[1],
                                 None if t[1] is None else -t[1] * n / n.inputs[1]), n))


def _power_ref(a, b):
    """numpy's power, but floating point for integer operands (api.FLOAT_RESULT): numpy's
    integer power wraps on overflow and refuses negative exponents, while the kernel's is
    pow() in float64 (exact where the result is below 2**53)."""
    if np.result_type(a, b).kind in "iub":
        return np.float_power(a, b)
    return np.power(a, b)


def _power_te(a, b):
    if not (a.dtype.is_float or b.dtype.is_float):
        a, b = a.astype("float64"), b.astype("float64")
    return tl.pow(a, b)


_binary("power", _power_ref, _power_te,
        lambda g, n: _unbroadcast([g * n.inputs[1] * n.inputs[0] ** (n.inputs[1] - 1.0),
                                   g * n * api.log(n.inputs[0])], n),
        lambda n, t: _fit(_add_t(
            None if t[0] is None else t[0] * n.inputs[1] * n.inputs[0] ** (n.inputs[1] - 1.0),
            None if t[1] is None else t[1] * n * api.log(n.inputs[0])), n))
_binary("equal", lambda a, b: (a == b).astype(np.result_type(a, b)),
        lambda a, b: tl.if_then_else(a == b, 1.0, 0.0).astype(a.dtype),
        lambda g, n: [None, None], lambda n, t: None)
_binary("relu_grad", lambda x, g: np.where(x > 0, g, 0).astype(np.result_type(x, g)),
        lambda x, g: tl.if_then_else(x > 0, g, _zero(g)),
        lambda g, n: [None, api.sum_like(api.make("relu_grad", (n.inputs[0], g)),
                                          n.inputs[1])],
        lambda n, t: None if t[1] is None else _fit(api.make("relu_grad", (n.inputs[0], t[1])),
                                                     n))


def _unary(name, ref, fn, deriv):
    """An elementwise function with derivative `deriv(x, y)` (y the output node)."""
    register_op(name, ref, lambda s: tuple(s),
                lambda g, n: [g * deriv(n.inputs[0], n)],
                lambda n, t: None if t[0] is None else t[0] * deriv(n.inputs[0], n),
                _elementwise(fn))


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


_unary("neg", np.negative, lambda x: -x, lambda x, y: -1.0)
_unary("exp", np.exp, tl.exp, lambda x, y: y)
_unary("log", np.log, tl.log, lambda x, y: 1.0 / x)
_unary("sin", np.sin, tl.sin, lambda x, y: api.cos(x))
_unary("cos", np.cos, tl.cos, lambda x, y: -api.sin(x))
_unary("tanh", np.tanh, tl.tanh, lambda x, y: 1.0 - y * y)
_unary("sqrt", np.sqrt, tl.sqrt, lambda x, y: 0.5 / y)
_unary("sigmoid", _sigmoid, tl.sigmoid, lambda x, y: y * (1.0 - y))
register_op("relu", lambda x: np.maximum(x, 0).astype(x.dtype), lambda s: tuple(s),
            lambda g, n: [api.make("relu_grad", (n.inputs[0], g))],
            lambda n, t: None if t[0] is None else api.make("relu_grad", (n.inputs[0], t[0])),
            _elementwise(lambda x: tl.if_then_else(x > 0, x, _zero(x))))
register_op("zeros_like", np.zeros_like, lambda s: tuple(s), lambda g, n: [None],
            lambda n, t: None, _elementwise(lambda x: _zero(x)))


# ============================================================ reductions
def _reduce_te(reducer, mean=False):
    def te(ts, shapes, out, axis, keepdims):
        x, shp = ts[0], shapes[0]
        ax = S.axes(axis, len(shp))
        if not ax:
            return tl.compute(out, lambda *i: x[i], name="out"), "elementwise"
        rk = {a: tl.reduce_axis((0, shp[a]), name=f"r{a}") for a in ax}

        def body(*i):
            it = iter(i)
            full = []
            for d in range(len(shp)):
                if d in rk:
                    full.append(rk[d])
                    if keepdims:
                        next(it)
                else:
                    full.append(next(it))
            return reducer(x[tuple(full)], axis=[rk[a] for a in ax])

        r = tl.compute(out, body, name="red")
        if mean:
            count = int(np.prod([shp[a] for a in ax]))
            # the mean of no elements is 0/0, NaN, as numpy's (which also warns)
            scale = 1.0 / count if count else float("nan")
            r = tl.compute(out, lambda *i: r[i] * scale, name="out")
        return r, "reduce"
    return te


def _max_mask(n, x):
    """Where x attains the reduction's maximum, divided by the number of ties."""
    G = api
    axis, keepdims = n.attr("axis"), n.attr("keepdims")
    mask = G.equal(x, G.unreduce(n, x, axis, keepdims))
    return mask / G.unreduce(G.sum(mask, axis=axis, keepdims=keepdims), x, axis, keepdims)


register_op("sum", lambda x, axis, keepdims: np.sum(x, axis=axis, keepdims=keepdims),
            lambda s, axis, keepdims: S.reduced(s, axis, keepdims),
            lambda g, n: [api.unreduce(g, n.inputs[0], n.attr("axis"), n.attr("keepdims"))],
            lambda n, t: None if t[0] is None else api.sum(t[0], n.attr("axis"),
                                                            n.attr("keepdims")),
            _reduce_te(tl.sum))
register_op("mean", lambda x, axis, keepdims: np.mean(x, axis=axis, keepdims=keepdims),
            lambda s, axis, keepdims: S.reduced(s, axis, keepdims),
            lambda g, n: [api.unreduce(g, n.inputs[0], n.attr("axis"), n.attr("keepdims"),
                                        True)],
            lambda n, t: None if t[0] is None else api.mean(t[0], n.attr("axis"),
                                                             n.attr("keepdims")),
            _reduce_te(tl.sum, mean=True))
register_op("max", lambda x, axis, keepdims: np.max(x, axis=axis, keepdims=keepdims),
            lambda s, axis, keepdims: S.reduced(s, axis, keepdims),
            lambda g, n: [_max_mask(n, n.inputs[0]) * api.unreduce(
                g, n.inputs[0], n.attr("axis"), n.attr("keepdims"))],
            lambda n, t: None if t[0] is None else api.sum(
                _max_mask(n, n.inputs[0]) * t[0], n.attr("axis"), n.attr("keepdims")),
            _reduce_te(tl.max))


def _unreduce_ref(g, x, axis, keepdims, mean):
    ax = S.axes(axis, x.ndim)
    if not keepdims:
        g = np.expand_dims(g, ax)
    out = np.broadcast_to(g, x.shape).astype(np.result_type(g, x))
    return out / np.prod([x.shape[a] for a in ax]) if mean else out


def _unreduce_te(ts, shapes, out, axis, keepdims, mean):
    g, xs = ts[0], shapes[1]
    ax = S.axes(axis, len(xs))
    count = int(np.prod([xs[a] for a in ax]))
    # no element of x when count is 0: the scale is never used
    scale = (1.0 / count if count else 0.0) if mean else 1.0

    def body(*i):
        idx = [0 if d in ax else i[d] for d in range(len(xs))] if keepdims else \
            [i[d] for d in range(len(xs)) if d not in ax]
        v = g[tuple(idx)]
        return v * scale if mean else v
    return tl.compute(out, body, name="out"), "elementwise"


register_op("unreduce", _unreduce_ref, lambda g, x, axis, keepdims, mean: tuple(x),
            lambda G, n: [(api.mean if n.attr("mean") else api.sum)(
                G, n.attr("axis"), n.attr("keepdims")), None],
            lambda n, t: None if t[0] is None else api.unreduce(
                t[0], n.inputs[1], n.attr("axis"), n.attr("keepdims"), n.attr("mean")),
            _unreduce_te)


# ============================================================ shapes and layout
def _sum_like_ref(x, like):
    lead = x.ndim - like.ndim
    r = x.sum(axis=tuple(range(lead))) if lead else x
    keep = tuple(d for d in range(like.ndim) if like.shape[d] == 1 and r.shape[d] != 1)
    return r.sum(axis=keep, keepdims=True) if keep else r


def _sum_like_shape(x, like):
    if S.broadcast(x, like) != tuple(x):
        raise ValueError("the first shape must be the broadcast of the second")
    return tuple(like)


def _sum_like_te(ts, shapes, out, **_):
    x, (xs, ls) = ts[0], shapes
    lead = len(xs) - len(ls)
    red = [d for d in range(len(xs)) if d < lead or (ls[d - lead] == 1 and xs[d] != 1)]
    if not red:
        return tl.compute(out, lambda *i: x[i], name="out"), "elementwise"
    rk = {d: tl.reduce_axis((0, xs[d]), name=f"r{d}") for d in red}

    def body(*i):
        idx = [rk[d] if d in rk else i[d - lead] for d in range(len(xs))]
        return tl.sum(x[tuple(idx)], axis=list(rk.values()))
    return tl.compute(out, body, name="out"), "reduce"


def _bcast_te(ts, shapes, out, **_):
    return tl.compute(out, lambda *i: _read(ts[0], shapes[0], out, i), name="out"), "elementwise"


register_op("sum_like", lambda x, like: _sum_like_ref(x, like), _sum_like_shape,
            lambda g, n: [api.broadcast_like(g, n.inputs[0]), None],
            lambda n, t: None if t[0] is None else api.sum_like(t[0], n.inputs[1]),
            _sum_like_te)
register_op("broadcast_like", lambda x, like: np.broadcast_to(x, like.shape).copy(),
            lambda x, like: _check_bcast(x, like),
            lambda g, n: [api.sum_like(g, n.inputs[0]), None],
            lambda n, t: None if t[0] is None else api.broadcast_like(t[0], n.inputs[1]),
            _bcast_te)
register_op("broadcast_to", lambda x, shape: np.broadcast_to(x, shape).copy(),
            lambda x, shape: _check_bcast(x, shape),
            lambda g, n: [api.sum_like(g, n.inputs[0])],
            lambda n, t: None if t[0] is None else api.broadcast_to(t[0], n.attr("shape")),
            _bcast_te)


def _check_bcast(x, shape):
    if S.broadcast(x, shape) != tuple(shape):
        raise ValueError(f"cannot broadcast {tuple(x)} to {tuple(shape)}")
    return tuple(shape)


def reshape_groups(xs, out) -> list[tuple[list[int], list[int]]] | None:
    """The dimensions of a row-major reshape from `xs` to `out` in groups (input dims,
    output dims) of equal products, in order: each group's elements map among themselves
    (a channel shuffle's (240,) -> (3, 80); a flatten's (c, h, w) -> (c*h*w,)). None for a
    shape with a zero extent."""
    xs, out = [int(d) for d in xs], [int(d) for d in out]
    if 0 in xs or 0 in out:
        return None
    groups, i, j = [], 0, 0
    while i < len(xs) or j < len(out):
        gi, gj, pi, pj = [], [], 1, 1
        while not (gi or gj) or pi != pj:
            if (pi <= pj and i < len(xs)) or j >= len(out):
                gi.append(i)
                pi *= xs[i]
                i += 1
            else:
                gj.append(j)
                pj *= out[j]
                j += 1
        groups.append((gi, gj))
    return groups


def _reshape_te(ts, shapes, out, **_):
    x, xs = ts[0], shapes[0]
    if tuple(xs) == tuple(out):
        return tl.compute(out, lambda *i: x[i], name="out"), "elementwise"
    groups = reshape_groups(xs, out)
    if groups is None:          # empty: no element to read
        groups = [(list(range(len(xs))), list(range(len(out))))]

    def body(*i):
        # each group's input indices from its own output indices: an index of a group of
        # one input and one output dimension is the output's (no division), so the inner
        # dimensions that a reshape keeps stay contiguous vectors
        idx = [None] * len(xs)
        for gi, gj in groups:
            if len(gi) == 1 and len(gj) == 1:
                idx[gi[0]] = i[gj[0]]
                continue
            flat = tl.const(0, "int32")
            for j in gj:
                flat = flat * int(out[j]) + i[j]
            for k, d in enumerate(gi):
                inner = int(np.prod([xs[e] for e in gi[k + 1:]]))
                q = flat // inner if inner != 1 else flat
                idx[d] = q % int(xs[d]) if k else q
        return x[tuple(idx)]
    return tl.compute(out, body, name="out"), "elementwise"


register_op("reshape", lambda x, shape: np.reshape(x, S.reshaped(x.shape, shape)).copy(),
            lambda x, shape: S.reshaped(x, shape),
            lambda g, n: [api.reshape_like(g, n.inputs[0])],
            lambda n, t: None if t[0] is None else api.reshape(t[0], n.attr("shape")),
            _reshape_te)
register_op("reshape_like", lambda x, like: np.reshape(x, like.shape).copy(),
            lambda x, like: S.reshaped(x, like),
            lambda g, n: [api.reshape_like(g, n.inputs[0]), None],
            lambda n, t: None if t[0] is None else api.reshape_like(t[0], n.inputs[1]),
            _reshape_te)


def _transpose_te(ts, shapes, out, axes):
    p = S.permutation(axes, len(shapes[0]))

    def body(*i):
        idx = [None] * len(p)
        for d, a in enumerate(p):
            idx[a] = i[d]
        return ts[0][tuple(idx)]
    return tl.compute(out, body, name="out"), "elementwise"


def _inverse(axes, ndim):
    p = S.permutation(axes, ndim)
    return tuple(int(a) for a in np.argsort(p))


register_op("transpose", lambda x, axes: np.transpose(x, axes).copy(),
            lambda x, axes: tuple(x[a] for a in S.permutation(axes, len(x))),
            lambda g, n: [api.transpose(g, None if n.attr("axes") is None else
                                         _inverse(n.attr("axes"), len(n.attr("axes"))))],
            lambda n, t: None if t[0] is None else api.transpose(t[0], n.attr("axes")),
            _transpose_te)


def _concat_te(ts, shapes, out, axis):
    ax = S.axes(axis, len(out))[0]
    offs = np.cumsum([0] + [s[ax] for s in shapes]).tolist()

    def body(*i):
        def parts(lo, hi):
            # inputs lo .. hi - 1 as a balanced tree of selects split at a middle offset: its
            # depth, and the number of guards on each read, grow as log2 of the number of
            # inputs (a chain would nest one select per input, too deep for the recursive
            # IR visitors at a few hundred, and guard each read by every earlier offset)
            if hi - lo == 1:
                return ts[lo][tuple(i[d] - offs[lo] if d == ax else i[d]
                                    for d in range(len(out)))]
            mid = (lo + hi) // 2
            return tl.if_then_else(i[ax] < offs[mid], parts(lo, mid), parts(mid, hi))
        return parts(0, len(ts))
    return tl.compute(out, body, name="out"), "elementwise"


register_op("concat", lambda *xs, axis: np.concatenate(xs, axis=axis),
            lambda *ss, axis: S.concat(ss, axis),
            lambda g, n: [api.make("concat_part", (g, *n.inputs), axis=n.attr("axis"), index=k)
                          for k in range(len(n.inputs))],
            lambda n, t: None if all(x is None for x in t) else api.concat(
                [x if x is not None else api.zeros_like(i) for x, i in zip(t, n.inputs)],
                n.attr("axis")),
            _concat_te)


def _part_ref(g, *xs, axis, index):
    offs = np.cumsum([0] + [x.shape[axis] for x in xs])
    return np.take(g, range(offs[index], offs[index + 1]), axis=axis)


def _part_te(ts, shapes, out, axis, index):
    ax = S.axes(axis, len(out))[0]
    off = int(sum(s[ax] for s in shapes[1:index + 1]))
    return tl.compute(out, lambda *i: ts[0][tuple(i[d] + off if d == ax else i[d]
                                                  for d in range(len(out)))],
                      name="out"), "elementwise"


def _part_grad(G, n):
    xs = n.inputs[1:]
    k = n.attr("index")
    parts = [G if j == k else api.zeros_like(x) for j, x in enumerate(xs)]
    return [api.concat(parts, n.attr("axis"))] + [None] * len(xs)


register_op("concat_part", _part_ref,
            lambda g, *xs, axis, index: tuple(xs[index]),
            _part_grad,
            lambda n, t: None if t[0] is None else api.make(
                "concat_part", (t[0], *n.inputs[1:]), axis=n.attr("axis"),
                index=n.attr("index")),
            _part_te)


# ============================================================ slice
def _slice_shape(x, axis, start, stop):
    ax = S.axes(axis, len(x))[0]
    if not 0 <= start < stop <= x[ax]:
        raise ValueError(f"slice [{start}, {stop}) is not inside axis {ax} of extent {x[ax]}")
    return tuple(stop - start if d == ax else e for d, e in enumerate(x))


def _slice_te(ts, shapes, out, axis, start, stop):
    ax = S.axes(axis, len(out))[0]
    return tl.compute(out, lambda *i: ts[0][tuple(i[d] + start if d == ax else i[d]
                                                  for d in range(len(out)))],
                      name="out"), "elementwise"


def _slice_grad(g, n):
    """The adjoint of a slice: g where the slice was, zeros around it (an `unslice` of x's
    shape, known only when the graph runs for a Variable made without one)."""
    return [api.make("unslice", (g, n.inputs[0]), axis=n.attr("axis"), start=n.attr("start"),
                      stop=n.attr("stop"))]


def _unslice_shape(g, x, axis, start, stop):
    if tuple(g) != _slice_shape(x, axis, start, stop):
        raise ValueError(f"unslice: {tuple(g)} is not the shape of the slice [{start}, {stop}) "
                         f"along axis {axis} of {tuple(x)}")
    return tuple(x)


def _unslice_ref(g, x, axis, start, stop):
    out = np.zeros(x.shape, np.result_type(g, x))
    idx = [np.s_[:]] * x.ndim
    idx[S.axes(axis, x.ndim)[0]] = np.s_[start:stop]
    out[tuple(idx)] = g
    return out


def _unslice_te(ts, shapes, out, axis, start, stop):
    g = ts[0]
    ax = S.axes(axis, len(out))[0]

    def body(*i):
        inside = tl.all(i[ax] >= start, i[ax] < stop)
        v = g[tuple(i[d] - start if d == ax else i[d] for d in range(len(out)))]
        return tl.if_then_else(inside, v, _zero(v))
    return tl.compute(out, body, name="out"), "elementwise"


# g placed at [start, stop) along `axis` of x's shape, zeros elsewhere (x: its shape only)
register_op("unslice", _unslice_ref, _unslice_shape,
            lambda G, n: [api.slice(G, n.attr("axis"), n.attr("start"), n.attr("stop")), None],
            lambda n, t: None if t[0] is None else api.make(
                "unslice", (t[0], n.inputs[1]), axis=n.attr("axis"), start=n.attr("start"),
                stop=n.attr("stop")),
            _unslice_te)


register_op("slice", lambda x, axis, start, stop: np.take(x, range(start, stop), axis=axis),
            _slice_shape, _slice_grad,
            lambda n, t: None if t[0] is None else api.make(
                "slice", (t[0],), axis=n.attr("axis"), start=n.attr("start"),
                stop=n.attr("stop")),
            _slice_te)


# ============================================================ matmul
def _mm_ref(a, b, ta, tb):
    return np.matmul(np.swapaxes(a, -1, -2) if ta else a, np.swapaxes(b, -1, -2) if tb else b)


def _mm_te(ts, shapes, out, ta, tb):
    A, B = ts
    sa, sb = shapes
    if A.dtype.name == B.dtype.name == "bfloat16":      # float32 sums (graph/bfloat16.py)
        from .bfloat16 import matmul_te
        return matmul_te(A, B, sa, sb, out, ta, tb)
    k = sa[-2] if ta else sa[-1]
    if tb:  # read B contiguously in the inner (j) loop: transpose it into a stage first
        Bt = tl.compute(sb[:-2] + (sb[-1], sb[-2]), lambda *i: B[i[:-2] + (i[-1], i[-2])],
                        name="bt")
        sb = sb[:-2] + (sb[-1], sb[-2])
        B = Bt
    r = tl.reduce_axis((0, k), name="k")
    nb = len(out) - 2

    def body(*i):
        bi = i[:nb]
        ia = _read_batch(sa, bi, nb) + ((r, i[-2]) if ta else (i[-2], r))
        ib = _read_batch(sb, bi, nb) + (r, i[-1])
        return tl.sum(A[ia] * B[ib], axis=r)
    return tl.compute(out, body, name="out"), "matmul"


_read_batch = S.read_batch


def _mm_grad(g, n):
    G = api
    a, b = n.inputs
    ta, tb = n.attr("ta"), n.attr("tb")
    mm = lambda x, y, tx, ty: G.make("matmul", (x, y), ta=tx, tb=ty)  # noqa: E731
    da = mm(b, g, tb, True) if ta else mm(g, b, False, not tb)
    db = mm(g, a, True, ta) if tb else mm(a, g, not ta, False)
    return [G.sum_like(da, a), G.sum_like(db, b)]


register_op("matmul", _mm_ref, lambda a, b, ta, tb: S.matmul(a, b, ta, tb), _mm_grad,
            lambda n, t: _add_t(
                None if t[0] is None else api.make("matmul", (t[0], n.inputs[1]),
                                                    ta=n.attr("ta"), tb=n.attr("tb")),
                None if t[1] is None else api.make("matmul", (n.inputs[0], t[1]),
                                                    ta=n.attr("ta"), tb=n.attr("tb"))),
            _mm_te)


# ============================================================ softmax
def _softmax_ref(x, axis):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def _log_softmax_ref(x, axis):
    m = x.max(axis=axis, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=axis, keepdims=True))


def _softmax_te(log):
    def te(ts, shapes, out, axis):
        x, shp = ts[0], shapes[0]
        ax = S.axes(axis, len(shp))[0]
        red = tuple(1 if d == ax else s for d, s in enumerate(shp))

        def along(r):
            return lambda *i: tuple(r if d == ax else i[d] for d in range(len(shp)))
        r1 = tl.reduce_axis((0, shp[ax]), name="r1")
        # the row's maximum only shifts the exponents (it cancels in the quotient): what it
        # is where the row has a NaN does not matter (`shift_max`: one vmaxps a vector, no
        # NaN test; max's NaN and signed-zero rules cost a compare and three blends, a
        # large share of softmax's time) — a row with a NaN is NaN throughout whatever the
        # shift, through its own exponential and the row's sum
        m = tl.compute(red, lambda *i: shift_max(x[along(r1)(*i)], axis=r1), name="m")
        r2 = tl.reduce_axis((0, shp[ax]), name="r2")

        def at(i):
            return tuple(0 if d == ax else i[d] for d in range(len(shp)))
        if log:
            z = tl.compute(red, lambda *i: tl.sum(tl.exp(x[along(r2)(*i)] - m[i]), axis=r2),
                           name="z")
            y = tl.compute(shp, lambda *i: x[i] - m[at(i)] - tl.log(z[at(i)]), name="out")
        else:
            # the exponentials are a stage of their own: the CPU schedule keeps a row of
            # them (computed once, read by the sum and the quotient); the GPU's inlines it.
            # The quotient is a product by the row's reciprocal (one division per row; the
            # result differs from e / z by at most an ulp)
            e = tl.compute(shp, lambda *i: tl.exp(x[i] - m[at(i)]), name="e")
            z = tl.compute(red, lambda *i: tl.sum(e[along(r2)(*i)], axis=r2), name="z")
            rz = tl.compute(red, lambda *i: 1.0 / z[i], name="rz")   # one division per row
            y = tl.compute(shp, lambda *i: e[i] * rz[at(i)], name="out")
        return y, "softmax"
    return te


def _softmax_grad(g, n):
    s = api.sum(g * n, axis=n.attr("axis"), keepdims=True)
    return [n * (g - s)]


def _log_softmax_grad(g, n):
    return [g - api.exp(n) * api.sum(g, axis=n.attr("axis"), keepdims=True)]


register_op("softmax", _softmax_ref, lambda s, axis: (S.axes(axis, len(s)), tuple(s))[1],
            _softmax_grad, lambda n, t: None if t[0] is None else _softmax_grad(t[0], n)[0],
            _softmax_te(False))
register_op("log_softmax", _log_softmax_ref,
            lambda s, axis: (S.axes(axis, len(s)), tuple(s))[1],
            _log_softmax_grad,
            lambda n, t: None if t[0] is None else t[0] - api.sum(
                api.exp(n) * t[0], axis=n.attr("axis"), keepdims=True),
            _softmax_te(True))

# sources: fed or stored, never computed by a kernel
register_op("variable", None, None, lambda g, n: [], lambda n, t: None, None)
register_op("constant", None, None, lambda g, n: [], lambda n, t: None, None)
