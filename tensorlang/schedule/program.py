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
from ..polyhedral import (
    accumulator_buffers, check_bounds, stage_statements, statement_times,
)
from ..polyhedral.astgen import TimedStatement
from ..polyhedral.deps import (
    Dependence, StatementInfo, check_legality, check_self_read, compute_dependences,
)
from ..polyhedral.model import AccessRelations, Statement, access_map, access_relations


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

    def times(self, states) -> list[TimedStatement]:
        return statement_times(states, self.statements, self.order)

    @property
    def deps(self) -> list[Dependence]:
        if self._deps is None:
            with timed("dependences"):
                self._deps = compute_dependences(
                    self.times(self.initial), self.access.reads, self.access.writes,
                    self.info, self.reduction_updates)
            debug_print(4, "isl dependences", "\n".join(
                f"{d.kind}{' (reduction)' if d.reduction else ''}: {d.rel}" for d in self._deps))
        return self._deps

    def check(self, primitive: str, stage: str, states) -> None:
        with timed(f"legality of {primitive}"):
            check_legality(primitive, stage, self.times(states), self.deps, self.info,
                           self.access.reads, self.access.writes)


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
    access = access_relations(statements, names_of, shapes, ptext)
    prog = Program(names, sizes, ptext, params, _context(names, sizes), bufs, statements, access,
                   info, [st.id for st in schedule.stages], reduction_updates, initial_states)
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
