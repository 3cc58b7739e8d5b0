"""Affine integer expressions of the loop IR: their text in isl's syntax, the constant
step of an index along one variable, and conditions whose solutions along a line are an
interval. Queries of IR alone; polyhedral/affine.py turns the text into isl sets."""

from __future__ import annotations

from .expr import (
    GE, GT, LE, LT, Add, And, Cast, Const, Expr, FloorDiv, FloorMod, IndexCheck, Max, Min, Mul,
    Sub, Var,
)
from .visit import walk


def affine_str(e: Expr) -> str | None:
    """isl text of an integer affine expression of variables and constants, or None."""
    return _affine(e, False)


def size_str(e: Expr) -> str | None:
    """isl text of a size expression (an extent or a shape), or None: like `affine_str`, but
    a product of two or more variables (`n * m`, `2 * n * m`) is the product parameter
    `product_name(...)` (times its constant), which the program declares as one more isl
    parameter whose value the kernel computes from its factors. Only for expressions whose
    variables are all sizes: a loop variable times a size is not affine."""
    return _affine(e, True)


PRODUCT_PREFIX = "prod__"


def product_name(factors) -> str:
    """The isl parameter of the product of the size variables `factors` (any order)."""
    return PRODUCT_PREFIX + "__".join(sorted(factors))


def monomial(e: Expr) -> tuple[int, list[str]] | None:
    """(coefficient, variable names) of a product of integer constants and variables."""
    if isinstance(e, Var):
        return 1, [e.name]
    if isinstance(e, Const):
        return (int(e.value), []) if e.dtype.is_int else None
    if isinstance(e, Cast) and e.dtype.is_int and e.value.dtype.is_int:
        return monomial(e.value)
    if isinstance(e, Mul):
        a, b = monomial(e.a), monomial(e.b)
        if a is None or b is None:
            return None
        return a[0] * b[0], a[1] + b[1]
    return None


def size_products(e: Expr) -> dict[str, tuple[str, ...]]:
    """The products of two or more variables in size expression `e` (what `size_str`
    names): product parameter -> its factors, sorted."""
    out: dict[str, tuple[str, ...]] = {}
    for x in walk(e):
        if isinstance(x, Mul):
            mono = monomial(x)
            if mono is not None and len(mono[1]) >= 2:
                out[product_name(mono[1])] = tuple(sorted(mono[1]))
    return out


def _affine(e: Expr, products: bool) -> str | None:
    if isinstance(e, Var):
        return e.name
    if isinstance(e, Const):
        return str(int(e.value)) if e.dtype.is_int else None
    if isinstance(e, Cast):
        return _affine(e.value, products) if e.dtype.is_int and e.value.dtype.is_int else None
    if isinstance(e, (Add, Sub, Min, Max)):
        a, b = _affine(e.a, products), _affine(e.b, products)
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
                a = _affine(x, products)
                return None if a is None else f"({y.value} * {a})"
        if products:
            mono = monomial(e)
            if mono is not None and len(mono[1]) >= 2:
                return f"({mono[0]} * {product_name(mono[1])})"
        return None
    if isinstance(e, (FloorDiv, FloorMod)):
        if isinstance(e.b, Const) and e.b.dtype.is_int and e.b.value > 0:
            a = _affine(e.a, products)
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


def linear_coeff(e: Expr, var: str) -> int | None:
    """How much `e` changes when `var` grows by 1, if that is a constant; else None."""
    if isinstance(e, Var):
        return 1 if e.name == var else 0
    if isinstance(e, Const):
        return 0
    if isinstance(e, (Add, Sub)):
        a, b = linear_coeff(e.a, var), linear_coeff(e.b, var)
        if a is None or b is None:
            return None
        return a + b if isinstance(e, Add) else a - b
    if isinstance(e, Mul):
        a, b = linear_coeff(e.a, var), linear_coeff(e.b, var)
        if a == 0 and b == 0:
            return 0
        if a is not None and b == 0 and isinstance(e.b, Const):
            return a * int(e.b.value)
        if b is not None and a == 0 and isinstance(e.a, Const):
            return b * int(e.a.value)
        return None
    if isinstance(e, IndexCheck):  # its value is the index's (the iteration is for messages)
        return linear_coeff(e.index, var)
    if isinstance(e, Cast) and e.dtype.is_int and e.value.dtype.is_int and \
            e.dtype.bits >= e.value.dtype.bits:
        return linear_coeff(e.value, var)
    # anything else is linear only when it does not involve var at all
    if any(isinstance(x, Var) and x.name == var for x in walk(e)):
        return None
    return 0
