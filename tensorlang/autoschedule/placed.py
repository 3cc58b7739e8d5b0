"""The isl facts of a schedule's statements as placed, at concrete sizes: what the cost
model (`cost.py`) reads of each statement — its loops' trip counts (the values each loop
takes, counted by isl), the footprint of each access per loop level (the first and last
points of each projection), the accesses with their strides, which dimensions and
variables a loop moves, which loop carries a recurrence and how far — and the isl helpers
that measure sets. The cost model's machine (cycles, bandwidths, latencies) is in cost.py.
"""

from __future__ import annotations

import math

import islpy as isl

from ..ir.expr import Const
from ..polyhedral.placement import loop_prefix

# the extent, in elements, that a symbolic dimension (a size bound at call time) counts as
# in the strides of the dimensions before it
SYMBOLIC_EXTENT = 64


def int_value(v: isl.Val) -> int:
    """An isl value as a Python int; 0 when it is not an integer (infinite, NaN,
    rational)."""
    return int(v.to_python()) if v.is_int() else 0


def _points(s: isl.Set) -> int:
    """How many points a bounded set has, exactly: isl's count_val enumerates them, too
    slowly for a loop nest of millions of iterations (a convolution's), so the innermost
    dimension is summed instead. In a convex piece without existentials its
    values at each outer point are one run of integers, lexmin to lexmax; where that run's
    length is constant over a region of outer points (a full tile, a tail), the region's
    own count times it is the piece's; elsewhere (a triangle) isl enumerates."""
    if s.is_empty():
        return 0
    n = s.dim(isl.dim_type.set)
    if n <= 1:
        return int_value(s.count_val())
    total = 0
    for b in s.make_disjoint().get_basic_sets():
        piece = isl.Set.from_basic_set(b)
        if b.dim(isl.dim_type.div) > 0:      # a stride: not one run of integers
            total += int_value(piece.count_val())
            continue
        m = isl.Map.from_range(piece).move_dims(isl.dim_type.in_, 0, isl.dim_type.out, 0,
                                                 n - 1)
        run = m.lexmax_pw_multi_aff().get_pw_aff(0).sub(
            m.lexmin_pw_multi_aff().get_pw_aff(0))
        for outer, length in run.get_pieces():
            if length.is_cst():
                total += (int_value(length.get_constant_val()) + 1) * _points(outer)
            else:
                total += int_value(m.intersect_domain(outer).wrap().count_val())
    return total


def _first(s: isl.Set) -> isl.Set:
    """The set's lexicographically first point, as a set (empty stays empty)."""
    if s.is_empty():
        return s
    return s.lexmin()


def bounding_box(s: isl.Set) -> list[int]:
    """Extents of the set's bounding box, per dimension (0 when empty)."""
    if s.is_empty():
        return [0] * s.dim(isl.dim_type.set)
    out = []
    for d in range(s.dim(isl.dim_type.set)):
        lo, hi = _ends(s, d)
        out.append(hi - lo + 1)
    return out


def box_size(box: list[int]) -> int:
    """The number of elements of a box of these extents."""
    n = 1
    for x in box:
        n *= x
    return n


def _line(s: isl.Set, d: int) -> isl.Set:
    """The values of dimension d (the others projected out)."""
    n = s.dim(isl.dim_type.set)
    return s.project_out(isl.dim_type.set, d + 1, n - d - 1).project_out(isl.dim_type.set, 0, d)


def _ends(s: isl.Set, d: int, line: isl.Set | None = None) -> tuple[int, int]:
    """The smallest and largest value of dimension d of a non-empty set, as the first and
    last points of its projection (`line`, when already made). (isl's dim_min_val answered
    0 for { X[512, j] : 1008 <= j <= 1025 } as the image of a compute_at stage's
    iterations, split into pieces with an empty one among them: a 3x3 blur's inner pass
    looked 10^4 times too slow; coalescing first failed inside isl on other sets.)"""
    line = _line(s, d) if line is None else line

    def at(p: isl.Set) -> int:
        return int_value(p.sample_point().get_coordinate_val(isl.dim_type.set, 0))
    return at(line.lexmin()), at(line.lexmax())


def _values(s: isl.Set, d: int, line: isl.Set | None = None) -> int:
    """How many values dimension d of a non-empty set takes (its projection `line`, when
    already made): not the extent of its bounding box — a stage computed at a fused loop
    runs its own fused loop over rows i - 1, i, i + 1 of a tile, 3 values 16 apart, not
    33."""
    line = _line(s, d) if line is None else line
    got = line.count_val()
    if got.is_int():
        return int_value(got)
    lo, hi = _ends(s, d, line)
    return hi - lo + 1


def _volume(s: isl.Set, d: int) -> int:
    """The product of the values each dimension after d takes in `s`."""
    out = 1
    for e in range(d + 1, s.dim(isl.dim_type.set)):
        out *= _values(s, e)
    return out


class PlacedStatement:
    """The isl facts of one placed statement at concrete sizes."""

    def __init__(self, e, ctx, names: dict, local_ids: set, itemsize: dict, strides: dict):
        self.e = e
        self.n = len(e.loops)
        self.dom = e.stmt.domain.intersect_params(ctx)
        self.prefix = [loop_prefix(e.lmap, d + 1).intersect_domain(self.dom)
                       for d in range(self.n)]
        self.trips = self._trips()
        self._feet: dict[tuple[int, int], list[int]] = {}    # footprint(m, d), computed once
        self._runs: dict[int, int] = {}                      # runs(d), computed once
        self.recurrences: list[isl.Map] = []                 # self flow deps (placed_...)
        self.local_elems: dict[str, tuple[int, int]] = {}    # local: (size, loops)
        self.accesses = []                # (tensor name, is write, is local, map, bytes)
        self.strides = []                 # per access: bytes between neighbours, per dim
        # the first of the loops that one use of an instruction replaces (a stage
        # tensorized onto a backend's instruction), or None
        self.instruction: int | None = None
        for acc, write in ((e.reads, False), (e.writes, True)):
            for tid, m in acc.items():
                if tid not in names:
                    continue
                self.accesses.append((names[tid], write, tid in local_ids,
                                      m.intersect_params(ctx).intersect_domain(self.dom),
                                      itemsize.get(tid, 4)))
                self.strides.append(strides.get(tid, ()))

    def runs(self, d: int) -> int:
        """How many times loop d's body runs in all (isl's count of the values of loops
        0..d; d = -1: once), computed once."""
        if d < 0:
            return 1
        got = self._runs.get(d)
        if got is None:
            got = self._runs[d] = _points(self.prefix[d].range())
        return got

    def _trips(self) -> list[int]:
        """Values of each loop inside a representative iteration of the loops around it:
        the middle one, chosen loop by loop (a full tile, and a full anti-diagonal of a
        skewed wavefront, where the first iteration has one tile); `self.point` keeps it.
        Also `constant`: whether the first and the last iterations have as many (LLVM sees
        a constant trip count)."""
        out, self.constant, self.point = [], [], []
        first = last = None
        cur = self.prefix[-1].range() if self.n else None
        for d in range(self.n):
            if cur is None or cur.is_empty():
                out.append(1)
            else:
                line = _line(cur, d)                 # the values loop d takes here
                out.append(max(_values(cur, d, line), 1))
                lo, hi = _ends(cur, d, line)
                mid = cur.fix_val(isl.dim_type.set, d, isl.Val(str((lo + hi) // 2)))
                if mid.is_empty():                   # a stride: the first value instead
                    lo_pt = cur.lexmin()
                    mid = cur.fix_val(isl.dim_type.set, d, isl.Val(str(lo)))
                    if mid.is_empty():
                        mid = lo_pt
                    self.point.append(lo)
                else:
                    self.point.append((lo + hi) // 2)
                    if lo < hi:
                        # the middle of a fused loop can be a partial tile (f = 22 b + t
                        # over 6-row tiles of 128 rows: f = 87 is a tile of 2 rows); the
                        # first iteration instead when it runs more of the inner loops
                        start = cur.fix_val(isl.dim_type.set, d, isl.Val(str(lo)))
                        if _volume(start, d) > _volume(mid, d):
                            mid = start
                            self.point[-1] = lo
                cur = mid
            r = self.prefix[d].range()
            ends = []
            for fixed in (first, last):
                x = r
                if fixed is not None:
                    x = r.intersect(fixed.insert_dims(isl.dim_type.set, d, 1))
                if x.is_empty():
                    ends.append(1)
                else:                                # loop d's extent only (not every dim's)
                    lo, hi = _ends(x, d)
                    ends.append(max(hi - lo + 1, 1))
                if fixed is first:
                    first = _first(x)
                else:
                    last = x.lexmax() if not x.is_empty() else x
            self.constant.append(ends[0] == ends[1])
        return out

    def divided_bounds(self, d: int) -> bool:
        """Whether loop d's first or last value, as a function of the loops around it, needs
        an integer division (`range(i // 4, (i + 2) // 4 + 1)`: a stage's tiles of 4 rows
        computed at each row of the next): LLVM cannot bound such a count, so it does not
        unroll the loop whole (where it does for a `min` of a tile's size and the rows
        left)."""
        m = isl.Map.from_range(self.prefix[d].range())
        m = m.move_dims(isl.dim_type.in_, 0, isl.dim_type.out, 0, d)
        return any(aff.dim(isl.dim_type.div)
                   for ends in (m.lexmin_pw_multi_aff(), m.lexmax_pw_multi_aff())
                   for _, aff in ends.get_pw_aff(0).get_pieces())

    def footprint(self, m: isl.Map, d: int) -> list[int]:
        """Bounding box of the elements one (the representative) iteration of loop d
        touches; d = -1: the whole statement's."""
        key = (id(m), d)
        if key not in self._feet:
            self._feet[key] = self._footprint(m, d)
        return self._feet[key]

    def touched(self, m: isl.Map, d: int) -> isl.Set:
        """The elements one (the representative) iteration of loop d touches; d = -1: the
        whole statement's."""
        if d < 0:
            return m.range()
        at = self.prefix[d].range()
        for k in range(d + 1):
            at = at.fix_val(isl.dim_type.set, k, isl.Val(str(self.point[k])))
        if at.is_empty():
            at = _first(self.prefix[d].range())
        inst = self.prefix[d].intersect_range(at).domain()
        return m.intersect_domain(inst).range()

    def _footprint(self, m: isl.Map, d: int) -> list[int]:
        return bounding_box(self.touched(m, d))

    def first_last_index(self, m: isl.Map, d: int) -> int:
        """The smallest last index of what one iteration of loop d touches: where its
        vector along the last axis starts."""
        rng = self.touched(m, d)
        return 0 if rng.is_empty() else _ends(rng, rng.dim(isl.dim_type.set) - 1)[0]


def _extent(x) -> int | None:
    """A buffer dimension's extent as an int, or None when it is symbolic (an expression
    of the program's size parameters). A buffer's shape holds index expressions
    (`ir.stmt.Buffer`): a constant is a `Const`."""
    return int(x.value) if isinstance(x, Const) else None


def _strides(buf) -> tuple[int, ...]:
    """Bytes between neighbouring elements along each dimension (row-major); a symbolic
    extent counts as SYMBOLIC_EXTENT elements."""
    out, step = [], buf.dtype.itemsize
    for x in reversed(buf.shape):
        out.append(step)
        n = _extent(x)
        step *= SYMBOLIC_EXTENT if n is None else n
    return tuple(reversed(out))


def placed_statements(s) -> list[PlacedStatement]:
    """The isl facts (trip counts, footprints, accesses) of every statement of schedule
    `s` as placed, at its concrete sizes."""
    from ..schedule.program import expand_dependences

    prog = s.program
    ctx = isl.Set(f"[{prog.ptext}] -> {{ : 1 = 1 }}")
    states = {st.id: st.state for st in s.stages}
    pl = prog.place(states)
    deps = prog.deps if all(e.expand is None for e in pl.entries) else \
        expand_dependences(prog, pl, states)[0]
    local_ids = {id(L.tensor) for L in pl.locals}
    names = {k: b.name for k, b in prog.bufs.items()}
    itemsize = {k: b.dtype.itemsize for k, b in prog.bufs.items()}
    strides = {k: _strides(b) for k, b in prog.bufs.items()}
    local_elems: dict[str, tuple[int, int]] = {}   # a local buffer: (elements, prefix loops)
    for L in pl.locals:
        extents = [_extent(x) for x in L.buffer.shape]
        if None in extents:
            continue                        # a size that depends on the parameters
        local_elems[names[id(L.tensor)]] = (math.prod(extents), L.n_prefix)
    out = []
    stages = {st.id: st for st in s.stages}
    for e in pl.entries:
        st = PlacedStatement(e, ctx, names, local_ids, itemsize, strides)
        st.instruction = _instruction_loop(e, stages.get(prog.info[e.orig].stage))
        st.local_elems = local_elems
        st.recurrences = [d.rel.intersect_params(ctx) for d in deps if d.kind == "RAW" and
                          not d.reduction and d.src == d.dst == e.stmt.name]
        out.append(st)
    return out


def _instruction_loop(e, stage) -> int | None:
    """The loop of entry `e` that its stage's `tensorize` marked, when the instruction is
    a backend's (one instruction a use); None otherwise (a plain-IR `impl` compiles to
    the loops it replaced, which the model counts as they are)."""
    from ..schedule.tensorize import MARK
    from ..te.tensorize import Lowering

    got = stage.tensorized() if stage is not None else None
    if got is None or not isinstance(got[1].impl, Lowering):
        return None
    return next((d for d, lp in enumerate(e.loops) if lp.thread_tag == MARK), None)


# ------------------------------------------------------------ which way loops move
def carries_recurrence(st: PlacedStatement, r: int) -> bool:
    """Whether loop r carries one of the statement's own flow dependences (isl's, from
    Program.deps): an element it writes is read by a later iteration of loop r within the
    same iteration of the loops around it (a recurrence along loop r; a reduction's
    updates are not one)."""
    return carry_distance(st, r) is not None


def carry_distance(st: PlacedStatement, r: int) -> int | None:
    """The fewest iterations of loop r between an element's write and its read by a later
    iteration of loop r, the loops around it fixed (isl: the smallest positive delta along
    loop r of the statement's own flow dependences); None when loop r carries none."""
    if r < 0:
        return None
    lp = st.prefix[r]
    zero = isl.Val.zero(lp.get_ctx())
    best = None
    for rel in st.recurrences:
        loops = lp.reverse().apply_range(rel).apply_range(lp)
        if loops.is_empty():
            continue
        along = loops.deltas()
        for k in range(r):
            along = along.fix_val(isl.dim_type.set, k, zero)
        n = along.dim(isl.dim_type.set)
        along = along.project_out(isl.dim_type.set, r + 1, n - r - 1)
        along = along.project_out(isl.dim_type.set, 0, r)
        along = along.intersect(isl.Set("{ [x] : x > 0 }").align_params(along.get_space()))
        if along.is_empty():
            continue
        d = int_value(along.lexmin().sample_point().get_coordinate_val(isl.dim_type.set, 0))
        best = d if best is None else min(best, d)
    return best


def moving_dims(st: PlacedStatement, m: isl.Map) -> list[int]:
    """The dimensions of an access that move with the innermost loop. A fused innermost
    loop runs over several dimensions at once: those that one step of it moves (its
    typical step, the one of least address change: out[i0, i1] = in[i1, i0] fused walks
    `in` down its columns, though the fused loop's footprint covers both dimensions)."""
    moving = [k for k, x in enumerate(st.footprint(m, st.n - 2)) if x > 1]
    if len(moving) > 1 and st.e.loops[-1].name.endswith(".fused"):
        step = _fused_step(st, m)
        if step is not None:
            return [k for k, x in enumerate(step) if x]
    return moving


def _fused_step(st: PlacedStatement, m: isl.Map) -> list[int] | None:
    """The change of an access's indices from one iteration of the innermost loop to the
    next with the loops around it fixed, the one of least address change among them (the
    others: where the fused loop wraps to the next row); None past a few of them."""
    n = st.n
    lp = st.prefix[n - 1]
    a = lp.reverse().apply_range(m)                       # loop values -> element
    loops = ", ".join(f"l{k}" for k in range(n))
    nxt = ", ".join(f"l{k}" if k < n - 1 else f"l{k} + 1" for k in range(n))
    step = isl.Map(f"{{ [{loops}] -> [{nxt}] }}").align_params(a.get_space())
    deltas = a.reverse().apply_range(step).apply_range(a).deltas()
    points: list[list[int]] = []

    def add(pt):
        if len(points) <= 16:
            points.append([int_value(pt.get_coordinate_val(isl.dim_type.set, k))
                           for k in range(deltas.dim(isl.dim_type.set))])
    deltas.foreach_point(add)
    strides = next((s for (_, _, _, mm, _), s in zip(st.accesses, st.strides) if mm is m), ())
    if not points or len(points) > 16 or len(strides) != len(points[0]):
        return None
    return min(points, key=lambda d: abs(sum(x * s for x, s in zip(d, strides))))


def moving_vars(st: PlacedStatement, r: int, names: set[str]) -> set[str]:
    """Those of `names` (statement variables) whose value changes along loop r with every
    other loop fixed (the loops around it and inside it); all of them when r < 0 or when
    loop r cannot change alone (isl: two loop vectors that differ in loop r alone give two
    values of the variable)."""
    rev = st.e.lmap.reverse()                           # loop values -> statement point
    n = rev.dim(isl.dim_type.out)
    dims = {rev.get_dim_name(isl.dim_type.out, k): k for k in range(n)}
    if r < 0:
        return set(names)
    nl = rev.dim(isl.dim_type.in_)
    loops = ", ".join(f"l{t}" for t in range(nl))
    other = ", ".join(f"l{t}" if t != r else "m" for t in range(nl))
    step = isl.Map(f"{{ [{loops}] -> [{other}] }}").align_params(rev.get_space())
    feasible = rev.domain()
    step = step.intersect_domain(feasible).intersect_range(feasible)
    zeros = ", ".join(["0"] * nl)
    if step.deltas().is_subset(isl.Set(f"{{ [{zeros}] }}").align_params(step.get_space())):
        # loop r cannot move alone (loops inside it run over ranges that move with it:
        # a tile's rows 8 l0 .. 8 l0 + 7): every variable counts as moving
        return set(names)
    out = set()
    for name in names:
        k = dims.get(name)
        if k is None:
            continue
        one = rev.project_out(isl.dim_type.out, k + 1, n - k - 1).project_out(
            isl.dim_type.out, 0, k)
        pairs = one.reverse().apply_range(step).apply_range(one)
        if not pairs.deltas().is_subset(isl.Set("{ [0] }").align_params(pairs.get_space())):
            out.add(name)
    return out
