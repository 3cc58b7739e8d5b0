"""Translate integer expressions and conditions into isl's affine syntax (None if not affine)."""

from __future__ import annotations

import islpy as isl

from ..ir.expr import (
    EQ, GE, GT, LE, LT, NE, Add, And, Cast, Const, Expr, FloorDiv, FloorMod, Max, Min, Mul, Not,
    Or, Sub, Var,
)
from ..ir.visit import walk

_CMP = {LT: "<", LE: "<=", GT: ">", GE: ">=", EQ: "="}


def affine_str(e: Expr) -> str | None:
    """isl text of an integer affine expression of variables and constants, or None."""
    if isinstance(e, Var):
        return e.name
    if isinstance(e, Const):
        return str(int(e.value)) if e.dtype.is_int else None
    if isinstance(e, Cast):
        return affine_str(e.value) if e.dtype.is_int and e.value.dtype.is_int else None
    if isinstance(e, (Add, Sub, Min, Max)):
        a, b = affine_str(e.a), affine_str(e.b)
        if a is None or b is None:
            return None
        if isinstance(e, Min):
            return f"min({a}, {b})"
        if isinstance(e, Max):
            return f"max({a}, {b})"
        return f"({a} {'+' if isinstance(e, Add) else '-'} {b})"
    if isinstance(e, Mul):
        for x, y in ((e.a, e.b), (e.b, e.a)):
            if isinstance(y, Const) and y.dtype.is_int:
                a = affine_str(x)
                return None if a is None else f"({y.value} * {a})"
        return None
    if isinstance(e, (FloorDiv, FloorMod)):
        if isinstance(e.b, Const) and e.b.dtype.is_int and e.b.value > 0:
            a = affine_str(e.a)
            if a is None:
                return None
            c = e.b.value
            return f"floor(({a})/{c})" if isinstance(e, FloorDiv) else f"(({a}) mod {c})"
        return None
    return None


def interval_condition(cond: Expr, names: set[str]) -> bool:
    """Whether the values of the variables `names` where `cond` holds, along any line, are
    an interval: a conjunction of comparisons (<, <=, >, >=) of affine expressions
    (`affine_str`) in which those variables stand outside every floor, mod, min, max and
    narrowing cast — a stencil's `i >= 1 and i <= n - 2`. Along a vector's lanes it holds
    in every lane exactly when it holds in the first and in the last."""
    if isinstance(cond, And):
        return interval_condition(cond.a, names) and interval_condition(cond.b, names)
    if not isinstance(cond, (LT, LE, GT, GE)) or not cond.a.dtype.is_int:
        return False

    def linear(e: Expr) -> bool:
        if affine_str(e) is None:
            return False
        for x in walk(e):
            bent = isinstance(x, (FloorDiv, FloorMod, Min, Max)) or (
                isinstance(x, Cast) and x.dtype.bits < x.value.dtype.bits)
            if bent and any(isinstance(v, Var) and v.name in names for v in walk(x)):
                return False
        return True
    return linear(cond.a) and linear(cond.b)


def condition_set(cond: Expr, space_text: str, params: str) -> isl.Set | None:
    """The set of points of `space_text` (e.g. "S[i, j]") where `cond` holds, or None."""
    def text(c: Expr) -> str | None:
        if isinstance(c, Const) and c.dtype.is_bool:
            return "1 = 1" if c.value else "1 = 0"
        if type(c) in _CMP or isinstance(c, NE):
            a, b = affine_str(c.a), affine_str(c.b)
            if a is None or b is None:
                return None
            if isinstance(c, NE):
                return f"({a} < {b} or {a} > {b})"
            return f"{a} {_CMP[type(c)]} {b}"
        if isinstance(c, (And, Or)):
            a, b = text(c.a), text(c.b)
            if a is None or b is None:
                return None
            return f"(({a}) {'and' if isinstance(c, And) else 'or'} ({b}))"
        if isinstance(c, Not):
            a = text(c.a)
            return None if a is None else f"not ({a})"
        return None

    t = text(cond)
    if t is None:
        return None
    return isl.Set(f"[{params}] -> {{ {space_text} : {t} }}")


def conjuncts(cond: Expr) -> list[Expr]:
    """The terms of a conjunction a & b & ... (the condition itself if it is not one)."""
    if isinstance(cond, And):
        return conjuncts(cond.a) + conjuncts(cond.b)
    return [cond]


def affine_part(cond: Expr, space_text: str, params: str) -> tuple[isl.Set | None, bool]:
    """The set where the affine conjuncts of `cond` hold (None if there are none) and
    whether that set is exactly `cond` (every conjunct affine)."""
    out, exact = None, True
    for c in conjuncts(cond):
        cs = condition_set(c, space_text, params)
        if cs is None:
            exact = False
            continue
        out = cs if out is None else out.intersect(cs)
    return out, exact
