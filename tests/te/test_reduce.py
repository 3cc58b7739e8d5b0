"""Reductions against numpy: sum/max/min/prod with where=, user reducers, argmax/argmin."""

import numpy as np
import pytest

import tensorlang as tl
from tests.conftest import SIZES, build, every_cpu_level, random_array

_every_cpu_level = every_cpu_level(__name__)  # host, baseline x86-64, x86-64-v3

REDUCERS = {"sum": (tl.sum, np.sum), "max": (tl.max, np.max), "min": (tl.min, np.min),
            "prod": (tl.prod, np.prod)}


def _row_reduction(red, dtype):
    """`red` over the columns of an n x m matrix (symbolic sizes), built."""
    n, m = tl.var("n"), tl.var("m")
    A = tl.placeholder((n, m), dtype, name="A")
    k = tl.reduce_axis((0, m), name="k")
    C = tl.compute((n,), lambda i: red(A[i, k], axis=k), name="C")
    return build(C, [A, C])


@pytest.mark.parametrize("dtype", ("float32", "float64", "int32", "int64"))
@pytest.mark.parametrize("name", sorted(REDUCERS))
def test_row_reductions(name, dtype, rng):
    red, ref = REDUCERS[name]
    f = _row_reduction(red, dtype)
    for rows in SIZES:
        for cols in (1, 13):
            a = random_array(rng, (rows, cols), dtype)
            if name == "prod" and dtype.startswith("float"):
                a = (1 + 0.01 * a).astype(dtype)
            if name == "prod" and dtype.startswith("int"):
                a = (a % 3).astype(dtype)
            c = np.zeros(rows, dtype)
            f(a, c)
            np.testing.assert_allclose(c, ref(a, axis=1).astype(dtype), rtol=1e-5)


@pytest.mark.parametrize("name,identity", [("sum", 0.0), ("max", -np.inf), ("min", np.inf),
                                           ("prod", 1.0)])
def test_where_clause_and_identity_elements(name, identity, rng):
    red, ref = REDUCERS[name]
    n = tl.var("n")
    A = tl.placeholder((n, 17), "float32", name="A")
    k = tl.reduce_axis(17, name="k")
    # only even k below a per-row limit; row 0 has no point at all -> the identity
    C = tl.compute((n,), lambda i: red(A[i, k], axis=k, where=(k % 2 == 0) & (k < i)),
                   name="C")
    f = build(C, [A, C])
    for rows in SIZES:
        a = (1 + 0.1 * random_array(rng, (rows, 17), "float32")).astype("float32")
        c = np.zeros(rows, "float32")
        f(a, c)
        want = np.array([ref(a[i, [q for q in range(17) if q % 2 == 0 and q < i]], initial=
                             identity) for i in range(rows)], "float32")
        np.testing.assert_allclose(c, want, rtol=1e-5)


def test_reduction_over_several_axes_and_offset_range(rng):
    n = tl.var("n")
    A = tl.placeholder((n, 6, 9), "float64", name="A")
    r = tl.reduce_axis(6, name="r")
    s = tl.reduce_axis((2, 9), name="s")
    C = tl.compute((n,), lambda i: tl.sum(A[i, r, s] * 2.0, axis=[r, s]), name="C")
    assert [a.name for a in C.op.reduce_axis] == ["r", "s"]
    f = build(C, [A, C])
    for size in SIZES:
        a = random_array(rng, (size, 6, 9), "float64")
        c = np.zeros(size)
        f(a, c)
        np.testing.assert_allclose(c, 2 * a[:, :, 2:].sum(axis=(1, 2)))


def test_matmul_with_all_sizes_symbolic(rng):
    n, m, p = tl.var("n"), tl.var("m"), tl.var("p")
    A = tl.placeholder((n, p), "float32", name="A")
    B = tl.placeholder((p, m), "float32", name="B")
    k = tl.reduce_axis((0, p), name="k")
    C = tl.compute((n, m), lambda i, j: tl.sum(A[i, k] * B[k, j], axis=k), name="C")
    f = build(C, [A, B, C])
    for rows, inner, cols in ((1, 1, 1), (13, 7, 1), (1, 300, 13), (67, 31, 45)):
        a = random_array(rng, (rows, inner), "float32")
        b = random_array(rng, (inner, cols), "float32")
        c = np.zeros((rows, cols), "float32")
        f(a, b, c)
        np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)


def test_comm_reducer_user_defined(rng):
    absmax = tl.comm_reducer(lambda x, y: tl.maximum(tl.abs(x), tl.abs(y)),
                             lambda t: tl.const(0, t), name="absmax")
    n = tl.var("n")
    A = tl.placeholder((n, 11), "float32", name="A")
    k = tl.reduce_axis(11, name="k")
    C = tl.compute((n,), lambda i: absmax(A[i, k], axis=k), name="C")
    f = build(C, [A, C])
    for size in SIZES:
        a = random_array(rng, (size, 11), "float32")
        c = np.zeros(size, "float32")
        f(a, c)
        np.testing.assert_array_equal(c, np.abs(a).max(axis=1))


def test_comm_reducer_with_numeric_identity_on_ints(rng):
    imax = tl.comm_reducer(lambda x, y: tl.maximum(x, y), 0, name="imax")
    A = tl.placeholder((5, 4), "int16", name="A")
    k = tl.reduce_axis(4, name="k")
    C = tl.compute((5,), lambda i: imax(A[i, k], axis=k), name="C")
    f = build(C, [A, C])
    a = np.abs(random_array(rng, (5, 4), "int16"))
    c = np.zeros(5, "int16")
    f(a, c)
    np.testing.assert_array_equal(c, a.max(axis=1))


@pytest.mark.parametrize("which", ["argmax", "argmin"])
@pytest.mark.parametrize("dtype", ["float32", "int32", "uint8"])
def test_argmax_argmin_first_occurrence(which, dtype, rng):
    red = getattr(tl, which)
    ref = getattr(np, which)
    n, m = tl.var("n"), tl.var("m")
    A = tl.placeholder((n, m), dtype, name="A")
    k = tl.reduce_axis((0, m), name="k")
    C = tl.compute((n,), lambda i: red(A[i, k], axis=k), name="C")
    assert C.dtype.name == "int32"
    f = build(C, [A, C])
    for rows in SIZES:
        for cols in (1, 13, 40):
            a = (random_array(rng, (rows, cols), dtype) % 5).astype(dtype)  # many ties
            c = np.zeros(rows, "int32")
            f(a, c)
            np.testing.assert_array_equal(c, ref(a, axis=1))


def test_argmax_nan_like_numpy(rng):
    A = tl.placeholder((4, 6), "float64", name="A")
    k = tl.reduce_axis(6, name="k")
    C = tl.compute((4,), lambda i: tl.argmax(A[i, k], axis=k, dtype="int64"), name="C")
    D = tl.compute((4,), lambda i: tl.argmin(A[i, k], axis=k, dtype="int64"), name="D")
    f = build([C, D], [A, C, D])
    a = rng.standard_normal((4, 6))
    a[0, 3] = np.nan
    a[1, [2, 4]] = np.nan
    c, d = np.zeros(4, "int64"), np.zeros(4, "int64")
    f(a, c, d)
    np.testing.assert_array_equal(c, np.argmax(a, axis=1))
    np.testing.assert_array_equal(d, np.argmin(a, axis=1))


def test_reductions_feeding_elementwise_stages(rng):
    # a softmax: max, exp, sum, divide -- four stages, intermediates allocated
    n = tl.var("n")
    X = tl.placeholder((n, 37), "float32", name="X")
    k = tl.reduce_axis(37, name="k")
    M = tl.compute((n,), lambda i: tl.max(X[i, k], axis=k), name="M")
    E = tl.compute((n, 37), lambda i, j: tl.exp(X[i, j] - M[i]), name="E")
    k2 = tl.reduce_axis(37, name="k2")
    S = tl.compute((n,), lambda i: tl.sum(E[i, k2], axis=k2), name="S")
    Y = tl.compute((n, 37), lambda i, j: E[i, j] / S[i], name="Y")
    f = build(Y, [X, Y])
    for size in SIZES:
        x = random_array(rng, (size, 37), "float32") * 5
        y = np.zeros_like(x)
        f(x, y)
        e = np.exp(x - x.max(axis=1, keepdims=True))
        np.testing.assert_allclose(y, e / e.sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("name,identity", [("sum", 0.0), ("max", -np.inf), ("min", np.inf),
                                           ("prod", 1.0)])
def test_empty_reduce_axis_gives_the_identity(name, identity):
    # regression: the init statement must not inherit "some k exists" from the update's domain
    red = REDUCERS[name][0]
    n, m = tl.var("n"), tl.var("m")
    A = tl.placeholder((n, m), "float32", name="A")
    k = tl.reduce_axis((0, m), name="k")
    C = tl.compute((n,), lambda i: red(A[i, k], axis=k), name="C")
    f = build(C, [A, C])
    c = np.full(5, 42.0, "float32")
    f(np.zeros((5, 0), "float32"), c)
    np.testing.assert_array_equal(c, np.full(5, identity, "float32"))


def test_matmul_with_empty_inner_dimension_is_zero():
    n, p = tl.var("n"), tl.var("p")
    A = tl.placeholder((n, p), name="A")
    B = tl.placeholder((p, n), name="B")
    k = tl.reduce_axis((0, p), name="k")
    C = tl.compute((n, n), lambda i, j: tl.sum(A[i, k] * B[k, j], axis=k), name="C")
    f = build(C, [A, B, C])
    c = np.full((3, 3), 7.0, "float32")
    f(np.zeros((3, 0), "float32"), np.zeros((0, 3), "float32"), c)
    np.testing.assert_array_equal(c, np.zeros((3, 3)))


@pytest.mark.parametrize("dtype", ("float32", "float64", "int32"))
@pytest.mark.parametrize("which", ("nanmax", "nanmin"))
def test_nanmax_nanmin_ignore_nan_as_numpy(which, dtype, rng):
    """tl.nanmax / tl.nanmin: NaN ignored, NaN where every value is NaN (numpy's nanmax /
    nanmin), integers as max / min; rows of 1, 13 and 300 (LLVM vectorises the long ones)."""
    import warnings

    red, ref = getattr(tl, which), getattr(np, which)
    f = _row_reduction(red, dtype)
    for cols in SIZES:
        a = random_array(rng, (5, cols), dtype)
        if dtype != "int32":
            a[0, cols // 2] = np.nan
            a[1, :] = np.nan
            a[2, 0] = np.inf if which == "nanmax" else -np.inf
            a[3, -1] = np.nan
        c = np.zeros(5, dtype)
        f(a, c)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)     # the all-NaN row
            np.testing.assert_array_equal(c, ref(a, axis=1).astype(dtype))
