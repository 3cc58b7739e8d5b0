"""Math intrinsics and if_then_else against numpy."""

import math

import numpy as np
import pytest

import tensorlang as tl
from tests.conftest import SIZES, build, every_cpu_level, random_array

_every_cpu_level = every_cpu_level(__name__)  # host, baseline x86-64, x86-64-v3

erf = np.vectorize(math.erf)

FUNCS = {
    "exp": (tl.exp, np.exp, lambda a: a),
    "log": (tl.log, np.log, lambda a: np.abs(a) + 0.1),
    "sqrt": (tl.sqrt, np.sqrt, np.abs),
    "rsqrt": (tl.rsqrt, lambda a: 1 / np.sqrt(a), lambda a: np.abs(a) + 0.1),
    "tanh": (tl.tanh, np.tanh, lambda a: a),
    "sigmoid": (tl.sigmoid, lambda a: 1 / (1 + np.exp(-a)), lambda a: a),
    "abs": (tl.abs, np.abs, lambda a: a),
    "floor": (tl.floor, np.floor, lambda a: a * 3),
    "ceil": (tl.ceil, np.ceil, lambda a: a * 3),
    "erf": (tl.erf, erf, lambda a: a),
    "sin": (tl.sin, np.sin, lambda a: a),
    "cos": (tl.cos, np.cos, lambda a: a),
}


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
@pytest.mark.parametrize("name", sorted(FUNCS))
def test_math_functions(name, dtype, rng):
    fn, ref, domain = FUNCS[name]
    n = tl.var("n")
    A = tl.placeholder((n,), dtype, name="A")
    C = tl.compute((n,), lambda i: fn(A[i]), name="C")
    f = build(C, [A, C])
    tol = {"float16": 2e-3, "float32": 2e-6, "float64": 1e-12}[dtype]
    for size in SIZES:
        a = domain(random_array(rng, size, dtype)).astype(dtype)
        c = np.zeros(size, dtype)
        f(a, c)
        want = ref(a.astype("float64")).astype(dtype)
        np.testing.assert_allclose(c, want, rtol=tol, atol=tol)


def test_math_on_integers_gives_float64(rng):
    A = tl.placeholder((9,), "int32", name="A")
    C = tl.compute((9,), lambda i: tl.sqrt(tl.abs(A[i])) + tl.pow(A[i], 2), name="C")
    I = tl.compute((9,), lambda i: tl.abs(A[i]) + tl.floor(A[i]), name="I")
    assert C.dtype.name == "float64" and I.dtype.name == "int32"
    f = build([C, I], [A, C, I])
    a = random_array(rng, 9, "int32")
    c, i = np.zeros(9), np.zeros(9, "int32")
    f(a, c, i)
    np.testing.assert_allclose(c, np.sqrt(np.abs(a)) + a.astype(float) ** 2)
    np.testing.assert_array_equal(i, np.abs(a) + a)


def test_pow_with_tensor_exponent(rng):
    A = tl.placeholder((7,), "float32", name="A")
    B = tl.placeholder((7,), "float32", name="B")
    C = tl.compute((7,), lambda i: tl.pow(tl.abs(A[i]), B[i]), name="C")
    f = build(C, [A, B, C])
    a, b = random_array(rng, 7, "float32"), random_array(rng, 7, "float32")
    c = np.zeros(7, "float32")
    f(a, b, c)
    np.testing.assert_allclose(c, np.abs(a) ** b, rtol=1e-5)


def test_maximum_minimum_propagate_nan():
    A = tl.placeholder((3,), "float32", name="A")
    C = tl.compute((3,), lambda i: tl.maximum(A[i], 0.0) + tl.minimum(A[i], 1.0), name="C")
    f = build(C, [A, C])
    a = np.array([np.nan, -2.0, 3.0], "float32")
    c = np.zeros(3, "float32")
    f(a, c)
    np.testing.assert_array_equal(c, np.maximum(a, 0) + np.minimum(a, 1))


def test_padded_stencil_reads_only_the_taken_arm(rng):
    n = tl.var("n")
    A = tl.placeholder((n,), "float32", name="A")
    B = tl.compute((n,), lambda i: tl.if_then_else(
        (i >= 1) & (i < n - 1), A[i - 1] + A[i] + A[i + 1], A[i]), name="B")
    f = build(B, [A, B])
    for size in SIZES:
        a = random_array(rng, size, "float32")
        b = np.zeros(size, "float32")
        f(a, b)
        want = a.copy()
        want[1:-1] = a[:-2] + a[1:-1] + a[2:]
        np.testing.assert_allclose(b, want, rtol=1e-6)


def test_if_then_else_promotes_arms_and_const(rng):
    A = tl.placeholder((6,), "int32", name="A")
    C = tl.compute((6,), lambda i: tl.if_then_else(A[i] > 0, A[i], tl.const(0.5, "float32")),
                   name="C")
    assert C.dtype.name == "float64"  # int32 with float32 -> float64, as numpy
    f = build(C, [A, C])
    a = random_array(rng, 6, "int32")
    c = np.zeros(6)
    f(a, c)
    np.testing.assert_array_equal(c, np.where(a > 0, a, 0.5))


SPECIALS = np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 1e-45, -3e38],
                    "float32")


@pytest.mark.parametrize("dtype", ("float32", "float64"))
def test_fmax_fmin_ignore_nan_as_numpy(dtype, rng, cpu_target):
    """tl.fmax / tl.fmin: the other operand where one is NaN, NaN where both are — numpy's
    fmax / fmin — on every pair of special values, as vectors and as a scalar tail."""
    a0, b0 = (x.ravel() for x in np.meshgrid(SPECIALS, SPECIALS))
    n = len(a0) + 13
    A = tl.placeholder((n,), dtype, name="A")
    B = tl.placeholder((n,), dtype, name="B")
    C = tl.compute((n,), lambda i: tl.fmax(A[i], B[i]), name="C")
    D = tl.compute((n,), lambda i: tl.fmin(A[i], B[i]), name="D")
    s = tl.create_schedule([C, D])
    for t in (C, D):
        s[t].vectorize(s[t].split(t.op.axis[0], factor=8)[1])
    f = tl.build(s, [A, B, C, D], target=cpu_target)
    a = np.concatenate([a0, random_array(rng, 13, "float32")]).astype(dtype)
    b = np.concatenate([b0, random_array(rng, 13, "float32")]).astype(dtype)
    c, d = np.zeros(n, dtype), np.zeros(n, dtype)
    f(a, b, c, d)
    for got, want in ((c, np.fmax(a, b)), (d, np.fmin(a, b))):
        zero = want == 0                 # which zero is unspecified, as in C's fmax
        np.testing.assert_array_equal(got[~zero], want[~zero])
        assert (got[zero] == 0).all()
    assert "maxnum" in f.get_source("ll") and "llvm.maximum" not in f.get_source("ll")


def test_fmax_of_integers_is_max():
    A = tl.placeholder((4,), "int32", name="A")
    C = tl.compute((4,), lambda i: tl.fmax(A[i], 2) + tl.fmin(A[i], 1), name="C")
    f = build(C, [A, C])
    a = np.array([-3, 1, 2, 7], "int32")
    c = np.zeros(4, "int32")
    f(a, c)
    np.testing.assert_array_equal(c, np.maximum(a, 2) + np.minimum(a, 1))
