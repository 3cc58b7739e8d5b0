"""Loop unswitching: a condition that a loop's iterations do not change is tested once,
outside the loop, which is then duplicated (one copy per outcome).

isl guards partial tiles inside the loops (`if extent == 4` around an unrolled register
tile, inside the k loop of a matmul); on a GPU such a branch in the innermost loop splits the
unrolled tile into blocks that the compiler cannot schedule together. Hoisting it leaves the
full-tile copy without branches.

Only conditions that are pure (no loads: memory may change inside the loop) and use no
variable bound inside the loop move. A condition is not hoisted out of a loop that contains a
barrier unless it uses no thread index: the threads of a block must meet every barrier at the
same point of the same code. Each loop hoists at most `MAX_HOISTS` conditions (the code
doubles with each).
"""

from __future__ import annotations

from .expr import IndexCheck, Load, Var
from .stmt import Allocate, Barrier, For, If, Let, Seq, Stmt, seq
from .visit import walk, walk_stmt

MAX_HOISTS = 2


def _pure(e) -> bool:
    return not any(isinstance(x, (Load, IndexCheck)) for x in walk(e))


def _names(e) -> set[str]:
    return {x.name for x in walk(e) if isinstance(x, Var)}


def _bound_inside(s: Stmt) -> set[str]:
    out = set()
    for x in walk_stmt(s):
        if isinstance(x, (For, Let)):
            out.add(x.var.name)
    return out


def _find(s: Stmt, inner: set[str], thread_vars: set[str], barrier: bool):
    """The first hoistable If in `s` (not under a nested loop), or None."""
    if isinstance(s, If):
        names = _names(s.cond)
        if _pure(s.cond) and not names & inner and not (barrier and names & thread_vars):
            return s
        return None
    if isinstance(s, Seq):
        for x in s.stmts:
            hit = _find(x, inner, thread_vars, barrier)
            if hit is not None:
                return hit
        return None
    if isinstance(s, (Let, Allocate)):
        return _find(s.body, inner, thread_vars, barrier)
    if isinstance(s, For):   # also look one loop deeper: its loop is then duplicated too
        return _find(s.body, inner, thread_vars, barrier)
    return None


def _replace(s: Stmt, target: If, by: Stmt | None) -> Stmt:
    if s is target:
        return by if by is not None else Seq(())
    if isinstance(s, Seq):
        return seq(_replace(x, target, by) for x in s.stmts) if s.stmts else s
    if isinstance(s, Let):
        return Let(s.var, s.value, _replace(s.body, target, by))
    if isinstance(s, Allocate):
        return Allocate(s.buffer, _replace(s.body, target, by))
    if isinstance(s, For):
        return For(s.var, s.min, s.extent, _replace(s.body, target, by), s.kind,
                   s.thread_tag, s.max_extent)
    return s


def unswitch(s: Stmt, thread_vars: set[str] = frozenset()) -> Stmt:
    """`s` with invariant conditions hoisted out of its loops (see the module doc)."""
    if isinstance(s, Seq):
        return seq(unswitch(x, thread_vars) for x in s.stmts) if s.stmts else s
    if isinstance(s, Let):
        return Let(s.var, s.value, unswitch(s.body, thread_vars))
    if isinstance(s, Allocate):
        return Allocate(s.buffer, unswitch(s.body, thread_vars))
    if isinstance(s, If):
        return If(s.cond, unswitch(s.then_body, thread_vars),
                  None if s.else_body is None else unswitch(s.else_body, thread_vars))
    if not isinstance(s, For):
        return s
    loop = For(s.var, s.min, s.extent, unswitch(s.body, thread_vars), s.kind, s.thread_tag,
               s.max_extent)
    return _hoist(loop, thread_vars, MAX_HOISTS)


def _hoist(loop: For, thread_vars, budget: int) -> Stmt:
    if budget == 0:
        return loop
    inner = _bound_inside(loop)
    barrier = any(isinstance(x, Barrier) for x in walk_stmt(loop.body))
    hit = _find(loop.body, inner, set(thread_vars), barrier)
    if hit is None:
        return loop

    def copy(body):
        return For(loop.var, loop.min, loop.extent, body, loop.kind, loop.thread_tag,
                   loop.max_extent)

    then = _hoist(copy(_replace(loop.body, hit, hit.then_body)), thread_vars, budget - 1)
    other = _hoist(copy(_replace(loop.body, hit, hit.else_body)), thread_vars, budget - 1)
    return If(hit.cond, then, other)
