"""Vector math in LLVM IR: float32 exp, log, tanh and erf without a libm call per lane.

LLVM lowers `llvm.exp.v16f32` to sixteen calls of `expf`; softmax, sigmoid and GELU spend
their time there. `exp_f32` emits the computation inline, for a scalar or any vector width,
so it vectorises with the loop around it:

- n = round(x / ln 2), r = x - n ln 2 in two parts (Cody-Waite: ln 2 = hi + lo, hi with
  trailing zero bits so that n * hi is exact), |r| <= ln 2 / 2;
- exp(r) = 1 + r + r^2 P(r), P of degree 5 (Cephes' `expf` coefficients);
- times 2^n as two powers of two, 2^(n // 2) and 2^(n - n // 2), each a normal float: the
  first product is exact, the second rounds once, so results in the subnormal range are
  rounded once as well, and overflow gives +inf;
- x > 88.72284 (exp overflows) -> +inf, x < -103.97208 (below half the smallest subnormal)
  -> +0, NaN -> NaN;
- a vector whose lanes all lie in |x| <= 87 skips the clamp, the split power of two and
  the edge selects (2^n is one exponent field there): one test of all lanes, the full
  computation in a rarely taken branch; the same bits either way.

Error (tests/backends/test_vmath.py, against float64 numpy on random floats, a sweep of
the range and the edges, on every CPU level): at most 2 ulp (measured: 0.99 ulp on 2^22
points from -103.9 to 88.7); exact at 0, inf and NaN. The same code runs for scalar and
vector lanes, so a loop's vector body and its scalar tail agree. float64 `exp` still
calls libm per lane.

log (`log_f32`): subnormals scaled by 2^23 first; x = m 2^e with m in [sqrt(1/2), sqrt(2)),
log(1 + f) = f - f^2/2 + f^3 P(f), P of degree 8 (Cephes' `logf` coefficients), e ln 2
added in two parts. log(+-0) = -inf, log(x < 0) = NaN, log(inf) = inf, NaN -> NaN.
Measured at most 1 ulp.

tanh (`tanh_f32`): |x| <= 0.625: x + x^3 P(x^2), P of degree 4 (Cephes' `tanhf`); above:
sign(x) (1 - 2 / (exp(2|x|) + 1)) with `exp_f32` (1 exactly once exp overflows). tanh(-0) =
-0, NaN -> NaN. Measured at most 2 ulp.

erf (`erf_f32`, odd): |x| < 1: x P(x^2), P of degree 6; 1 <= |x| < 3.9: 1 - exp(Q(|x| - 2) -
x^2), Q of degree 8 fitting log(erfc(x)) + x^2 (least squares on Chebyshev nodes against
double-precision erfc; the exponent's rounding moves the result by under 0.3 ulp); |x| >= 3.9:
+-1 (erf rounds to 1 in float32 from 3.8325). NaN -> NaN. Measured at most 3 ulp.

The ulp bounds are checked by tests/backends/test_vmath.py against float64 numpy on random
floats, sweeps and edge cases, for scalar and vector lanes on every CPU level.
"""

from __future__ import annotations

import llvmlite.ir as ir

F32 = ir.FloatType()
I32 = ir.IntType(32)

LOG2E = 1.44269504088896341
LN2_HI = 0.693359375          # 8 significant bits: n * LN2_HI is exact for |n| <= 2^16
LN2_LO = -2.12194440e-4
POLY = (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2,
        1.6666665459e-1, 5.0000001201e-1)
OVERFLOW = 88.72283935546875   # the largest float whose exp is finite (rounded)
UNDERFLOW = -103.972076416015625  # below it, exp rounds to +0


def _like(t: ir.Type, scalar: ir.Type, value):
    if isinstance(t, ir.VectorType):
        return ir.Constant(ir.VectorType(scalar, t.count), [value] * t.count)
    return ir.Constant(scalar, value)


def _int_type(t: ir.Type) -> ir.Type:
    return ir.VectorType(I32, t.count) if isinstance(t, ir.VectorType) else I32


def exp_f32(b: ir.IRBuilder, x: ir.Value, declare, fast: bool = False,
            scalef: bool = False) -> ir.Value:
    """exp of a float32 scalar or vector, inline. `declare(name, ret, args)` gives an
    intrinsic's declaration. `fast` (fast math): a polynomial of one degree less and no
    edge selects — the clamp still gives +inf above the range and +0 below it, but NaN
    becomes +0 and the error grows to a few ulp.

    A vector takes a shorter path when every lane has |x| <= FAST_RANGE (results are
    normal floats: 2^n is one exponent field, no clamp, no edge selects — about 40 % fewer
    instructions; softmax's x - max lies there): one test of all lanes, and the full
    computation in a rarely taken branch otherwise. Both give the same bits in that range
    (a product by a power of two in the normal range is exact).

    `scalef` (x86 with AVX-512, 16 lanes): `_exp_scalef`, one path for every lane."""
    if scalef and isinstance(x.type, ir.VectorType) and x.type.count == 16:
        return _exp_scalef(b, x, declare, fast)
    if fast or not isinstance(x.type, ir.VectorType):
        return _exp_full(b, x, declare, fast)
    t = x.type
    suffix = f"v{t.count}f32"
    fabs = declare(f"llvm.fabs.{suffix}", t, [t])
    out_of_range = b.fcmp_unordered(">", b.call(fabs, [x]), _like(t, F32, FAST_RANGE))
    mask = b.bitcast(out_of_range, ir.IntType(t.count))
    with b.if_else(b.icmp_unsigned("!=", mask, ir.Constant(ir.IntType(t.count), 0)),
                   likely=False) as (slow, quick):
        with slow:
            y_slow = _exp_full(b, x, declare, False)
            slow_end = b.block
        with quick:
            y_quick = _exp_normal(b, x, declare)
            quick_end = b.block
    y = b.phi(t)
    y.add_incoming(y_slow, slow_end)
    y.add_incoming(y_quick, quick_end)
    return y


FAST_RANGE = 87.0        # |x| <= 87: n = round(x / ln 2) in [-126, 126], exp(x) normal


def _reduced(b: ir.IRBuilder, x: ir.Value, declare, coeffs=POLY):
    """(exp(r), n, the float type's 2^k builder, n as a float) for x = n ln 2 + r,
    |r| <= ln 2 / 2: the range reduction and polynomial every path shares."""
    t = x.type
    m_ = _Math(b, t, declare)
    c, ci = m_.c, m_.ci
    nf = m_.intrinsic("rint", b.fmul(x, c(LOG2E)))
    r = m_.intrinsic("fmuladd", nf, c(-LN2_HI), x)         # exact: n * LN2_HI has 8 bits
    r = m_.intrinsic("fmuladd", nf, c(-LN2_LO), r)
    p = m_.horner(coeffs, r)
    y = b.fadd(m_.intrinsic("fmuladd", b.fmul(p, r), r, r), c(1.0))

    def pow2(k):
        return b.bitcast(b.shl(b.add(k, ci(127)), ci(23)), t)
    return y, b.fptosi(nf, m_.it), pow2, nf


def _exp_normal(b: ir.IRBuilder, x: ir.Value, declare) -> ir.Value:
    """exp(x) for |x| <= FAST_RANGE (no NaN, no overflow, no subnormal result): times 2^n
    built as one exponent field."""
    y, n, pow2, _ = _reduced(b, x, declare)
    return b.fmul(y, pow2(n))


def _exp_scalef(b: ir.IRBuilder, x: ir.Value, declare, fast: bool) -> ir.Value:
    """exp of 16 float32 lanes over the whole range with AVX-512's `vscalefps` (y * 2^n in
    one instruction, rounded once, +inf past the largest float and subnormal or +0 below
    the smallest normal): x clamped to [UNDERFLOW - 1, OVERFLOW + 1] by compare and select
    (a NaN lane fails both compares and stays NaN through the polynomial and the scaling),
    then the shared range reduction and polynomial. No test of the lanes and no branch:
    four instructions fewer than the quick path of `exp_f32` (its range test, the
    exponent field built in integer lanes and the product), and the same bits in the
    normal range (the product by 2^n is exact there); below it one rounding, as
    `_exp_full`'s split product."""
    m_ = _Math(b, x.type, declare)
    c = m_.c
    hi, lo = c(OVERFLOW + 1.0), c(UNDERFLOW - 1.0)
    xc = b.select(b.fcmp_ordered(">", x, hi), hi, x)
    xc = b.select(b.fcmp_ordered("<", xc, lo), lo, xc)
    y, _, _, nf = _reduced(b, xc, declare, POLY[1:] if fast else POLY)
    t = x.type
    scale = declare("llvm.x86.avx512.mask.scalef.ps.512", t,
                    [t, t, t, ir.IntType(16), I32])
    return b.call(scale, [y, nf, y, ir.Constant(ir.IntType(16), 0xFFFF), ir.Constant(I32, 4)])


def _exp_full(b: ir.IRBuilder, x: ir.Value, declare, fast: bool) -> ir.Value:
    """exp over the whole float32 range (see the module's docstring)."""
    m_ = _Math(b, x.type, declare)
    c = m_.c
    xc = m_.intrinsic("maxnum", m_.intrinsic("minnum", x, c(OVERFLOW + 1.0)),
                      c(UNDERFLOW - 1.0))
    y, n, pow2, _ = _reduced(b, xc, declare, POLY[1:] if fast else POLY)
    n1 = b.ashr(n, m_.ci(1))
    y = b.fmul(b.fmul(y, pow2(n1)), pow2(b.sub(n, n1)))
    if fast:
        return y
    y = b.select(b.fcmp_ordered(">", x, c(OVERFLOW)), c(float("inf")), y)
    y = b.select(b.fcmp_ordered("<", x, c(UNDERFLOW)), c(0.0), y)
    return b.select(b.fcmp_unordered("uno", x, x), x, y)


LOG_POLY = (7.0376836292e-2, -1.1514610310e-1, 1.1676998740e-1, -1.2420140846e-1,
            1.4249322787e-1, -1.6668057665e-1, 2.0000714765e-1, -2.4999993993e-1,
            3.3333331174e-1)
SQRT_HALF = 0.707106781186547524
TANH_POLY = (-5.70498872745e-3, 2.06390887954e-2, -5.37397155531e-2, 1.33314422036e-1,
             -3.33332819422e-1)
TANH_SMALL = 0.625
ERF_SMALL = (7.898066403432388e-05, -0.0008024311707643989, 0.005190048821891492,
             -0.026854806018400287, 0.11283612364872295, -0.3761262883674459,
             1.1283791665082512)        # erf(x) / x as a polynomial in x^2, |x| < 1
ERF_LARGE = (1.6281051070625745e-06, -1.9785744237859025e-05, 0.0001352074754438067,
             -0.0007334075872578318, 0.003571121358929212, -0.016464717369643975,
             0.07624902383225225, -0.4181608513604276, -1.3649412583060712)
ERF_ONE = 3.9                           # erf(x) rounds to 1 in float32 from 3.8325


class _Math:
    """Constants, intrinsics and Horner's rule for one float32 scalar or vector type."""

    def __init__(self, b: ir.IRBuilder, t: ir.Type, declare):
        self.b, self.t, self.it = b, t, _int_type(t)
        self.suffix = f"v{t.count}f32" if isinstance(t, ir.VectorType) else "f32"
        self.declare = declare

    def c(self, v):
        return _like(self.t, F32, v)

    def ci(self, v):
        return _like(self.t, I32, v)

    def intrinsic(self, name, *args):
        f = self.declare(f"llvm.{name}.{self.suffix}", self.t, [self.t] * len(args))
        return self.b.call(f, list(args))

    def horner(self, coeffs, x):
        p = self.c(coeffs[0])
        for k in coeffs[1:]:
            p = self.intrinsic("fmuladd", p, x, self.c(k))
        return p


def log_f32(b: ir.IRBuilder, x: ir.Value, declare, fast: bool = False) -> ir.Value:
    """Natural log of a float32 scalar or vector, inline (see the module's docstring)."""
    m_ = _Math(b, x.type, declare)
    c, ci = m_.c, m_.ci
    sub = b.fcmp_ordered("<", x, c(2.0 ** -126))
    xs = b.select(sub, b.fmul(x, c(2.0 ** 23)), x)
    bits = b.bitcast(xs, m_.it)
    e = b.sub(b.and_(b.lshr(bits, ci(23)), ci(0xFF)), ci(126))
    e = b.sub(e, b.select(sub, ci(23), ci(0)))
    m = b.bitcast(b.or_(b.and_(bits, ci(0x007FFFFF)), ci(0x3F000000)), x.type)  # [1/2, 1)
    low = b.fcmp_ordered("<", m, c(SQRT_HALF))
    e = b.sub(e, b.zext(low, m_.it))
    f = b.fsub(b.select(low, b.fadd(m, m), m), c(1.0))
    ef = b.sitofp(e, x.type)
    z = b.fmul(f, f)
    y = b.fmul(b.fmul(f, z), m_.horner(LOG_POLY, f))
    y = m_.intrinsic("fmuladd", ef, c(LN2_LO), y)
    y = m_.intrinsic("fmuladd", z, c(-0.5), y)
    r = m_.intrinsic("fmuladd", ef, c(LN2_HI), b.fadd(f, y))
    r = b.select(b.fcmp_ordered("==", x, c(float("inf"))), x, r)
    r = b.select(b.fcmp_ordered("==", x, c(0.0)), c(float("-inf")), r)
    return b.select(b.fcmp_unordered("<", x, c(0.0)), c(float("nan")), r)  # x < 0 or NaN


def tanh_f32(b: ir.IRBuilder, x: ir.Value, declare, fast: bool = False) -> ir.Value:
    """tanh of a float32 scalar or vector, inline (see the module's docstring)."""
    m_ = _Math(b, x.type, declare)
    c = m_.c
    a = m_.intrinsic("fabs", x)
    s = exp_f32(b, b.fmul(a, c(2.0)), declare)
    big = b.fsub(c(1.0), b.fdiv(c(2.0), b.fadd(s, c(1.0))))
    big = m_.intrinsic("copysign", big, x)
    z = b.fmul(x, x)
    small = m_.intrinsic("fmuladd", b.fmul(m_.horner(TANH_POLY, z), z), x, x)
    r = b.select(b.fcmp_ordered(">", a, c(TANH_SMALL)), big, small)
    return b.select(b.fcmp_unordered("ueq", x, c(0.0)), x, r)     # NaN, and the sign of 0


def erf_f32(b: ir.IRBuilder, x: ir.Value, declare, fast: bool = False) -> ir.Value:
    """erf of a float32 scalar or vector, inline (see the module's docstring)."""
    m_ = _Math(b, x.type, declare)
    c = m_.c
    a = m_.intrinsic("fabs", x)
    small = b.fmul(x, m_.horner(ERF_SMALL, b.fmul(x, x)))
    ac = m_.intrinsic("minnum", a, c(ERF_ONE))
    q = m_.horner(ERF_LARGE, b.fsub(ac, c(2.0)))
    large = b.fsub(c(1.0), exp_f32(b, b.fsub(q, b.fmul(ac, ac)), declare))
    large = b.select(b.fcmp_ordered(">=", a, c(ERF_ONE)), c(1.0), large)
    r = b.select(b.fcmp_ordered("<", a, c(1.0)), small, m_.intrinsic("copysign", large, x))
    return b.select(b.fcmp_unordered("uno", x, x), x, r)
