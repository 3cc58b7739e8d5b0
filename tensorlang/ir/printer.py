"""Readable, Python-like text of expressions and loop nests."""

from __future__ import annotations

from ..deep import deep_call
from .expr import (
    EQ, GE, GT, LE, LT, NE, Add, And, Call, Cast, Const, Div, Expr, FloorDiv, FloorMod, Load,
    PRINTERS, Max, Min, Mul, Not, Or, Select, Sub, Var,
)
from .simplify import simplify
from .stmt import (
    Allocate, Barrier, ExternCall, For, If, Let, LoopKind, Seq, Stmt, Store, TensorCall,
)

_BINARY = {Add: ("+", 5), Sub: ("-", 5), Mul: ("*", 6), Div: ("/", 6), FloorDiv: ("//", 6),
           FloorMod: ("%", 6), LT: ("<", 4), LE: ("<=", 4), GT: (">", 4), GE: (">=", 4),
           EQ: ("==", 4), NE: ("!=", 4), And: ("and", 2), Or: ("or", 1)}


def _const_str(c: Const) -> str:
    if c.dtype.is_bool:
        return str(c.value)
    if c.dtype.is_float:
        v = c.value
        if v != v:
            return "nan"
        if v in (float("inf"), float("-inf")):
            return "inf" if v > 0 else "-inf"
        return repr(v)
    return str(c.value)


def _expr(e: Expr, prec: int = 0) -> str:
    t = type(e)
    if isinstance(e, Var):
        return e.name
    if t is Const:
        s = _const_str(e)
        return f"({s})" if s.startswith("-") and prec > 5 else s
    if t in _BINARY:
        sym, p = _BINARY[t]
        # left-associative: the right operand needs parentheses at equal precedence
        s = f"{_expr(e.a, p)} {sym} {_expr(e.b, p + 1)}"
        return f"({s})" if p < prec else s
    if t is Not:
        s = f"not {_expr(e.a, 3)}"
        return f"({s})" if prec > 3 else s
    if t in (Min, Max):
        return f"{t.__name__.lower()}({_expr(e.a)}, {_expr(e.b)})"
    if t is Select:
        return f"select({_expr(e.cond)}, {_expr(e.true_value)}, {_expr(e.false_value)})"
    if t is Cast:
        return f"{e.dtype}({_expr(e.value)})"
    if t is Call:
        return f"{e.name}({', '.join([_expr(a) for a in e.args])})"
    if t is Load:
        return f"{e.buffer.name}[{', '.join([_expr(i) for i in e.indices])}]"
    printer = getattr(e, "_print", None)
    if printer is not None:
        return printer(_expr)
    return f"<{t.__name__}>"


def expr_str(e: Expr) -> str:
    return deep_call(_expr, e)


def _range_str(f: For) -> str:
    lo, ext = f.min, f.extent
    if isinstance(lo, Const) and lo.value == 0:
        return f"range({_expr(ext)})"
    return f"range({_expr(lo)}, {_expr(simplify(lo + ext))})"


def _stmt(s: Stmt, indent: int, out: list[str]) -> None:
    pad = "  " * indent
    if isinstance(s, For):
        kind = "" if s.kind is LoopKind.SERIAL else f"  # {s.kind.value}"
        if s.thread_tag:
            kind += f" {s.thread_tag}"
        out.append(f"{pad}for {s.var.name} in {_range_str(s)}:{kind}")
        _stmt(s.body, indent + 1, out)
    elif isinstance(s, Store):
        idx = ", ".join(_expr(i) for i in s.indices)
        if s.atomic == "add":
            out.append(f"{pad}{s.buffer.name}[{idx}] += {_expr(s.value)}  # atomic")
        elif s.atomic:
            out.append(f"{pad}{s.buffer.name}[{idx}] = {s.atomic}({s.buffer.name}[{idx}], "
                       f"{_expr(s.value)})  # atomic")
        else:
            out.append(f"{pad}{s.buffer.name}[{idx}] = {_expr(s.value)}")
    elif isinstance(s, Seq):
        for x in s.stmts:
            _stmt(x, indent, out)
    elif isinstance(s, If):
        out.append(f"{pad}if {_expr(s.cond)}:")
        _stmt(s.then_body, indent + 1, out)
        if s.else_body is not None:
            out.append(f"{pad}else:")
            _stmt(s.else_body, indent + 1, out)
    elif isinstance(s, Let):
        out.append(f"{pad}{s.var.name} = {_expr(s.value)}")
        _stmt(s.body, indent, out)
    elif isinstance(s, Allocate):
        b = s.buffer
        shape = ", ".join(_expr(x) for x in b.shape)
        out.append(f"{pad}{b.name} = allocate({b.dtype}, [{shape}], {b.scope!r})")
        _stmt(s.body, indent, out)
    elif isinstance(s, ExternCall):
        outs = ", ".join(b.name for b in s.outputs)
        ins = ", ".join(b.name for b in s.inputs)
        out.append(f"{pad}{outs} = extern {s.what}({ins})")
    elif isinstance(s, TensorCall):
        ops = ", ".join(f"{b.name}[{', '.join(_expr(i) for i in base)}]"
                        for b, base in zip(s.buffers, s.bases))
        out.append(f"{pad}{getattr(s.intrin, 'name', s.intrin)}({ops})  # tensorized")
    elif isinstance(s, Barrier):
        out.append(f"{pad}sync_warp()" if s.scope == "warp" else f"{pad}sync_threads()")
    else:
        out.append(f"{pad}<{type(s).__name__}>")


def stmt_str(s: Stmt, indent: int = 0) -> str:
    out: list[str] = []
    deep_call(_stmt, s, indent, out)
    return "\n".join(out)


PRINTERS.update(expr=expr_str, stmt=stmt_str)
