"""The arithmetic of the LLVM code generator: binary operations (float with the kernel's
fast-math flags, integers with floor division and modulo), selects, casts, and float16 (where
the target has no native half arithmetic), bfloat16 and float8 computed as float32. A mixin
of `FunctionCodegen`: it uses the builder, `expr`, `ty` and the flags that class sets up.
"""

from __future__ import annotations

from llvmlite import ir

from ...errors import TensorlangError
from ...ir.dtype import DType
from ...ir.expr import (
    Add, Const, Div, Expr, FloorDiv, FloorMod,
    IndexCheck, Load, Max, Min, Mul, Select, Sub,
)
from ...ir.visit import walk
from .half import f16_to_f32, f32_to_f16, f64_to_f16
from .smallfloat import decode, encode
from .types import I1, I8, I32, I64, type_suffix  # noqa: F401 (I1: arith's API)


def _has_side_effects_or_traps(e: Expr) -> bool:
    """Whether evaluating `e` speculatively could read out of bounds (a load) or stop the
    kernel (an index check)."""
    return any(isinstance(x, (Load, IndexCheck)) for x in walk(e))



class ArithCodegen:
    """Operations on values (see the module)."""

    def to_i64(self, v: ir.Value, d: DType) -> ir.Value:
        if d.bits == 64:
            return v
        t = ir.VectorType(I64, v.type.count) if isinstance(v.type, ir.VectorType) else I64
        return self.builder.zext(v, t) if d.is_unsigned or d.is_bool else \
            self.builder.sext(v, t)

    def arith(self, e) -> ir.Value:
        x, y = self.expr(e.a), self.expr(e.b)
        d = e.dtype
        if self.soft(d):
            # in float32, rounded back after the operation (numpy's and ml_dtypes' results)
            return self.narrow(self.float_arith(e, self.widen(x, d), self.widen(y, d)), d)
        if d.is_float:
            return self.float_arith(e, x, y)
        return self.int_arith(e, x, y)

    def float_arith(self, e, x: ir.Value, y: ir.Value) -> ir.Value:
        b = self.builder
        if isinstance(e, Add):
            return b.fadd(x, y, flags=self.fp_flags)
        if isinstance(e, Sub):
            return b.fsub(x, y, flags=self.fp_flags)
        if isinstance(e, Mul):
            return b.fmul(x, y, flags=self.fp_flags)
        if isinstance(e, Div):
            return b.fdiv(x, y, flags=self.fp_flags if self.fast else ())
        if isinstance(e, (Min, Max)):
            if self.fast:     # NaN ignored: one vminps/vmaxps instead of a compare and blend
                name = "minnum" if isinstance(e, Min) else "maxnum"
            else:
                name = "minimum" if isinstance(e, Min) else "maximum"
            return b.call(self._intrinsic(name, x.type, 2), [x, y])
        q = b.call(self._intrinsic("floor", x.type), [b.fdiv(x, y)])
        if isinstance(e, FloorDiv):
            return q
        return b.fsub(x, b.fmul(q, y))  # FloorMod: x - floor(x / y) * y

    def int_arith(self, e, x: ir.Value, y: ir.Value) -> ir.Value:
        b = self.builder
        d = e.dtype
        if isinstance(e, Add):
            return b.add(x, y)
        if isinstance(e, Sub):
            return b.sub(x, y)
        if isinstance(e, Mul):
            return b.mul(x, y)
        if isinstance(e, (Min, Max)):
            op = "<" if isinstance(e, Min) else ">"
            c = b.icmp_unsigned(op, x, y) if d.is_unsigned or d.is_bool else \
                b.icmp_signed(op, x, y)
            return b.select(c, x, y)
        if isinstance(e, (FloorDiv, FloorMod)):
            return self.int_division(e, x, y)
        raise TensorlangError(f"llvm backend: unsupported operation {type(e).__name__} on {d}")

    def int_division(self, e, x: ir.Value, y: ir.Value) -> ir.Value:
        """Floor division/modulo that never traps: x // 0 == x % 0 == 0 (numpy's result)."""
        b = self.builder
        t = x.type
        zero, one = ir.Constant(t, 0), ir.Constant(t, 1)
        const_ok = isinstance(e.b, Const) and e.b.value not in (0, -1)
        if e.dtype.is_unsigned:
            if const_ok:
                return b.udiv(x, y) if isinstance(e, FloorDiv) else b.urem(x, y)
            is0 = b.icmp_unsigned("==", y, zero)
            ys = b.select(is0, one, y)
            r = b.udiv(x, ys) if isinstance(e, FloorDiv) else b.urem(x, ys)
            return b.select(is0, zero, r)
        if const_ok:
            ys, bad = y, None
        else:
            # y == 0 gives 0; y == -1 would trap on INT_MIN / -1, and x // -1 == -x anyway
            bad = b.or_(b.icmp_signed("==", y, zero), b.icmp_signed("==", y, ir.Constant(t, -1)))
            ys = b.select(bad, one, y)
        q, r = b.sdiv(x, ys), b.srem(x, ys)
        # C division truncates; floor it: when r != 0 and the signs of r and y differ
        adjust = b.and_(b.icmp_signed("!=", r, zero),
                        b.icmp_signed("<", b.xor(r, ys), zero))
        if isinstance(e, FloorDiv):
            out = b.sub(q, b.zext(adjust, t))
            if bad is not None:
                neg = b.sub(zero, x)
                out = b.select(b.icmp_signed("==", y, zero), zero,
                               b.select(b.icmp_signed("==", y, ir.Constant(t, -1)), neg, out))
            return out
        out = b.select(adjust, b.add(r, ys), r)
        return out if bad is None else b.select(bad, zero, out)

    def select(self, e: Select) -> ir.Value:
        b = self.builder
        if self.vec is not None and self.vec.uniform(e.cond):
            # every lane takes the same arm: a branch (only the taken arm's loads run)
            c = self.expr(e.cond)
            c0 = b.extract_element(c, ir.Constant(ir.IntType(32), 0)) \
                if isinstance(c.type, ir.VectorType) else c
            return self.branch_value(c0, lambda: self.expr(e.true_value),
                                     lambda: self.expr(e.false_value), "usel")
        if self.vec is not None:
            cond = self.vec.interval(e.cond)
            if cond is None:
                return self.lane_select(e)
            # the lanes that take the true arm are an interval (a stencil's interior,
            # `i >= 1 and i <= n - 2`): when it covers the whole vector — every vector but
            # the edges' — the true arm alone, unmasked; else lane by lane
            return self.branch_value(self.vec.all_lanes(self, cond),
                                     lambda: self.expr(e.true_value),
                                     lambda: self.lane_select(e), "isel")
        c = self.expr(e.cond)
        if not (_has_side_effects_or_traps(e.true_value) or
                _has_side_effects_or_traps(e.false_value)):
            return b.select(c, self.expr(e.true_value), self.expr(e.false_value))
        # only the taken arm may run: it can read where the other would be out of bounds
        return self.branch_value(c, lambda: self.expr(e.true_value),
                                 lambda: self.expr(e.false_value), "sel")

    def lane_select(self, e: Select) -> ir.Value:
        """A vector select whose condition differs between lanes: each arm reads only in
        the lanes that take it."""
        b = self.builder
        c = self.expr(e.cond)
        with self.vec.masked(self, c):
            tv = self.expr(e.true_value)
        with self.vec.masked(self, b.xor(c, ir.Constant(c.type, 1))):
            fv = self.expr(e.false_value)
        return b.select(c, tv, fv)

    def branch_value(self, c: ir.Value, then, other, name: str) -> ir.Value:
        """The value of `then()` where `c` holds, else of `other()`, each made in its own
        block (so that only the taken one runs), joined by a phi."""
        b = self.builder
        then_bb = b.append_basic_block(f"{name}.then")
        else_bb = b.append_basic_block(f"{name}.else")
        end_bb = b.append_basic_block(f"{name}.end")
        b.cbranch(c, then_bb, else_bb)
        b.position_at_end(then_bb)
        tv = then()
        then_end = b.block
        b.branch(end_bb)
        b.position_at_end(else_bb)
        fv = other()
        else_end = b.block
        b.branch(end_bb)
        b.position_at_end(end_bb)
        phi = b.phi(tv.type)
        phi.add_incoming(tv, then_end)
        phi.add_incoming(fv, else_end)
        return phi

    def soft(self, d: DType) -> bool:
        """Whether values of `d` are computed in float32 and rounded back: bfloat16 and the
        float8s always, float16 where the target has no half arithmetic."""
        return d.is_small_float or (d.name == "float16" and not self.half_native[0])

    def widen(self, v: ir.Value, d: DType) -> ir.Value:
        """A value of the soft dtype `d` as float32, exactly."""
        return decode(self.builder, v, d.name) if d.is_small_float else self.widen_half(v)

    def narrow(self, v: ir.Value, d: DType) -> ir.Value:
        """A float32 or float64 value rounded once to the soft dtype `d`."""
        return encode(self.builder, v, d.name) if d.is_small_float else self.narrow_half(v)

    def widen_half(self, v: ir.Value) -> ir.Value:
        """A float16 value (scalar or vector) as float32, exactly."""
        if self.half_native[0]:
            return self.builder.fpext(v, ir.VectorType(ir.FloatType(), v.type.count)
                                      if isinstance(v.type, ir.VectorType) else ir.FloatType())
        return f16_to_f32(self.builder, v)

    def narrow_half(self, v: ir.Value) -> ir.Value:
        """A float32 or float64 value as float16, rounded once to nearest even."""
        double = isinstance(getattr(v.type, "element", v.type), ir.DoubleType)
        if self.half_native[1 if double else 0]:
            return self.builder.fptrunc(v, ir.VectorType(ir.HalfType(), v.type.count)
                                        if isinstance(v.type, ir.VectorType) else ir.HalfType())
        return f64_to_f16(self.builder, v) if double else f32_to_f16(self.builder, v)

    def cast(self, v: ir.Value, src: DType, dst: DType) -> ir.Value:
        b = self.builder
        if src == dst:
            return v
        t = self.ty(dst)
        # float16 goes through float32 (exact) on every path but float64 -> float16, which
        # rounds once: LLVM would otherwise call compiler-rt for some of these conversions
        f32 = DType("float32", src.lanes)
        if src.is_small_float:     # every value is a float32
            w = decode(b, v, src.name)
            return w if dst.name == "float32" else self.cast(w, f32, dst)
        if dst.is_small_float:
            if src.name == "float16":
                v = self.widen_half(v)
            elif not src.is_float:   # integers through float64: exact up to 2^53
                v = self.cast(v, src, DType("float64", src.lanes))
            return encode(b, v, dst.name)
        if src.name == "float16":
            w = self.widen_half(v)
            return w if dst.name == "float32" else self.cast(w, f32, dst)
        if dst.name == "float16":
            if not src.is_float:   # integers: exact in float32 below 2^24, inf above 65519
                v = self.cast(v, src, f32)
            return self.narrow_half(v)
        if dst.is_bool:
            if src.is_float:
                return b.fcmp_unordered("!=", v, ir.Constant(v.type, 0.0))
            return b.icmp_unsigned("!=", v, ir.Constant(v.type, 0))
        if src.is_bool:
            return b.uitofp(v, t) if dst.is_float else b.zext(v, t)
        if src.is_float and dst.is_float:
            return b.fpext(v, t) if dst.bits > src.bits else b.fptrunc(v, t)
        if src.is_int and dst.is_int:
            if dst.bits == src.bits:
                return v
            if dst.bits < src.bits:
                return b.trunc(v, t)
            return b.zext(v, t) if src.is_unsigned else b.sext(v, t)
        if src.is_int:  # -> float
            return b.uitofp(v, t) if src.is_unsigned else b.sitofp(v, t)
        # float -> int saturates (NaN -> 0) instead of producing poison
        if dst.bits < 32:
            # the same saturation as compares and a plain conversion: NaN to 0, the value
            # clamped to the type's range (exact in float), then converted (x86 expands a
            # vector of saturating conversions to one lane at a time, with branches)
            lo, hi = (0, (1 << dst.bits) - 1) if dst.is_unsigned else \
                (-(1 << (dst.bits - 1)), (1 << (dst.bits - 1)) - 1)
            x = b.select(b.fcmp_unordered("uno", v, v), ir.Constant(v.type, 0.0), v)
            x = b.select(b.fcmp_ordered("<", x, ir.Constant(v.type, float(lo))),
                         ir.Constant(v.type, float(lo)), x)
            x = b.select(b.fcmp_ordered(">", x, ir.Constant(v.type, float(hi))),
                         ir.Constant(v.type, float(hi)), x)
            i32 = ir.IntType(32)
            wt = ir.VectorType(i32, t.count) if isinstance(t, ir.VectorType) else i32
            return b.trunc(b.fptosi(x, wt), t)
        name = "fptoui" if dst.is_unsigned else "fptosi"
        f = self._declare(f"llvm.{name}.sat.{type_suffix(t)}.{type_suffix(v.type)}", t,
                          [v.type])
        return b.call(f, [v])
