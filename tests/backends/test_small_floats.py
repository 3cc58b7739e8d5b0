"""bfloat16, float8_e4m3fn and float8_e5m2 on every CPU level: bit-exact against ml_dtypes,
scalar and vectorized (backends/llvm/smallfloat.py).

Every encoding is converted up; random bit patterns of float32 and float64, values across
each type's range, every midpoint between neighbouring values (the ties that round to even)
and the edges (overflow, subnormals, NaN, infinities) are converted down. Arithmetic rounds
after each operation, as ml_dtypes computes."""

import ml_dtypes
import numpy as np
import pytest

import tensorlang as tl
from tests.conftest import cast_kernel

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")  # NaN and overflow casts

SMALL = ["bfloat16", "float8_e4m3fn", "float8_e5m2"]


def _every(dt):
    width = np.dtype(dt).itemsize
    return np.arange(1 << (8 * width), dtype=f"u{width}").view(dt)


def _assert_same_bits(out, ref):
    """Equal bit for bit, except that a NaN only has to be a NaN of the same sign."""
    out, ref = np.asarray(out), np.asarray(ref)
    width = f"u{out.dtype.itemsize}"
    nan = np.isnan(ref.astype(np.float64))
    assert np.isnan(out[nan].astype(np.float64)).all()
    signs = np.signbit(out[nan].astype(np.float64)), np.signbit(ref[nan].astype(np.float64))
    assert (signs[0] == signs[1]).all()
    bad = (out.view(width) != ref.view(width)) & ~nan
    assert not bad.any(), (out[bad][:5], ref[bad][:5], np.flatnonzero(bad)[:5])


def _down_inputs(src, dt, rng):
    it = np.uint32 if src == "float32" else np.uint64
    raw = rng.integers(0, np.iinfo(it).max, 40_000, dtype=it, endpoint=True).view(src)
    top = float(ml_dtypes.finfo(dt).max)
    scaled = rng.standard_normal(40_000) * np.exp2(rng.integers(-30, int(np.log2(top)) + 3,
                                                                 40_000))
    finite = _every(dt).astype(np.float64)
    finite = np.unique(finite[np.isfinite(finite)])
    mids = (finite[:-1] + finite[1:]) / 2
    tiny = float(ml_dtypes.finfo(dt).smallest_subnormal)
    edges = [np.inf, -np.inf, np.nan, -np.nan, 0.0, -0.0, top, -top, top * 1.0625,
             top * 1.03, top * 2, tiny, tiny / 2, tiny * 0.75, tiny * 1.5,
             float(ml_dtypes.finfo(dt).smallest_normal), 1e-30, 1e30, 3.0000002]
    return np.concatenate([raw, scaled.astype(src), mids.astype(src), np.array(edges, src)])


@pytest.mark.parametrize("lanes", [1, 16], ids=["scalar", "vector16"])
@pytest.mark.parametrize("dt", SMALL)
def test_every_value_up_to_float32(dt, lanes, cpu_target):
    x = _every(dt)
    f = cast_kernel(dt, "float32", cpu_target, lanes)
    out = np.zeros(x.size, np.float32)
    f(x, out)
    _assert_same_bits(out, x.astype(np.float32))


@pytest.mark.parametrize("lanes", [1, 8], ids=["scalar", "vector8"])
@pytest.mark.parametrize("src", ["float32", "float64"])
@pytest.mark.parametrize("dt", SMALL)
def test_down_rounds_to_nearest_even(dt, src, lanes, cpu_target, rng):
    x = _down_inputs(src, dt, rng)
    f = cast_kernel(src, dt, cpu_target, lanes)
    out = np.zeros(x.size, dt)
    f(x, out)
    with np.errstate(all="ignore"):
        _assert_same_bits(out, x.astype(dt))


@pytest.mark.parametrize("dt", SMALL)
@pytest.mark.parametrize("other", ["float16", "float64", "int8", "int32", "uint8", "bool"])
def test_to_and_from_other_types(dt, other, cpu_target, rng):
    # up: every finite value of the small float; integers saturate, compared where numpy is
    # defined
    x = _every(dt)
    x = x[np.isfinite(x.astype(np.float64))]
    f = cast_kernel(dt, other, cpu_target, 1)
    out = np.zeros(x.size, other)
    f(x, out)
    ref = x.astype(np.float64)
    if np.dtype(other).kind in "iu":
        info = np.iinfo(other)
        keep = (ref > info.min - 1) & (ref < info.max + 1)
        np.testing.assert_array_equal(out[keep], np.trunc(ref[keep]).astype(other))
    elif other == "bool":
        np.testing.assert_array_equal(out, ref != 0)
    else:
        with np.errstate(all="ignore"):
            _assert_same_bits(out, ref.astype(other))
    # down
    if other == "bool":
        y = np.array([True, False, True])
    elif np.dtype(other).kind in "iu":
        info = np.iinfo(other)
        y = rng.integers(info.min, info.max, 5000, endpoint=True).astype(other)
    else:
        y = _every("float16").astype(other)
    g = cast_kernel(other, dt, cpu_target, 1)
    back = np.zeros(y.size, dt)
    g(y, back)
    with np.errstate(all="ignore"):
        ref = y.astype(np.float64).astype(dt) if other != "float16" else y.astype(dt)
    _assert_same_bits(back, ref)


@pytest.mark.parametrize("lanes", [1, 16], ids=["scalar", "vector16"])
@pytest.mark.parametrize("dt", SMALL)
def test_arithmetic_rounds_after_each_operation(dt, lanes, cpu_target, rng):
    """(a * b + a) / (b - 3) and max(a, b), sqrt(|a|): each step in float32, rounded back,
    as ml_dtypes' numpy arithmetic; sizes 1, a prime and one past a vector."""
    for n in (1, 37, 17):
        f = _arith_kernel(n, dt, lanes, cpu_target)
        a = (rng.standard_normal(n) * 4).astype(dt)
        b = (rng.standard_normal(n) * 4).astype(dt)
        c, d = np.zeros(n, dt), np.zeros(n, dt)
        f(a, b, c, d)
        with np.errstate(all="ignore"):
            _assert_same_bits(c, (a * b + a) / (b - dt_scalar(dt, 3.0)))
            _assert_same_bits(d, np.maximum(a, b) + np.sqrt(np.abs(a)))


def _arith_kernel(n, dt, lanes, target):
    A = tl.placeholder((n,), dt, name="A")
    B = tl.placeholder((n,), dt, name="B")
    C = tl.compute((n,), lambda i: (A[i] * B[i] + A[i]) / (B[i] - 3.0), name="C")
    D = tl.compute((n,), lambda i: tl.max(A[i], B[i]) + tl.sqrt(tl.abs(A[i])), name="D")
    s = tl.create_schedule([C.op, D.op])
    if lanes > 1:
        for T in (C, D):
            _, inner = s[T].split(T.op.axis[0], factor=lanes)
            s[T].vectorize(inner)
    return tl.build(s, [A, B, C, D], target=target)


def dt_scalar(dt, v):
    return np.array(v, dt)[()]


@pytest.mark.parametrize("dt", SMALL)
def test_dtype_properties_and_numpy_interop(dt):
    A = tl.placeholder((4,), dt, name="A")
    assert A.dtype == dt
    assert np.zeros(3, A.dtype).dtype == np.dtype(getattr(ml_dtypes, dt))
    assert tl.placeholder((2,), np.dtype(getattr(ml_dtypes, dt))).dtype == dt
    f = tl.build(tl.create_schedule(C := tl.compute((4,), lambda i: A[i] * 2, name="C")),
                 [A, C])
    with pytest.raises(tl.TensorlangError, match=dt):
        f(np.zeros(4, np.float32), np.zeros(4, dt))
    x = np.array([1, 2, 3, 448], dt)
    y = np.zeros(4, dt)
    f(x, y)
    _assert_same_bits(y, x * dt_scalar(dt, 2))
