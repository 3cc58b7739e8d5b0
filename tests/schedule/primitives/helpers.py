"""Kernels and checks shared by the primitives' test files (one file per primitive, as TVM's
tests/python/tir-schedule keeps them): each file checks its primitive against numpy and the
interpreter, its refusals (with the witness) and the replay of its trace."""

import re

import numpy as np
import pytest

import tensorlang as tl
from tensorlang.ir.interp import run_lowered
from tensorlang.ir.stmt import Allocate
from tensorlang.ir.visit import walk_stmt

RNG = np.random.default_rng(0)


# ---------------------------------------------------------------------------- kernels
def vadd(n=None):
    n = tl.var("n") if n is None else n
    A = tl.placeholder((n,), name="A")
    B = tl.compute((n,), lambda i: A[i] * 2.0 + 1.0, name="B")
    return A, B


def matmul(n=None, m=None):
    """C = A @ B with A n x m, B m x n (symbolic sizes unless given)."""
    n = tl.var("n") if n is None else n
    m = tl.var("m") if m is None else m
    A = tl.placeholder((n, m), name="A")
    B = tl.placeholder((m, n), name="B")
    k = tl.reduce_axis((0, m), name="k")
    C = tl.compute((n, n), lambda i, j: tl.sum(A[i, k] * B[k, j], axis=k), name="C")
    return A, B, C


def matmul_nmk(N, M, K):
    """C = A @ B with A N x K, B K x M."""
    A = tl.placeholder((N, K), name="A")
    B = tl.placeholder((K, M), name="B")
    k = tl.reduce_axis((0, K), name="k")
    C = tl.compute((N, M), lambda i, j: tl.sum(A[i, k] * B[k, j], axis=k), name="C")
    return A, B, C


def blur(n, m=None):
    """A two-stage vertical blur: B = 2 A + 1 (n + 2 rows), C = three rows of B summed."""
    m = n if m is None else m
    A = tl.placeholder((n + 2, m), name="A")
    B = tl.compute((n + 2, m), lambda y, x: A[y, x] * 2.0 + 1.0, name="B")
    C = tl.compute((n, m), lambda y, x: B[y, x] + B[y + 1, x] + B[y + 2, x], name="C")
    return A, B, C


def prefix_sum(n=None):
    """y[i] = y[i - 1] + x[i]: every i depends on i - 1 (a dependence to refuse against)."""
    n = tl.var("n") if n is None else n
    x = tl.placeholder((n,), "float64", name="x")
    y = tl.recurrence((n,), lambda y, i: tl.if_then_else(i > 0, y[i - 1], 0.0) + x[i],
                      dtype="float64", name="y")
    return x, y


def grid(n=None, m=None):
    """u[i, j] = u[i - 1, j] + u[i, j - 1] + x[i, j]: dependences along both loops."""
    n = tl.var("n") if n is None else n
    m = tl.var("m") if m is None else m
    x = tl.placeholder((n, m), "float64", name="x")
    u = tl.recurrence((n, m), lambda u, i, j: tl.if_then_else(i > 0, u[i - 1, j], 0.0)
                      + tl.if_then_else(j > 0, u[i, j - 1], 0.0) + x[i, j],
                      dtype="float64", name="u")
    return x, u


def anti(n=None, m=None):
    """v[i, j] = 0.5 v[i - 1, j + 1] + x[i, j]: distance (1, -1), so j may not go outside i."""
    n = tl.var("n") if n is None else n
    m = tl.var("m") if m is None else m
    x = tl.placeholder((n, m), "float64", name="x")
    v = tl.recurrence((n, m), lambda v, i, j: tl.if_then_else(
        (i > 0) & (j < m - 1), 0.5 * v[i - 1, j + 1], 0.0) + x[i, j], dtype="float64",
        name="v")
    return x, v


def grid_ref(x):
    out = np.zeros_like(x)
    for i in range(x.shape[0]):
        for j in range(x.shape[1]):
            out[i, j] = (out[i - 1, j] if i else 0) + (out[i, j - 1] if j else 0) + x[i, j]
    return out


# ----------------------------------------------------------------------------- checks
def run_vadd(s, A, B, sizes=(1, 2, 7, 13, 64, 300)):
    f = tl.build(s, [A, B])
    for n in sizes:
        a = RNG.random(n, dtype=np.float32)
        b = np.full(n, np.nan, np.float32)
        f(a, b)
        np.testing.assert_allclose(b, a * 2 + 1, rtol=1e-6)


def run_matmul(s, A, B, C, sizes=((1, 1), (13, 7), (33, 17))):
    f = tl.build(s, [A, B, C])
    for n, m in sizes:
        a = RNG.random((n, m), dtype=np.float32)
        b = RNG.random((m, n), dtype=np.float32)
        c = np.full((n, n), np.nan, np.float32)
        f(a, b, c)
        np.testing.assert_allclose(c, a @ b, rtol=1e-5)


def check_blur(s, A, C, sizes):
    f = tl.build(s, [A, C])
    for N in sizes:
        a = np.random.default_rng(N).random((N + 2, N), dtype=np.float32)
        c = np.full((N, N), np.nan, np.float32)
        f(a, c)
        b = a * 2 + 1
        np.testing.assert_allclose(c, b[:-2] + b[1:-1] + b[2:], rtol=1e-5)


def check_rect_blur(s, A, C, n, m):
    a = np.random.default_rng(n * m).random((n + 2, m), dtype=np.float32)
    c = np.full((n, m), np.nan, np.float32)
    tl.build(s, [A, C])(a, c)
    b = a * 2 + 1
    np.testing.assert_allclose(c, b[:-2] + b[1:-1] + b[2:], rtol=1e-5)


def allocations(f) -> dict[str, tuple]:
    """name -> shape (ints where constant) of every allocation in a lowered function."""
    out = {}
    for x in walk_stmt(f.body):
        if isinstance(x, Allocate):
            out[x.buffer.name] = tuple(getattr(e, "value", str(e)) for e in x.buffer.shape)
    return out


def assert_computes(s, args, cases, rtol=1e-5, llvm=True):
    """The interpreter (running the lowered nest) and, unless `llvm` is False, the built
    kernel both give `want` for each `(inputs, want)` of `cases`; the output starts as NaN
    (or -1), so an element that the schedule leaves unwritten fails."""
    low = tl.lower(s, args)
    runs = [("interpreter", lambda *a: run_lowered(low, list(a)))]
    if llvm:
        runs.append(("llvm", tl.build(s, args)))
    for ins, want in cases:
        for name, run in runs:
            fill = np.nan if want.dtype.kind == "f" else -1
            out = np.full(want.shape, fill, want.dtype)
            run(*ins, out)
            np.testing.assert_allclose(out, want, rtol=rtol, err_msg=name)


def vadd_cases(sizes=(1, 7, 8, 28)):
    """(inputs, expected) of vadd at sizes 1, a prime and multiples of 4 and 7."""
    return [([a], a * 2 + 1) for a in (RNG.random(n, dtype=np.float32) for n in sizes)]


def matmul_cases(sizes=((1, 1), (7, 5), (8, 3), (13, 11))):
    """(inputs, expected) of matmul: n and m 1, primes, and multiples of 2 and 4."""
    out = []
    for n, m in sizes:
        a, b = RNG.random((n, m), dtype=np.float32), RNG.random((m, n), dtype=np.float32)
        out.append(([a, b], a @ b))
    return out


def grid_cases(sizes=((1, 1), (7, 5), (8, 6), (13, 4))):
    out = []
    for n, m in sizes:
        x = RNG.standard_normal((n, m))
        out.append(([x], grid_ref(x)))
    return out


def assert_replays(s, args, make):
    """The schedule's trace — as data (`replay`) and as its Python text (`trace_text`) —
    applied to a fresh copy of the computation gives the same loop nest, which differs
    from the unscheduled one. `make()` builds the computation again and returns the
    tensors of `args` in order, the output last."""
    text = str(tl.lower(s, args))
    fresh = list(make())
    assert str(tl.lower(tl.create_schedule(fresh[-1]), fresh)) != text, "nothing to replay"
    again = s.replay(tl.create_schedule(fresh[-1]))
    assert again.trace == s.trace
    assert str(tl.lower(again, fresh)) == text
    fresh = list(make())
    pasted = tl.create_schedule(fresh[-1])
    exec(s.trace_text(), {"s": pasted})
    assert pasted.trace == s.trace
    assert str(tl.lower(pasted, fresh)) == text


def assert_refused_with_witness(s, apply, prim: str, stage: str):
    """`apply()` raises IllegalScheduleError naming `prim`, `stage` and the witness's
    iterations (their values and, where it gives them, their loop coordinates); the schedule
    is left as it was. Returns the witness."""
    before = (s.trace_text(), [(st.id, st.loops, st.state.attach) for st in s.stages])
    with pytest.raises(tl.IllegalScheduleError) as info:
        apply()
    assert before == (s.trace_text(), [(st.id, st.loops, st.state.attach) for st in s.stages])
    w = info.value.witness
    msg = str(info.value)
    assert msg.startswith(prim + "(") and stage in msg, msg
    assert w is not None and (w.source or w.sink), msg
    for point, loops in ((w.source, w.source_loops), (w.sink, w.sink_loops)):
        if point:   # `y[i=1] (loops i.outer=0, i.inner=1)`: the iteration and its loops
            named = r"\b\w+\[" + re.escape(", ".join(f"{k}={v}" for k, v in point.items()))
            if loops:
                named += re.escape("] (loops " + ", ".join(f"{k}={v}" for k, v in loops.items())
                                   + ")")
            assert re.search(named, msg), (msg, w)
    return w


def prefix_cases(sizes=(1, 7, 8, 20)):
    return [([x], np.cumsum(x)) for x in (RNG.standard_normal(n) for n in sizes)]


def blur_cases(sizes=(1, 5, 8, 13)):
    out = []
    for n in sizes:
        a = RNG.random((n + 2, n), dtype=np.float32)
        b = a * 2 + 1
        out.append(([a], b[:-2] + b[1:-1] + b[2:]))
    return out
