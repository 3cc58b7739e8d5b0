"""The isl model of a whole schedule: buffers, statements, accesses and dependences.

Built once per schedule (statements and accesses do not change under loop primitives) and
shared by the legality checks of every primitive and by `lower`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import islpy as isl

from ..config import debug_print, timed
from ..ir.dtype import int64
from ..ir.expr import Var, same
from ..ir.simplify import simplify
from ..ir.stmt import Buffer
from ..ir.visit import free_vars, substitute, walk
from ..polyhedral import accumulator_buffers, check_bounds, stage_statements
from ..polyhedral.astgen import TimedStatement, base_entries, timed_statements
from ..polyhedral.checks import insert_index_checks
from ..polyhedral.placement import Placement, loop_prefix, place
from ..polyhedral.deps import (
    Dependence, StatementInfo, check_legality, check_self_read, compute_dependences,
)
from ..polyhedral.model import (
    AccessRelations, Statement, access_map, access_relations, statement_writes,
)


def _stage_vars(op) -> set[str]:
    return {a.name for a in op.axis} | {a.name for a in op.reduce_axis}


def program_params(schedule) -> tuple[list[str], set[str]]:
    """All scalar variables of the program (first-use order) and those that are sizes."""
    order: dict[str, None] = {}
    sizes: set[str] = set()
    tensors = list(schedule.placeholders) + [st.op.output for st in schedule.stages]
    for t in tensors:
        for s in t.shape:
            for n in free_vars(s):
                order.setdefault(n, None)
                sizes.add(n)
    for st in schedule.stages:
        for a in st.op.reduce_axis:
            for n in free_vars(a.min) | free_vars(a.extent):
                order.setdefault(n, None)
                sizes.add(n)
        own = _stage_vars(st.op)
        for e in walk(st.op.body):
            if isinstance(e, Var) and e.name not in own:
                order.setdefault(e.name, None)
    return list(order), sizes


# Dependences by the isl text of what they are computed from (the declared order's time
# maps, the accesses, the statements' spatial dimensions): the auto-scheduler builds a
# program per candidate, and most candidates share a few structures (a conv's 30 sampled
# candidates made 119 programs, whose dependence analysis took 5.5 of 8 s of sampling).
# The results are isl objects that no one mutates; the text decides equality, so a hit is
# the same analysis.
DEPS_CACHED = 256
_DEPS: dict[tuple, list[Dependence]] = {}


def _deps_key(times, access, info, reduction_updates) -> tuple:
    return (tuple(str(t.time) for t in times), str(access.reads), str(access.writes),
            tuple(sorted((k, v.n_spatial) for k, v in info.items())),
            tuple(sorted(reduction_updates)))


@dataclass
class Program:
    names: list[str]                       # scalar parameters, in first-use order
    sizes: set[str]
    ptext: str
    params: dict[str, Var]
    context: isl.Set
    bufs: dict[int, Buffer]                # tensor (or accumulator) id -> buffer
    statements: list[Statement]
    access: AccessRelations
    info: dict[str, StatementInfo]
    order: list[str]                       # stage ids
    reduction_updates: set[str]
    initial: dict[str, object]             # stage id -> declared StageState
    outputs: dict[str, tuple]              # stage id -> (output tensor, accumulators...)
    labels: dict[str, str]                 # stage id -> the compute's name
    sites: list = field(default_factory=list)  # run-time index checks (polyhedral.checks)
    stmt_reads: dict[str, dict[int, isl.Map]] = field(default_factory=dict)
    stmt_writes: dict[str, dict[int, isl.Map]] = field(default_factory=dict)
    _deps: list[Dependence] | None = field(default=None, repr=False)
    _violations: list | None = field(default=None, repr=False)

    @property
    def violations(self) -> list:
        """Size-dependent out-of-bounds reads (a runtime precondition); raises BoundsError
        for reads that are out of bounds for every size. Independent of the schedule."""
        if self._violations is None:
            with timed("bounds check"):
                self._violations = check_bounds(self.statements, self.access, self.context)
        return self._violations

    def stage_label(self, sid: str) -> str:
        return self.labels[sid]

    def stage_output(self, sid: str):
        return self.outputs[sid][0]

    def stage_tensors(self, sid: str) -> tuple:
        return self.outputs[sid]

    def place(self, states) -> Placement:
        return place(self, states, base_entries(states, self.statements, self.order))

    def times(self, states) -> list[TimedStatement]:
        return timed_statements(self.place(states).entries)

    @property
    def deps(self) -> list[Dependence]:
        if self._deps is None:
            with timed("dependences"):
                times = self.times(self.initial)
                key = _deps_key(times, self.access, self.info, self.reduction_updates)
                self._deps = _DEPS.get(key)
                if self._deps is None:
                    self._deps = compute_dependences(
                        times, self.access.reads, self.access.writes, self.info,
                        self.reduction_updates)
                    _DEPS[key] = self._deps
                    while len(_DEPS) > DEPS_CACHED:
                        del _DEPS[next(iter(_DEPS))]
            debug_print(4, "isl dependences", "\n".join(
                f"{d.kind}{' (reduction)' if d.reduction else ''}: {d.rel}" for d in self._deps))
        return self._deps

    def check(self, primitive: str, stage: str | None, states) -> None:
        """Raise IllegalScheduleError when `states` break a dependence (touching `stage`,
        or any when None). Dependences of stages computed inside others are checked between
        the copies that really communicate (see `expand_dependences`)."""
        with timed(f"legality of {primitive}"):
            pl = self.place(states)
            times = timed_statements(pl.entries)
            if not any(e.expand is not None for e in pl.entries):
                check_legality(primitive, stage, times, self.deps, self.info,
                               self.access.reads, self.access.writes)
                return
            deps, info, reads, writes = expand_dependences(self, pl, states)
            check_legality(primitive, stage, times, deps, info, reads, writes)
            if any(L.threads for L in pl.locals):     # a GPU block's shared tiles
                from ..polyhedral.races import check_races

                check_races(self, pl, timed_statements(pl.entries + pl.barriers))


def expand_dependences(prog: Program, pl: Placement, states):
    """The program's dependences between placed (expanded) statement instances.

    A copy of a stage computed at a consumer's loop writes a local buffer, so a dependence
    through that buffer links only copies in the same iteration of the loop (the same
    prefix); any other dependence links every copy."""
    by_orig = pl.by_orig()
    prefix = {L.stage: L.n_prefix for L in pl.locals}
    info: dict[str, StatementInfo] = {}
    for e in pl.entries:
        base = prog.info[e.orig]
        info[e.stmt.name] = StatementInfo(base.stage, base.label, e.stmt.dims,
                                          base.n_spatial + len(e.stmt.dims) - len(base.dims))
    out = []
    for d in prog.deps:
        a, b = by_orig[d.src], by_orig[d.dst]
        rel = d.rel
        if a.expand is not None:
            rel = a.expand.reverse().apply_range(rel)
        if b.expand is not None:
            rel = rel.apply_range(b.expand)
        writer = d.src if d.kind in ("RAW", "WAW") else d.dst
        k = prefix.get(prog.info[writer].stage)
        if k is not None:
            same = loop_prefix(a.lmap, k).apply_range(loop_prefix(b.lmap, k).reverse())
            rel = rel.intersect(same)
        if rel.is_empty():
            continue
        out.append(Dependence(d.kind, a.stmt.name, b.stmt.name, rel, d.reduction))
    space = prog.access.reads.get_space()
    reads, writes = isl.UnionMap.empty(space), isl.UnionMap.empty(space)
    for e in pl.entries:
        for m in e.reads.values():
            reads = reads.union(isl.UnionMap.from_map(m))
        for m in e.writes.values():
            writes = writes.union(isl.UnionMap.from_map(m))
    return out, info, reads, writes


def _context(params: list[str], sizes: set[str]) -> isl.Set:
    conds = " and ".join(f"{p} >= 0" for p in params if p in sizes) or "1 = 1"
    return isl.Set(f"[{', '.join(params)}] -> {{ : {conds} }}")


def build_program(schedule, initial_states: dict) -> Program:
    """Buffers for every tensor, the statements of every stage and their accesses."""
    names, sizes = program_params(schedule)
    ptext = ", ".join(names)
    params = {n: Var(n, int64) for n in names}
    used: set[str] = set()

    def fresh(n: str) -> str:
        k, out = 1, n
        while out in used:
            out, k = f"{n}_{k}", k + 1
        used.add(out)
        return out

    def buffer(t) -> Buffer:
        shape = tuple(simplify(substitute(x, params)) for x in t.shape)
        return Buffer(fresh(t.name), shape, t.dtype)

    bufs: dict[int, Buffer] = {}
    for t in list(schedule.placeholders) + [st.op.output for st in schedule.stages]:
        bufs[id(t)] = buffer(t)
    statements: list[Statement] = []
    info: dict[str, StatementInfo] = {}
    reduction_updates: set[str] = set()
    for st in schedule.stages:
        acc = accumulator_buffers(st.op)
        for t in acc:
            if id(t) not in bufs:
                bufs[id(t)] = buffer(t)
        mine = stage_statements(st.id, st.op, st.state, acc)
        n_sp = len(st.op.axis)
        for x in mine:
            label = f"{st.op.name}.init" if x.is_init else st.op.name
            info[x.name] = StatementInfo(st.id, label, x.dims, n_sp)
            if x.name.endswith("_update") and len(mine) == 2:
                reduction_updates.add(x.name)
        statements.extend(mine)
    debug_print(4, "isl domains", "\n".join(f"{x.name}: {x.domain}" for x in statements))
    shapes = {k: b.shape for k, b in bufs.items()}
    names_of = {k: b.name for k, b in bufs.items()}
    labels = {st.id: st.op.name for st in schedule.stages}
    context = _context(names, sizes)
    statements, sites = insert_index_checks(statements, names_of, labels, ptext, context)
    access = access_relations(statements, names_of, shapes, ptext)
    outputs = {st.id: (st.op.output,) + tuple(t for t in accumulator_buffers(st.op)
                                              if t is not st.op.output)
               for st in schedule.stages}
    prog = Program(names, sizes, ptext, params, context, bufs, statements, access,
                   info, [st.id for st in schedule.stages], reduction_updates, initial_states,
                   outputs, labels, sites)
    for x, acc, m in access.per_read:
        d = prog.stmt_reads.setdefault(x.name, {})
        d[id(acc.buffer)] = d[id(acc.buffer)].union(m) if id(acc.buffer) in d else m
    for x in statements:
        d = prog.stmt_writes.setdefault(x.name, {})
        for buf, idx in statement_writes(x):
            if id(buf) in names_of:
                m = access_map(x, buf, idx, (), ptext, names_of[id(buf)],
                               access.boxes[id(buf)])
                d[id(buf)] = d[id(buf)].union(m) if id(buf) in d else m
    for st in schedule.stages:
        if st.op.is_recurrence:
            _check_recurrence(prog, st)
    return prog


def _check_recurrence(prog: Program, st) -> None:
    out = st.op.output
    mine = [x for x in prog.statements if prog.info[x.name].stage == st.id]
    writer = mine[0]  # the pure statement, or a reduction's init
    names = {x.name for x in mine}
    spatial = tuple(a.var for a in st.op.axis)
    # a reduction's update reads its accumulator at its own point: that is not a self-read
    own = [(x, acc, m) for x, acc, m in prog.access.per_read
           if x.name in names and acc.buffer is out
           and not (x.name in prog.reduction_updates
                    and all(map(same, acc.indices, spatial)))]
    for _x, acc, _m in own:
        if not acc.affine:
            raise NotImplementedError(
                f"recurrence {st.op.name}: the read {out.name}[...] has a non-affine index; "
                "tensorlang checks recurrences exactly and needs affine self-reads"
            )
    bname = prog.bufs[id(out)].name
    idx = tuple(a.var for a in st.op.axis)
    w = access_map(writer, out, idx, (), prog.ptext, bname, prog.access.boxes[id(out)])
    projections = {}
    for x in mine:
        dims = ", ".join(x.dims)
        sp = ", ".join(x.dims[:len(st.op.axis)])
        projections[x.name] = isl.Map(
            f"[{prog.ptext}] -> {{ {x.name}[{dims}] -> {writer.name}[{sp}] }}")
    for x, _acc, m in own:
        check_self_read(st.op.name, m, w, projections[x.name])
