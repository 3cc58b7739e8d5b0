"""Register tiles on the CPU: which small local arrays SROA can keep in registers.

A local array (a `cache_write(..., "local")` tile) stays in registers only when every
index into it is a constant after unrolling; one dynamic index puts the whole array in
memory (a matmul's accumulators then load and store at every multiply-add). The code
generator unrolls, with guards, the loops whose variable indexes such an array, when
`register_code_size` says the unrolled code is bounded; vector loops stay vectors (their
tails are masked: see `vector.py`).
"""

from __future__ import annotations

from ...errors import TensorlangError
from ...ir.expr import Const, Load, Var
from ...ir.stmt import (
    Allocate, Barrier, Buffer, ExternCall, For, If, Let, LoopKind, Seq, Stmt, Store, TensorCall,
)
from ...ir.simplify import FLAT_OFFSET, simplify
from ...ir.visit import map_expr, stmt_exprs, substitute, walk, walk_stmt

REGISTER_ARRAY_BYTES = 2048   # a local array this small is a register tile (see `loop`)
MAX_GUARDED_UNROLL = 16       # its partial loops up to this bound are unrolled, guarded
VECTOR_PAD = 64               # spare elements after a small local array (see allocate)
UNROLL_BUDGET = 512           # ... while the stores of the unrolled code stay this many
# (a 4 x 4-vector matmul tile with a partial row group and a partial last vector has four
# copies of its code once its tests are hoisted out of k: 320 stores at 127x4100x4100; at a
# budget of 256 it stayed in memory, a store after every FMA)


def indexes(s: For, buf: Buffer) -> bool:
    """Whether the loop's variable appears in an index of `buf` inside the loop (a load, a
    store, or the origin of a tensorized instruction's region of `buf`)."""
    def uses(indices) -> bool:
        return any(isinstance(v, Var) and v.name == s.var.name
                   for i in indices for v in walk(i))
    for st in walk_stmt(s.body):
        accesses = [x for e in stmt_exprs(st) for x in walk(e) if isinstance(x, Load)]
        if isinstance(st, Store):
            accesses.append(st)
        if any(x.buffer is buf and uses(x.indices) for x in accesses):
            return True
        if isinstance(st, TensorCall) and any(
                b is buf and uses(base) for b, base in zip(st.buffers, st.bases)):
            return True
    return False


def register_code_size(s: Stmt, buf: Buffer) -> int | None:
    """The stores of `s` once every loop that indexes `buf` is unrolled (vector loops are
    one instruction; the larger branch of an If counts), or None when some such loop has
    no constant bound (an index into `buf` would stay dynamic)."""
    if isinstance(s, Store):
        return 1
    if isinstance(s, Seq):
        sizes = [register_code_size(x, buf) for x in s.stmts]
        return None if None in sizes else sum(sizes)
    if isinstance(s, If):
        a = register_code_size(s.then_body, buf)
        b = 0 if s.else_body is None else register_code_size(s.else_body, buf)
        return None if a is None or b is None else a + b
    if isinstance(s, (Let, Allocate)):
        return register_code_size(s.body, buf)
    if isinstance(s, For):
        inner = register_code_size(s.body, buf)
        if inner is None:
            return None
        if s.kind is LoopKind.VECTORIZED and isinstance(s.extent, Const):
            return inner
        if not indexes(s, buf):
            return inner                       # stays a loop
        n = int(s.extent.value) if isinstance(s.extent, Const) else s.max_extent
        if n is None or n > MAX_GUARDED_UNROLL:
            return None
        return n * inner
    return 0


def rebase_register_loops(s: Stmt, buf: Buffer) -> Stmt:
    """`s` with every non-vector loop that indexes `buf` counting from zero (its variable
    v replaced by v + min inside it) and the indices into `buf` simplified (a quotient and
    remainder recombined too: isl may write a tile's offset `32 * (f // 16)` as `2*f -
    2*(f % 16)`), so that once such a loop is unrolled each index is a constant plus lanes.
    isl's loops start at expressions of the outer tile loops (`for c in range(3*jb,
    3*jb + 3)` indexing the tile at `16*c - 48*jb`); left to LLVM, the two halves of such
    an index went into separate address computations (the `-48*jb` hoisted out of the
    loops), SROA saw a dynamic offset and left the register tile in memory (an 8 x
    3-vector matmul tile, a store after every multiply-add)."""
    def go(x: Stmt, shift: dict) -> Stmt:
        def ex(e):
            if not shift:
                return e
            return map_expr(substitute(e, shift), lambda y: Load(
                buf, tuple(simplify(i, FLAT_OFFSET) for i in y.indices))
                if isinstance(y, Load) and y.buffer is buf else None)

        if isinstance(x, For):
            lo, ext = ex(x.min), ex(x.extent)
            inner = {k: v for k, v in shift.items() if k != x.var.name}
            if x.kind is not LoopKind.VECTORIZED and indexes(x, buf) and \
                    not (isinstance(lo, Const) and lo.value == 0):
                inner[x.var.name] = x.var + lo
                lo = Const(0, lo.dtype)
            return For(x.var, lo, ext, go(x.body, inner), x.kind, x.thread_tag, x.max_extent)
        if isinstance(x, Store):
            idx = tuple(ex(i) for i in x.indices)
            if x.buffer is buf and shift:
                idx = tuple(simplify(i, FLAT_OFFSET) for i in idx)
            return Store(x.buffer, idx, ex(x.value), x.atomic)
        if isinstance(x, Seq):
            return Seq(tuple(go(y, shift) for y in x.stmts))
        if isinstance(x, If):
            return If(ex(x.cond), go(x.then_body, shift),
                      None if x.else_body is None else go(x.else_body, shift))
        if isinstance(x, Let):
            return Let(x.var, ex(x.value), go(x.body, {k: v for k, v in shift.items()
                                                       if k != x.var.name}))
        if isinstance(x, Allocate):
            return Allocate(x.buffer, go(x.body, shift))
        if isinstance(x, TensorCall):   # its regions' origins move with the loops too
            return TensorCall(x.intrin, x.buffers, tuple(
                tuple(simplify(ex(i), FLAT_OFFSET) if b is buf and shift else ex(i)
                      for i in base)
                for b, base in zip(x.buffers, x.bases)))
        if isinstance(x, (Barrier, ExternCall)):
            return x
        raise TensorlangError(f"internal: rebase_register_loops meets a {type(x).__name__}")

    return go(s, {})
