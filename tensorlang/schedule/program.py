"""The isl model of a whole schedule: buffers, statements, accesses and dependences.

Built once per schedule (statements and accesses do not change under loop primitives) and
shared by the legality checks of every primitive and by `lower`. A primitive that changes
the computes (compute_inline, cache_read, ...) builds the next program from the previous
one: each stage's part (statements, accesses, declared state) is kept while its compute and
the names of its buffers are unchanged, and the dependences are recomputed only between the
stages the edit touched and the stages that share a buffer with them, so an edit costs what
it changes, not the size of the program.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field

import islpy as isl

from ..config import debug_level, debug_print, timed
from ..ir.dtype import int64
from ..ir.expr import Load, Var, same
from ..ir.simplify import simplify
from ..ir.stmt import Buffer
from ..ir.visit import substitute, walk
from ..te.extern import ExternOp
from ..polyhedral import accumulator_buffers, check_bounds, stage_statements
from ..polyhedral.astgen import TimedStatement, base_entries, timed_statements
from ..polyhedral.checks import CheckSite, insert_index_checks
from ..polyhedral.placement import Placement, loop_prefix, place
from ..polyhedral.storage import check_folds
from ..polyhedral.deps import (
    Dependence, StatementInfo, check_legality, check_self_read, compute_dependences,
)
from ..polyhedral.affine import affine_str, size_products
from ..polyhedral.model import (
    Access, AccessRelations, StageState, Statement, access_map, buffer_box, identity_state,
    statement_accesses, statement_writes, union_all,
)
from ..te.update import UpdateOp
from .update import check_update_stage


def _stage_vars(op) -> set[str]:
    return {a.name for a in op.axis} | {a.name for a in op.reduce_axis}


@dataclass(frozen=True)
class _OpUses:
    """What the program needs to know of one compute's expression, found by one walk."""

    body: object                    # the body these facts are of (a compute may be rewritten)
    sizes: tuple[str, ...]          # variables of its reduce axes' bounds, first use first
    scalars: tuple[str, ...]        # free variables of its body, first use first
    reads: frozenset[int]           # ids of the tensors its body loads


# facts of each compute by identity, valid while its body is the same object: an edit of a
# long pipeline rewrites a few computes, and walking every body again per edit made the
# edits of a 200-stage chain quadratic in its size
_USES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _op_uses(op) -> _OpUses:
    u = _USES.get(op)
    if u is not None and u.body is op.body:
        return u
    if isinstance(op, ExternOp):
        u = _extern_uses(op)
        _USES[op] = u
        return u
    sizes: dict[str, None] = {}
    for a in op.reduce_axis:
        for n in _ordered_vars(a.min, a.extent):
            sizes.setdefault(n, None)
    own = _stage_vars(op)
    scalars: dict[str, None] = {}
    reads = set()
    for e in walk(op.body):
        if isinstance(e, Var) and e.name not in own:
            scalars.setdefault(e.name, None)
        elif isinstance(e, Load):
            reads.add(id(e.buffer))
    u = _OpUses(op.body, tuple(sizes), tuple(scalars), frozenset(reads))
    _USES[op] = u
    return u


def _ordered_vars(*exprs) -> list[str]:
    """The variables of `exprs` in the order they appear: the kernel's size parameters
    follow it (a set's order would change with the process's string hashing: `n * m`
    gave (n, m) in one run and (m, n) in the next)."""
    seen: dict[str, None] = {}
    for e in exprs:
        for x in walk(e):
            if isinstance(x, Var):
                seen.setdefault(x.name, None)
    return list(seen)


def _extern_uses(op) -> _OpUses:
    """An extern stage reads its inputs; the bounds of its declared regions are sizes."""
    sizes: dict[str, None] = {}
    for region in (*op.reads, op.writes):
        for lo, hi in region or ():
            for n in _ordered_vars(lo, hi):
                sizes.setdefault(n, None)
    return _OpUses(op.body, tuple(sizes), (), frozenset(id(t) for t in op.inputs))


def reads_tensor(op, tensor) -> bool:
    """Whether compute `op`'s body loads `tensor`."""
    return id(tensor) in _op_uses(op).reads


def program_params(schedule) -> tuple[list[str], set[str]]:
    """All scalar variables of the program (first-use order) and those that are sizes. A
    product of sizes in a shape or an extent (`n * m`) is one more size parameter
    (`product_name`), after its factors: isl reasons about it as a parameter of its own."""
    order, sizes, _products = _params_and_products(schedule)
    return order, sizes


def program_products(schedule) -> dict[str, tuple[str, ...]]:
    """The product parameters of the program (`product_name(factors)` -> factors)."""
    return _params_and_products(schedule)[2]


def _params_and_products(schedule):
    order: dict[str, None] = {}
    sizes: set[str] = set()
    products: dict[str, tuple[str, ...]] = {}
    tensors = list(schedule.placeholders) + [t for st in schedule.stages for t in st.op.outputs]
    exprs = [s for t in tensors for s in t.shape]
    for st in schedule.stages:
        axes = list(st.op.axis) + list(st.op.reduce_axis)
        exprs.extend(x for a in axes for x in (a.min, a.extent))
    for s in exprs:
        for n in _ordered_vars(s):
            order.setdefault(n, None)
            sizes.add(n)
        products.update(size_products(s))
    for st in schedule.stages:
        u = _op_uses(st.op)
        for n in u.sizes:
            order.setdefault(n, None)
            sizes.add(n)
        for n in u.scalars:
            order.setdefault(n, None)
    for p in products:
        order.setdefault(p, None)
        sizes.add(p)
    return list(order), sizes, products


# Dependences by the isl text of what they are computed from (the declared order's time
# maps, the accesses, the statements' spatial dimensions): the auto-scheduler builds a
# program per candidate, and most candidates share a few structures (a conv's sampled
# candidates make several programs each, whose dependence analysis, done anew for each,
# would take most of the sampling's time).
# The results are isl objects that no one mutates; the text decides equality, so a hit is
# the same analysis.
DEPS_CACHED = 256
_DEPS: dict[tuple, list[Dependence]] = {}


def _deps_key(times, access, info, reduction_updates, may_writes=frozenset()) -> tuple:
    return (tuple(str(t.time) for t in times), str(access.reads), str(access.writes),
            tuple(sorted((k, v.n_spatial) for k, v in info.items())),
            tuple(sorted(reduction_updates)), tuple(sorted(may_writes)))


@dataclass
class StagePart:
    """What one stage puts into a program: its declared state, its statements (with their
    index checks) and their accesses. `build_program` keeps it for the next program while
    the stage's compute (and body), its domain and the names of the buffers it touches are
    the same, and the index checks of the stages before it are as many."""

    op: object
    body: object
    domain: isl.Set
    spatial_domain: isl.Set
    initial: StageState
    acc: tuple                               # accumulator_buffers(op)
    buffers: tuple[tuple[int, str | None], ...]  # (id, buffer name) of what it reads/writes
    read_ids: frozenset[int]
    write_ids: frozenset[int]
    first_site: int
    sites: list[CheckSite]
    statements: list[Statement]
    info: dict[str, StatementInfo]
    reduction_updates: set[str]
    per_read: list[tuple[Statement, Access, isl.Map]]
    write_maps: list[isl.Map]
    stmt_reads: dict[str, dict[int, isl.Map]]
    stmt_writes: dict[str, dict[int, isl.Map]]
    may_writes: frozenset[str] = frozenset()   # statements whose write index reads data


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
    parts: dict[str, StagePart] = field(default_factory=dict)
    tensors: dict[int, object] = field(default_factory=dict)   # the objects behind bufs' ids
    rebuilt: frozenset[str] = frozenset()   # stages whose parts are new in this program
    key: tuple = ()                         # (parameters, sizes): parts are reused within one
    may_writes: frozenset[str] = frozenset()  # statements that may write any element
    # product parameters (`n * m` in a shape or extent): name -> factors; params maps the
    # name to the product of its factors, which the kernel computes (never an argument)
    products: dict[str, tuple[str, ...]] = field(default_factory=dict)
    _deps: list[Dependence] | None = field(default=None, repr=False)
    # (dependences, statement info, parts) of the program this one was built from, while
    # its own dependences are not computed yet
    _base: tuple | None = field(default=None, repr=False)
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
        pl = place(self, states, base_entries(states, self.statements, self.order))
        if any(L.folds for L in pl.locals):     # a folded buffer keeps every live value
            check_folds(self, pl, timed_statements(pl.entries), states)
        return pl

    def times(self, states) -> list[TimedStatement]:
        return timed_statements(self.place(states).entries)

    @property
    def deps(self) -> list[Dependence]:
        if self._deps is None:
            with timed("dependences"):
                if self._base is not None:
                    self._deps = self._updated_deps(*self._base)
                else:
                    times = self.times(self.initial)
                    key = _deps_key(times, self.access, self.info, self.reduction_updates,
                                    self.may_writes)
                    self._deps = _DEPS.get(key)
                    if self._deps is None:
                        self._deps = compute_dependences(
                            times, self.access.reads, self.access.writes, self.info,
                            self.reduction_updates, self.may_writes)
                        _DEPS[key] = self._deps
                        while len(_DEPS) > DEPS_CACHED:
                            del _DEPS[next(iter(_DEPS))]
            self._base = None
            if debug_level() >= 4:
                debug_print(4, "isl dependences", "\n".join(
                    f"{d.kind}{' (reduction)' if d.reduction else ''}: {d.rel}"
                    for d in self._deps))
        return self._deps

    def _updated_deps(self, old: list[Dependence], old_info: dict[str, StatementInfo],
                      old_parts: dict[str, StagePart]) -> list[Dependence]:
        """The dependences, from those of the program this one was built from.

        Isl's flow analysis relates a write and a read (or two writes) of one element, and
        what can hide a write is another write of that element; so the dependences between
        two stages follow from their own accesses, the writes of the buffers they share
        and their declared order. The stages whose parts are new (`rebuilt`), the readers
        and writers of every buffer whose writers changed, the writers of what the new
        parts read, and every writer of a buffer one of those touches (`sub`) get their
        dependences recomputed among themselves; every other dependence is the same
        relation as before. (The declared order of the kept stages is the same: checked
        when the program is built.)"""
        writers: dict[int, set[str]] = {}
        accessors: dict[int, set[str]] = {}
        for sid, part in self.parts.items():
            for b in part.write_ids:
                writers.setdefault(b, set()).add(sid)
            for b in part.read_ids | part.write_ids:
                accessors.setdefault(b, set()).add(sid)
        dirty: set[int] = set()
        for sid, part in old_parts.items():
            if sid in self.rebuilt or sid not in self.parts:
                dirty |= part.write_ids
        for sid in self.rebuilt:
            dirty |= self.parts[sid].write_ids
        sub = set(self.rebuilt)
        for b in dirty:
            sub |= accessors.get(b, set())
        for sid in self.rebuilt:
            for b in self.parts[sid].read_ids:
                sub |= writers.get(b, set())
        for sid in list(sub):
            part = self.parts[sid]
            for b in part.read_ids | part.write_ids:
                sub |= writers.get(b, set())
        kept = []
        for d in old:
            a, b = old_info[d.src].stage, old_info[d.dst].stage
            if a in sub and b in sub:
                continue
            if a in self.rebuilt or b in self.rebuilt or a not in self.parts or \
                    b not in self.parts:
                continue
            kept.append(d)
        parts = [self.parts[sid] for sid in self.order if sid in sub]
        stmts = [x for p in parts for x in p.statements]
        times = timed_statements(base_entries(self.initial, stmts, self.order))
        space = self.access.space
        reads = union_all([m for p in parts for _x, _acc, m in p.per_read], space)
        writes = union_all([m for p in parts for m in p.write_maps], space)
        return kept + compute_dependences(times, reads, writes, self.info,
                                          self.reduction_updates, self.may_writes)

    def moved(self, states, seeds: set[str]) -> set[str]:
        """The stages whose placed statements may change when those of `seeds` do: a stage
        computed at a loop of another is placed by that consumer's statements and over the
        footprint of the statements that read it (see `placement.place`), so the stages
        computed inside a moved stage and the stages a moved stage reads that are computed
        somewhere move too, and so on. (Stages at root stay where they are.)"""
        owner = {id(t): sid for sid, ts in self.outputs.items() for t in ts}
        depends: dict[str, set[str]] = {}    # stage -> stages placed by its statements
        for sid, st in states.items():
            if st.attach is None:
                continue
            depends.setdefault(st.attach[0], set()).add(sid)
        for sid, part in self.parts.items():
            for b in part.read_ids:
                src = owner.get(b)
                if src is not None and src != sid and states[src].attach is not None:
                    depends.setdefault(sid, set()).add(src)
        out = set(seeds)
        todo = list(seeds)
        while todo:
            for y in depends.get(todo.pop(), ()):
                if y not in out:
                    out.add(y)
                    todo.append(y)
        return out

    def check(self, primitive: str, stage: str | None, states,
              touching: set[str] | None = None) -> None:
        """Raise IllegalScheduleError when `states` break a dependence of one of the
        stages in `touching` (default: `stage`, named in the messages; every dependence
        when both are None). Dependences of stages computed inside others are checked
        between the copies that really communicate (see `expand_dependences`).

        A caller may leave out the dependences whose stages keep their times: the
        schedule was legal before its edit, so those keep their order."""
        if touching is None and stage is not None:
            touching = {stage}
        with timed(f"legality of {primitive}"):
            if all(st.attach is None for st in states.values()):
                self._check_at_root(primitive, stage, states, touching)
                return
            pl = self.place(states)
            if not any(e.expand is not None for e in pl.entries):
                check_legality(primitive, stage, timed_statements(pl.entries), self.deps,
                               self.info, self.access.reads, self.access.writes, touching)
                return
            deps, info, reads, writes = expand_dependences(self, pl, states, touching)
            # time maps of the statements checked only (placed statements have as many
            # time dimensions as loops around them: making all of them cost a placed
            # chain's edits the square of its depth); place() padded all to one width
            used = {x for d in deps for x in (d.src, d.dst)}
            times = timed_statements([e for e in pl.entries
                                      if touching is None or e.stmt.name in used])
            check_legality(primitive, stage, times, deps, info, reads, writes, touching)
            if any(L.threads for L in pl.locals):     # a GPU block's shared tiles
                from ..polyhedral.races import check_races

                check_races(self, pl, timed_statements(pl.entries + pl.barriers))

    def _check_at_root(self, primitive: str, stage: str | None, states,
                       touching: set[str] | None) -> None:
        """`check` when no stage is computed inside another: every statement runs at root,
        so its time depends on its own stage's state and position alone, and only the
        statements of the stages checked and of their dependences need time maps (the
        time maps of the whole program made every primitive cost the program's size).
        Any other dependence keeps its order: its stages and their states are unchanged."""
        deps = self.deps
        if touching is not None:
            deps = [d for d in deps if self.info[d.src].stage in touching
                    or self.info[d.dst].stage in touching]
        used = {d.src for d in deps} | {d.dst for d in deps}
        stmts = [x for x in self.statements
                 if x.name in used or touching is None or x.stage in touching]
        times = timed_statements(base_entries(states, stmts, self.order))
        if touching is None:
            reads, writes = self.access.reads, self.access.writes
        else:   # for the messages: the accesses of the statements checked
            space = self.access.space
            reads = union_all([m for x in stmts
                               for m in self.stmt_reads.get(x.name, {}).values()], space)
            writes = union_all([m for x in stmts
                                for m in self.stmt_writes.get(x.name, {}).values()], space)
        check_legality(primitive, stage, times, deps, self.info, reads, writes, touching)


def expand_dependences(prog: Program, pl: Placement, states,
                       touching: set[str] | None = None):
    """The program's dependences between placed (expanded) statement instances (those of
    the stages in `touching` when given), with the accesses of their statements.

    A copy of a stage computed at a consumer's loop writes a local buffer, so a dependence
    through that buffer links only copies in the same iteration of the loop (the same
    prefix); any other dependence links every copy."""
    by_orig = pl.by_orig()
    prefix = {L.stage: L.n_prefix if L.link is None else L.link for L in pl.locals}
    info: dict[str, StatementInfo] = {}
    for e in pl.entries:
        base = prog.info[e.orig]
        info[e.stmt.name] = StatementInfo(base.stage, base.label, e.stmt.dims,
                                          base.n_spatial + len(e.stmt.dims) - len(base.dims))
    out = []
    for d in prog.deps:
        if touching is not None and prog.info[d.src].stage not in touching and \
                prog.info[d.dst].stage not in touching:
            continue
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
    used = {x for d in out for x in (d.src, d.dst)}
    entries = [e for e in pl.entries if touching is None or e.stmt.name in used]
    reads = union_all([m for e in entries for m in e.reads.values()], prog.access.space)
    writes = union_all([m for e in entries for m in e.writes.values()], prog.access.space)
    return out, info, reads, writes


def _context(params: list[str], sizes: set[str],
             products: dict[str, tuple[str, ...]] | None = None) -> isl.Set:
    """Sizes are >= 0. A product parameter p = f1 * ... * fk is not affine in its factors,
    but isl is told what is: p = 0 when a factor is 0, else p >= each factor (and, for
    two, p >= f1 + f2 - 1), so that bounds proofs and witnesses respect it."""
    conds = [f"{p} >= 0" for p in params if p in sizes]
    for p, fs in (products or {}).items():
        zero = " or ".join(f"{f} = 0" for f in fs)
        pos = [f"{f} >= 1" for f in fs] + [f"{p} >= {f}" for f in fs]
        if len(fs) == 2:
            pos.append(f"{p} >= {fs[0]} + {fs[1]} - 1")
        conds.append(f"(({p} = 0 and ({zero})) or ({' and '.join(pos)}))")
    return isl.Set(f"[{', '.join(params)}] -> {{ : {' and '.join(conds) or '1 = 1'} }}")


def build_program(schedule, prev: Program | None = None) -> Program:
    """Buffers for every tensor, the statements of every stage and their accesses.

    `prev` is the program of the same schedule before an edit of its computes or stages:
    the part of each stage that the edit left alone (same compute and body, same domain,
    same names for the buffers it touches) is taken from it instead of being rebuilt, and
    the dependences are updated from its (`Program._updated_deps`). The result is the
    program a build from scratch makes, up to the order of its dependences."""
    names, sizes, products = _params_and_products(schedule)
    ptext = ", ".join(names)
    key = (ptext, frozenset(sizes))
    if prev is not None and prev.key != key:
        prev = None       # other parameters: every isl object has another space
    stages = list(schedule.stages)
    candidates: dict[str, StagePart] = {}
    if prev is not None:
        for st in stages:
            part = prev.parts.get(st.id)
            if part is not None and part.op is st.op and part.body is st.op.body and \
                    st.state is not None and st.state.domain is part.domain and \
                    st.state.spatial_domain is part.spatial_domain:
                candidates[st.id] = part
        # the dependences kept between stages rest on their declared order
        if [sid for sid in prev.order if sid in candidates] != \
                [st.id for st in stages if st.id in candidates]:
            candidates = {}
    if prev is not None:
        params = prev.params
    else:   # a product parameter stands for the product of its factors in the loop IR
        params = {n: Var(n, int64) for n in names if n not in products}
        for p, fs in products.items():
            e = params[fs[0]]
            for f in fs[1:]:
                e = e * params[f]
            params[p] = e
    context = prev.context if prev is not None else _context(names, sizes, products)
    space = prev.access.space if prev is not None else \
        isl.Set(f"[{ptext}] -> {{ : }}").get_space()
    used: set[str] = set()

    def fresh(n: str) -> str:
        k, out = 1, n
        while out in used:
            out, k = f"{n}_{k}", k + 1
        used.add(out)
        return out

    def same_object(k: int, t) -> bool:
        return prev is not None and prev.tensors.get(k) is t

    bufs: dict[int, Buffer] = {}
    tensors: dict[int, object] = {}

    def buffer(t) -> None:
        name = fresh(t.name)
        old = prev.bufs.get(id(t)) if same_object(id(t), t) else None
        if old is None or old.name != name:
            shape = tuple(simplify(substitute(x, params)) for x in t.shape)
            old = Buffer(name, shape, t.dtype)
        bufs[id(t)] = old
        tensors[id(t)] = t

    for t in list(schedule.placeholders) + [t for st in stages for t in st.op.outputs]:
        buffer(t)
    for st in stages:     # an update runs in place: its init stage stores into its buffer
        if isinstance(st.op, UpdateOp):
            check_update_stage(schedule, st)
            bufs[id(st.op.init)] = bufs[id(st.op.output)]
    accs: dict[str, tuple] = {}
    for st in stages:
        part = candidates.get(st.id)
        accs[st.id] = part.acc if part is not None else accumulator_buffers(st.op)
        for t in accs[st.id]:
            if id(t) not in bufs:
                buffer(t)
    names_of = {k: b.name for k, b in bufs.items()}
    labels = {st.id: st.op.name for st in stages}
    boxes: dict[int, isl.Set] = {}

    def box(buf) -> isl.Set:
        k = id(buf)
        if k not in boxes:
            old = prev.access.boxes.get(k) if same_object(k, buf) else None
            if old is None or prev.bufs[k].name != names_of[k]:
                old = buffer_box(names_of[k], bufs[k].shape, ptext)
            boxes[k] = old
        return boxes[k]

    parts: dict[str, StagePart] = {}
    rebuilt: set[str] = set()
    statements: list[Statement] = []
    sites: list[CheckSite] = []
    info: dict[str, StatementInfo] = {}
    reduction_updates: set[str] = set()
    may_writes: set[str] = set()
    per_read: list = []
    write_maps: list = []
    stmt_reads: dict[str, dict[int, isl.Map]] = {}
    stmt_writes: dict[str, dict[int, isl.Map]] = {}
    for st in stages:
        part = candidates.get(st.id)
        if part is not None and ((part.sites and part.first_site != len(sites)) or
                                 any(names_of.get(k) != n for k, n in part.buffers)):
            part = None
        if part is None:
            part = _stage_part(st, accs[st.id], names_of, labels, ptext, context, box,
                               len(sites))
            rebuilt.add(st.id)
        else:
            for k in part.read_ids | part.write_ids:
                if k in names_of:
                    box(tensors[k])
        parts[st.id] = part
        statements.extend(part.statements)
        sites.extend(part.sites)
        info.update(part.info)
        reduction_updates |= part.reduction_updates
        may_writes |= part.may_writes
        per_read.extend(part.per_read)
        write_maps.extend(part.write_maps)
        stmt_reads.update(part.stmt_reads)
        stmt_writes.update(part.stmt_writes)
    if debug_level() >= 4:
        debug_print(4, "isl domains", "\n".join(f"{x.name}: {x.domain}" for x in statements))
    access = AccessRelations(per_read, boxes, write_maps, space)
    outputs = {st.id: (st.op.output,) + tuple(t for t in accs[st.id] if t is not st.op.output)
               for st in stages}
    base = None
    if prev is not None and prev._deps is not None and len(rebuilt) < len(stages):
        base = (prev._deps, prev.info, prev.parts)
    prog = Program(names, sizes, ptext, params, context, bufs, statements, access, info,
                   [st.id for st in stages], reduction_updates,
                   {sid: p.initial for sid, p in parts.items()}, outputs, labels, sites,
                   stmt_reads, stmt_writes, parts, tensors, frozenset(rebuilt), key,
                   frozenset(may_writes), products=products, _base=base)
    for st in stages:
        if st.id in rebuilt and st.op.is_recurrence:
            _check_recurrence(prog, st)
    return prog


def _stage_part(st, acc: tuple, names_of: dict[int, str], labels: dict[str, str], ptext: str,
                context: isl.Set, box, first_site: int) -> StagePart:
    """The part of stage `st` in a program whose buffers are named `names_of`."""
    initial = identity_state(st.id, st.op, ptext)
    state = st.state if st.state is not None else initial
    mine = stage_statements(st.id, st.op, state, acc)
    n_sp = len(st.op.axis)
    info: dict[str, StatementInfo] = {}
    reduction_updates: set[str] = set()
    for x in mine:
        label = f"{st.op.name}.init" if x.is_init else st.op.name
        info[x.name] = StatementInfo(st.id, label, x.dims, n_sp)
        if x.name.endswith("_update") and len(mine) == 2:
            reduction_updates.add(x.name)
    mine, sites = insert_index_checks(mine, names_of, labels, ptext, context, first_site)
    per_read: list = []
    write_maps: list = []
    stmt_reads: dict[str, dict[int, isl.Map]] = {}
    stmt_writes: dict[str, dict[int, isl.Map]] = {}
    read_ids: set[int] = set()
    write_ids: set[int] = set()
    for x in mine:
        reads, writes = statement_accesses(x, names_of, box, ptext)
        per_read.extend(reads)
        d = stmt_reads.setdefault(x.name, {})
        for _x, a, m in reads:
            k = id(a.buffer)
            d[k] = d[k].union(m) if k in d else m
            read_ids.add(k)
        d = stmt_writes.setdefault(x.name, {})
        for buf, m in writes:
            k = id(buf)
            d[k] = d[k].union(m) if k in d else m
            write_ids.add(k)
            write_maps.append(m)
    touched = _op_uses(st.op).reads | {id(t) for t in acc}
    # a write whose index is not affine (it reads data) may reach any element
    may = frozenset(x.name for x in mine for _buf, idx in statement_writes(x)
                    if any(affine_str(i) is None for i in idx))
    return StagePart(st.op, st.op.body, state.domain, state.spatial_domain, initial, acc,
                     tuple((k, names_of.get(k)) for k in sorted(touched)),
                     frozenset(read_ids), frozenset(write_ids), first_site, sites, mine,
                     info, reduction_updates, per_read, write_maps, stmt_reads, stmt_writes,
                     may)


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
