"""Generic traversal: rebuild nodes with new children, substitute variables, collect nodes."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from .expr import (
    And, BinaryOp, Call, Cast, CmpOp, Const, Expr, Load, Not, Or, Select, Var, binary, cast,
    compare, select,
)
from .stmt import (
    Allocate, Barrier, Buffer, ExternCall, For, If, Let, Seq, Stmt, Store, TensorCall, seq,
)


def rebuild(e: Expr, kids: tuple[Expr, ...]) -> Expr:
    """`e` with its children replaced by `kids` (same order as `e.children`); types re-promoted."""
    if isinstance(e, BinaryOp):
        return binary(type(e), kids[0], kids[1])
    if isinstance(e, CmpOp):
        return compare(type(e), kids[0], kids[1])
    if isinstance(e, (And, Or)):
        return type(e)(kids[0], kids[1])
    if isinstance(e, Not):
        return Not(kids[0])
    if isinstance(e, Select):
        return select(*kids)
    if isinstance(e, Cast):
        return cast(e.dtype, kids[0])
    if isinstance(e, Call):
        return Call(e.name, tuple(kids), e.dtype)
    if isinstance(e, Load):
        return Load(e.buffer, tuple(kids))
    if isinstance(e, (Var, Const)):
        return e
    custom = getattr(e, "rebuild", None)
    if custom is None:
        raise TypeError(f"cannot rebuild {type(e).__name__}")
    return custom(kids)


def map_expr(e: Expr, fn: Callable[[Expr], Expr | None]) -> Expr:
    """Post-order rewrite: children first, then `fn` on the rebuilt node (None = keep)."""
    kids = e.children
    if kids:
        # a list comprehension, not a generator: on Python 3.12 a generator consumed by
        # tuple() is a C call per level, and C recursion has its own fixed limit that a
        # 10,000-deep expression passes (the comprehension runs in this frame)
        new = tuple([map_expr(k, fn) for k in kids])
        if any(n is not k for n, k in zip(new, kids)):
            e = rebuild(e, new)
    out = fn(e)
    return e if out is None else out


def substitute(e: Expr, mapping: dict[str, Expr]) -> Expr:
    """Replace variables by name."""
    if not mapping:
        return e

    def fn(x: Expr) -> Expr | None:
        return mapping.get(x.name) if isinstance(x, Var) else None

    return map_expr(e, fn)


def walk(e: Expr) -> Iterator[Expr]:
    """Every node of `e`, parents before children."""
    stack = [e]
    while stack:
        x = stack.pop()
        yield x
        stack.extend(reversed(x.children))


def free_vars(e: Expr) -> set[str]:
    return {x.name for x in walk(e) if isinstance(x, Var)}


def map_stmt(s: Stmt, fexpr: Callable[[Expr], Expr],
             fbuf: Callable[[object], object] | None = None) -> Stmt:
    """Apply `fexpr` to every expression of a statement tree (and `fbuf` to stored buffers)."""
    def go(x: Stmt) -> Stmt:
        if isinstance(x, For):
            return For(x.var, fexpr(x.min), fexpr(x.extent), go(x.body), x.kind, x.thread_tag,
                       x.max_extent)
        if isinstance(x, Store):
            return Store(x.buffer if fbuf is None else fbuf(x.buffer),
                         tuple(fexpr(i) for i in x.indices), fexpr(x.value), x.atomic)
        if isinstance(x, Seq):
            return Seq(tuple(go(y) for y in x.stmts))
        if isinstance(x, If):
            return If(fexpr(x.cond), go(x.then_body),
                      None if x.else_body is None else go(x.else_body))
        if isinstance(x, Allocate):
            return Allocate(x.buffer, go(x.body))
        if isinstance(x, Let):
            return Let(x.var, fexpr(x.value), go(x.body))
        if isinstance(x, Barrier):
            return x
        if isinstance(x, TensorCall):
            return TensorCall(x.intrin, tuple(x.buffers if fbuf is None else map(fbuf, x.buffers)),
                              tuple(tuple(fexpr(i) for i in b) for b in x.bases))
        if isinstance(x, ExternCall):
            if fbuf is None:
                return x
            return ExternCall(x.stage, x.fn, tuple(fbuf(b) for b in x.inputs),
                              tuple(fbuf(b) for b in x.outputs), x.library, x.what, x.reads,
                              x.writes)
        raise TypeError(f"unknown statement {type(x).__name__}")

    return go(s)


def map_children(s: Stmt, f: Callable[[Stmt], Stmt]) -> Stmt:
    """`s` with `f` applied to each statement directly inside it (a loop's, Let's or
    Allocate's body, a Seq's statements, an If's branches); its own fields unchanged."""
    if isinstance(s, For):
        return For(s.var, s.min, s.extent, f(s.body), s.kind, s.thread_tag, s.max_extent)
    if isinstance(s, Seq):
        return seq(f(x) for x in s.stmts) if s.stmts else s
    if isinstance(s, If):
        return If(s.cond, f(s.then_body), None if s.else_body is None else f(s.else_body))
    if isinstance(s, Let):
        return Let(s.var, s.value, f(s.body))
    if isinstance(s, Allocate):
        return Allocate(s.buffer, f(s.body))
    return s


def stmt_exprs(s: Stmt) -> list[Expr]:
    """The expressions a statement node holds itself (not those of nested statements)."""
    if isinstance(s, Store):
        return [*s.indices, s.value]
    if isinstance(s, For):
        return [s.min, s.extent]
    if isinstance(s, If):
        return [s.cond]
    if isinstance(s, Let):
        return [s.value]
    if isinstance(s, Allocate):
        return list(s.buffer.shape)
    if isinstance(s, TensorCall):
        return [i for b in s.bases for i in b]
    return []


def walk_stmt(s: Stmt) -> Iterator[Stmt]:
    yield s
    if isinstance(s, For | Allocate | Let):
        yield from walk_stmt(s.body)
    elif isinstance(s, Seq):
        for x in s.stmts:
            yield from walk_stmt(x)
    elif isinstance(s, If):
        yield from walk_stmt(s.then_body)
        if s.else_body is not None:
            yield from walk_stmt(s.else_body)


def uses_buffer(s: Stmt, buf: Buffer) -> bool:
    """Whether a statement tree loads or stores `buf`."""
    for x in walk_stmt(s):
        if isinstance(x, (ExternCall, TensorCall)):
            if any(b is buf for b in x.buffers):
                return True
            if isinstance(x, ExternCall):
                continue
            exprs = stmt_exprs(x)
        elif isinstance(x, Store):
            if x.buffer is buf:
                return True
            exprs = list(x.indices) + [x.value]
        elif isinstance(x, For):
            exprs = [x.min, x.extent]
        elif isinstance(x, If):
            exprs = [x.cond]
        elif isinstance(x, Let):
            exprs = [x.value]
        else:
            exprs = []
        for ex in exprs:
            if any(isinstance(y, Load) and y.buffer is buf for y in walk(ex)):
                return True
    return False
