"""tl.analyze: exact iteration, flop and footprint counts of a schedule, by isl.

For concrete sizes, every count is the number of points of an isl set:
- a stage's *iterations* are the instances it executes (recomputation under compute_at
  included);
- its *flops* are the floating-point operations of one instance times the iterations;
- the *distinct* elements it reads and writes of each tensor are the image of its instances
  under the access relations;
- at each loop level d, *moved* is the number of (iteration of loops 0..d, element) pairs:
  the elements that a cache placed at that loop would load, summed over its iterations
  (CSE 291's data-movement count), and *per iteration* is that divided by the iterations.
The arithmetic intensity is flops / (distinct elements read + written in global buffers).

For each buffer of a stage computed at a loop (compute_at, store_at, fold_storage), `buffers`
gives its allocated shape, the positions written in it (folded: x_d mod factor) summed over
the iterations of the loop it lives in, and the smallest fold of each dimension that keeps
every live value at these sizes (isl's liveness, polyhedral/storage.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction

import islpy as isl

from ..deep import deep
from ..errors import TensorlangError
from ..ir.expr import Add, Call, Const, Div, Expr, Max, Min, Mul, Sub
from ..ir.stmt import Store
from ..ir.visit import walk, walk_stmt
from ..polyhedral.astgen import timed_statements
from ..polyhedral.placement import loop_prefix
from ..polyhedral.storage import liveness, smallest_fold
from .lower import _check_args
from .schedule import Schedule

_FLOP_NODES = (Add, Sub, Mul, Div, Min, Max, Call)


@dataclass
class LevelReport:
    loop: str
    iterations: int                        # distinct values of loops 0..d
    moved: dict[str, int]                  # tensor -> (iteration, element) pairs
    per_iteration: dict[str, Fraction]


@dataclass
class StageReport:
    name: str
    iterations: int
    flops: int
    reads: dict[str, int]                  # tensor -> distinct elements
    writes: dict[str, int]
    levels: list[LevelReport] = field(default_factory=list)
    local: bool = False                    # computed into a local buffer (compute_at)

    @property
    def intensity(self) -> Fraction | None:
        moved = sum(self.reads.values()) + sum(self.writes.values())
        return Fraction(self.flops, moved) if moved else None


@dataclass
class BufferReport:
    name: str
    shape: tuple                           # allocated extents (ints, or size expressions)
    folds: dict[str, int]                  # dimension -> fold factor
    store_iterations: int                  # iterations of the loop the buffer lives in
    footprint: int                         # (iteration, position written) pairs
    smallest_fold: dict[str, int | None]   # dimension -> least correct factor (None: none)


@dataclass
class Report:
    sizes: dict[str, int]
    stages: list[StageReport]
    global_reads: dict[str, int]
    global_writes: dict[str, int]
    buffers: list[BufferReport] = field(default_factory=list)

    def buffer(self, name: str) -> BufferReport:
        for b in self.buffers:
            if b.name == name:
                return b
        raise TensorlangError(f"analyze: no local buffer {name!r}; the local buffers are "
                              f"{[b.name for b in self.buffers]}")

    @property
    def flops(self) -> int:
        return sum(s.flops for s in self.stages)

    @property
    def intensity(self) -> Fraction | None:
        """Whole-program flops per element read or written in global memory."""
        moved = sum(self.global_reads.values()) + sum(self.global_writes.values())
        return Fraction(self.flops, moved) if moved else None

    def stage(self, name: str) -> StageReport:
        for s in self.stages:
            if s.name == name:
                return s
        raise TensorlangError(f"analyze: no stage {name!r}; the stages are "
                              f"{[s.name for s in self.stages]}")

    def __str__(self) -> str:
        lines = [f"sizes: {self.sizes or '(constant)'}"]
        for s in self.stages:
            ai = s.intensity
            lines.append(f"stage {s.name}{' (local)' if s.local else ''}: {s.iterations} "
                         f"iterations, {s.flops} flops, reads {_d(s.reads)}, writes "
                         f"{_d(s.writes)}, intensity {_f(ai)}")
            for lv in s.levels:
                per = ", ".join(f"{k}={_f(v)}" for k, v in lv.per_iteration.items())
                lines.append(f"  at {lv.loop}: {lv.iterations} iterations; moved "
                             f"{_d(lv.moved)}; per iteration {per}")
        for b in self.buffers:
            lines.append(f"buffer {b.name}{list(b.shape)}: folds {_d(b.folds)}, "
                         f"{b.footprint} positions written over {b.store_iterations} "
                         f"iteration(s); smallest folds {_d(b.smallest_fold)}")
        lines.append(f"total: {self.flops} flops; global reads {_d(self.global_reads)}, "
                     f"writes {_d(self.global_writes)}; intensity {_f(self.intensity)}")
        return "\n".join(lines)


def _d(d: dict) -> str:
    return "{" + ", ".join(f"{k}: {v}" for k, v in d.items()) + "}"


def _f(x) -> str:
    if x is None:
        return "-"
    return str(x) if x.denominator != 1 else str(x.numerator)


def _count(s: isl.Set | isl.Map) -> int:
    if isinstance(s, isl.Map):
        s = s.wrap()
    v = s.count_val()
    if not v.is_int():
        raise TensorlangError("analyze: a count is unbounded; give every size in sizes=")
    return v.to_python()


def _flops(body) -> int:
    n = 0
    for x in walk_stmt(body):
        if isinstance(x, Store):
            for e in walk(x.value):
                if isinstance(e, _FLOP_NODES) and isinstance(e, Expr) and e.dtype.is_float:
                    n += 1
    return n


@deep
def analyze(s: Schedule, args, sizes: dict[str, int] | None = None) -> Report:
    """Exact counts for a schedule at concrete sizes (`sizes` binds the tl.var sizes).

    >>> import tensorlang as tl
    >>> A = tl.placeholder((8,), name="A"); B = tl.compute((8,), lambda i: A[i] + 1.0, name="B")
    >>> tl.analyze(tl.create_schedule(B), [A, B]).stage("B").flops
    8
    """
    if not isinstance(s, Schedule):
        raise TensorlangError(f"analyze: expected a Schedule, got {s!r}")
    _check_args(s, args)
    prog = s.program
    sizes = dict(sizes or {})
    for k, v in sizes.items():
        if k not in prog.names:
            raise TensorlangError(f"analyze: sizes names {k!r}, which the schedule does not "
                                  f"use (its sizes are {sorted(prog.sizes)})")
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise TensorlangError(f"analyze: sizes[{k!r}] must be an int >= 0, got {v!r}")
    for k in sizes:
        if k in prog.products:
            raise TensorlangError(f"analyze: sizes names {k!r}, the product of "
                                  f"{' * '.join(prog.products[k])}; give its factors")
    missing = [p for p in prog.names if p in prog.sizes and p not in sizes
               and p not in prog.products]
    if missing:
        raise TensorlangError(f"analyze: give concrete values for the sizes {missing} "
                              "(sizes={...})")
    for p, fs in prog.products.items():   # a product parameter (n * m) from its factors
        prod = 1
        for f in fs:
            prod *= sizes[f]
        sizes[p] = prod
    conds = " and ".join(f"{k} = {v}" for k, v in sizes.items()) or "1 = 1"
    ctx = isl.Set(f"[{prog.ptext}] -> {{ : {conds} }}")
    pl = prog.place({st.id: st.state for st in s.stages})
    local_ids = {id(L.tensor) for L in pl.locals}
    names = {k: b.name for k, b in prog.bufs.items()}
    stages = []
    greads: dict[str, isl.UnionSet] = {}
    gwrites: dict[str, isl.UnionSet] = {}
    for st in s.stages:
        mine = [e for e in pl.entries if prog.info[e.orig].stage == st.id]
        iters = flops = 0
        rd: dict[str, isl.Set] = {}
        wr: dict[str, isl.Set] = {}
        for e in mine:
            dom = e.stmt.domain.intersect_params(ctx)
            n = _count(dom)
            iters += n if not e.stmt.is_init else 0
            flops += n * _flops(e.stmt.body)
            for acc, dst, glob in ((e.reads, rd, greads), (e.writes, wr, gwrites)):
                for tid, m in acc.items():
                    if tid not in names or tid in local_ids:
                        continue
                    img = m.intersect_params(ctx).intersect_domain(dom).range()
                    nm = names[tid]
                    dst[nm] = dst[nm].union(img) if nm in dst else img
                    u = isl.UnionSet.from_set(img)
                    glob[nm] = glob[nm].union(u) if nm in glob else u
        if not any(not e.stmt.is_init for e in mine):
            iters = sum(_count(e.stmt.domain.intersect_params(ctx)) for e in mine)
        rep = StageReport(st.op.name, iters, flops, {k: _count(v) for k, v in rd.items()},
                          {k: _count(v) for k, v in wr.items()},
                          local=st.state.attach is not None)
        main = max(mine, key=lambda e: len(e.loops)) if mine else None
        if main is not None:
            dom = main.stmt.domain.intersect_params(ctx)
            for d in range(main.own_start, len(main.loops)):
                pm = loop_prefix(main.lmap, d + 1).intersect_domain(dom)
                n_it = _count(pm.range())
                moved, per = {}, {}
                for tid, m in main.reads.items():
                    nm = names.get(tid)
                    if nm is None:
                        continue
                    f = pm.reverse().apply_range(m.intersect_params(ctx))
                    c = _count(f)
                    moved[nm] = c
                    per[nm] = Fraction(c, n_it) if n_it else Fraction(0)
                rep.levels.append(LevelReport(main.loops[d].name, n_it, moved, per))
        stages.append(rep)
    return Report(sizes, stages, {k: _count_union(v) for k, v in greads.items()},
                  {k: _count_union(v) for k, v in gwrites.items()},
                  _buffers(s, prog, pl, ctx))


def _buffers(s: Schedule, prog, pl, ctx: isl.Set) -> list[BufferReport]:
    states = {st.id: st.state for st in s.stages}
    times = timed_statements(pl.entries)
    out = []
    for L in pl.locals:
        st = states[L.stage]
        names = list(st.axes[:st.n_spatial])
        folds = dict(L.folds)
        k, tid = L.n_prefix, id(L.tensor)
        pairs = None
        for e in pl.entries:
            if tid not in e.writes:
                continue
            w = e.writes[tid].intersect_params(ctx).intersect_domain(
                e.stmt.domain.intersect_params(ctx))
            elem = w.get_tuple_name(isl.dim_type.out)
            xs = [f"x{j}" for j in range(len(names))]
            slot = [f"x{j} mod {folds[j]}" if j in folds else f"x{j}" for j in range(len(xs))]
            to_slot = isl.Map(f"{{ {elem}[{', '.join(xs)}] -> [{', '.join(slot)}] }}")
            p = loop_prefix(e.lmap, k).reverse().apply_range(
                w.apply_range(to_slot.align_params(w.get_space())))
            pairs = p if pairs is None else pairs.union(p)
        if pairs is None:
            continue
        live = liveness(pl.entries, times, tid, ctx) if st.store is not None or folds \
            else None
        best = {names[d]: smallest_fold(live, d) for d in range(len(names))} if live else {}
        shape = tuple(int(x.value) if isinstance(x, Const) else str(x)
                      for x in L.buffer.shape)
        out.append(BufferReport(L.buffer.name, shape,
                                {names[d]: f for d, f in folds.items()},
                                _count(pairs.domain()), _count(pairs), best))
    return out


def _count_union(u: isl.UnionSet) -> int:
    out = 0
    sets: list[isl.Set] = []
    u.foreach_set(sets.append)
    for x in sets:
        out += _count(x)
    return out
