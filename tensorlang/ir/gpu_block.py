"""What a GPU block runs, made explicit in the loop IR before any backend sees it.

Two rewrites, both exact, applied by `lower` to programs with bound loops:

1. **Reductions across threads** (`allreduce`). `bind` accepts a threadIdx loop that carries
   only the updates of one reduction (TVM's cross-thread reduction: `ko, ki =
   s[B].split(k, factor=256); s[B].bind(ki, "threadIdx.x")`); isl checks that nothing else
   is carried. Every thread then accumulates its own iterations in a register, the block
   combines the registers through a tree in shared memory (a barrier after each level;
   any thread count, not only powers of two), and thread 0 combines the result into the
   output element. Sums, products, max and min (the reducers whose update is `acc op x`)
   are supported; a reducer of another shape raises NotImplementedError.

2. **Phases of a block** (`merge_phases`). A block loop whose body is several thread loops
   in sequence (a softmax row: the row max across the threads, then the sum, then the
   outputs), or statements outside any thread loop, becomes one thread nest — the launch
   geometry — whose threads run the phases in order with a barrier between each two (and
   at the end of each iteration of a serial loop around phases: a k-loop that copies a
   shared tile and then reads it must not copy the next tile over one still being read).
   A phase binds some of the block's thread indices; the other indices run it at 0 only,
   and statements outside every thread loop run on thread 0. Buffers allocated per block
   (outside the thread loops: a row's max computed at the block loop) become shared
   memory, since every thread reads them. A barrier inside a phase is reached by every
   thread: guards are pushed below barriers, never around them.
"""

from __future__ import annotations

from ..errors import ScheduleError
from .dtype import as_dtype
from .expr import (
    EQ, LT, Add, And, Call, Const, Expr, Load, Max, Min, Mul, Var, binary, compare, const,
    logical,
)
from .stmt import Allocate, Barrier, Buffer, For, If, Let, LoopKind, Seq, Stmt, Store, seq
from .visit import free_vars, map_expr, map_stmt, substitute, walk_stmt

INT64 = as_dtype("int64")
WARP = 32

_COMBINE = (Add, Mul, Max, Min)


class _NanIgnoring:
    """The combining operation of tl.nanmax / tl.nanmin (a Call of fmax / fmin)."""

    name = ""


class _FMax(_NanIgnoring):
    name = "fmax"


class _FMin(_NanIgnoring):
    name = "fmin"


class _FMaxAny(_NanIgnoring):
    name = "fmax_any"        # softmax's shift: NaN unspecified, identity -inf


def _op_of(v: Expr):
    """The reduction operation of an update's value (Add, Mul, Max, Min, _FMax, _FMin) and
    its two operands, or (None, ())."""
    if type(v) in _COMBINE:
        return type(v), (v.a, v.b)
    if isinstance(v, Call) and v.name in ("fmax", "fmin", "fmax_any") and len(v.args) == 2:
        return {"fmax": _FMax, "fmin": _FMin, "fmax_any": _FMaxAny}[v.name], v.args
    return None, ()


def has_gpu_loops(s: Stmt) -> bool:
    return any(isinstance(x, For) and x.kind in (LoopKind.GPU_BLOCK, LoopKind.GPU_THREAD)
               for x in walk_stmt(s))


def prepare(body: Stmt) -> Stmt:
    """Both rewrites, in order; then warp barriers only where warps are whole."""
    return _warps_whole(merge_phases(allreduce(body)))


def _thread_extents(s: Stmt) -> dict[str, int | None]:
    out: dict[str, int | None] = {}
    for x in walk_stmt(s):
        if isinstance(x, For) and x.kind is LoopKind.GPU_THREAD:
            n = _extent(x)
            out[x.thread_tag] = None if n is None or out.get(x.thread_tag, 0) is None \
                else max(out.get(x.thread_tag, 0), n)
    return out


def _warps_whole(s: Stmt) -> Stmt:
    """A warp barrier orders the 32 consecutive threads of a warp. The tree's last levels
    pair threads x < 32 of one (y, z): one warp when the block is one-dimensional, or when
    its x extent is a multiple of 32. Elsewhere they become block barriers."""
    def fix(x: Stmt) -> Stmt:
        ext = _thread_extents(x)
        others = [t for t in ext if t != "threadIdx.x" and ext[t] != 1]
        xs = ext.get("threadIdx.x")
        if not others or (xs is not None and xs % WARP == 0):
            return x
        return _block_barriers(x) if _has_warp(x) else x

    def go(x: Stmt) -> Stmt:
        if isinstance(x, For) and x.kind is LoopKind.GPU_BLOCK:
            return For(x.var, x.min, x.extent, go(x.body), x.kind, x.thread_tag,
                       x.max_extent)
        if isinstance(x, For) and x.kind is LoopKind.GPU_THREAD:
            return fix(x)
        if isinstance(x, Seq):
            return Seq(tuple(go(y) for y in x.stmts))
        if isinstance(x, If):
            return If(x.cond, go(x.then_body), None if x.else_body is None
                      else go(x.else_body))
        if isinstance(x, Let):
            return Let(x.var, x.value, go(x.body))
        if isinstance(x, Allocate):
            return Allocate(x.buffer, go(x.body))
        return x
    return go(s)


def _has_warp(s: Stmt) -> bool:
    return any(isinstance(x, Barrier) and x.scope == "warp" for x in walk_stmt(s))


def _block_barriers(s: Stmt) -> Stmt:
    if isinstance(s, Barrier):
        return Barrier()
    if isinstance(s, Seq):
        return Seq(tuple(_block_barriers(x) for x in s.stmts))
    if isinstance(s, For):
        return For(s.var, s.min, s.extent, _block_barriers(s.body), s.kind, s.thread_tag,
                   s.max_extent)
    if isinstance(s, If):
        return If(s.cond, _block_barriers(s.then_body), None if s.else_body is None
                  else _block_barriers(s.else_body))
    if isinstance(s, (Let, Allocate)):
        return type(s)(s.var if isinstance(s, Let) else s.buffer,
                       *((s.value,) if isinstance(s, Let) else ()), _block_barriers(s.body))
    return s


# ------------------------------------------------------------------ buffers and guards
def _retarget(s: Stmt, old: Buffer, new: Buffer, indices=None) -> Stmt:
    """`s` with every access of `old` made to `new` (at `indices`, when given)."""
    def fe(e: Expr) -> Expr:
        def fn(x: Expr) -> Expr | None:
            if isinstance(x, Load) and x.buffer is old:
                return Load(new, x.indices if indices is None else indices, x.dtype)
            return None
        return map_expr(e, fn)

    def go(x: Stmt) -> Stmt:
        if isinstance(x, Store) and x.buffer is old:
            return Store(new, tuple(fe(i) for i in x.indices) if indices is None else indices,
                         fe(x.value), x.atomic)
        if isinstance(x, Allocate) and x.buffer is old:
            return Allocate(new, go(x.body))
        if isinstance(x, For):
            return For(x.var, fe(x.min), fe(x.extent), go(x.body), x.kind, x.thread_tag,
                       x.max_extent)
        if isinstance(x, Seq):
            return Seq(tuple(go(y) for y in x.stmts))
        if isinstance(x, If):
            return If(fe(x.cond), go(x.then_body), None if x.else_body is None
                      else go(x.else_body))
        if isinstance(x, Let):
            return Let(x.var, fe(x.value), go(x.body))
        if isinstance(x, Allocate):
            return Allocate(x.buffer, go(x.body))
        if isinstance(x, Store):
            return Store(x.buffer, tuple(fe(i) for i in x.indices), fe(x.value), x.atomic)
        return x
    return go(s)


def _has_barrier(s: Stmt) -> bool:
    return any(isinstance(x, Barrier) for x in walk_stmt(s))


def _guard(s: Stmt, cond: Expr | None) -> Stmt:
    """`if cond: s`, with the condition pushed below every barrier so that all threads
    reach each barrier (a loop around a barrier must not depend on the guard)."""
    if cond is None:
        return s
    if not _has_barrier(s):
        return If(cond, s)
    if isinstance(s, Barrier):
        return s
    if isinstance(s, Seq):
        return Seq(tuple(_guard(x, cond) for x in s.stmts))
    if isinstance(s, Allocate):
        return Allocate(s.buffer, _guard(s.body, cond))
    if isinstance(s, Let):
        return Let(s.var, s.value, _guard(s.body, cond))
    if isinstance(s, For) and s.kind is not LoopKind.GPU_THREAD:
        return For(s.var, s.min, s.extent, _guard(s.body, cond), s.kind, s.thread_tag,
                   s.max_extent)
    raise NotImplementedError(
        "gpu: a barrier under a condition that only some threads of the block meet "
        "(a phase with fewer threads than the block, around a shared tile or a reduction "
        "across threads inside a branch); give the phases the same thread extents")


def _and(a: Expr | None, b: Expr | None) -> Expr | None:
    if a is None:
        return b
    if b is None:
        return a
    return logical(And, a, b)


# ----------------------------------------------------------- reductions across threads
def _identity(op: type, dtype) -> Const:
    if op is _FMaxAny and dtype.is_float:
        return const(float("-inf"), dtype)
    if issubclass(op, _NanIgnoring):      # fmax(NaN, x) = x: all NaN stays NaN (nanmax)
        if dtype.is_float:
            return const(float("nan"), dtype)
        return const(dtype.min_value() if op is _FMax else dtype.max_value(), dtype)
    if op is Add:
        return const(0, dtype)
    if op is Mul:
        return const(1, dtype)
    if dtype.is_float:
        return const(float("-inf") if op is Max else float("inf"), dtype)
    return const(dtype.min_value() if op is Max else dtype.max_value(), dtype)


def _combine(op: type, a: Expr, b: Expr) -> Expr:
    if issubclass(op, _NanIgnoring):
        return Call(op.name, (a, b), a.dtype)
    return binary(op, a, b)


def _thread_dependent(loop: For) -> set[str]:
    """The loop's variable and the names bound inside it (Let) whose values use it."""
    dep = {loop.var.name}
    for x in walk_stmt(loop.body):
        if isinstance(x, Let) and free_vars(x.value) & dep:
            dep.add(x.var.name)
    return dep


def _accumulator(loop: For) -> tuple[Buffer, tuple[Expr, ...], type] | None:
    """The element every thread of `loop` updates (its indices do not depend on the
    thread), with the reduction's combining operation; None when there is none. A loop of
    one thread has nothing to combine (a bound loop isl did not emit is kept as one, with
    its value written into the indices instead of its variable)."""
    if isinstance(loop.extent, Const) and int(loop.extent.value) == 1:
        return None
    mine = _thread_dependent(loop)
    inner = {x.var.name for x in walk_stmt(loop.body) if isinstance(x, (For, Let))}
    # buffers allocated inside are per thread (registers) or tiles the race check covers
    private = {id(x.buffer) for x in walk_stmt(loop.body) if isinstance(x, Allocate)}
    found = None
    for st in walk_stmt(loop.body):
        if not isinstance(st, Store) or id(st.buffer) in private or st.atomic:
            continue            # (an atomic update needs no combining across threads)
        names = set().union(*(free_vars(i) for i in st.indices)) if st.indices else set()
        if names & mine:
            continue            # an element per thread
        if names & inner:
            raise NotImplementedError(
                f"gpu: every thread of {loop.var.name} ({loop.thread_tag}) updates "
                f"{st.buffer.name} at an index that varies inside the thread (a loop over "
                "outputs inside a reduction across threads); bind the reduction to the "
                "innermost loop that updates one element")
        v = st.value
        op, operands = _op_of(v)
        ok = op is not None and any(
            isinstance(x, Load) and x.buffer is st.buffer and
            all(str(p) == str(q) for p, q in zip(x.indices, st.indices))
            for x in operands)
        if not ok:
            raise NotImplementedError(
                f"gpu: {st.buffer.name} is updated by every thread of {loop.var.name} "
                f"({loop.thread_tag}) with {type(v).__name__}; a reduction across threads "
                "supports sum, product, max and min")
        key = (st.buffer, tuple(str(i) for i in st.indices), op)
        if found is not None and (found[0] is not key[0] or found[1] != key[1] or
                                  found[2] is not key[2]):
            raise NotImplementedError(
                f"gpu: loop {loop.var.name} ({loop.thread_tag}) reduces into more than one "
                "element across threads; one accumulator per thread loop is supported")
        found = key + (st.indices,)
    if found is None:
        return None
    if any(isinstance(x, For) and x.kind is LoopKind.GPU_THREAD for x in walk_stmt(loop.body)):
        raise NotImplementedError(
            f"gpu: the reduction across threads over {loop.var.name} ({loop.thread_tag}) "
            "encloses another thread loop; bind the reduction to the innermost thread loop")
    buf, _, op, indices = found
    return buf, indices, op


def _extent(lp: For) -> int | None:
    return int(lp.extent.value) if isinstance(lp.extent, Const) else lp.max_extent


def _offset(lp: For) -> Expr:
    """The loop's position in its range: its variable minus its start."""
    if isinstance(lp.min, Const) and lp.min.value == 0:
        return lp.var
    return lp.var - lp.min


def _reduce_loop(loop: For, outer: list[For]) -> Stmt:
    """`loop` with its reduction across threads made explicit; `outer`: the thread loops
    around it (each of their threads reduces on its own: the tree has a row for each)."""
    acc_info = _accumulator(loop)
    if acc_info is None:
        return loop
    buf, indices, op = acc_info
    T = _extent(loop)
    if T is None:
        raise ScheduleError(
            f"gpu: the reduction across threads over {loop.var.name} needs a constant number "
            f"of threads (split the reduction by a constant first), got {loop.extent}")
    d = buf.dtype
    rows = []
    for lp in outer:
        n = _extent(lp)
        if n is None:
            raise ScheduleError(f"gpu: thread loop {lp.var.name} needs a constant extent")
        rows.append((n, _offset(lp)))
    acc = Buffer(f"{buf.name}_{loop.var.name}_acc", (const(1, "int64"),), d, "local")
    red = Buffer(f"{buf.name}_{loop.var.name}_red",
                 tuple(const(n, "int64") for n, _ in rows) + (const(T, "int64"),), d, "shared")
    row = tuple(o for _, o in rows)
    zero = const(0, "int64")
    pos = _offset(loop)
    body = _retarget(loop.body, buf, acc, (zero,))
    if not (isinstance(loop.extent, Const) and int(loop.extent.value) == T):
        body = If(compare(LT, pos, loop.extent), body)
    tree: list[Stmt] = [Store(red, row + (pos,), Load(acc, (zero,), d)), Barrier()]
    # the last levels (32 partial values or fewer) are within warp 0 when the reduction
    # runs along threadIdx.x in whole warps: a warp barrier suffices (checked again once
    # the block's thread nest is known: `_warps_whole`)
    warps = loop.thread_tag == "threadIdx.x" and T % WARP == 0
    cur = T
    while cur > 1:
        half = (cur + 1) // 2
        mine = Load(red, row + (pos,), d)
        other = Load(red, row + (pos + const(half, "int64"),), d)
        tree.append(If(compare(LT, pos, const(cur - half, "int64")),
                       Store(red, row + (pos,), _combine(op, mine, other))))
        tree.append(Barrier("warp" if warps and half <= WARP else "block"))
        cur = half
    out = Load(buf, indices, d)
    tree.append(If(compare(EQ, pos, zero),
                   Store(buf, indices, _combine(op, out, Load(red, row + (zero,), d)))))
    tree.append(Barrier())      # red[0] is read before the tile is used again
    thread_body = Allocate(acc, seq([Store(acc, (zero,), _identity(op, d)), body,
                                     Allocate(red, seq(tree))]))
    return For(loop.var, loop.min, const(T, loop.extent.dtype), thread_body,
               LoopKind.GPU_THREAD, loop.thread_tag, T)


def allreduce(s: Stmt) -> Stmt:
    """Rewrite every thread loop that reduces across its threads (see the module)."""
    def go(x: Stmt, outer: list[For]) -> Stmt:
        if isinstance(x, For) and x.kind is LoopKind.GPU_THREAD:
            new = For(x.var, x.min, x.extent, go(x.body, outer + [x]), x.kind, x.thread_tag,
                      x.max_extent)
            return _reduce_loop(new, outer)
        if isinstance(x, For):
            return For(x.var, x.min, x.extent, go(x.body, outer), x.kind, x.thread_tag,
                       x.max_extent)
        if isinstance(x, Seq):
            return Seq(tuple(go(y, outer) for y in x.stmts))
        if isinstance(x, If):
            return If(x.cond, go(x.then_body, outer), None if x.else_body is None
                      else go(x.else_body, outer))
        if isinstance(x, Let):
            return Let(x.var, x.value, go(x.body, outer))
        if isinstance(x, Allocate):
            return Allocate(x.buffer, go(x.body, outer))
        return x
    return go(s, [])


# --------------------------------------------------------------------- block phases
def _has_threads(s: Stmt) -> bool:
    return any(isinstance(x, For) and x.kind is LoopKind.GPU_THREAD for x in walk_stmt(s))


def _reallocated(s: Stmt, buf: Buffer) -> bool:
    """Whether `buf` is allocated again inside `s` (compute_at under a thread loop
    allocates at each level; the per-thread one is the one in force)."""
    return any(isinstance(x, Allocate) and x.buffer is buf for x in walk_stmt(s))


def _perfect(s: Stmt) -> bool:
    """A perfect nest of thread loops (through allocations) with no thread loop below."""
    while isinstance(s, Allocate):
        s = s.body
    if not (isinstance(s, For) and s.kind is LoopKind.GPU_THREAD):
        return False
    while isinstance(s, For) and s.kind is LoopKind.GPU_THREAD or isinstance(s, Allocate):
        s = s.body
    return not _has_threads(s)


class _Lift:
    """Removes the thread loops of one block's body: each statement runs, inside the one
    thread nest of the block, on the threads its loops bound (the others at index 0)."""

    def __init__(self, tags: dict[str, int]):
        self.tags = tags
        self.tids = {t: Var(f"tid_{t[-1]}", INT64) for t in tags}

    def lift(self, s: Stmt, bound: dict[str, For], mapping: dict[str, Expr]) -> Stmt:
        if not _has_threads(s):
            cond = None
            for t, n in self.tags.items():
                lp = bound.get(t)
                if lp is None:
                    cond = _and(cond, compare(EQ, self.tids[t], const(0, "int64")))
                elif not (isinstance(lp.extent, Const) and int(lp.extent.value) == n):
                    cond = _and(cond, compare(LT, self.tids[t], substitute(lp.extent,
                                                                           mapping)))
            if mapping:
                s = map_stmt(s, lambda e: substitute(e, mapping))
            return _guard(s, cond)
        if isinstance(s, For) and s.kind is LoopKind.GPU_THREAD:
            tid = self.tids[s.thread_tag]
            lo = substitute(s.min, mapping)
            value = tid if isinstance(lo, Const) and lo.value == 0 else tid + lo
            return self.lift(s.body, {**bound, s.thread_tag: s},
                             {**mapping, s.var.name: value})
        if isinstance(s, Seq):
            parts: list[Stmt] = []
            for x in s.stmts:
                if parts:
                    parts.append(Barrier())  # the next part may read what this one wrote
                parts.append(self.lift(x, bound, mapping))
            return seq(parts)
        if bound:
            raise NotImplementedError(
                f"gpu: a {type(s).__name__} inside thread loops "
                f"({', '.join(lp.var.name for lp in bound.values())}) encloses another "
                "thread loop; bind the loops so that the thread loops are outermost")
        if isinstance(s, Allocate):
            if _reallocated(s.body, s.buffer) or s.buffer.scope == "shared":
                return Allocate(s.buffer, self.lift(s.body, bound, mapping))
            shared = Buffer(s.buffer.name, s.buffer.shape, s.buffer.dtype, "shared")
            return Allocate(shared, self.lift(_retarget(s.body, s.buffer, shared), bound,
                                              mapping))
        if isinstance(s, For):
            body = self.lift(s.body, bound, mapping)
            if not (isinstance(s.extent, Const) and int(s.extent.value) == 1):
                # an iteration's phases may touch what other threads' phases touched in
                # the one before (a shared tile copied again over the one being read)
                body = seq([body, Barrier()])
            return For(s.var, s.min, s.extent, body, s.kind, s.thread_tag, s.max_extent)
        if isinstance(s, If):
            return If(s.cond, self.lift(s.then_body, bound, mapping),
                      None if s.else_body is None else self.lift(s.else_body, bound,
                                                                 mapping))
        if isinstance(s, Let):
            return Let(s.var, s.value, self.lift(s.body, bound, mapping))
        raise NotImplementedError(f"gpu: cannot run {type(s).__name__} in a block")


def _block_body(s: Stmt) -> Stmt:
    """The statements of one block (under its block loops) as one thread nest."""
    if not _has_threads(s) or _perfect(s):
        return s          # no threads (the block runs on one), or one nest already
    tags: dict[str, int] = {}
    for x in walk_stmt(s):
        if isinstance(x, For) and x.kind is LoopKind.GPU_THREAD:
            n = _extent(x)
            if n is None:
                raise ScheduleError(
                    f"gpu: thread loop {x.var.name} ({x.thread_tag}) needs a constant "
                    f"extent (split by a constant first), got {x.extent}")
            tags[x.thread_tag] = max(tags.get(x.thread_tag, 0), n)
    tags = dict(sorted(tags.items(), key=lambda kv: "zyx".index(kv[0][-1])))
    lift = _Lift(tags)
    body = lift.lift(s, {}, {})
    for t in reversed(list(tags)):
        body = For(lift.tids[t], const(0, "int64"), const(tags[t], "int64"), body,
                   LoopKind.GPU_THREAD, t, tags[t])
    return body


def merge_phases(s: Stmt) -> Stmt:
    """Give every block one thread nest (see the module)."""
    def go(x: Stmt, in_block: bool) -> Stmt:
        if isinstance(x, For) and x.kind is LoopKind.GPU_BLOCK:
            inner = x.body
            if any(isinstance(y, For) and y.kind is LoopKind.GPU_BLOCK
                   for y in walk_stmt(inner)):
                body = go(inner, True)          # the innermost block loop's body is it
            else:
                body = _block_body(inner)
            return For(x.var, x.min, x.extent, body, x.kind, x.thread_tag, x.max_extent)
        if isinstance(x, Seq):
            return Seq(tuple(go(y, in_block) for y in x.stmts))
        if isinstance(x, Allocate):
            return Allocate(x.buffer, go(x.body, in_block))
        if isinstance(x, If):
            return If(x.cond, go(x.then_body, in_block), None if x.else_body is None
                      else go(x.else_body, in_block))
        if isinstance(x, Let):
            return Let(x.var, x.value, go(x.body, in_block))
        if isinstance(x, For) and x.kind is LoopKind.GPU_THREAD and not in_block:
            return x
        if isinstance(x, For):
            return For(x.var, x.min, x.extent, go(x.body, in_block), x.kind, x.thread_tag,
                       x.max_extent)
        return x

    return go(s, False)

