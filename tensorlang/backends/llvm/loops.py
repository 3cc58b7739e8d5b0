"""Loops in the LLVM code generator: serial loops (with a value carried from one iteration
to the next, carry.py), unrolled and guarded-unrolled loops (register tiles), vectorized
loops (vector.py) and loops inside them, and parallel loops (outlined, outline.py). A mixin
of `FunctionCodegen` (codegen.py)."""

from __future__ import annotations

import contextlib

from llvmlite import ir

from ...errors import TensorlangError
from ...ir.expr import Add, Call, Const, Load, Max, Min, Var, binary
from ...ir.stmt import For, LoopKind, Stmt
from ...ir.visit import free_vars, map_stmt, stmt_exprs, substitute, walk, walk_stmt
from ..abi import AOT_THREADS
from .carry import carried_loads
from .outline import emit_parallel_loop
from .registers import MAX_GUARDED_UNROLL, indexes
from .types import I32, I64, memory_type, type_suffix
from .vector import VectorContext

# NaN-ignoring float min and max: the call's name -> LLVM's intrinsic (one vmaxps on x86)
NAN_IGNORING = {"fmax": "maxnum", "fmin": "minnum", "fmax_any": "maxnum"}
# ... of which these leave NaN unspecified (LLVM's nnan flag: one vmaxps, no NaN test)
NAN_UNSPECIFIED = {"fmax_any"}


class LoopCodegen:
    """Loops (see the module)."""

    def loop(self, s: For) -> None:
        if self.vec is not None:
            self.loop_in_vector(s)
            return
        if s.kind in (LoopKind.GPU_BLOCK, LoopKind.GPU_THREAD):
            raise TensorlangError(f"llvm backend: loop {s.var.name} is bound to a GPU index; "
                                  "build it for target='cuda'")
        if self.transposed_copy(s):     # a strided copy as a register transpose
            return
        b = self.builder
        lo = self.to_i64(self.expr(s.min), s.min.dtype)
        if isinstance(s.extent, Const) and s.kind is LoopKind.UNROLLED:
            for k in range(int(s.extent.value)):
                with self.bound(s.var.name, b.add(lo, ir.Constant(I64, k))):
                    self.stmt(s.body)
            return
        if isinstance(s.extent, Const) and s.kind is LoopKind.VECTORIZED and s.extent.value > 1:
            body = s.body
            if not (isinstance(s.min, Const) and int(s.min.value) == 0) and \
                    s.var.name not in free_vars(s.min):
                # counted from zero (v -> v + min): an index `(v + 16*q) // 16` into a
                # packed buffer is then seen as uniform and `(v + 16*q) % 16` as the lanes
                # (`lane_divmod`), one vector load instead of a gather (a register tile
                # placed in a channel-tile loop: the conv's packed weights)
                shifted = binary(Add, s.var, s.min)
                body = map_stmt(body, lambda e: substitute(e, {s.var.name: shifted}))
                lo = ir.Constant(I64, 0)
            self.vec = VectorContext(s.var.name, int(s.extent.value), lo, starts_at_zero=True)
            try:
                self.stmt(body)
            finally:
                self.vec = None
            return
        bound = int(s.extent.value) if isinstance(s.extent, Const) else s.max_extent
        if bound is not None and bound <= MAX_GUARDED_UNROLL and \
                s.kind in (LoopKind.SERIAL, LoopKind.UNROLLED) and \
                any(indexes(s, r) for r in self.registers):
            # a loop whose variable indexes a register array (a partial tile, a tile's
            # copy-out): unrolled to isl's bound, each iteration guarded, so that every
            # index into the array is a constant and SROA keeps it in registers (one
            # dynamic index would put the whole tile in memory, a store after every FMA)
            self.guarded_unroll(s, lo, b.add(lo, self.to_i64(self.expr(s.extent),
                                                             s.extent.dtype)), bound)
            return
        if s.kind is LoopKind.PARALLEL and not self.in_parallel and \
                (self.threads > 1 or self.threads == AOT_THREADS):
            self.parallel_loop(s, lo)
            return
        hi = b.add(lo, self.to_i64(self.expr(s.extent), s.extent.dtype))
        self.serial_loop(s.var.name, lo, hi, s.body)

    def loop_in_vector(self, s: For) -> None:
        """A serial or unrolled loop inside a vector loop runs once for all lanes, each
        iteration one vector operation per statement of its body. When its bounds differ
        between lanes (a split's tail: `k < n - 16 * jo - ji`), it runs from the smallest
        first iteration of the lanes that are on to their largest end, each lane masked
        off outside its own range."""
        if s.kind not in (LoopKind.SERIAL, LoopKind.UNROLLED):
            raise TensorlangError(f"internal: {s.kind.name.lower()} loop {s.var.name} inside "
                                  "a vectorized loop")
        b = self.builder
        if any(isinstance(x, Var) and x.name in (self.vec.var, *self.vec.lets)
               for e in (s.min, s.extent) for x in walk(e)):
            self._lane_varying_loop(s)
            return
        vec, self.vec = self.vec, None          # the bounds are scalars
        try:
            lo = self.to_i64(self.expr(s.min), s.min.dtype)
            n = self.to_i64(self.expr(s.extent), s.extent.dtype)
        finally:
            self.vec = vec
        bound = int(s.extent.value) if isinstance(s.extent, Const) else s.max_extent
        unroll = s.kind is LoopKind.UNROLLED or any(indexes(s, r) for r in self.registers)
        if bound is not None and unroll and bound <= MAX_GUARDED_UNROLL:
            self.guarded_unroll(s, lo, b.add(lo, n), bound)
            return
        self.serial_loop(s.var.name, lo, b.add(lo, n), s.body)

    def guarded_unroll(self, s: For, lo: ir.Value, hi: ir.Value, bound: int) -> None:
        """`s` unrolled to `bound` iterations, each guarded by `i < hi` unless the extent
        is a constant."""
        b = self.builder
        for k in range(bound):
            i = b.add(lo, ir.Constant(I64, k))
            with self.bound(s.var.name, i):
                if isinstance(s.extent, Const):
                    self.stmt(s.body)
                    continue
                with b.if_then(b.icmp_signed("<", i, hi)):
                    self.stmt(s.body)

    def _lane_varying_loop(self, s: For) -> None:
        b = self.builder
        lo = self.to_i64(self.expr(s.min), s.min.dtype)
        hi = b.add(lo, self.to_i64(self.expr(s.extent), s.extent.dtype))
        lo, hi = self.splat(lo), self.splat(hi)
        vt = lo.type
        on = self.vec.mask
        if on is not None:      # lanes that are off do not widen the range
            big = (1 << 63) - 1
            lo = b.select(on, lo, ir.Constant(vt, [big] * vt.count))
            hi = b.select(on, hi, ir.Constant(vt, [-big - 1] * vt.count))
        first = b.call(self._declare(f"llvm.vector.reduce.smin.{type_suffix(vt)}", I64, [vt]),
                       [lo])
        last = b.call(self._declare(f"llvm.vector.reduce.smax.{type_suffix(vt)}", I64, [vt]),
                      [hi])

        def own_range(i):                # each lane on only inside its own [lo, hi)
            iv = self.splat(i)
            inside = b.and_(b.icmp_signed(">=", iv, lo), b.icmp_signed("<", iv, hi))
            return self.vec.masked(self, inside)
        self.serial_loop(s.var.name, first, last, s.body, within=own_range)

    @contextlib.contextmanager
    def bound(self, name: str, value: ir.Value):
        """`name` means `value` inside the block, and what it meant before (or nothing)
        after it: a stale loop variable would otherwise be captured by a later parallel
        loop's closure (an SSA value that does not dominate its use)."""
        saved = self.env.get(name)
        self.env[name] = value
        try:
            yield
        finally:
            if saved is None:
                del self.env[name]
            else:
                self.env[name] = saved

    def serial_loop(self, name: str, lo: ir.Value, hi: ir.Value, body_stmt: Stmt,
                    within=None) -> None:
        """for name in [lo, hi): body; `within(i)`, a context the body runs in (a mask)."""
        b = self.builder
        pre = b.block
        head = b.append_basic_block(f"{name}.head")
        body = b.append_basic_block(f"{name}.body")
        end = b.append_basic_block(f"{name}.end")
        b.branch(head)
        b.position_at_end(head)
        i = b.phi(I64, name=name)
        i.add_incoming(lo, pre)
        carry = carried_loads(body_stmt, name) if self.vec is None and within is None else None
        if carry is not None:    # the value the last iteration stored (carry.py)
            store, loads = carry
            prev = b.phi(memory_type(store.buffer.dtype), name=f"{name}.carried")
            prev.add_incoming(ir.Constant(prev.type, ir.Undefined), pre)
        b.cbranch(b.icmp_signed("<", i, hi), body, end)
        b.position_at_end(body)
        with self.bound(name, i), (within(i) if within else contextlib.nullcontext()):
            if carry is None:
                self.stmt(body_stmt)
            else:
                first = b.icmp_signed("==", i, lo)
                saved = self.carried, self.carry_store
                self.carried = {**self.carried, **{id(x): (first, prev) for x in loads}}
                self.carry_store, self.carry_value = store, None
                try:
                    self.stmt(body_stmt)
                    stored = self.carry_value
                finally:
                    self.carried, self.carry_store = saved
        nxt = b.add(i, ir.Constant(I64, 1), flags=["nsw"])
        i.add_incoming(nxt, b.block)
        if carry is not None:
            prev.add_incoming(stored, b.block)
        latch = b.branch(head)
        hint = self.vector_width_hint(body_stmt) if self.vec is None else None
        if hint is not None:
            latch.set_metadata("llvm.loop", hint)
        b.position_at_end(end)

    def vector_width_hint(self, body_stmt: Stmt):
        """Loop metadata giving LLVM's loop vectorizer its vector width, for a scalar loop
        that computes a NaN-ignoring float min or max (`llvm.maxnum`/`minnum`: fmax, fmin,
        nanmax, nanmin; min and max under fast math); else None. LLVM 22 (llvmlite 0.50,
        an assertions build) aborts the process choosing the width of such a loop by its
        cost models ("VPlan cost model and legacy cost model disagreed": a plain
        `tl.nanmax` reduction over 8, 16, 72 or 1024 floats); a given width skips that
        choice, and LLVM still vectorizes the loop where it is legal. The width: the
        target's vector lanes for the widest float the NaN-ignoring operation takes.

        Only a loop that stays innermost in LLVM IR (no serial or parallel loop inside:
        vectorized and unrolled loops are straight-line code here) gets it: LLVM reports a
        loop given a width that it cannot vectorize (an outer loop) on stderr."""
        if any(isinstance(st, For) and st.kind in (LoopKind.SERIAL, LoopKind.PARALLEL)
               for st in walk_stmt(body_stmt)):
            return None
        widest = None
        for st in walk_stmt(body_stmt):
            for e in stmt_exprs(st):
                for x in walk(e):
                    nan_ignoring = isinstance(x, Call) and x.name in NAN_IGNORING or \
                        self.fast and isinstance(x, (Min, Max))
                    if nan_ignoring and x.dtype.is_float and \
                            (widest is None or x.dtype.itemsize > widest.itemsize):
                        widest = x.dtype
        if widest is None:
            return None
        lanes = self.target.vector_lanes(widest.name) if self.target is not None else 4
        m = self.module
        width = m.add_metadata([ir.MetaDataString(m, "llvm.loop.vectorize.width"),
                                ir.Constant(I32, max(lanes, 2))])
        loop = m.add_metadata([ir.MetaDataString(m, f"tl.loop.{len(m.metadata)}")])
        loop.operands = (loop, width)      # a loop's id names itself first
        return loop

    def carried_load(self, e: Load) -> ir.Value:
        """A load of what the previous iteration stored: memory in the first iteration,
        else the stored value (`serial_loop`)."""
        first, prev = self.carried[id(e)]
        return self.branch_value(
            first, lambda: self.tag(self.builder.load(self.address(e.buffer, e.indices)),
                                    e.buffer),
            lambda: prev, "carry")

    def parallel_loop(self, s: For, lo: ir.Value) -> None:
        """Outline the loop and run it on the thread pool (outline.py)."""
        emit_parallel_loop(self, s, lo)
