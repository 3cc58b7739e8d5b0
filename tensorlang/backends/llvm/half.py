"""float16 conversions written as integer IR, for targets without conversion instructions.

LLVM lowers `fpext half` and `fptrunc ... to half` to instructions where the CPU has them
(x86 F16C for float, AVX512-FP16 for double, AArch64 always) and otherwise to calls of
compiler-rt's `__extendhfsf2`, `__truncsfhf2` and `__truncdfhf2`, which a JIT-compiled kernel
cannot resolve and an object file would need a runtime library for. tensorlang emits those
conversions itself on such targets: bit manipulation on the IEEE encodings, rounding to
nearest even (the float add that aligns a subnormal's bits rounds by itself), NaN kept NaN
(quiet), overflow to infinity, subnormals exact. Every function works on scalars and on
vectors alike; `tests/backends/test_half.py` compares them with numpy on every float16 and on
the rounding boundaries of float32 and float64.

Arithmetic on float16 values is done in float32 and rounded back after each operation: for
+, -, *, / and sqrt that gives the correctly rounded float16 result (float32 has more than
twice float16's precision), which is what numpy computes.
"""

from __future__ import annotations

from llvmlite import ir

from ...target import Target
from .types import like, splat

F16, F32, F64 = ir.HalfType(), ir.FloatType(), ir.DoubleType()


def native_conversions(target: Target) -> tuple[bool, bool]:
    """Whether `target` converts (float32 <-> float16, float64 -> float16) in one instruction.
    An x86 CPU named without -mattr has the features its name implies (`Target.parse`);
    F16C spelled nowhere counts as lacking: the integer sequence is correct everywhere."""
    feats = target.feature_set
    arch = target.arch
    if arch in ("x86_64", "i386", "i686"):
        f16c = ("+f16c" in feats or target.cpu in ("x86-64-v3", "x86-64-v4")) and \
            "-f16c" not in feats
        fp16 = "+avx512fp16" in feats and "-avx512fp16" not in feats
        return f16c or fp16, fp16
    if arch in ("aarch64", "aarch64_be", "arm64"):
        return True, True
    if arch.startswith("riscv"):
        zfh = bool({"+zfh", "+zfhmin"} & feats)
        return zfh, zfh and "+d" in feats
    return False, False


def f16_to_f32(b: ir.IRBuilder, v: ir.Value) -> ir.Value:
    """float16 -> float32, exact."""
    i16, i32, f32 = like(v, ir.IntType(16)), like(v, ir.IntType(32)), like(v, F32)

    def c(x):
        return splat(i32, x)

    u = b.zext(b.bitcast(v, i16), i32)
    o = b.shl(b.and_(u, c(0x7FFF)), c(13))          # exponent and mantissa, float's place
    exp = b.and_(o, c(0x7C00 << 13))
    o = b.add(o, c((127 - 15) << 23))                # rebias the exponent
    inf_nan = b.add(o, c((128 - 16) << 23))          # all exponent bits set
    # zero or subnormal: 1.m * 2^-14 minus 2^-14 is 0.m * 2^-14, exactly
    den = b.fsub(b.bitcast(b.add(o, c(1 << 23)), f32), splat(f32, 2.0 ** -14))
    den = b.bitcast(den, i32)
    o = b.select(b.icmp_unsigned("==", exp, c(0x7C00 << 13)), inf_nan,
                 b.select(b.icmp_unsigned("==", exp, c(0)), den, o))
    o = b.or_(o, b.shl(b.and_(u, c(0x8000)), c(16)))
    return b.bitcast(o, f32)


def _to_f16(b: ir.IRBuilder, v: ir.Value, bits: int, mant: int, bias: int, ft) -> ir.Value:
    """A float of `bits` bits (`mant` mantissa bits, exponent `bias`) -> float16, rounding to
    nearest even. Directly from float64: float64 -> float32 -> float16 rounds twice."""
    it, i16 = like(v, ir.IntType(bits)), like(v, ir.IntType(16))
    fty = like(v, ft)
    shift = mant - 10

    def c(x):
        return splat(it, x & ((1 << bits) - 1))

    u = b.bitcast(v, it)
    sign = b.and_(u, c(1 << (bits - 1)))
    a = b.xor(u, sign)                                    # |v|'s bits
    inf_bits = ((1 << (bits - 1 - mant)) - 1) << mant
    big = b.icmp_unsigned(">=", a, c((bias + 16) << mant))      # |v| >= 2^16: inf or NaN
    special = b.select(b.icmp_unsigned(">", a, c(inf_bits)), c(0x7E00), c(0x7C00))
    small = b.icmp_unsigned("<", a, c((bias - 14) << mant))     # below float16's normals
    # adding 2^(shift-1+... ) puts the value where one unit of the last place is 2^-24, the
    # smallest float16 subnormal: the add rounds to nearest even, the low bits are the result
    magic = float(2.0 ** (mant - 24))
    magic_bits = (bias + mant - 24) << mant
    den = b.sub(b.bitcast(b.fadd(b.bitcast(a, fty), splat(fty, magic)), it), c(magic_bits))
    odd = b.and_(b.lshr(a, c(shift)), c(1))
    nrm = b.add(b.add(a, c(((15 - bias) << mant) + (1 << (shift - 1)) - 1)), odd)
    nrm = b.lshr(nrm, c(shift))                           # may carry into inf: correct
    r = b.select(big, special, b.select(small, den, nrm))
    r = b.or_(r, b.lshr(sign, c(bits - 16)))
    return b.bitcast(b.trunc(r, i16), like(v, F16))


def f32_to_f16(b: ir.IRBuilder, v: ir.Value) -> ir.Value:
    """float32 -> float16, rounding to nearest even."""
    return _to_f16(b, v, 32, 23, 127, F32)


def f64_to_f16(b: ir.IRBuilder, v: ir.Value) -> ir.Value:
    """float64 -> float16, rounding to nearest even (once)."""
    return _to_f16(b, v, 64, 52, 1023, F64)
