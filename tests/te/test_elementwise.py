"""Elementwise operators on every dtype, one symbolic build called at several sizes."""

import numpy as np
import pytest

import tensorlang as tl
from tests.conftest import SIZES, build, every_cpu_level, random_array

_every_cpu_level = every_cpu_level(__name__)  # host, baseline x86-64, x86-64-v3

INTS = ("int8", "int16", "int32", "int64", "uint8")
FLOATS = ("float16", "float32", "float64")

BINARY = {
    "add": (lambda a, b: a + b, np.add),
    "sub": (lambda a, b: a - b, np.subtract),
    "mul": (lambda a, b: a * b, np.multiply),
    "maximum": (tl.maximum, np.maximum),
    "minimum": (tl.minimum, np.minimum),
}


def _binary_kernel(fn, dtype):
    n = tl.var("n")
    A = tl.placeholder((n,), dtype, name="A")
    B = tl.placeholder((n,), dtype, name="B")
    C = tl.compute((n,), lambda i: fn(A[i], B[i]), name="C")
    return build(C, [A, B, C]), C


@pytest.mark.parametrize("dtype", INTS + FLOATS)
@pytest.mark.parametrize("op", sorted(BINARY))
def test_binary_ops_every_dtype(op, dtype, rng):
    fn, ref = BINARY[op]
    f, C = _binary_kernel(fn, dtype)
    for size in SIZES:
        a, b = random_array(rng, size, dtype), random_array(rng, size, dtype)
        c = np.zeros(size, C.dtype.np)
        f(a, b, c)
        with np.errstate(all="ignore"):
            np.testing.assert_array_equal(c, ref(a, b).astype(C.dtype.np))


@pytest.mark.parametrize("dtype", INTS)
def test_integer_floordiv_and_mod_follow_python_with_zero_divisors(dtype, rng):
    n = tl.var("n")
    A = tl.placeholder((n,), dtype, name="A")
    B = tl.placeholder((n,), dtype, name="B")
    Q = tl.compute((n,), lambda i: A[i] // B[i], name="Q")
    R = tl.compute((n,), lambda i: A[i] % B[i], name="R")
    f = build([Q, R], [A, B, Q, R])
    for size in SIZES:
        a, b = random_array(rng, size, dtype), random_array(rng, size, dtype)
        b[::3] = 0  # numpy's integer division by zero gives 0
        if np.dtype(dtype).kind == "i":
            b[1::5] = -1
            a[::7] = np.iinfo(dtype).min  # INT_MIN // -1 must not trap
        q, r = np.zeros(size, dtype), np.zeros(size, dtype)
        f(a, b, q, r)
        with np.errstate(all="ignore"):
            np.testing.assert_array_equal(q, np.floor_divide(a, b))
            np.testing.assert_array_equal(r, np.mod(a, b))


@pytest.mark.parametrize("dtype", FLOATS)
def test_float_division_floordiv_mod(dtype, rng):
    n = tl.var("n")
    A = tl.placeholder((n,), dtype, name="A")
    B = tl.placeholder((n,), dtype, name="B")
    D = tl.compute((n,), lambda i: A[i] / B[i], name="D")
    Q = tl.compute((n,), lambda i: A[i] // B[i], name="Q")
    R = tl.compute((n,), lambda i: A[i] % B[i], name="R")
    f = build([D, Q, R], [A, B, D, Q, R])
    tol = 1e-2 if dtype == "float16" else 1e-5
    for size in SIZES:
        a, b = random_array(rng, size, dtype), random_array(rng, size, dtype)
        b[np.abs(b) < 0.1] = 0.5
        d, q, r = (np.zeros(size, dtype) for _ in range(3))
        f(a, b, d, q, r)
        np.testing.assert_allclose(d, a / b, rtol=tol)
        np.testing.assert_array_equal(q, np.floor_divide(a, b))
        np.testing.assert_allclose(r, np.mod(a, b), rtol=tol, atol=tol)


def test_true_division_of_integers_gives_float64(rng):
    n = tl.var("n")
    A = tl.placeholder((n,), "int32", name="A")
    C = tl.compute((n,), lambda i: A[i] / 7, name="C")
    assert C.dtype.name == "float64"
    f = build(C, [A, C])
    for size in SIZES:
        a = random_array(rng, size, "int32")
        c = np.zeros(size, "float64")
        f(a, c)
        np.testing.assert_allclose(c, a / 7)


@pytest.mark.parametrize("dtype", ("int32", "float32", "float64", "uint8"))
def test_comparisons_and_logic_produce_bools(dtype, rng):
    n = tl.var("n")
    A = tl.placeholder((n,), dtype, name="A")
    B = tl.placeholder((n,), dtype, name="B")
    outs = {
        "lt": (lambda i: A[i] < B[i], np.less),
        "le": (lambda i: A[i] <= B[i], np.less_equal),
        "gt": (lambda i: A[i] > B[i], np.greater),
        "ge": (lambda i: A[i] >= B[i], np.greater_equal),
        "eq": (lambda i: A[i] == B[i], np.equal),
        "ne": (lambda i: A[i] != B[i], np.not_equal),
        "and_": (lambda i: (A[i] < B[i]) & (A[i] > 0), lambda a, b: (a < b) & (a > 0)),
        "or_": (lambda i: (A[i] < B[i]) | (A[i] > 0), lambda a, b: (a < b) | (a > 0)),
        "not_": (lambda i: ~(A[i] < B[i]), lambda a, b: ~(a < b)),
    }
    tensors = {k: tl.compute((n,), fn, name=k) for k, (fn, _) in outs.items()}
    f = build(list(tensors.values()), [A, B, *tensors.values()])
    for size in SIZES:
        a, b = random_array(rng, size, dtype), random_array(rng, size, dtype)
        b[: size // 2] = a[: size // 2]  # equal elements too
        res = {k: np.zeros(size, bool) for k in outs}
        f(a, b, *res.values())
        for k, (_, ref) in outs.items():
            np.testing.assert_array_equal(res[k], ref(a, b), err_msg=k)


def test_bool_tensors_in_and_out(rng):
    n = tl.var("n")
    A = tl.placeholder((n,), "bool", name="A")
    B = tl.placeholder((n,), "bool", name="B")
    C = tl.compute((n,), lambda i: (A[i] & ~B[i]) | (B[i] & ~A[i]), name="C")
    D = tl.compute((n,), lambda i: A[i].astype("int32") + B[i].astype("int32"), name="D")
    f = build([C, D], [A, B, C, D])
    for size in SIZES:
        a, b = random_array(rng, size, bool), random_array(rng, size, bool)
        c, d = np.zeros(size, bool), np.zeros(size, "int32")
        f(a, b, c, d)
        np.testing.assert_array_equal(c, a ^ b)
        np.testing.assert_array_equal(d, a.astype("int32") + b)


CASTS = [("float32", "int32"), ("float64", "int8"), ("int32", "float16"), ("int64", "int8"),
         ("uint8", "int32"), ("int8", "uint8"), ("float32", "float64"), ("float64", "float16"),
         ("int32", "bool"), ("float32", "bool"), ("bool", "float32"), ("uint8", "float32")]


@pytest.mark.parametrize("src,dst", CASTS)
def test_astype_matches_numpy(src, dst, rng):
    n = tl.var("n")
    A = tl.placeholder((n,), src, name="A")
    C = tl.compute((n,), lambda i: A[i].astype(dst), name="C")
    f = build(C, [A, C])
    for size in SIZES:
        a = random_array(rng, size, src)
        if np.dtype(src).kind == "f":
            a = (a * 20).astype(src)  # in range of every integer type used above
        c = np.zeros(size, dst)
        f(a, c)
        np.testing.assert_array_equal(c, a.astype(dst))


def test_python_scalars_are_weak_like_numpy():
    A = tl.placeholder((4,), "float16", name="A")
    I8 = tl.placeholder((4,), "int8", name="I8")
    assert (A[0] * 2.0).dtype.name == "float16"
    assert (I8[0] + 1).dtype.name == "int8"
    assert (I8[0] + 1.5).dtype.name == "float64"
    assert (A[0] + I8[0]).dtype.name == "float16"
    assert (A[0].astype("float32") + A[0]).dtype.name == "float32"


def test_power_and_unary_minus(rng):
    n = tl.var("n")
    A = tl.placeholder((n,), "float32", name="A")
    I = tl.placeholder((n,), "int32", name="I")
    P2 = tl.compute((n,), lambda i: A[i] ** 2, name="P2")
    P3 = tl.compute((n,), lambda i: tl.abs(A[i]) ** 1.5, name="P3")
    PI = tl.compute((n,), lambda i: I[i] ** 3, name="PI")
    NEG = tl.compute((n,), lambda i: -A[i] + (-I[i]).astype("float32"), name="NEG")
    f = build([P2, P3, PI, NEG], [A, I, P2, P3, PI, NEG])
    for size in SIZES:
        a = random_array(rng, size, "float32")
        iv = (random_array(rng, size, "int32") % 50).astype("int32")
        p2, p3, neg = (np.zeros(size, "float32") for _ in range(3))
        pi = np.zeros(size, "int32")
        f(a, iv, p2, p3, pi, neg)
        np.testing.assert_allclose(p2, a**2, rtol=1e-6)
        np.testing.assert_allclose(p3, np.abs(a) ** 1.5, rtol=1e-6)
        np.testing.assert_array_equal(pi, iv**3)
        np.testing.assert_allclose(neg, -a - iv, rtol=1e-6)


def test_index_arithmetic_and_symbolic_values(rng):
    n = tl.var("n")
    A = tl.placeholder((n,), "float32", name="A")
    C = tl.compute((n,), lambda i: A[n - 1 - i] * i.astype("float32") + n.astype("float32"),
                   name="C")
    f = build(C, [A, C])
    for size in SIZES:
        a = random_array(rng, size, "float32")
        c = np.zeros(size, "float32")
        f(a, c)
        ref = a[::-1] * np.arange(size, dtype=np.float32) + np.float32(size)
        # a*b + c may be one fused multiply-add: off by at most an ulp of a*b
        prod = np.abs(a[::-1] * np.arange(size, dtype=np.float32))
        np.testing.assert_allclose(c, ref, rtol=1e-6, atol=2 * np.spacing(prod.max(initial=0)))


def test_two_dimensional_shapes_and_const_shapes(rng):
    n, m = tl.var("n"), tl.var("m")
    A = tl.placeholder((n, m), "float64", name="A")
    B = tl.placeholder((m,), "float64", name="B")
    C = tl.compute((n, m), lambda i, j: A[i, j] * B[j] + 1.0, name="C")
    f = build(C, [A, B, C])
    for rows, cols in ((1, 1), (13, 1), (1, 13), (31, 300)):
        a, b = random_array(rng, (rows, cols), "float64"), random_array(rng, cols, "float64")
        c = np.zeros((rows, cols))
        f(a, b, c)
        np.testing.assert_allclose(c, a * b + 1.0)


def test_zero_dimensional_tensors(rng):
    A = tl.placeholder((), "float32", name="A")
    B = tl.placeholder((5,), "float32", name="B")
    C = tl.compute((5,), lambda i: B[i] * A[()], name="C")
    f = build(C, [A, B, C])
    a, b, c = np.array(3.0, "float32"), np.arange(5, dtype="float32"), np.zeros(5, "float32")
    f(a, b, c)
    np.testing.assert_array_equal(c, b * 3)


def test_python_ints_with_bools_and_out_of_range_like_numpy():
    # found by the pipeline fuzzer: bool + 0 is numpy's default int (int64), and a Python
    # int that does not fit the other operand's type is refused, as numpy refuses it
    B = tl.placeholder((4,), "bool", name="B")
    assert (B[0] + 0).dtype.name == str((np.zeros(1, bool) + 0).dtype)
    U = tl.placeholder((4,), "uint8", name="U")
    with pytest.raises(tl.TensorlangError, match="-3 does not fit uint8"):
        U[0] + (-3)
    with pytest.raises(OverflowError):
        np.zeros(1, np.uint8) + (-3)
    assert (U[0] + 255).dtype.name == "uint8"


def test_true_division_of_a_negative_python_int_by_unsigned(rng):
    # found by the pipeline fuzzer: -3 / uint8 made -3 a uint8 constant (253) before dividing
    n = tl.var("n")
    U = tl.placeholder((n,), "uint8", name="U")
    D = tl.compute((n,), lambda i: -3 / U[i], name="D")
    f = build(D, [U, D])
    u = np.array([1, 2, 3, 250], np.uint8)
    d = np.zeros(4)
    f(u, d)
    np.testing.assert_array_equal(d, np.true_divide(-3, u))
