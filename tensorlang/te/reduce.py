"""Reductions: commutative reducers (sum, max, min, prod, user-defined) and argmax/argmin."""

from __future__ import annotations

from collections.abc import Callable

from ..errors import TensorlangError
from ..ir.dtype import DType, as_dtype
from ..ir.expr import (
    Call, Const, Expr, Max, Min, Var, binary, cast, const, select,
)
from .intrin import fmax as _fmax
from .intrin import fmax_any as _fmax_any
from .intrin import fmin as _fmin
from .intrin import maximum as _maximum
from .intrin import minimum as _minimum
from .tensor import CommReducer, IterVar, Reduce, to_expr  # noqa: F401 (CommReducer: te's API)


def combiner_name(op) -> str:
    """The name of a compute op's reduction combiner ("sum", "max", ...), "" when its body
    is not a reduction."""
    body = getattr(op, "body", None)
    return body.combiner.name if isinstance(body, Reduce) else ""


def _axes(axis, who: str) -> tuple[IterVar, ...]:
    axes = axis if isinstance(axis, (list, tuple)) else [axis]
    if not axes:
        raise TensorlangError(f"{who}: axis must name at least one reduce_axis")
    for a in axes:
        if not isinstance(a, IterVar) or a.kind != IterVar.REDUCE:
            raise TensorlangError(
                f"{who}: axis must be tl.reduce_axis(...) (or a list of them), got {a!r}"
            )
    if len({a.name for a in axes}) != len(axes):
        raise TensorlangError(f"{who}: the same axis is listed twice")
    return tuple(axes)


def _where(where, who: str) -> Expr:
    if where is None:
        return Const(True, DType("bool"))
    w = to_expr(where, f"{who} where")
    if not w.dtype.is_bool:
        raise TensorlangError(f"{who}: where= must be a bool expression, got {w.dtype}")
    return w


def comm_reducer(fcombine: Callable, fidentity, name: str = "reduce") -> Callable:
    """Make a reducer from a combine function and an identity.

    `fidentity` is a function of the dtype (``lambda t: tl.const(0, t)``) or a number.
    The returned reducer is called as ``r(expr, axis=k, where=None)``.

    Over a tuple of expressions (TVM's tuple reducer, e.g. an argmax over index and value
    tensors), ``r((a, b), axis=k)`` returns a tuple of reductions, one per value, to be
    the tuple body of one compute: `fcombine(x, y)` then takes and returns tuples, and
    `fidentity(t0, t1, ...)` takes the values' dtypes and returns a tuple (or is a tuple of
    numbers).
    """
    if not callable(fcombine):
        raise TensorlangError("comm_reducer: fcombine must be a function of (x, y)")

    def reducer(expr, axis, where=None):
        who = f"{name}"
        if isinstance(expr, (tuple, list)):
            return _tuple_reduce(fcombine, fidentity, name, tuple(expr), axis, where)
        src = to_expr(expr, f"{who} expr")
        d = src.dtype
        x, y = Var("__acc", d), Var("__val", d)
        res = to_expr(fcombine(x, y), f"{who} fcombine result")
        ident = fidentity(d) if callable(fidentity) else fidentity
        ident = cast(d, to_expr(ident, f"{who} identity") if isinstance(ident, Expr)
                     else const(ident, d))
        if not isinstance(ident, Const):
            raise TensorlangError(f"{who}: the identity must be a constant, got {ident}")
        comb = CommReducer(name, (x,), (y,), (cast(d, res),), (ident,))
        return Reduce(comb, (src,), _axes(axis, who), _where(where, who), 0, d)

    reducer.__name__ = name
    return reducer


def _tuple_reduce(fcombine, fidentity, name: str, exprs: tuple, axis, where
                  ) -> tuple[Reduce, ...]:
    """`comm_reducer`'s reducer over a tuple of expressions: one Reduce per value."""
    who = name
    if not exprs:
        raise TensorlangError(f"{who}: expr is an empty tuple; give one expression per value")
    src = tuple(to_expr(e, f"{who} expr {j}") for j, e in enumerate(exprs))
    dts = tuple(e.dtype for e in src)
    lhs = tuple(Var(f"__acc{j}", d) for j, d in enumerate(dts))
    rhs = tuple(Var(f"__val{j}", d) for j, d in enumerate(dts))
    res = fcombine(lhs, rhs)
    if not isinstance(res, (tuple, list)) or len(res) != len(src):
        raise TensorlangError(f"{who}: fcombine must return a tuple of {len(src)} values "
                              f"(one per value reduced), got {res!r}")
    res = tuple(cast(d, to_expr(r, f"{who} fcombine result {j}"))
                for j, (r, d) in enumerate(zip(res, dts)))
    ident = fidentity(*dts) if callable(fidentity) else fidentity
    if not isinstance(ident, (tuple, list)) or len(ident) != len(src):
        raise TensorlangError(f"{who}: fidentity must give a tuple of {len(src)} identities "
                              f"(one per value reduced), got {ident!r}")
    idents = []
    for j, (v, d) in enumerate(zip(ident, dts)):
        c = cast(d, to_expr(v, f"{who} identity {j}") if isinstance(v, Expr) else const(v, d))
        if not isinstance(c, Const):
            raise TensorlangError(f"{who}: identity {j} must be a constant, got {c}")
        idents.append(c)
    comb = CommReducer(name, lhs, rhs, res, tuple(idents))
    axes, w = _axes(axis, who), _where(where, who)
    return tuple(Reduce(comb, src, axes, w, j, d) for j, d in enumerate(dts))


def _builtin(name: str, fcombine, fidentity, no_bool: bool = False):
    base = comm_reducer(fcombine, fidentity, name)

    def reducer(expr, axis, where=None) -> Reduce:
        e = to_expr(expr, f"{name} expr")
        if no_bool and e.dtype.is_bool:
            raise TensorlangError(f"{name}: cannot reduce bool values; use .astype('int32')")
        return base(e, axis, where)

    reducer.__name__ = name
    reducer.__doc__ = f"tl.{name}(expr, axis, where=None): {name} over the reduce axes."
    return reducer


sum = _builtin("sum", lambda x, y: x + y, lambda t: const(0, t), no_bool=True)  # noqa: A001
prod = _builtin("prod", lambda x, y: x * y, lambda t: const(1, t), no_bool=True)
def _or_elementwise(reducer, pairwise, name: str):
    """`reducer`, or TVM's elementwise form where the second argument is an expression
    rather than reduce axes: ``tl.max(x, 0.0)`` is ``tl.maximum(x, 0.0)`` (TOPI's relu)."""
    def f(expr, axis=None, where=None):
        axes = axis if isinstance(axis, (list, tuple)) else [axis]
        if axis is not None and where is None and axes and \
                not any(isinstance(a, IterVar) for a in axes):
            return pairwise(expr, axis)
        if axis is None:
            raise TensorlangError(f"{name}: give reduce axes (tl.{name}(expr, axis=k)) or a "
                                  f"second expression (tl.{name}(a, b), elementwise)")
        return reducer(expr, axis, where)
    f.__name__ = name
    f.__doc__ = (f"tl.{name}(expr, axis, where=None): the {name} over the reduce axes; "
                 f"tl.{name}(a, b): the elementwise {name} of two expressions (as TVM's "
                 f"te.{name}).")
    return f


max = _or_elementwise(_builtin("max", lambda x, y: binary(Max, x, y),  # noqa: A001
                               lambda t: const(t.min_value(), t)),
                      _maximum, "max")
min = _or_elementwise(_builtin("min", lambda x, y: binary(Min, x, y),  # noqa: A001
                               lambda t: const(t.max_value(), t)),
                      _minimum, "min")


def _nan_or(bound: str):
    # NaN is fmax's identity (fmax(NaN, x) = x): a reduction over NaN only stays NaN, as
    # numpy's nanmax; integers have no NaN and reduce as max/min
    return lambda t: const(float("nan"), t) if t.is_float else const(getattr(t, bound)(), t)


nanmax = _builtin("nanmax", _fmax, _nan_or("min_value"))
nanmax.__doc__ = ("tl.nanmax(expr, axis, where=None): the maximum ignoring NaN, as numpy's "
                  "nanmax (NaN where every value is NaN); one vmaxps per vector on x86, "
                  "where max's NaN and signed-zero rules cost a compare and blends")
nanmin = _builtin("nanmin", _fmin, _nan_or("max_value"))
nanmin.__doc__ = "tl.nanmin(expr, axis, where=None): the minimum ignoring NaN (see nanmax)."
# the maximum as a shift (`intrin.fmax_any`: NaN unspecified), for softmax; identity -inf,
# never NaN (a NaN identity under LLVM's no-NaN flag could make a NaN-free row's max NaN)
shift_max = _builtin("shift_max", _fmax_any,
                     lambda t: const(float("-inf"), t) if t.is_float else const(t.min_value(), t))
# combiners whose reductions LLVM's loop vectoriser takes itself (lane-wise in a register),
# where a rfactor would make one dependent chain (graph/cpu_schedules, schedule/sample)
MINMAX_COMBINERS = ("max", "min", "nanmax", "nanmin", "shift_max")


def _arg_reducer(name: str, better):
    def reducer(expr, axis, where=None, dtype="int32") -> Reduce:
        who = name
        src = to_expr(expr, f"{who} expr")
        axes = _axes(axis, who)
        if len(axes) != 1:
            raise TensorlangError(f"{who}: reduces over exactly one axis, got {len(axes)}")
        idt = as_dtype(dtype, f"{who} dtype")
        if not idt.is_int:
            raise TensorlangError(f"{who}: dtype must be an integer type, got {idt}")
        d = src.dtype
        v0, i0, v1, i1 = Var("__v0", d), Var("__i0", idt), Var("__v1", d), Var("__i1", idt)
        # take the right pair when it is strictly better, or equal with a smaller index, so
        # the combiner commutes and the result is numpy's first occurrence; NaN wins, as there
        take = better(v1, v0) | ((v1 == v0) & (i1 < i0))
        if d.is_float:
            nan1, nan0 = Call("isnan", (v1,), DType("bool")), Call("isnan", (v0,), DType("bool"))
            take = (nan1 & ~nan0) | (nan1 & nan0 & (i1 < i0)) | (~nan0 & take)
        ident_v = const(d.min_value() if name == "argmax" else d.max_value(), d)
        big = const(idt.max_value(), idt)
        comb = CommReducer(name, (v0, i0), (v1, i1),
                           (select(take, v1, v0), select(take, i1, i0)), (ident_v, big))
        index = cast(idt, axes[0].var)
        return Reduce(comb, (src, index), axes, _where(where, who), 1, idt)

    reducer.__name__ = name
    reducer.__doc__ = (f"tl.{name}(expr, axis, where=None, dtype='int32'): the index along "
                       "`axis` of the first extreme value (numpy's convention; NaN counts as "
                       "extreme). Where no point satisfies `where`, the result is dtype's max.")
    return reducer


argmax = _arg_reducer("argmax", lambda a, b: a > b)
argmin = _arg_reducer("argmin", lambda a, b: a < b)

__all__ = ["CommReducer", "Reduce", "comm_reducer", "sum", "prod", "max", "min", "nanmax",
           "nanmin", "argmax", "argmin"]
