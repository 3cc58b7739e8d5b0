"""Vectorized loops: the body of a constant-extent loop as LLVM vector operations.

Inside a vectorized loop every value is a vector with one lane per iteration. A load or
store whose flat index moves by exactly 1 per iteration is one vector load/store at the
first lane's address; an index that does not move is one scalar load broadcast to all lanes;
anything else is a gather/scatter. Conditions (`if`, the arms of `if_then_else`) become lane
masks, and every memory access under a mask is masked, so a lane that is switched off never
touches memory (a padded stencil's border reads stay in bounds).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

from llvmlite import ir

from ...ir.expr import (
    Add, Const, Expr, FloorDiv, FloorMod, Load, Mul, Var, binary,
)
from ...ir.simplify import FLAT_OFFSET, simplify
from ...ir.stmt import Let, Store
from ...ir.visit import map_expr, substitute, walk
from ...ir.affine import interval_condition, linear_coeff  # noqa: F401 (linear_coeff: vector's API)
from . import stream
from .types import I1, I32, I64, memory_type, type_suffix  # noqa: F401 (type_suffix: vector's API)



# lane distances (elements) read as a few whole vectors and a shuffle instead of a gather
STRIDED = (2, 4)


def flat_coeff(indices, extents, var: str) -> int | None:
    """How much the row-major offset of `indices` in an array of `extents` (its memory
    layout) moves when `var` grows by 1, or None when that is not a constant."""
    flat, stride = 0, 1
    for ix, ext in zip(reversed(indices), reversed(extents)):
        c = linear_coeff(ix, var)
        if c is None:
            return None
        if c:
            if stride is None:
                return None
            flat += c * stride
        stride = stride * int(ext.value) if stride is not None and isinstance(ext, Const) \
            else None
    return flat


def _terms(e: Expr) -> list[Expr]:
    if isinstance(e, Add):
        return _terms(e.a) + _terms(e.b)
    return [e]


def _multiple_of(e: Expr, m: int) -> bool:
    """Whether the integer `e` is a multiple of `m` for every value of its variables."""
    if isinstance(e, Const):
        return int(e.value) % m == 0
    if isinstance(e, Add):
        return _multiple_of(e.a, m) and _multiple_of(e.b, m)
    if isinstance(e, Mul):
        return _multiple_of(e.a, m) or _multiple_of(e.b, m)
    return False


def _flat_moves_by_one(idx, extents, var: str) -> bool:
    """Whether the row-major offset of `idx` in a buffer of `extents` (constants) grows by
    exactly 1 per lane although some index alone does not: a fused loop's row and column
    `(f // 55, f % 55)` flatten back to `f` (`ir.simplify.rule_div_mod_pair`), so the
    access is one vector whichever rows its lanes cross."""
    if not all(isinstance(x, Const) for x in extents) or len(idx) != len(extents):
        return False
    flat: Expr | None = None
    stride = 1
    for i, ext in zip(reversed(idx), reversed(extents)):
        dt = i.dtype
        t = i if stride == 1 else binary(Mul, i, Const(stride, dt))
        flat = t if flat is None else binary(Add, t, flat)
        stride *= int(ext.value)
    return flat is not None and linear_coeff(simplify(flat, FLAT_OFFSET), var) == 1


def lane_divmod(e: Expr, var: str, lanes: int) -> Expr:
    """`e` with each `(r + var) // c` and `(r + var) % c` over the lanes of a vector loop
    that starts at 0 written as `r // c` and `r % c + var`, where `c` is a multiple of the
    lane count and `r` (free of `var`) a multiple of it too: the lanes' values r .. r +
    lanes - 1 then lie in one block of c, so the quotient is the same in every lane and the
    remainder grows by 1. (A packed buffer's index, `B_packed[j // 32, k, j % 32]`, becomes
    one vector load instead of a gather.)"""
    def fn(x: Expr) -> Expr | None:
        if not isinstance(x, (FloorDiv, FloorMod)) or not isinstance(x.b, Const):
            return None
        c = int(x.b.value)
        if c <= 0 or c % lanes:
            return None
        terms = _terms(x.a)
        mine = [t for t in terms if isinstance(t, Var) and t.name == var]
        rest = [t for t in terms if not (isinstance(t, Var) and t.name == var)]
        if len(mine) != 1 or \
                any(isinstance(v, Var) and v.name == var for t in rest for v in walk(t)) or \
                not all(_multiple_of(t, lanes) for t in rest):
            return None
        if not rest:                # r = 0: the lanes 0 .. lanes - 1 lie in the first block
            return Const(0, x.dtype) if isinstance(x, FloorDiv) else mine[0]
        r = rest[0]
        for t in rest[1:]:
            r = binary(Add, r, t)
        if isinstance(x, FloorDiv):
            return binary(FloorDiv, r, x.b)
        return binary(Add, binary(FloorMod, r, x.b), mine[0])
    return map_expr(e, fn)


@dataclass
class VectorContext:
    var: str
    lanes: int
    lo: ir.Value                                         # the first lane's iteration (i64)
    vals: dict[str, ir.Value] = field(default_factory=dict)   # Let variables: vectors
    lets: dict[str, Expr] = field(default_factory=dict)        # ... and their definitions
    mask: ir.Value | None = None                         # lanes that are on (None: all)
    starts_at_zero: bool = False                         # the loop's first iteration is 0
    first_lane_on: bool = True       # no mask switches lane 0 off (a tail's guard keeps it)
    # Load/Store (by id) -> the alignment of its first lane's address, tested at run time
    aligned: dict[int, int] = field(default_factory=dict)

    def iota(self, cg) -> ir.Value:
        steps = ir.Constant(ir.VectorType(I64, self.lanes), list(range(self.lanes)))
        return cg.builder.add(cg.splat(self.lo), steps)

    @contextlib.contextmanager
    def masked(self, cg, cond: ir.Value, keeps_first_lane: bool = False):
        """Lanes where `cond` holds (and the current mask); `keeps_first_lane`: the
        condition is true in lane 0 (a vector tail's guard)."""
        saved, saved_first = self.mask, self.first_lane_on
        self.mask = cond if saved is None else cg.builder.and_(saved, cond)
        self.first_lane_on = saved_first and keeps_first_lane
        try:
            yield
        finally:
            self.mask, self.first_lane_on = saved, saved_first

    def let(self, cg, s: Let) -> None:
        v = cg.cast(cg.expr(s.value), s.value.dtype, s.var.dtype)
        self.vals[s.var.name] = v
        self.lets[s.var.name] = self._expand(s.value)

    def _expand(self, e: Expr) -> Expr:
        return substitute(e, self.lets) if self.lets else e

    def uniform(self, cond: Expr) -> bool:
        """Whether `cond` is the same in every lane: it reads no memory and does not
        depend on the vector loop's variable (a time step's `t == 0`). Such a condition
        is a branch, not a mask: a masked load whose lanes are all off still costs a
        microcode assist when its address lies on an unmapped page (AMD Zen 5 takes one),
        as the heat stencil's reads of row t - 1 at t = 0 do on numpy's mmap-backed arrays:
        they lie before the array's first page."""
        return not any(isinstance(x, Load) or (isinstance(x, Var) and x.name == self.var)
                       for x in walk(self._expand(cond)))

    def interval(self, cond: Expr) -> Expr | None:
        """`cond` with Let variables expanded when the lanes where it holds are an interval
        of the vector loop's values: a conjunction of comparisons (<, <=, >, >=) of
        integer expressions affine in the loop variable, reading no memory (a stencil's
        `i >= 1 and i <= n - 2`). It then holds in every lane exactly when it holds in
        the first and in the last (`all_lanes`); None otherwise."""
        e = self._expand(cond)
        return e if interval_condition(e, {self.var}) else None

    def all_lanes(self, cg, cond: Expr) -> ir.Value:
        """A scalar i1: whether `cond` (an `interval` condition) holds in every lane — in
        the first and in the last, each evaluated with the loop variable a scalar."""
        b = cg.builder
        saved, cg.vec = cg.vec, None
        try:
            ends = []
            for lane in (0, self.lanes - 1):
                value = b.add(self.lo, ir.Constant(I64, lane))
                with cg.bound(self.var, value):
                    ends.append(cg.expr(cond))
        finally:
            cg.vec = saved
        return b.and_(*ends)

    # ---------------------------------------------------------------------- addresses
    def _kind(self, indices, buf=None, extents=None) -> tuple[str, tuple[Expr, ...]]:
        """'contiguous', 'uniform', 'strided' or 'gather' for an access, with Let variables
        expanded. Contiguous: consecutive lanes are consecutive elements of the row-major
        buffer (the last index grows by 1, or an earlier one whose inner extents are all
        1, as in an rfactor buffer of shape [16, 1]). Strided: they lie a constant 2 or 4
        elements apart (`STRIDED`; a stride-2 convolution's or pooling's input row)."""
        idx = tuple(self._expand(i) for i in indices)
        if self.starts_at_zero:
            idx = tuple(lane_divmod(i, self.var, self.lanes) for i in idx)
        cs = [linear_coeff(i, self.var) for i in idx]
        if all(c == 0 for c in cs):
            return "uniform", idx
        if cs and cs[-1] == 1 and all(c == 0 for c in cs[:-1]):
            return "contiguous", idx
        if buf is not None and None not in cs:
            flat = flat_coeff(idx, extents or buf.shape, self.var)
            if flat == 1:
                return "contiguous", idx
            if flat in STRIDED:
                return "strided", idx
        if buf is not None and None in cs and _flat_moves_by_one(idx, extents or buf.shape,
                                                                 self.var):
            return "contiguous", idx
        return "gather", idx

    @contextlib.contextmanager
    def _first_lane(self, cg):
        """Scalar code generation with the vector loop's variable at the first lane."""
        saved_vec, saved = cg.vec, cg.env.get(self.var)
        cg.vec = None
        cg.env[self.var] = self.lo
        try:
            yield
        finally:
            cg.vec = saved_vec
            if saved is None:
                del cg.env[self.var]
            else:
                cg.env[self.var] = saved

    def _scalar_address(self, cg, buf, idx) -> ir.Value:
        """The address of the first lane (or of every lane, for a uniform access)."""
        saved_guard = cg.check_guard
        # an index check made once for all lanes fails only if some lane is on
        cg.check_guard = self._any_on(cg) if self.mask is not None else None
        try:
            with self._first_lane(cg):
                return cg.address(buf, idx)
        finally:
            cg.check_guard = saved_guard

    def _addresses(self, cg, buf, idx) -> ir.Value:
        b = cg.builder
        flat = cg.flat_index(buf, idx)
        if not isinstance(flat.type, ir.VectorType):
            flat = cg.splat(flat)
        base = b.ptrtoint(cg.ptrs[id(buf)], I64)
        size = ir.Constant(ir.VectorType(I64, self.lanes), buf.dtype.itemsize
                           if not buf.dtype.is_bool else 1)
        ints = b.add(cg.splat(base), b.mul(flat, size))
        ptr_t = cg.ptrs[id(buf)].type
        return b.inttoptr(ints, ir.VectorType(ptr_t, self.lanes))

    def _padded(self, cg, buf, idx) -> bool:
        """A masked contiguous access to a small local array may touch every lane: the
        array has VECTOR_PAD spare elements and the first lane is on (a vector loop's
        tail keeps its first lane), so the lanes stay inside the allocation."""
        return id(buf) in cg.padded and self.lanes <= 64 and self.first_lane_on

    def _or_padding(self, cg, buf, idx) -> ir.Value:
        """The blend's mask for a masked store to a padded local array: the lanes that are
        on, and the lanes that fall in padding — past the row's last element, inside its
        row (`CodeGen.extents`: rows padded to whole vectors) or, for a 1-D array, inside
        its VECTOR_PAD spare elements. No statement reads padding, so those lanes may take
        any value, and a tail whose off lanes are all padding (a register tile 56 wide: its
        fourth vector) is stored whole: no blend, which costs a shuffle per accumulator per
        step. Lanes off inside the row (a condition's mask) keep their values. Only where
        consecutive lanes walk the last index (else the mask as it is)."""
        cs = [linear_coeff(i, self.var) for i in idx]
        shape, extents = buf.shape, cg.extents(buf)
        if not cs or cs[-1] != 1 or any(c != 0 for c in cs[:-1]) or \
                not isinstance(shape[-1], Const) or not isinstance(extents[-1], Const):
            return self.mask
        last, wide = int(shape[-1].value), int(extents[-1].value)
        if len(shape) > 1 and wide <= last:
            return self.mask            # rows not padded: past the row is the next row
        b = cg.builder
        with self._first_lane(cg):
            first = cg.to_i64(cg.expr(idx[-1]), idx[-1].dtype)
        vt = ir.VectorType(I64, self.lanes)
        pos = b.add(cg.splat(first), ir.Constant(vt, list(range(self.lanes))))
        pad = b.icmp_signed(">=", pos, ir.Constant(vt, [last] * self.lanes))
        if len(shape) > 1:
            pad = b.and_(pad, b.icmp_signed("<", pos, ir.Constant(vt, [wide] * self.lanes)))
        return b.or_(self.mask, pad)

    def _all_on(self) -> ir.Value:
        return ir.Constant(ir.VectorType(I1, self.lanes), [1] * self.lanes)

    def _align(self, buf) -> ir.Constant:
        return ir.Constant(I32, buf.dtype.itemsize if not buf.dtype.is_bool else 1)

    def _any_on(self, cg) -> ir.Value:
        t = self.mask.type
        f = cg._declare(f"llvm.vector.reduce.or.{type_suffix(t)}", I1, [t])
        return cg.builder.call(f, [self.mask])

    # ---------------------------------------------------------------------- loads
    def strided_load(self, cg, e: Load, idx, step: int) -> ir.Value:
        """The lanes of an access `step` elements apart: the `step` vectors that span them
        loaded whole (the last one masked to end at the last lane's element, so nothing
        past it is read) and the lanes picked out by one shuffle — a few vector loads and
        shuffles instead of a gather of every element. The elements between the lanes lie
        between two that the loop reads, inside the buffer. Under a mask (a border, a
        tail) every chunk is a masked load of the elements of the lanes that are on."""
        b = cg.builder
        mt = memory_type(e.buffer.dtype)
        n = self.lanes
        vt = ir.VectorType(mt, n)
        first = self._scalar_address(cg, e.buffer, idx)
        align = self._align(e.buffer)
        chunks = []
        off = ir.Constant(ir.VectorType(I1, n), [0] * n)
        for c in range(step):
            # by elements: a vector type's stride in memory is rounded up to a power of 2
            ptr = b.bitcast(b.gep(first, [ir.Constant(I64, c * n)], inbounds=True) if c
                            else first, vt.as_pointer())
            if self.mask is not None:
                # each element of the chunk that is a lane's, read if that lane is on
                picks = [(c * n + j) // step if (c * n + j) % step == 0 and
                         (c * n + j) // step < n else n for j in range(n)]
                mask = b.shuffle_vector(self.mask, off,
                                        ir.Constant(ir.VectorType(I32, n), picks))
            elif c < step - 1:
                chunks.append(cg.tag(b.load(ptr, align=align.constant), e.buffer))
                continue
            else:
                keep = n - (step - 1)       # the last lane's element ends the span
                mask = ir.Constant(ir.VectorType(I1, n), [1] * keep + [0] * (step - 1))
            f = cg._declare(f"llvm.masked.load.{type_suffix(vt)}.p0", vt,
                            [vt.as_pointer(), I32, mask.type, vt])
            chunks.append(cg.tag(b.call(f, [ptr, align, mask, ir.Constant(vt, None)]),
                                 e.buffer))
        while len(chunks) > 1:              # concatenated pairwise: 2 or 4 chunks
            w = chunks[0].type.count
            joined = ir.Constant(ir.VectorType(I32, 2 * w), list(range(2 * w)))
            chunks = [b.shuffle_vector(chunks[k], chunks[k + 1], joined)
                      for k in range(0, len(chunks), 2)]
        picks = ir.Constant(ir.VectorType(I32, n), [k * step for k in range(n)])
        return b.shuffle_vector(chunks[0], ir.Constant(chunks[0].type, None), picks)

    def load(self, cg, e: Load) -> ir.Value:
        b = cg.builder
        mt = memory_type(e.buffer.dtype)
        vt = ir.VectorType(mt, self.lanes)
        kind, idx = self._kind(e.indices, e.buffer, cg.extents(e.buffer))
        step = flat_coeff(idx, cg.extents(e.buffer), self.var) if kind == "strided" else 0
        if kind == "strided" and not e.dtype.is_bool and \
                self.lanes >= step:     # (fewer lanes than the step: one chunk past the last)
            return self.strided_load(cg, e, idx, step)
        if kind == "uniform":
            if self.mask is None:
                v = cg.tag(b.load(self._scalar_address(cg, e.buffer, idx)), e.buffer)
            else:  # read only when some lane is on: the address may be out of bounds
                with b.if_else(self._any_on(cg)) as (then, other):
                    with then:
                        got = cg.tag(b.load(self._scalar_address(cg, e.buffer, idx)),
                                     e.buffer)
                        then_bb = b.block
                    with other:
                        other_bb = b.block
                phi = b.phi(mt)
                phi.add_incoming(got, then_bb)
                phi.add_incoming(ir.Constant(mt, 0), other_bb)
                v = phi
            out = cg.splat(v)
        elif kind == "contiguous":
            ptr = b.bitcast(self._scalar_address(cg, e.buffer, idx), vt.as_pointer())
            if self.mask is None or self._padded(cg, e.buffer, idx):
                out = cg.tag(b.load(ptr, align=self.aligned.get(
                    id(e), self._align(e.buffer).constant)), e.buffer)
            else:
                f = cg._declare(f"llvm.masked.load.{type_suffix(vt)}.p0", vt,
                                [vt.as_pointer(), I32, self.mask.type, vt])
                out = cg.tag(b.call(f, [ptr, self._align(e.buffer), self.mask,
                                        ir.Constant(vt, None)]), e.buffer)
        else:
            ptrs = self._addresses(cg, e.buffer, idx)
            f = cg._declare(f"llvm.masked.gather.{type_suffix(vt)}.v{self.lanes}p0", vt,
                            [ptrs.type, I32, self.mask.type if self.mask is not None
                             else self._all_on().type, vt])
            out = cg.tag(b.call(f, [ptrs, self._align(e.buffer), self.mask or self._all_on(),
                                    ir.Constant(vt, None)]), e.buffer)
        if e.dtype.is_bool:
            return b.icmp_unsigned("!=", out, ir.Constant(out.type, 0))
        return out

    # ---------------------------------------------------------------------- stores
    def store(self, cg, s: Store, v: ir.Value) -> None:
        b = cg.builder
        v = cg.splat(v)
        vt = v.type
        kind, idx = self._kind(s.indices, s.buffer, cg.extents(s.buffer))
        if kind == "contiguous":
            ptr = b.bitcast(self._scalar_address(cg, s.buffer, idx), vt.as_pointer())
            if self.mask is None:
                if id(s.buffer) in cg.streamed and stream.stream_store(cg, v, ptr, s.buffer):
                    return
                cg.tag(b.store(v, ptr, align=self.aligned.get(
                    id(s), self._align(s.buffer).constant)), s.buffer)
            elif self._padded(cg, s.buffer, idx):    # a blend: every lane, the off ones
                old = cg.tag(b.load(ptr, align=self._align(s.buffer).constant),  # unchanged
                             s.buffer)
                keep = self._or_padding(cg, s.buffer, idx)
                cg.tag(b.store(b.select(keep, v, old), ptr,
                               align=self._align(s.buffer).constant), s.buffer)
            else:
                f = cg._declare(f"llvm.masked.store.{type_suffix(vt)}.p0", ir.VoidType(),
                                [vt, vt.as_pointer(), I32, self.mask.type])
                cg.tag(b.call(f, [v, ptr, self._align(s.buffer), self.mask]), s.buffer)
            return
        if kind == "uniform" and self.mask is None:  # the last lane's value wins
            last = b.extract_element(v, ir.Constant(I32, self.lanes - 1))
            cg.tag(b.store(last, self._scalar_address(cg, s.buffer, idx)), s.buffer)
            return
        ptrs = self._addresses(cg, s.buffer, idx)
        mask = self.mask or self._all_on()
        # scatter writes overlapping lanes in lane order, as the loop would
        f = cg._declare(f"llvm.masked.scatter.{type_suffix(vt)}.v{self.lanes}p0",
                        ir.VoidType(), [vt, ptrs.type, I32, mask.type])
        cg.tag(b.call(f, [v, ptrs, self._align(s.buffer), mask]), s.buffer)
