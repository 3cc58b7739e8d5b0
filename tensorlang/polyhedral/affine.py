"""Conditions of the loop IR as isl sets (None where not affine); the text of affine
expressions (`affine_str`) comes from ir/affine.py."""

from __future__ import annotations

import islpy as isl

from ..ir.affine import (  # noqa: F401 (the model's API)
    PRODUCT_PREFIX, affine_str, interval_condition, product_name, size_products, size_str,
)
from ..ir.expr import EQ, GE, GT, LE, LT, NE, And, Const, Expr, Not, Or

_CMP = {LT: "<", LE: "<=", GT: ">", GE: ">=", EQ: "="}


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
