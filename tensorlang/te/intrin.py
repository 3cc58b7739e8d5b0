"""Elementwise math functions and helpers of the tensor-expression language."""

from __future__ import annotations

from ..errors import TensorlangError
from ..ir.dtype import as_dtype, bool_, float64
from ..ir.expr import Call, Const, Expr, Max, Min, binary, cast, const, power, select
from .tensor import to_expr


def _float_arg(x, name: str) -> Expr:
    e = to_expr(x, f"{name} argument")
    if e.dtype.is_bool:
        raise TensorlangError(f"{name}: expected a number, got a bool expression")
    return e if e.dtype.is_float else cast(float64, e)  # numpy: integer math -> float64


def _unary_call(name: str, fn: str):
    def f(x) -> Expr:
        e = _float_arg(x, name)
        return Call(fn, (e,), e.dtype)

    f.__name__ = name
    f.__doc__ = f"Elementwise {name}; integer input is converted to float64 as in numpy."
    return f


exp = _unary_call("exp", "exp")
log = _unary_call("log", "log")
sqrt = _unary_call("sqrt", "sqrt")
tanh = _unary_call("tanh", "tanh")
erf = _unary_call("erf", "erf")
sin = _unary_call("sin", "sin")
cos = _unary_call("cos", "cos")


def rsqrt(x) -> Expr:
    """1 / sqrt(x)."""
    e = _float_arg(x, "rsqrt")
    return const(1.0, e.dtype) / Call("sqrt", (e,), e.dtype)


def sigmoid(x) -> Expr:
    """1 / (1 + exp(-x))."""
    e = _float_arg(x, "sigmoid")
    return const(1.0, e.dtype) / (const(1.0, e.dtype) + Call("exp", (-e,), e.dtype))


def abs(x) -> Expr:  # noqa: A001
    """Absolute value; integers stay integers."""
    e = to_expr(x, "abs argument")
    if e.dtype.is_float:
        return Call("fabs", (e,), e.dtype)
    if e.dtype.is_unsigned or e.dtype.is_bool:
        return e
    return select(e < 0, -e, e)


def floor(x) -> Expr:
    e = to_expr(x, "floor argument")
    return Call("floor", (e,), e.dtype) if e.dtype.is_float else e


def ceil(x) -> Expr:
    e = to_expr(x, "ceil argument")
    return Call("ceil", (e,), e.dtype) if e.dtype.is_float else e


def round(x) -> Expr:  # noqa: A001
    """Round to the nearest integer, halves to even (numpy's `round`, IEEE's roundeven);
    integers stay integers."""
    e = to_expr(x, "round argument")
    return Call("roundeven", (e,), e.dtype) if e.dtype.is_float else e


def pow(x, y) -> Expr:  # noqa: A001
    """x ** y."""
    return power(to_expr(x, "pow base"), y if not hasattr(y, "var") else y.var)


def maximum(a, b) -> Expr:
    """Elementwise maximum (NaN propagates, as in numpy)."""
    return binary(Max, _arg(a), _arg(b))


def minimum(a, b) -> Expr:
    """Elementwise minimum (NaN propagates, as in numpy)."""
    return binary(Min, _arg(a), _arg(b))


def fmax(a, b) -> Expr:
    """Elementwise maximum that ignores NaN, as numpy's `fmax` and C's `fmax`: the other
    operand where one is NaN (NaN only where both are); which zero of +0 and -0 is
    unspecified. One `vmaxps` on x86, where `maximum`'s NaN and signed-zero rules cost a
    compare and blends per vector."""
    return _nan_ignoring(a, b, Max, "fmax")


def fmax_any(a, b) -> Expr:
    """Elementwise maximum whose result is unspecified where an operand is NaN (either
    operand, or any value): one `vmaxps` on x86 with no NaN test. For a maximum that only
    shifts other values (softmax's row maximum: a row with a NaN is NaN throughout through
    its own terms, whatever the shift), not for results a user sees."""
    return _nan_ignoring(a, b, Max, "fmax_any")


def fmin(a, b) -> Expr:
    """Elementwise minimum that ignores NaN, as numpy's `fmin` (see `fmax`)."""
    return _nan_ignoring(a, b, Min, "fmin")


def _nan_ignoring(a, b, op, name: str) -> Expr:
    m = binary(op, _arg(a), _arg(b))
    return Call(name, (m.a, m.b), m.dtype) if m.dtype.is_float else m


def _arg(a):
    return a if isinstance(a, (int, float, bool)) else to_expr(a)


def indexdiv(a, b) -> Expr:
    """TVM's name for `a // b` on indices: division rounding towards minus infinity."""
    return _arg(a) // b


def indexmod(a, b) -> Expr:
    """TVM's name for `a % b` on indices: the remainder of `indexdiv` (sign of `b`)."""
    return _arg(a) % b


def floordiv(a, b) -> Expr:
    """TVM's `floordiv`: `a // b` rounding towards minus infinity (as `indexdiv`)."""
    return _arg(a) // b


def floormod(a, b) -> Expr:
    """TVM's `floormod`: the remainder of `floordiv`, with the sign of `b`."""
    return _arg(a) % b


def max_value(dtype) -> Expr:
    """The largest value of `dtype` (inf for floats), as TVM's `te.max_value`."""
    d = as_dtype(dtype, "max_value dtype")
    return const(d.max_value(), d)


def min_value(dtype) -> Expr:
    """The smallest value of `dtype` (-inf for floats), as TVM's `te.min_value`."""
    d = as_dtype(dtype, "min_value dtype")
    return const(d.min_value(), d)


def if_then_else(cond, true_value, false_value) -> Expr:
    """`true_value` where `cond` holds, else `false_value`; the other arm is not evaluated,
    so it may read out of bounds (a padded stencil's halo)."""
    return select(to_expr(cond, "if_then_else cond"), _arg(true_value), _arg(false_value))


def all(*conds) -> Expr:  # noqa: A001
    """The conjunction of bool expressions."""
    if not conds:
        return Const(True, bool_)
    out = to_expr(conds[0])
    for c in conds[1:]:
        out = out & to_expr(c)
    return out


def any(*conds) -> Expr:  # noqa: A001
    """The disjunction of bool expressions."""
    if not conds:
        return Const(False, bool_)
    out = to_expr(conds[0])
    for c in conds[1:]:
        out = out | to_expr(c)
    return out
