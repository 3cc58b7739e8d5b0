"""A transposing copy in registers: a loop of L iterations over a vectorized loop of L
lanes whose one statement copies a strided read into a contiguous write,

    for k in range(L):
        for j in range(L):  # vectorized
            dst[... k ..., ... + j] = src[... + P * j + k]

reads an L x L block of `src` whose rows (one per lane j) are contiguous along k. Done as
written, each iteration of k gathers L elements P apart (one gather instruction, about one
element a cycle). Here the block is read as L contiguous row vectors, transposed with
log2(L) rounds of two-source shuffles (L log2 L shuffles in all) and written as L
vectors: the channel-blocked conv's write-back of a row tile ([columns, channels] ->
NCHW) is such a copy.

A loop whose body is an `if` that does not depend on the loop's variable (a split's
tail test) is unswitched first. A tail tile (its lanes under a condition that does not
depend on the outer loop) loads only the rows of the lanes that are on and stores masked.
"""

from __future__ import annotations

from llvmlite import ir

from ...ir.expr import Const, Expr, Load, Var
from ...ir.stmt import For, If, LoopKind, Store
from ...ir.visit import walk
from .types import I32, I64, llvm_type, memory_type
from .vector import VectorContext, flat_coeff

# element types whose values are their memory type (no conversion on load or store)
_PLAIN = {"float32", "float64", "int32", "int64", "uint32", "uint64"}


def _copy(cg, s: For) -> tuple[For, Store, Load, Expr | None] | None:
    """(vector loop, store, load, the condition of the lanes that are on or None) when
    `s` is a transposing copy (see the module). The lanes' condition may not depend on
    `s`'s variable: a lane that is on then reads its whole row."""
    if not isinstance(s.extent, Const):
        return None
    n = int(s.extent.value)
    v = s.body
    if not (isinstance(v, For) and v.kind is LoopKind.VECTORIZED and
            isinstance(v.extent, Const) and int(v.extent.value) == n and
            isinstance(v.min, Const) and int(v.min.value) == 0):
        return None
    st, lanes_on = v.body, None
    if isinstance(st, If) and st.else_body is None and \
            not any(isinstance(x, Load) or (isinstance(x, Var) and x.name == s.var.name)
                    for x in walk(st.cond)):
        st, lanes_on = st.then_body, st.cond      # a tail tile: the lanes where it holds
    if not (isinstance(st, Store) and isinstance(st.value, Load)) or st.atomic:
        return None
    ld = st.value
    dt = str(st.buffer.dtype)
    if n not in (4, 8, 16) or dt not in _PLAIN or str(ld.buffer.dtype) != dt or \
            ld.buffer is st.buffer or \
            n * st.buffer.dtype.itemsize * 8 > 512:
        return None
    # only the two loops' variables and names bound outside may appear; no memory reads
    # in the indices (they are evaluated once per row or per column)
    if any(isinstance(x, Load) for e in (*st.indices, *ld.indices) for x in walk(e)):
        return None
    if flat_coeff(ld.indices, cg.extents(ld.buffer), s.var.name) != 1:
        return None
    p = flat_coeff(ld.indices, cg.extents(ld.buffer), v.var.name)
    if p is None or p in (0, 1):
        return None
    ctx = VectorContext(v.var.name, n, ir.Constant(I64, 0), starts_at_zero=True)
    if ctx._kind(st.indices, st.buffer, cg.extents(st.buffer))[0] != "contiguous":
        return None
    return v, st, ld, lanes_on


def transpose_rows(b: ir.IRBuilder, rows: list[ir.Value]) -> list[ir.Value]:
    """The columns of the square matrix whose rows are `rows` (vectors of len(rows)
    lanes, a power of two): each round swaps one bit between the row and the lane index,
    pairing rows that differ in that bit."""
    n = len(rows)
    h = 1
    while h < n:
        lo_mask = [c if not c & h else n + c - h for c in range(n)]
        hi_mask = [c + h if not c & h else n + c for c in range(n)]
        new = list(rows)
        for i in range(n):
            if i & h:
                continue
            a, c = rows[i], rows[i | h]
            new[i] = b.shuffle_vector(a, c, ir.Constant(ir.VectorType(I32, n), lo_mask))
            new[i | h] = b.shuffle_vector(a, c, ir.Constant(ir.VectorType(I32, n), hi_mask))
        rows = new
        h *= 2
    return rows


class TransposeCodegen:
    """Transposing copies (see the module). A mixin of `FunctionCodegen`."""

    def transposed_copy(self, s: For) -> bool:
        """Emit `s` as a transposing copy if it is one (or an `if` around full tiles
        of one, unswitched); False, emitting nothing, otherwise."""
        if self.vec is not None or s.kind not in (LoopKind.SERIAL, LoopKind.UNROLLED):
            return False
        body = s.body
        if isinstance(body, If) and not any(isinstance(x, Var) and x.name == s.var.name
                                            for x in walk(body.cond)):
            then = For(s.var, s.min, s.extent, body.then_body, s.kind, s.thread_tag,
                       s.max_extent)
            if _copy(self, then) is None:
                return False
            other = None if body.else_body is None else \
                For(s.var, s.min, s.extent, body.else_body, s.kind, s.thread_tag,
                    s.max_extent)
            self.stmt(If(body.cond, then, other))
            return True
        found = _copy(self, s)
        if found is None:
            return False
        v, st, ld, lanes_on = found
        b = self.builder
        n = int(s.extent.value)
        et = memory_type(st.buffer.dtype)
        vt = ir.VectorType(et, n)
        assert et == llvm_type(st.buffer.dtype)
        lo = self.to_i64(self.expr(s.min), s.min.dtype)
        align = st.buffer.dtype.itemsize
        rows = []
        for j in range(n):
            with self.bound(v.var.name, ir.Constant(I64, j)), self.bound(s.var.name, lo):
                if lanes_on is None:
                    ptr = self.address(ld.buffer, ld.indices)
                    rows.append(self.tag(b.load(b.bitcast(ptr, vt.as_pointer()),
                                                align=align), ld.buffer))
                    continue
                # a lane that is off reads nothing (its row may lie past the array)
                on = self.expr(lanes_on)
                start = b.block
                with b.if_then(on):
                    ptr = self.address(ld.buffer, ld.indices)
                    got = self.tag(b.load(b.bitcast(ptr, vt.as_pointer()), align=align),
                                   ld.buffer)
                    then = b.block
                row = b.phi(vt)
                row.add_incoming(got, then)
                row.add_incoming(ir.Constant(vt, None), start)
                rows.append(row)
        for k, col in enumerate(transpose_rows(b, rows)):
            with self.bound(s.var.name, b.add(lo, ir.Constant(I64, k))):
                self.vec = VectorContext(v.var.name, n, ir.Constant(I64, 0),
                                         starts_at_zero=True)
                try:
                    if lanes_on is None:
                        self.vec.store(self, st, col)
                    else:
                        with self.vec.masked(self, self.expr(lanes_on)):
                            self.vec.store(self, st, col)
                finally:
                    self.vec = None
        return True
