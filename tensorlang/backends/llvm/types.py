"""LLVM types of the code generators: the integer types, the type of a dtype's values and
of its elements in memory, and the suffix of an overloaded intrinsic."""

from __future__ import annotations

from llvmlite import ir

from ...ir.dtype import DType

I1, I8, I32, I64 = ir.IntType(1), ir.IntType(8), ir.IntType(32), ir.IntType(64)


def llvm_type(d: DType) -> ir.Type:
    """The LLVM type of a value of dtype `d` (a vector type for a vector dtype)."""
    if d.is_bool:
        t = I1
    elif d.is_int or d.is_small_float:      # a small float's bits (smallfloat.py)
        t = ir.IntType(d.bits)
    elif d.name == "float16":
        t = ir.HalfType()
    elif d.name == "float32":
        t = ir.FloatType()
    else:
        t = ir.DoubleType()
    return t if d.lanes == 1 else ir.VectorType(t, d.lanes)


def memory_type(d: DType) -> ir.Type:
    """How an element is stored: bools take a byte, as in numpy."""
    return I8 if d.is_bool else llvm_type(d)


def type_suffix(t: ir.Type) -> str:
    """LLVM's overloaded-intrinsic suffix of a type: f32, i64, v8f32, ..."""
    if isinstance(t, ir.VectorType):
        return f"v{t.count}{type_suffix(t.element)}"
    if isinstance(t, ir.IntType):
        return f"i{t.width}"
    if isinstance(t, ir.PointerType):
        return "p0"
    return {ir.HalfType: "f16", ir.FloatType: "f32", ir.DoubleType: "f64"}[type(t)]


def like(v: ir.Value, scalar: ir.Type) -> ir.Type:
    """`scalar`, or a vector of it as wide as `v` when `v` is a vector."""
    t = v.type
    return ir.VectorType(scalar, t.count) if isinstance(t, ir.VectorType) else scalar


def splat(t: ir.Type, value) -> ir.Constant:
    """The constant `value` of type `t`, in every lane when `t` is a vector."""
    if isinstance(t, ir.VectorType):
        return ir.Constant(t, [ir.Constant(t.element, value)] * t.count)
    return ir.Constant(t, value)
