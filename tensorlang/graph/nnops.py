"""Convolution and pooling ops (NCHW / OIHW), with their adjoints as ops of their own.

conv2d(x, w), its input adjoint bx(g, w) and weight adjoint bw(x, g) are the three partial
derivatives of one trilinear form <g, conv2d(x, w)>, so each one's gradient is written with
the other two: gradients of any order stay in this table. Pooling has no padding; max
pooling shares the gradient of a window evenly among its tied maxima (as `G.max` does).
"""

from __future__ import annotations

import numpy as np

import tensorlang as tl

from . import api
from . import shapes as S
from .ops import _add_t
from .node import GraphError
from .registry import register_op


# ------------------------------------------------------------------ numpy references
def _windows(x, k, s, pad=0):
    """x[n, c, i*s + p, j*s + q] as an array [n, c, OH, OW, k, k]."""
    if pad:
        x = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    n, c, h, w = x.shape
    oh, ow = (h - k) // s + 1, (w - k) // s + 1
    out = np.empty((n, c, oh, ow, k, k), x.dtype)
    for p in range(k):
        for q in range(k):
            out[:, :, :, :, p, q] = x[:, :, p:p + s * (oh - 1) + 1:s, q:q + s * (ow - 1) + 1:s]
    return out


def conv2d_ref(x, w, stride, padding):
    win = _windows(x, w.shape[2], stride, padding)         # n c oh ow kh kw (square kernels)
    if w.shape[2] != w.shape[3]:
        raise ValueError("the reference handles square kernels")
    if x.dtype.name == "bfloat16":      # float32 sums, rounded once (as the kernel's)
        return np.einsum("ncijpq,ocpq->noij", win.astype(np.float32),
                         w.astype(np.float32)).astype(x.dtype)
    return np.einsum("ncijpq,ocpq->noij", win, w)


def conv2d_bx_ref(g, w, x, stride, padding):
    n, c, h, wd = x.shape
    k = w.shape[2]
    out = np.zeros((n, c, h + 2 * padding, wd + 2 * padding), np.result_type(g, w))
    oh, ow = g.shape[2:]
    for p in range(k):
        for q in range(k):
            out[:, :, p:p + stride * (oh - 1) + 1:stride, q:q + stride * (ow - 1) + 1:stride] += \
                np.einsum("noij,oc->ncij", g, w[:, :, p, q])
    return out[:, :, padding:padding + h, padding:padding + wd]


def conv2d_bw_ref(x, g, w, stride, padding):
    win = _windows(x, w.shape[2], stride, padding)
    return np.einsum("ncijpq,noij->ocpq", win, g)


def _ties(x, kernel, stride):
    win = _windows(x, kernel, stride)
    y = win.max(axis=(4, 5))
    mask = win == y[..., None, None]
    return win, mask / mask.sum(axis=(4, 5), keepdims=True)


def max_pool_ref(x, kernel, stride):
    return _windows(x, kernel, stride).max(axis=(4, 5))


def max_pool_bx_ref(x, g, kernel, stride):
    _, share = _ties(x, kernel, stride)
    out = np.zeros_like(x, dtype=np.result_type(x, g))
    oh, ow = g.shape[2:]
    for p in range(kernel):
        for q in range(kernel):
            out[:, :, p:p + stride * (oh - 1) + 1:stride, q:q + stride * (ow - 1) + 1:stride] += \
                g * share[..., p, q]
    return out


def max_pool_gather_ref(x, G, kernel, stride):
    _, share = _ties(x, kernel, stride)
    return np.einsum("ncijpq,ncijpq->ncij", _windows(G, kernel, stride), share)


def avg_pool_ref(x, kernel, stride):
    return _windows(x, kernel, stride).mean(axis=(4, 5))


def avg_pool_bx_ref(g, x, kernel, stride):
    out = np.zeros(x.shape, np.result_type(g, x))
    oh, ow = g.shape[2:]
    for p in range(kernel):
        for q in range(kernel):
            out[:, :, p:p + stride * (oh - 1) + 1:stride, q:q + stride * (ow - 1) + 1:stride] += \
                g / kernel**2
    return out


# ------------------------------------------------------------------ TE definitions
def _padded(x, shp, pad):
    if not pad:
        return x
    n, c, h, w = shp
    return tl.compute((n, c, h + 2 * pad, w + 2 * pad), lambda a, b, y, z: tl.if_then_else(
        tl.all(y >= pad, y < h + pad, z >= pad, z < w + pad), x[a, b, y - pad, z - pad],
        tl.const(0.0, x.dtype)), name="xpad")


def conv2d_te(ts, shapes, out, stride, padding):
    x, w = ts
    (_, c, _, _), (_, _, kh, kw) = shapes
    xp = _padded(x, shapes[0], padding)
    rc, rp, rq = (tl.reduce_axis((0, c), "rc"), tl.reduce_axis((0, kh), "rp"),
                  tl.reduce_axis((0, kw), "rq"))
    return tl.compute(out, lambda n, o, i, j: tl.sum(
        xp[n, rc, i * stride + rp, j * stride + rq] * w[o, rc, rp, rq], axis=[rc, rp, rq]),
        name="out"), "conv2d"


def pack_conv_weights(w: np.ndarray, block: int) -> np.ndarray:
    """OIHW weights packed as `conv2d_blocked_te` reads them: [K/block, C, kh, kw, block],
    zeros past K (the `wpack` stage, done once in numpy for constant weights)."""
    k, c, kh, kw = w.shape
    kb = -(-k // block)
    full = np.zeros((kb * block, c, kh, kw), w.dtype)
    full[:k] = w
    return np.ascontiguousarray(full.reshape(kb, block, c, kh, kw).transpose(0, 2, 3, 4, 1))


def unpack_conv_weights(wp: np.ndarray, channels: int) -> np.ndarray:
    """The OIHW weights of `pack_conv_weights`' packing (its first `channels` filters)."""
    kb, c, kh, kw, block = wp.shape
    return wp.transpose(0, 4, 1, 2, 3).reshape(kb * block, c, kh, kw)[:channels]


def conv2d_blocked_te(ts, shapes, out, stride, padding, block):
    """conv2d with the output channels in blocks of `block` innermost (NCHW[block]c, as
    TVM's conv2d_NCHWc and oneDNN's blocked formats): the weights packed to
    [K/block, C, kh, kw, block] (zeros past K), the conv computed into
    [n, K/block, oh, ow, block], and the NCHW output read from it. A vector over the
    block's channels is then one contiguous load of weights and one accumulator per output
    column, fed by broadcasts of the input — the CPU executor's form when the channels
    fill vectors better than the output columns do (`cpu_schedules.conv_block`)."""
    x, w = ts
    (_, c, _, _), (k, _, kh, kw) = shapes
    nb, _, oh, ow = out
    kb = -(-k // block)
    zero = tl.const(0.0, w.dtype)
    wp = tl.compute((kb, c, kh, kw, block), lambda ko, b, p, q, ki: tl.if_then_else(
        ko * block + ki < k, w[ko * block + ki, b, p, q], zero) if kb * block > k
        else w[ko * block + ki, b, p, q], name="wpack")
    return _conv2d_nchwc(x, wp, shapes[0], out, stride, padding)


def conv2d_nchwc_te(ts, shapes, out, stride, padding, channels):
    """`conv2d_blocked_te` with its weights packed already (`pack_conv_weights`): the form
    the executor gives a conv2d whose weights are a constant, packed once per plan
    instead of in every call (as TVM's and Halide's conv kernels take a filter packed
    offline)."""
    return _conv2d_nchwc(ts[0], ts[1], shapes[0], out, stride, padding)


def _conv2d_nchwc(x, wp, x_shape, out, stride, padding):
    nb, _, oh, ow = out
    kb, c, kh, kw, block = (int(d.value) for d in wp.shape)
    xp = _padded(x, x_shape, padding)
    rc, rp, rq = (tl.reduce_axis((0, c), "rc"), tl.reduce_axis((0, kh), "rp"),
                  tl.reduce_axis((0, kw), "rq"))
    blocked = tl.compute((nb, kb, oh, ow, block), lambda n, ko, i, j, ki: tl.sum(
        xp[n, rc, i * stride + rp, j * stride + rq] * wp[ko, rc, rp, rq, ki],
        axis=[rc, rp, rq]), name="conv_blocked")
    return tl.compute(out, lambda n, o, i, j: blocked[n, o // block, i, j, o % block],
                      name="out"), "conv2d"


def conv2d_bx_te(ts, shapes, out, stride, padding):
    g, w = ts[0], ts[1]
    (_, o, oh, ow), (_, _, kh, kw) = shapes[0], shapes[1]
    ro, ri, rj = (tl.reduce_axis((0, o), "ro"), tl.reduce_axis((0, oh), "ri"),
                  tl.reduce_axis((0, ow), "rj"))

    def body(n, c, h, x):
        p, q = h + padding - ri * stride, x + padding - rj * stride
        ok = tl.all(p >= 0, p < kh, q >= 0, q < kw)
        return tl.sum(g[n, ro, ri, rj] * w[ro, c, p, q], axis=[ro, ri, rj], where=ok)
    return tl.compute(out, body, name="out"), "conv"


def conv2d_bw_te(ts, shapes, out, stride, padding):
    x, g = ts[0], ts[1]
    (nb, _, _, _), (_, _, oh, ow) = shapes[0], shapes[1]
    xp = _padded(x, shapes[0], padding)
    rn, ri, rj = (tl.reduce_axis((0, nb), "rn"), tl.reduce_axis((0, oh), "ri"),
                  tl.reduce_axis((0, ow), "rj"))
    return tl.compute(out, lambda o, c, p, q: tl.sum(
        g[rn, o, ri, rj] * xp[rn, c, ri * stride + p, rj * stride + q], axis=[rn, ri, rj]),
        name="out"), "conv"


def _pool_stages(x, shp, kernel, stride, out):
    rp, rq = tl.reduce_axis((0, kernel), "rp"), tl.reduce_axis((0, kernel), "rq")
    y = tl.compute(out, lambda n, c, i, j: tl.max(
        x[n, c, i * stride + rp, j * stride + rq], axis=[rp, rq]), name="pmax")
    sp, sq = tl.reduce_axis((0, kernel), "sp"), tl.reduce_axis((0, kernel), "sq")
    cnt = tl.compute(out, lambda n, c, i, j: tl.sum(tl.if_then_else(
        x[n, c, i * stride + sp, j * stride + sq] == y[n, c, i, j], tl.const(1.0, x.dtype),
        tl.const(0.0, x.dtype)), axis=[sp, sq]), name="pcnt")
    return y, cnt


def max_pool_te(ts, shapes, out, kernel, stride):
    x = ts[0]
    rp, rq = tl.reduce_axis((0, kernel), "rp"), tl.reduce_axis((0, kernel), "rq")
    return tl.compute(out, lambda n, c, i, j: tl.max(
        x[n, c, i * stride + rp, j * stride + rq], axis=[rp, rq]), name="out"), "conv"


def max_pool_bx_te(ts, shapes, out, kernel, stride):
    x, g = ts
    oh, ow = shapes[1][2:]
    y, cnt = _pool_stages(x, shapes[0], kernel, stride, tuple(shapes[1]))
    ri, rj = tl.reduce_axis((0, oh), "ri"), tl.reduce_axis((0, ow), "rj")

    def body(n, c, h, w):
        ok = tl.all(h - ri * stride >= 0, h - ri * stride < kernel, w - rj * stride >= 0,
                    w - rj * stride < kernel)
        hit = x[n, c, h, w] == y[n, c, ri, rj]
        return tl.sum(tl.if_then_else(hit, g[n, c, ri, rj] / cnt[n, c, ri, rj],
                                      tl.const(0.0, g.dtype)), axis=[ri, rj], where=ok)
    return tl.compute(out, body, name="out"), "conv"


def max_pool_gather_te(ts, shapes, out, kernel, stride):
    x, G = ts
    y, cnt = _pool_stages(x, shapes[0], kernel, stride, tuple(out))
    rp, rq = tl.reduce_axis((0, kernel), "rp"), tl.reduce_axis((0, kernel), "rq")

    def body(n, c, i, j):
        h, w = i * stride + rp, j * stride + rq
        return tl.sum(tl.if_then_else(x[n, c, h, w] == y[n, c, i, j],
                                      G[n, c, h, w] / cnt[n, c, i, j], tl.const(0.0, G.dtype)),
                      axis=[rp, rq])
    return tl.compute(out, body, name="out"), "conv"


def avg_pool_te(ts, shapes, out, kernel, stride):
    x = ts[0]
    rp, rq = tl.reduce_axis((0, kernel), "rp"), tl.reduce_axis((0, kernel), "rq")
    s = tl.compute(out, lambda n, c, i, j: tl.sum(
        x[n, c, i * stride + rp, j * stride + rq], axis=[rp, rq]), name="psum")
    return tl.compute(out, lambda *i: s[i] * (1.0 / kernel**2), name="out"), "conv"


def avg_pool_bx_te(ts, shapes, out, kernel, stride):
    g = ts[0]
    oh, ow = shapes[0][2:]
    ri, rj = tl.reduce_axis((0, oh), "ri"), tl.reduce_axis((0, ow), "rj")

    def body(n, c, h, w):
        ok = tl.all(h - ri * stride >= 0, h - ri * stride < kernel, w - rj * stride >= 0,
                    w - rj * stride < kernel)
        return tl.sum(g[n, c, ri, rj] * (1.0 / kernel**2), axis=[ri, rj], where=ok)
    return tl.compute(out, body, name="out"), "conv"


# ------------------------------------------------------------------ registry
def _mk(op, inputs, n):
    return api.make(op, inputs, **n.kwargs)


def _conv_grad(g, n):
    x, w = n.inputs
    return [_mk("conv2d_bx", (g, w, x), n), _mk("conv2d_bw", (x, g, w), n)]


def _bx_grad(G, n):
    g, w, x = n.inputs
    return [_mk("conv2d", (G, w), n), _mk("conv2d_bw", (G, g, w), n), None]


def _bw_grad(G, n):
    x, g, w = n.inputs
    return [_mk("conv2d_bx", (g, G, x), n), _mk("conv2d", (x, G), n), None]


register_op("conv2d", conv2d_ref, lambda x, w, stride, padding: S.conv2d(x, w, stride, padding),
            _conv_grad,
            lambda n, t: _add_t(None if t[0] is None else _mk("conv2d", (t[0], n.inputs[1]), n),
                                None if t[1] is None else _mk("conv2d", (n.inputs[0], t[1]), n)),
            conv2d_te)


def _packed_conv_ref(x, wp, stride, padding, channels):
    return conv2d_ref(x, unpack_conv_weights(wp, channels), stride, padding)


def _packed_conv_shape(x, wp, stride, padding, channels):
    kb, c, kh, kw, block = wp
    if channels > kb * block:
        raise ValueError(f"{channels} channels do not fit packed weights {tuple(wp)}")
    return S.conv2d(x, (channels, c, kh, kw), stride, padding)


def _no_derivative(*_):
    raise GraphError("conv2d_nchwc exists only inside the executor's plans (conv2d with "
                     "constant weights, packed once); differentiate the conv2d it came from")


# conv2d of weights packed at plan time (`Executor`: a conv2d whose weights are a constant);
# not a user op, and never differentiated
register_op("conv2d_nchwc", _packed_conv_ref, _packed_conv_shape, _no_derivative,
            _no_derivative, conv2d_nchwc_te)
register_op("conv2d_bx", conv2d_bx_ref, lambda g, w, x, stride, padding: tuple(x), _bx_grad,
            lambda n, t: _add_t(
                None if t[0] is None else _mk("conv2d_bx", (t[0], n.inputs[1], n.inputs[2]), n),
                None if t[1] is None else _mk("conv2d_bx", (n.inputs[0], t[1], n.inputs[2]), n)),
            conv2d_bx_te)
register_op("conv2d_bw", conv2d_bw_ref, lambda x, g, w, stride, padding: tuple(w), _bw_grad,
            lambda n, t: _add_t(
                None if t[0] is None else _mk("conv2d_bw", (t[0], n.inputs[1], n.inputs[2]), n),
                None if t[1] is None else _mk("conv2d_bw", (n.inputs[0], t[1], n.inputs[2]), n)),
            conv2d_bw_te)

register_op("max_pool2d", max_pool_ref, lambda x, kernel, stride: S.pool2d(x, kernel, stride),
            lambda g, n: [_mk("max_pool2d_bx", (n.inputs[0], g), n)],
            lambda n, t: None if t[0] is None else _mk("max_pool2d_gather",
                                                       (n.inputs[0], t[0]), n),
            max_pool_te)
register_op("max_pool2d_bx", max_pool_bx_ref, lambda x, g, kernel, stride: tuple(x),
            lambda G, n: [None, _mk("max_pool2d_gather", (n.inputs[0], G), n)],
            lambda n, t: None if t[1] is None else _mk("max_pool2d_bx", (n.inputs[0], t[1]), n),
            max_pool_bx_te)
register_op("max_pool2d_gather", max_pool_gather_ref,
            lambda x, G, kernel, stride: S.pool2d(x, kernel, stride),
            lambda g, n: [None, _mk("max_pool2d_bx", (n.inputs[0], g), n)],
            lambda n, t: None if t[1] is None else _mk("max_pool2d_gather",
                                                       (n.inputs[0], t[1]), n),
            max_pool_gather_te)
register_op("avg_pool2d", avg_pool_ref, lambda x, kernel, stride: S.pool2d(x, kernel, stride),
            lambda g, n: [_mk("avg_pool2d_bx", (g, n.inputs[0]), n)],
            lambda n, t: None if t[0] is None else _mk("avg_pool2d", (t[0],), n),
            avg_pool_te)
register_op("avg_pool2d_bx", avg_pool_bx_ref, lambda g, x, kernel, stride: tuple(x),
            lambda G, n: [_mk("avg_pool2d", (G,), n), None],
            lambda n, t: None if t[0] is None else _mk("avg_pool2d_bx", (t[0], n.inputs[1]), n),
            avg_pool_bx_te)
