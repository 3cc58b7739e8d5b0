"""Recurrences and reductions for the legality tests, each with a plain-Python reference."""

import numpy as np

import tensorlang as tl


def prefix_sum(n=12):
    x = tl.placeholder((n,), dtype="float64", name="x")
    y = tl.recurrence((n,), lambda y, i: tl.if_then_else(i > 0, y[i - 1], 0.0) + x[i],
                      dtype="float64", name="y")

    def ref(xv):
        return [np.cumsum(xv)]
    return [x], y, ref


def iir(n=12, a=0.5):
    x = tl.placeholder((n,), dtype="float64", name="x")
    y = tl.recurrence((n,), lambda y, i: tl.if_then_else(i > 0, a * y[i - 1], 0.0) + x[i],
                      dtype="float64", name="y")

    def ref(xv):
        out = np.zeros_like(xv)
        for i in range(len(xv)):
            out[i] = (a * out[i - 1] if i > 0 else 0.0) + xv[i]
        return [out]
    return [x], y, ref


def grid(n=7, m=6):
    """u[i, j] = u[i-1, j] + u[i, j-1] + x[i, j]: distances (1, 0) and (0, 1)."""
    x = tl.placeholder((n, m), dtype="float64", name="x")
    u = tl.recurrence((n, m), lambda u, i, j: tl.if_then_else(i > 0, u[i - 1, j], 0.0)
                      + tl.if_then_else(j > 0, u[i, j - 1], 0.0) + x[i, j],
                      dtype="float64", name="u")

    def ref(xv):
        out = np.zeros_like(xv)
        for i in range(xv.shape[0]):
            for j in range(xv.shape[1]):
                out[i, j] = (out[i - 1, j] if i else 0) + (out[i, j - 1] if j else 0) + xv[i, j]
        return [out]
    return [x], u, ref


def anti(n=7, m=6):
    """v[i, j] = 0.5 * v[i-1, j+1] + x[i, j]: distance (1, -1)."""
    x = tl.placeholder((n, m), dtype="float64", name="x")
    v = tl.recurrence((n, m), lambda v, i, j: tl.if_then_else(
        (i > 0) & (j < m - 1), 0.5 * v[i - 1, j + 1], 0.0) + x[i, j], dtype="float64", name="v")

    def ref(xv):
        out = np.zeros_like(xv)
        for i in range(n):
            for j in range(m):
                out[i, j] = (0.5 * out[i - 1, j + 1] if i > 0 and j < m - 1 else 0) + xv[i, j]
        return [out]
    return [x], v, ref


def stencil(t=5, n=9, dtype="float64"):
    """A time-stepped 3-point stencil: u[t, i] from u[t-1, i-1..i+1]."""
    x = tl.placeholder((n,), dtype=dtype, name="x")
    u = tl.recurrence((t, n), lambda u, s, i: tl.if_then_else(
        s == 0, x[i], tl.if_then_else((i > 0) & (i < n - 1),
                                      (u[s - 1, i - 1] + u[s - 1, i] + u[s - 1, i + 1]) / 3.0,
                                      u[s - 1, i])), dtype=dtype, name="u")

    def ref(xv):
        out = np.zeros((t, n))
        out[0] = xv
        for s in range(1, t):
            out[s] = out[s - 1]
            out[s, 1:-1] = (out[s - 1, :-2] + out[s - 1, 1:-1] + out[s - 1, 2:]) / 3.0
        return [out]
    return [x], u, ref


def edit_distance(n=6, m=7):
    a = tl.placeholder((n,), dtype="int32", name="a")
    b = tl.placeholder((m,), dtype="int32", name="b")
    D = tl.recurrence((n + 1, m + 1), lambda D, i, j: tl.if_then_else(
        i == 0, j, tl.if_then_else(j == 0, i, tl.minimum(tl.minimum(
            D[i - 1, j] + 1, D[i, j - 1] + 1),
            D[i - 1, j - 1] + (a[i - 1] != b[j - 1]).astype("int32")))),
        dtype="int32", name="D")

    def ref(av, bv):
        out = np.zeros((n + 1, m + 1), np.int32)
        for i in range(n + 1):
            for j in range(m + 1):
                if i == 0:
                    out[i, j] = j
                elif j == 0:
                    out[i, j] = i
                else:
                    out[i, j] = min(out[i - 1, j] + 1, out[i, j - 1] + 1,
                                    out[i - 1, j - 1] + (av[i - 1] != bv[j - 1]))
        return [out]
    return [a, b], D, ref


def gauss_seidel(t=3, n=6, m=5):
    """An in-order sweep: new values above and left, old values below and right."""
    x = tl.placeholder((n, m), dtype="float64", name="x")

    def body(G, s, i, j):
        inner = (i > 0) & (i < n - 1) & (j > 0) & (j < m - 1)
        return tl.if_then_else(s == 0, x[i, j], tl.if_then_else(
            inner, (G[s, i - 1, j] + G[s - 1, i + 1, j] + G[s, i, j - 1] + G[s - 1, i, j + 1])
            * 0.25, G[s - 1, i, j]))
    G = tl.recurrence((t, n, m), body, dtype="float64", name="G")

    def ref(xv):
        out = np.zeros((t, n, m))
        out[0] = xv
        for s in range(1, t):
            out[s] = out[s - 1]
            for i in range(1, n - 1):
                for j in range(1, m - 1):
                    out[s, i, j] = (out[s, i - 1, j] + out[s - 1, i + 1, j] + out[s, i, j - 1]
                                    + out[s - 1, i, j + 1]) * 0.25
        return [out]
    return [x], G, ref


def matmul(n=6, m=5):
    A = tl.placeholder((n, m), dtype="float64", name="A")
    B = tl.placeholder((m, n), dtype="float64", name="B")
    k = tl.reduce_axis((0, m), name="k")
    C = tl.compute((n, n), lambda i, j: tl.sum(A[i, k] * B[k, j], axis=k), name="C")
    return [A, B], C, lambda a, b: [a @ b]


def row_sum(n=6, m=9):
    A = tl.placeholder((n, m), dtype="float64", name="A")
    k = tl.reduce_axis((0, m), name="k")
    S = tl.compute((n,), lambda i: tl.sum(A[i, k], axis=k), name="S")
    return [A], S, lambda a: [a.sum(axis=1)]


def row_prefix(n=5, m=8):
    """y[i, j] = y[i, j-1] + x[i, j]: each row is independent."""
    x = tl.placeholder((n, m), dtype="float64", name="x")
    y = tl.recurrence((n, m), lambda y, i, j: tl.if_then_else(j > 0, y[i, j - 1], 0.0)
                      + x[i, j], dtype="float64", name="y")
    return [x], y, lambda xv: [np.cumsum(xv, axis=1)]


def argmax_rows(n=5, m=11):
    A = tl.placeholder((n, m), dtype="float64", name="A")
    k = tl.reduce_axis((0, m), name="k")
    I = tl.compute((n,), lambda i: tl.argmax(A[i, k], axis=k), name="I")
    return [A], I, lambda a: [a.argmax(axis=1)]


def inputs(tensors, rng):
    out = []
    for t in tensors:
        shape = tuple(int(s.value) for s in t.shape)
        if t.dtype.is_int:
            out.append(rng.integers(0, 3, shape).astype(t.dtype.np))
        else:
            out.append(rng.integers(-4, 5, shape).astype(t.dtype.np))
    return out
