"""float16 conversions on every CPU level: bit-exact against numpy, scalar and vectorized.

Without F16C (baseline x86-64) or AVX512-FP16 (float64 -> float16 on every other x86 CPU),
LLVM lowers these conversions to compiler-rt calls that a JIT cannot resolve; tensorlang
emits them as integer IR (backends/llvm/half.py). Every float16 is converted up; random bit
patterns, values across float16's range and every midpoint between neighbouring float16s
(the ties that round to even) are converted down."""

import numpy as np
import pytest

import tensorlang as tl
from tests.conftest import cast_kernel


ALL_HALVES = np.arange(1 << 16, dtype=np.uint16).view(np.float16)


def _assert_same_bits(out, ref):
    nan = np.isnan(ref)
    assert np.isnan(out[nan]).all()
    width = np.uint16 if out.dtype == np.float16 else np.uint32
    bad = out.view(width) != ref.view(width)
    bad &= ~nan
    assert not bad.any(), (out[bad][:5], ref[bad][:5])


def _down_inputs(dtype, rng):
    it = np.uint32 if dtype == "float32" else np.uint64
    raw = rng.integers(0, np.iinfo(it).max, 50_000, dtype=it, endpoint=True).view(dtype)
    scaled = (rng.standard_normal(50_000) * np.exp2(rng.integers(-27, 18, 50_000)))
    finite = ALL_HALVES[np.isfinite(ALL_HALVES)].astype(np.float64)
    finite.sort()
    mids = (finite[:-1] + finite[1:]) / 2
    edges = [np.inf, -np.inf, np.nan, 0.0, -0.0, 65504, 65519.99, 65520, -65520, 1e-8,
             2.0 ** -25, 2.0 ** -24, 3 * 2.0 ** -26, 2.0 ** -14, 2.0 ** -14 - 2.0 ** -25]
    return np.concatenate([raw, scaled.astype(dtype), mids.astype(dtype),
                           np.array(edges, dtype)])


@pytest.mark.parametrize("lanes", [1, 16], ids=["scalar", "vector16"])
def test_float16_to_float32_every_value(lanes, cpu_target):
    f = cast_kernel("float16", "float32", cpu_target, lanes)
    out = np.zeros(ALL_HALVES.size, np.float32)
    f(ALL_HALVES, out)
    _assert_same_bits(out, ALL_HALVES.astype(np.float32))


@pytest.mark.parametrize("lanes", [1, 8], ids=["scalar", "vector8"])
@pytest.mark.parametrize("src", ["float32", "float64"])
def test_down_to_float16_rounds_to_nearest_even(src, lanes, cpu_target, rng):
    x = _down_inputs(src, rng)
    f = cast_kernel(src, "float16", cpu_target, lanes)
    out = np.zeros(x.size, np.float16)
    f(x, out)
    with np.errstate(all="ignore"):
        _assert_same_bits(out, x.astype(np.float16))


@pytest.mark.parametrize("dst", ["int8", "int32", "int64", "uint8", "bool", "float64"])
def test_float16_to_and_from_other_types(dst, cpu_target):
    h = ALL_HALVES[np.isfinite(ALL_HALVES)]
    f = cast_kernel("float16", dst, cpu_target, 1)
    out = np.zeros(h.size, dst)
    f(h, out)
    ref = h.astype(np.float64)
    if np.dtype(dst).kind in "iu":   # tensorlang saturates; compare where numpy is defined
        info = np.iinfo(dst)
        keep = (ref > info.min - 1) & (ref < info.max + 1)
        np.testing.assert_array_equal(out[keep], np.trunc(ref[keep]).astype(dst))
    else:
        np.testing.assert_array_equal(out, h.astype(dst))
    if dst != "bool":
        g = cast_kernel(dst, "float16", cpu_target, 1)
        vals = out if dst != "float64" else ref
        back = np.zeros(vals.size, np.float16)
        g(vals, back)
        with np.errstate(all="ignore"):
            _assert_same_bits(back, vals.astype(np.float16))


@pytest.mark.parametrize("lanes", [1, 16], ids=["scalar", "vector16"])
def test_float16_arithmetic_rounds_each_operation(lanes, cpu_target, rng):
    n = tl.var("n")
    A = tl.placeholder((n,), "float16", name="A")
    B = tl.placeholder((n,), "float16", name="B")
    C = tl.compute((n,), lambda i: (A[i] * B[i] + A[i]) / B[i] - tl.sqrt(tl.abs(A[i])),
                   name="C")
    s = tl.create_schedule(C)
    if lanes > 1:
        _, inner = s[C].split(C.op.axis[0], factor=lanes)
        s[C].vectorize(inner)
    f = tl.build(s, [A, B, C], target=cpu_target)
    a = rng.standard_normal(1000).astype(np.float16) * 8
    b = rng.standard_normal(1000).astype(np.float16)
    c = np.zeros(1000, np.float16)
    f(a, b, c)
    with np.errstate(all="ignore"):
        ref = (a * b + a) / b - np.sqrt(np.abs(a))
    np.testing.assert_array_equal(c, ref)
