"""Scalar expressions: frozen, slotted dataclasses with tuple children and no back-pointers.

Equality is structural: ``a == b`` builds an `EQ` node (so ``i == 0`` can be used in tensor
expressions), and ``bool(a == b)`` compares the two trees, so expressions work as dict keys.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields

import numpy as np

from ..errors import TensorlangError
from .dtype import (
    DType,
    as_dtype,
    bool_,
    dtype_of_python,
    float64,
    int32,
    promote,
    weak_dtype,
)

Scalar = int | float | bool


_FIELD_NAMES: dict[type, tuple[str, ...]] = {}   # each node type's dataclass fields

# The text of expressions and statements (repr, str): printer.py, which knows every node
# type and so imports this module and stmt.py, puts its `expr_str` and `stmt_str` here.
# Importing any module of tensorlang.ir runs the package's __init__, which imports the
# printer, so the table is full before a node can be printed.
PRINTERS: dict[str, Callable[[object], str]] = {}


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Expr:
    """Base class of all scalar expressions."""

    # -- arithmetic -------------------------------------------------------------------
    def __add__(self, other):
        return binary(Add, self, other)

    def __radd__(self, other):
        return binary(Add, other, self)

    def __sub__(self, other):
        return binary(Sub, self, other)

    def __rsub__(self, other):
        return binary(Sub, other, self)

    def __mul__(self, other):
        return binary(Mul, self, other)

    def __rmul__(self, other):
        return binary(Mul, other, self)

    def __truediv__(self, other):
        return true_divide(self, other)

    def __rtruediv__(self, other):
        return true_divide(other, self)

    def __floordiv__(self, other):
        return binary(FloorDiv, self, other)

    def __rfloordiv__(self, other):
        return binary(FloorDiv, other, self)

    def __mod__(self, other):
        return binary(FloorMod, self, other)

    def __rmod__(self, other):
        return binary(FloorMod, other, self)

    def __pow__(self, other):
        return power(self, other)

    def __rpow__(self, other):
        return power(other, self)

    def __neg__(self):
        return binary(Sub, Const(0, self.dtype) if not self.dtype.is_float else
                      Const(-0.0, self.dtype), self)

    def __pos__(self):
        return self

    # -- comparisons and logic ---------------------------------------------------------
    def __lt__(self, other):
        return compare(LT, self, other)

    def __le__(self, other):
        return compare(LE, self, other)

    def __gt__(self, other):
        return compare(GT, self, other)

    def __ge__(self, other):
        return compare(GE, self, other)

    def __eq__(self, other):  # type: ignore[override]
        return compare(EQ, self, other)

    def __ne__(self, other):  # type: ignore[override]
        return compare(NE, self, other)

    def __and__(self, other):
        return logical(And, self, other)

    def __rand__(self, other):
        return logical(And, other, self)

    def __or__(self, other):
        return logical(Or, self, other)

    def __ror__(self, other):
        return logical(Or, other, self)

    def __invert__(self):
        if not self.dtype.is_bool:
            raise TensorlangError(f"~ expects a bool expression, got {self.dtype}")
        return Not(self)

    def __hash__(self) -> int:
        return hash(structural_key(self))

    def __bool__(self) -> bool:
        raise TensorlangError(
            "a symbolic expression has no Python truth value; use tl.if_then_else(cond, a, b) "
            "instead of `if`, and & | ~ instead of and/or/not"
        )

    def astype(self, dtype) -> Expr:
        """Convert to `dtype` (numpy's astype semantics; float -> int truncates)."""
        return cast(as_dtype(dtype), self)

    def __int__(self) -> int:
        raise TensorlangError(f"int({self}): not a constant (a symbolic size or an "
                              "expression); its value is known only when a kernel is called")

    @property
    def children(self) -> tuple[Expr, ...]:
        out: list[Expr] = []
        names = _FIELD_NAMES.get(type(self))
        if names is None:   # dataclasses.fields per node was most of the cost of a walk
            names = _FIELD_NAMES[type(self)] = tuple(f.name for f in fields(self))
        for name in names:
            v = getattr(self, name)
            if isinstance(v, Expr):
                out.append(v)
            elif isinstance(v, tuple):
                out.extend(x for x in v if isinstance(x, Expr))
        return tuple(out)

    def __repr__(self) -> str:
        return PRINTERS["expr"](self)

    __str__ = __repr__


# ---------------------------------------------------------------------------------- leaves
@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Var(Expr):
    """A named integer variable: a loop index, an axis, or a symbolic size."""

    name: str
    dtype: DType = int32


class ReduceVar(Var):
    """The variable of a reduction axis (a Var; the subclass lets misuse be detected)."""

    __slots__ = ()


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Const(Expr):
    value: Scalar
    dtype: DType

    def __post_init__(self):
        d = self.dtype
        v = self.value
        if d.is_bool:
            v = bool(v)
        elif d.is_int:
            v = int(v)
        else:
            v = float(v)
        object.__setattr__(self, "value", v)

    def __int__(self) -> int:  # int(C.shape[0]), as TVM users write
        return int(self.value)

    def __float__(self) -> float:
        return float(self.value)


# ----------------------------------------------------------------------- binary arithmetic
@dataclass(frozen=True, slots=True, eq=False, repr=False)
class BinaryOp(Expr):
    a: Expr
    b: Expr
    dtype: DType = None  # type: ignore[assignment]

    def __post_init__(self):
        if self.dtype is None:
            object.__setattr__(self, "dtype", self.a.dtype)


class Add(BinaryOp):
    __slots__ = ()


class Sub(BinaryOp):
    __slots__ = ()


class Mul(BinaryOp):
    __slots__ = ()


class Div(BinaryOp):
    """True division of floats."""

    __slots__ = ()


class FloorDiv(BinaryOp):
    """Division rounding towards minus infinity (Python's //); x // 0 == 0 for integers."""

    __slots__ = ()


class FloorMod(BinaryOp):
    """Remainder with the sign of the divisor (Python's %); x % 0 == 0 for integers."""

    __slots__ = ()


class Min(BinaryOp):
    __slots__ = ()


class Max(BinaryOp):
    __slots__ = ()


# ------------------------------------------------------------------- comparisons and logic
@dataclass(frozen=True, slots=True, eq=False, repr=False)
class CmpOp(Expr):
    a: Expr
    b: Expr
    dtype: DType = bool_


class LT(CmpOp):
    __slots__ = ()


class LE(CmpOp):
    __slots__ = ()


class GT(CmpOp):
    __slots__ = ()


class GE(CmpOp):
    __slots__ = ()


class EQ(CmpOp):
    __slots__ = ()

    def __bool__(self) -> bool:  # structural equality, so expressions work as dict keys
        return structural_key(self.a) == structural_key(self.b)


class NE(CmpOp):
    __slots__ = ()

    def __bool__(self) -> bool:
        return structural_key(self.a) != structural_key(self.b)


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class And(Expr):
    a: Expr
    b: Expr
    dtype: DType = bool_


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Or(Expr):
    a: Expr
    b: Expr
    dtype: DType = bool_


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Not(Expr):
    a: Expr
    dtype: DType = bool_


# ------------------------------------------------------------------------------ the rest
@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Select(Expr):
    """`true_value` where `cond` holds, else `false_value`; only the taken arm is evaluated."""

    cond: Expr
    true_value: Expr
    false_value: Expr
    dtype: DType = None  # type: ignore[assignment]

    def __post_init__(self):
        if self.dtype is None:
            object.__setattr__(self, "dtype", self.true_value.dtype)


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Cast(Expr):
    dtype: DType
    value: Expr


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Call(Expr):
    """A math function (exp, log, sqrt, tanh, erf, pow, floor, ceil, abs, ...)."""

    name: str
    args: tuple[Expr, ...]
    dtype: DType


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Load(Expr):
    """Read one element of a tensor or buffer (anything with .name, .dtype, .shape)."""

    buffer: object
    indices: tuple[Expr, ...]
    dtype: DType = None  # type: ignore[assignment]

    def __post_init__(self):
        if self.dtype is None:
            object.__setattr__(self, "dtype", self.buffer.dtype)


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class IndexCheck(Expr):
    """`index`, checked when it is evaluated to lie in [0, `extent`): an index isl cannot prove
    in range (it reads a tensor, or is not affine). Outside it, the kernel stops and returns
    status 3 with `site` (which access, see `lower`'s `checks`), the index's value and `point`
    (the values of the statement's axes: the iteration) recorded for the error message."""

    index: Expr
    extent: Expr
    site: int
    point: tuple[Expr, ...] = ()

    @property
    def dtype(self) -> DType:
        return self.index.dtype

    def rebuild(self, kids: tuple[Expr, ...]) -> IndexCheck:
        return IndexCheck(kids[0], kids[1], self.site, tuple(kids[2:]))

    def _print(self, fmt) -> str:
        return f"checked({fmt(self.index)} < {fmt(self.extent)})"


MATH_FUNCTIONS = ("exp", "log", "sqrt", "tanh", "erf", "pow", "floor", "ceil", "roundeven", "fabs",
                  "sin",
                  "cos", "isnan", "fmax", "fmin", "fmax_any")


# ---------------------------------------------------------------- structural comparison
def structural_key(e: object) -> object:
    """A hashable value equal for structurally equal expressions."""
    if isinstance(e, Expr):
        parts = [type(e).__name__]
        for f in fields(e):
            v = getattr(e, f.name)
            if f.name == "buffer":
                parts.append(("buffer", id(v)))
            else:
                parts.append(structural_key(v))
        return tuple(parts)
    if isinstance(e, tuple):
        return tuple([structural_key(x) for x in e])   # (a list: see ir/visit.map_expr)
    if isinstance(e, float):
        return ("f", e)  # keep 1 and 1.0 apart
    return e


def same(a: Expr, b: Expr) -> bool:
    """Structural equality of two expressions."""
    return structural_key(a) == structural_key(b)


# ------------------------------------------------------------------------- constructors
def const(value: Scalar, dtype: DType | str | None = None) -> Const:
    """A constant; without `dtype`, Python ints are int32 and floats float32."""
    if isinstance(value, Const):
        return value if dtype is None else Const(value.value, as_dtype(dtype))
    if isinstance(value, np.ndarray) and value.ndim == 0:
        value = value.item()
    d = as_dtype(dtype) if dtype is not None else dtype_of_python(value)
    is_integer = isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))
    if d.is_int and is_integer:
        lo, hi = d.min_value(), d.max_value()
        if not lo <= int(value) <= hi:
            raise TensorlangError(f"constant {value} does not fit in {d}")
    return Const(value, d)


def as_expr(value: object, like: DType | None = None) -> Expr:
    """Make an Expr of `value`; Python scalars take a dtype fitting `like` (weak typing)."""
    if isinstance(value, Expr):
        return value
    convert = getattr(value, "__tl_expr__", None)  # e.g. te's IterVar stands for its variable
    if convert is not None:
        return convert()
    if isinstance(value, (bool, int, float, np.number, np.bool_)):
        if like is not None and not isinstance(value, (np.number, np.bool_)):
            dt = weak_dtype(value, like.element)
            if dt.is_int and not isinstance(value, bool) and \
                    not dt.min_value() <= value <= dt.max_value():
                # numpy (NEP 50) refuses it too: uint8_array + (-3) is an OverflowError
                raise TensorlangError(f"the Python integer {value} does not fit {dt}, the "
                                      f"type of the expression it is combined with; convert "
                                      f"one of them with .astype()")
            return Const(value, dt)
        return const(value)
    raise TensorlangError(
        f"expected an expression or a number, got {type(value).__name__} {value!r}"
    )


def _operands(a: object, b: object) -> tuple[Expr, Expr]:
    if isinstance(a, Expr) and not isinstance(b, Expr):
        b = as_expr(b, like=a.dtype)
    elif isinstance(b, Expr) and not isinstance(a, Expr):
        a = as_expr(a, like=b.dtype)
    else:
        a, b = as_expr(a), as_expr(b)
    return a, b


def cast(dtype: DType, e: Expr) -> Expr:
    """Convert `e` to `dtype`; no node when it already has that type."""
    e = as_expr(e)
    if e.dtype == dtype:
        return e
    if isinstance(e, Const):
        v = e.value
        if dtype.is_bool:
            return Const(bool(v), dtype)
        if dtype.is_int:
            if isinstance(v, float) and not np.isfinite(v):
                return Cast(dtype, e)
            return Const(int(np.array(int(v) if not isinstance(v, float) else np.trunc(v))
                             .astype(np.int64).astype(dtype.np)), dtype)
        return Const(float(np.array(v).astype(dtype.np)), dtype)
    return Cast(dtype, e)


def binary(cls: type[BinaryOp], a: object, b: object) -> Expr:
    """Build `a <op> b` with numpy type promotion (Python scalars are weak)."""
    a, b = _operands(a, b)
    if a.dtype.is_bool and b.dtype.is_bool and cls not in (Min, Max):
        raise TensorlangError(
            f"{cls.__name__} of two bool expressions; use .astype() to pick a numeric type"
        )
    d = promote(a.dtype, b.dtype)
    if cls is Div and not d.is_float:
        d = float64
    return cls(cast(d, a), cast(d, b), d)


def true_divide(a: object, b: object) -> Expr:
    """`a / b`: floats divide; integers are converted to float64 first, as in numpy (so a
    Python int beside an int8 tensor is a float64 value, not an int8 one)."""
    floats = any(isinstance(x, Expr) and x.dtype.is_float for x in (a, b))
    if not floats:
        a, b = (cast(float64.with_lanes(x.dtype.lanes), x) if isinstance(x, Expr) else x
                for x in (a, b))
    return binary(Div, a, b)


def compare(cls: type[CmpOp], a: object, b: object) -> Expr:
    a, b = _operands(a, b)
    d = promote(a.dtype, b.dtype)
    return cls(cast(d, a), cast(d, b), bool_.with_lanes(d.lanes))


def logical(cls: type, a: object, b: object) -> Expr:
    a, b = _operands(a, b)
    for side, e in (("left", a), ("right", b)):
        if not e.dtype.is_bool:
            raise TensorlangError(
                f"{cls.__name__.lower()}: the {side} operand must be bool, got {e.dtype}; "
                "compare it first (e.g. x > 0)"
            )
    return cls(a, b)


def select(cond: object, true_value: object, false_value: object) -> Expr:
    """`true_value if cond else false_value`, with numpy promotion of the two arms."""
    cond = as_expr(cond)
    if not cond.dtype.is_bool:
        raise TensorlangError(f"if_then_else: cond must be a bool expression, got {cond.dtype}")
    t, f = _operands(true_value, false_value)
    d = promote(t.dtype, f.dtype)
    return Select(cond, cast(d, t), cast(d, f), d)


def power(a: object, b: object) -> Expr:
    """`a ** b`: small constant integer exponents become products; otherwise pow()."""
    def small(x: object) -> int | None:
        if isinstance(x, Const):
            x = x.value
        if isinstance(x, (int, float)) and not isinstance(x, bool) and float(x).is_integer():
            return int(x) if 0 <= x <= 4 else None
        return None

    k = small(b)
    if k is not None and isinstance(a, Expr):
        if k == 0:
            return Const(1, a.dtype)
        out = a
        for _ in range(k - 1):
            out = binary(Mul, out, a)
        return out
    a, b = _operands(a, b)
    d = promote(a.dtype, b.dtype)
    if d.is_float:
        return Call("pow", (cast(d, a), cast(d, b)), d)
    # integer base and exponent: computed exactly in float64 for |result| < 2**53
    return cast(d, Call("pow", (cast(float64, a), cast(float64, b)), float64))
