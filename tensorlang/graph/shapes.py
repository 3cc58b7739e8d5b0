"""Shape rules of the graph ops (numpy's), on concrete shapes; ValueError on a mismatch
(the caller names the op and the shapes)."""

from __future__ import annotations

import numpy as np


def broadcast(*shapes) -> tuple[int, ...]:
    try:
        return tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        raise ValueError("shapes do not broadcast") from None


def axes(axis, ndim: int) -> tuple[int, ...]:
    """Normalised, sorted reduction axes (None: all)."""
    if axis is None:
        return tuple(range(ndim))
    out = []
    for a in (axis if isinstance(axis, tuple) else (axis,)):
        if not -ndim <= a < ndim:
            raise ValueError(f"axis {a} is out of range for {ndim} dimensions")
        out.append(a % ndim)
    if len(set(out)) != len(out):
        raise ValueError(f"repeated axis in {axis}")
    return tuple(sorted(out))


def reduced(shape, axis, keepdims: bool) -> tuple[int, ...]:
    ax = axes(axis, len(shape))
    if keepdims:
        return tuple(1 if d in ax else s for d, s in enumerate(shape))
    return tuple(s for d, s in enumerate(shape) if d not in ax)


def reshaped(shape, new) -> tuple[int, ...]:
    size = int(np.prod(shape, dtype=np.int64))
    new = tuple(int(s) for s in new)
    if new.count(-1) > 1:
        raise ValueError("at most one -1 in a new shape")
    if -1 in new:
        rest = int(np.prod([s for s in new if s != -1], dtype=np.int64))
        if rest == 0 or size % rest:
            raise ValueError(f"cannot reshape {size} elements into {new}")
        new = tuple(size // rest if s == -1 else s for s in new)
    if int(np.prod(new, dtype=np.int64)) != size or any(s < 0 for s in new):
        raise ValueError(f"cannot reshape {size} elements into {new}")
    return new


def permutation(axes_, ndim: int) -> tuple[int, ...]:
    if axes_ is None:
        return tuple(reversed(range(ndim)))
    p = tuple(a % ndim for a in axes_)
    if sorted(p) != list(range(ndim)) or len(axes_) != ndim:
        raise ValueError(f"axes {axes_} are not a permutation of {ndim} dimensions")
    return p


def matmul(a, b, ta: bool, tb: bool) -> tuple[int, ...]:
    if len(a) < 2 or len(b) < 2:
        raise ValueError("matmul needs operands of 2 or more dimensions")
    m, ka = (a[-1], a[-2]) if ta else (a[-2], a[-1])
    kb, n = (b[-1], b[-2]) if tb else (b[-2], b[-1])
    if ka != kb:
        raise ValueError(f"inner dimensions differ ({ka} and {kb})")
    return broadcast(a[:-2], b[:-2]) + (m, n)


def conv_out(size: int, k: int, stride: int, pad: int) -> int:
    out = (size + 2 * pad - k) // stride + 1
    if out < 1:
        raise ValueError(f"a window of {k} (stride {stride}, padding {pad}) does not fit in "
                         f"{size}")
    return out


def conv2d(x, w, stride: int, padding: int) -> tuple[int, ...]:
    if len(x) != 4 or len(w) != 4:
        raise ValueError("conv2d takes x in NCHW and w in OIHW (4 dimensions each)")
    if x[1] != w[1]:
        raise ValueError(f"x has {x[1]} channels but w expects {w[1]}")
    return (x[0], w[0], conv_out(x[2], w[2], stride, padding),
            conv_out(x[3], w[3], stride, padding))


def pool2d(x, kernel: int, stride: int) -> tuple[int, ...]:
    if len(x) != 4:
        raise ValueError("pooling takes x in NCHW (4 dimensions)")
    return (x[0], x[1], conv_out(x[2], kernel, stride, 0), conv_out(x[3], kernel, stride, 0))


def concat(shapes, axis: int) -> tuple[int, ...]:
    first = shapes[0]
    ax = axes(axis, len(first))[0]
    for s in shapes[1:]:
        if len(s) != len(first) or any(a != b for d, (a, b) in enumerate(zip(s, first))
                                       if d != ax):
            raise ValueError(f"concat along axis {ax} needs equal other dimensions")
    return first[:ax] + (sum(s[ax] for s in shapes),) + first[ax + 1:]


def read_batch(shp, bi, nb: int) -> tuple:
    """The batch indices into an operand of batch shape `shp[:-2]` at the output's batch
    indices `bi` (of `nb` dimensions), broadcast as numpy's: a dimension of 1 reads 0."""
    bs = shp[:-2]
    off = nb - len(bs)
    return tuple(0 if bs[d] == 1 else bi[off + d] for d in range(len(bs)))
