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

from .expr import And, Const, IndexCheck, Load, Var
from .stmt import Allocate, Barrier, For, If, Let, LoopKind, Seq, Stmt, seq
from .visit import map_children, walk, walk_stmt

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
    return map_children(s, lambda x: _replace(x, target, by))


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


# ------------------------------------------------------------ guards of unrolled tiles
MAX_TILE_GUARDS = 64     # conditions folded into one hoisted test


def _guards(s: Stmt, env: dict, inner: set[str], out: list, hit: set[int]) -> bool:
    """Collect into `out` the conditions of the Ifs in `s` (and into `hit` those Ifs) with
    every unrolled loop of constant extent expanded (its variable replaced by each of its
    values, `env`): the conditions that use no variable bound inside the hoisting loop
    except those. False when some If's condition cannot be expanded so (it depends on the
    loop's own iterations), or there are too many."""
    from .simplify import simplify
    from .visit import substitute

    if isinstance(s, If):
        cond = s.cond
        names = _names(cond)
        if not _pure(cond) or names & (inner - set(env)):
            return False
        cases = [{}]
        for name in names & set(env):
            cases = [dict(c, **{name: v}) for c in cases for v in env[name]]
        for c in cases:
            out.append(simplify(substitute(cond, c)) if c else cond)
        hit.add(id(s))
        if len(out) > MAX_TILE_GUARDS:
            return False
        return _guards(s.then_body, env, inner, out, hit)   # else: dropped when all hold
    if isinstance(s, Seq):
        return all(_guards(x, env, inner, out, hit) for x in s.stmts)
    if isinstance(s, (Let, Allocate)):
        return _guards(s.body, env, inner, out, hit)
    if isinstance(s, For):
        if s.kind is LoopKind.UNROLLED and isinstance(s.extent, Const) and \
                int(s.extent.value) <= 16 and not (_names(s.min) & (inner - set(env))):
            vals = [s.min + k for k in range(int(s.extent.value))]
            return _guards(s.body, dict(env, **{s.var.name: vals}), inner, out, hit)
        return not any(isinstance(x, If) for x in walk_stmt(s.body))
    return True


def _assume(s: Stmt, hit: set[int]) -> Stmt:
    """`s` with each If of `hit` replaced by its then-branch (they all hold under the
    hoisted test)."""
    if isinstance(s, If) and id(s) in hit:
        return _assume(s.then_body, hit)
    return map_children(s, lambda x: _assume(x, hit))


def hoist_tile_guards(s: Stmt) -> Stmt:
    """Each serial loop whose body tests, inside unrolled loops, conditions that the loop
    itself does not change (a register tile's partial-vector tests, `extent == 16` per
    vector of a tile whose columns end inside it) runs as `if <all of them hold>: <the loop
    without the tests> else: <the loop as it was>`: the conjunction of the tests over every
    value of the unrolled loops is evaluated once, outside. LLVM does not unswitch a
    reduction loop on a dozen such tests; left inside, they slow a matmul whose tiles run
    over a partial vector (1000^3) severalfold. Only the full tiles lose their tests; the
    loop stays the same otherwise."""
    from .simplify import simplify

    def go(x: Stmt) -> Stmt:
        if not isinstance(x, For) or x.kind is not LoopKind.SERIAL:
            return map_children(x, go)
        conds: list = []
        hit: set[int] = set()
        if not any(isinstance(y, For) and y.kind is LoopKind.UNROLLED
                   for y in walk_stmt(x.body)) or \
                any(isinstance(y, Barrier) for y in walk_stmt(x.body)) or \
                not _guards(x.body, {}, _bound_inside(x) | {x.var.name}, conds, hit) or \
                not conds:
            return map_children(x, go)
        test = conds[0]
        for c in conds[1:]:
            test = And(test, c)
        return If(simplify(test), map_children(x, lambda b: _assume(b, hit)), x)
    return go(s)
