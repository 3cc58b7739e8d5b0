"""Whether a launch's index arithmetic fits 32 bits at given sizes (the CUDA target picks
32-bit index variants when it does, 64-bit ones otherwise): interval arithmetic over the
loop nest as emitted, with each loop's range from its bounds."""

from __future__ import annotations

from ...ir.expr import (
    EQ, GE, GT, LE, LT, NE, Add, And, Cast, Const, Expr, FloorDiv, FloorMod, Max, Min, Mul,
    Not, Or, Select, Sub, Var)
from ...ir.stmt import Allocate, For, If, Let, Seq, Stmt
from ...ir.visit import stmt_exprs
from .codegen import is_index
from .launch import Launch

INT32_MIN, INT32_MAX = -(2 ** 31), 2 ** 31 - 1


class _Wide(Exception):
    """Some index value of the launch may not fit 32 bits."""


def fits_int32(launch: Launch, env: dict[str, int]) -> bool:
    """Whether every index value of `launch` (loop variables, sizes, index arithmetic and
    its intermediates, flat addresses) fits 32 bits for these sizes: interval arithmetic
    over the loop nest as emitted, with the loops' ranges from their bounds."""
    for b in launch.buffers:
        n = 1
        for x in b.shape:
            lo, hi = _interval(x, {k: (v, v) for k, v in env.items()})
            n *= max(hi, 0)
        if n > INT32_MAX:
            return False
    iv = {p.name: (env[p.name], env[p.name]) for p in launch.params}
    try:
        _walk(launch.body, iv)
    except _Wide:
        return False
    return True


def _walk(s: Stmt, iv: dict) -> None:
    if isinstance(s, Seq):
        for x in s.stmts:
            _walk(x, iv)
    elif isinstance(s, For):
        lo = _check(s.min, iv)
        ext = _check(s.extent, iv)
        top = max(ext[1], s.max_extent or 0)
        if top <= 0:
            return                       # runs no iteration
        iv[s.var.name] = (lo[0], lo[1] + top - 1)
        _fits(iv[s.var.name])
        _walk(s.body, iv)
    elif isinstance(s, Let):
        if s.var.dtype.is_int and is_index(s.value, iv):
            iv[s.var.name] = _check(s.value, iv)
        else:
            for e in stmt_exprs(s):
                _exprs(e, iv)
        _walk(s.body, iv)
    elif isinstance(s, If):
        _exprs(s.cond, iv)
        _walk(s.then_body, iv)
        if s.else_body is not None:
            _walk(s.else_body, iv)
    elif isinstance(s, Allocate):
        _walk(s.body, iv)
    else:
        for e in stmt_exprs(s):
            _exprs(e, iv)


def _exprs(e: Expr, iv: dict) -> None:
    """Check every maximal index subexpression of `e`."""
    if e.dtype.is_int and not e.dtype.is_bool and is_index(e, iv):
        _check(e, iv)
        return
    for k in e.children:
        _exprs(k, iv)


def _fits(r) -> tuple[int, int]:
    if r[0] < INT32_MIN or r[1] > INT32_MAX:
        raise _Wide
    return r


def _check(e: Expr, iv: dict) -> tuple[int, int]:
    return _fits(_interval(e, iv, check=True))


def _interval(e: Expr, iv: dict, check: bool = False) -> tuple[int, int]:
    """Bounds of an index expression (every intermediate checked when `check`)."""
    def go(x):
        r = _interval(x, iv, check)
        return _fits(r) if check else r

    if isinstance(e, Const):
        v = int(e.value)
        return v, v
    if isinstance(e, Var):
        if e.name not in iv:
            raise _Wide                  # not an index variable we know: be safe
        return iv[e.name]
    if isinstance(e, Cast):
        return go(e.value)
    if type(e) in (LT, LE, GT, GE, EQ, NE, And, Or, Not):
        for k in e.children:
            go(k)
        return 0, 1
    if isinstance(e, Select):
        go(e.cond)
        a, b = go(e.true_value), go(e.false_value)
        return min(a[0], b[0]), max(a[1], b[1])
    a, b = go(e.a), go(e.b)
    if isinstance(e, Add):
        return a[0] + b[0], a[1] + b[1]
    if isinstance(e, Sub):
        return a[0] - b[1], a[1] - b[0]
    if isinstance(e, Mul):
        ps = [x * y for x in a for y in b]
        return min(ps), max(ps)
    if isinstance(e, Min):
        return min(a[0], b[0]), min(a[1], b[1])
    if isinstance(e, Max):
        return max(a[0], b[0]), max(a[1], b[1])
    big = max(abs(a[0]), abs(a[1]))
    if isinstance(e, FloorDiv):
        if b[0] > 0 or b[1] < 0:          # the divisor's sign is known and not zero
            qs = [x // y for x in a for y in b]
            return min(qs), max(qs)
        return -big, big
    if isinstance(e, FloorMod):
        m = max(abs(b[0]), abs(b[1]))
        return -m, m
    raise _Wide
