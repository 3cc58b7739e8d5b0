"""bfloat16 and float8 conversions as integer IR.

A value of one of these dtypes lives in an integer of its width (`types.llvm_type`): LLVM's
`bfloat` type has no arithmetic and its conversions become compiler-rt calls on most CPUs,
and LLVM has no float8 type. Arithmetic widens to float32 (exact: every such value is a
float32), computes there and rounds back after each operation, which is what `ml_dtypes`
does for numpy. AVX512-BF16's `vcvtneps2bf16` is not used for the rounding: it flushes
subnormal inputs to zero, where `ml_dtypes` rounds them.

The encodings (`ir.dtype.SMALL_FLOATS`): bfloat16 is float32's upper half; float8_e5m2 is
IEEE-like (bias 15, infinities, NaNs); float8_e4m3fn has bias 7, no infinities and one NaN
per sign (all exponent and mantissa bits set), so what overflows it becomes NaN, as in
`ml_dtypes`. Rounding is to nearest even, once, from float32 or float64; NaN stays NaN
(quiet, its sign kept). Every function takes scalars and vectors alike;
`tests/backends/test_small_floats.py` compares them with `ml_dtypes` on every encoding and
on the rounding boundaries.
"""

from __future__ import annotations

from llvmlite import ir

from ...ir.dtype import SMALL_FLOATS
from .types import like, splat

F32, F64 = ir.FloatType(), ir.DoubleType()


def _layout(name: str) -> tuple[int, int, int, bool]:
    """(width, exponent bits, mantissa bits, IEEE-like) of a small float's encoding."""
    e, m, ieee = SMALL_FLOATS[name]
    return 1 + e + m, e, m, ieee


def decode(b: ir.IRBuilder, v: ir.Value, name: str) -> ir.Value:
    """The float32 value (exact) of `v`, the bits of a `name` value."""
    width, e, m, ieee = _layout(name)
    i32, f32 = like(v, ir.IntType(32)), like(v, F32)

    def c(x):
        return splat(i32, x)

    u = b.zext(v, i32)
    if name == "bfloat16":                   # float32's upper half
        return b.bitcast(b.shl(u, c(16)), f32)
    bias = (1 << (e - 1)) - 1
    sign = b.shl(b.and_(u, c(1 << (width - 1))), c(32 - width))
    a = b.and_(u, c((1 << (width - 1)) - 1))
    exp = b.lshr(a, c(m))
    normal = b.add(b.shl(a, c(23 - m)), c((127 - bias) << 23))
    # a subnormal (exponent field 0) is its mantissa times 2^(1 - bias - m), exactly
    sub = b.bitcast(b.fmul(b.uitofp(a, f32), splat(f32, 2.0 ** (1 - bias - m))), i32)
    out = b.select(b.icmp_unsigned("==", exp, c(0)), sub, normal)
    top = (1 << e) - 1
    if ieee:       # all exponent bits: infinity or NaN, the mantissa kept in float32's place
        special = b.or_(b.shl(a, c(23 - m)), c(0x7F800000))
        out = b.select(b.icmp_unsigned("==", exp, c(top)), special, out)
    else:          # only all bits set is NaN
        out = b.select(b.icmp_unsigned("==", a, c((1 << (width - 1)) - 1)),
                       c(0x7FC00000), out)
    return b.bitcast(b.or_(out, sign), f32)


def encode(b: ir.IRBuilder, v: ir.Value, name: str) -> ir.Value:
    """A float32 or float64 value as the bits of a `name` value, rounded once to nearest
    even."""
    width, e, m, ieee = _layout(name)
    double = isinstance(getattr(v.type, "element", v.type), ir.DoubleType)
    bits, smant, sbias = (64, 52, 1023) if double else (32, 23, 127)
    it, ft = like(v, ir.IntType(bits)), like(v, F64 if double else F32)
    out_t = like(v, ir.IntType(width))
    bias = (1 << (e - 1)) - 1
    shift = smant - m

    def c(x):
        return splat(it, x & ((1 << bits) - 1))

    u = b.bitcast(v, it)
    sign = b.and_(u, c(1 << (bits - 1)))
    a = b.xor(u, sign)                                       # |v|'s bits
    src_inf = ((1 << (bits - 1 - smant)) - 1) << smant
    # normal results: round the mantissa at its new width (ties to even), then rebias
    odd = b.and_(b.lshr(a, c(shift)), c(1))
    nrm = b.add(b.add(a, c((1 << (shift - 1)) - 1)), odd)
    nrm = b.sub(b.lshr(nrm, c(shift)), c((sbias - bias) << m))
    if ieee:       # past the largest finite value: infinity
        inf = ((1 << e) - 1) << m
        nrm = b.select(b.icmp_unsigned(">", nrm, c(inf)), c(inf), nrm)
        nan = inf | (1 << (m - 1))
    else:          # float8_e4m3fn: past 448 is NaN (all bits set)
        nan = (1 << (width - 1)) - 1
        nrm = b.select(b.icmp_unsigned(">", nrm, c(nan)), c(nan), nrm)
    # below the smallest normal: adding 2^k puts one unit of the last place at the smallest
    # subnormal, 2^(1 - bias - m); the add rounds to nearest even, the low bits are the code
    k = 1 - bias - m + smant
    magic_bits = (k + sbias) << smant
    den = b.sub(b.bitcast(b.fadd(b.bitcast(a, ft), splat(ft, float(2.0 ** k))), it),
                c(magic_bits))
    small = b.icmp_unsigned("<", a, c((sbias - bias + 1) << smant))
    r = b.select(small, den, nrm)
    r = b.select(b.icmp_unsigned(">", a, c(src_inf)), c(nan), r)
    r = b.or_(r, b.lshr(sign, c(bits - width)))
    return b.trunc(r, out_t)
