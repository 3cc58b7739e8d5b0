"""The isl model of a program: statements with domains, accesses and schedule state.

Each compute stage becomes one statement (`C[i, j]`), or two for a reduction: `C_init[i, j]`
writes the identity and `C_update[i, j, k]` combines one more value. Symbolic sizes are isl
parameters. A stage's schedule state (`StageState`) is an isl map from its full domain to its
loops; schedule primitives are edits of that map, and statement times are derived from it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import islpy as isl

from ..ir.expr import And, Const, Expr, Load, Select, Var
from ..ir.stmt import Buffer, ExternCall, If, Let, LoopKind, Stmt, Store, seq
from ..te.extern import ExternOp
from ..te.reduce import Reduce
from ..te.tensor import ComputeOp, IterVar, TupleBody
from ..te.update import UpdateOp
from .affine import affine_part, affine_str, condition_set, conjuncts, size_str


@dataclass(frozen=True)
class Loop:
    """One loop of a stage (a schedule dimension) with its tag."""

    name: str
    kind: LoopKind = LoopKind.SERIAL
    thread_tag: str = ""
    max_extent: int | None = None  # constant bound on the trip count (vector/unroll loops)
    atomic: bool = False  # an update stage's parallel loop whose updates are atomic


@dataclass(frozen=True)
class StageState:
    """The polyhedral state of one stage, edited by schedule primitives.

    `sched` maps points of the stage's space (spatial axes, then reduce axes) to its loops,
    outer first; output dimension d of `sched` is loop `loops[d]`. It is a function on the
    whole space, not restricted to `domain`: a reduction's init takes the spatial part of it,
    which must not inherit "some reduce point exists" from the domain.
    """

    stage: str
    axes: tuple[str, ...]
    n_spatial: int
    domain: isl.Set
    spatial_domain: isl.Set
    loops: tuple[Loop, ...]
    sched: isl.Map
    trace: tuple[str, ...] = field(default=())
    attach: tuple[str, str] | None = None   # (consumer stage, loop) for compute_at; None: root
    scope: str = "local"                    # storage of its values when attached
    sync: bool = True                       # barriers around a shared tile's copy
    # store_at: (consumer stage, loop) or "root" where the buffer of an attached stage lives
    # (None: at its compute_at loop); folds: (dimension, factor) of storage folding
    store: tuple[str, str] | str | None = None
    folds: tuple[tuple[int, int], ...] = ()

    @property
    def is_reduction(self) -> bool:
        return len(self.axes) > self.n_spatial

    def loop_index(self, name: str) -> int:
        for d, lp in enumerate(self.loops):
            if lp.name == name:
                return d
        raise KeyError(name)

    def with_loops(self, loops, sched: isl.Map, note: str) -> StageState:
        return replace(self, loops=tuple(loops), sched=sched, trace=self.trace + (note,))


def identity_state(stage: str, op: ComputeOp, params: str) -> StageState:
    """The declared order: spatial axes outer to inner, then reduce axes."""
    axes = tuple(a.name for a in op.axis) + tuple(a.name for a in op.reduce_axis)
    domain = stage_domain(stage, op, params)
    spatial = stage_domain(stage, op, params, spatial_only=True)
    names = ", ".join(axes)
    sched = isl.Map(f"[{params}] -> {{ {stage}[{names}] -> [{names}] }}")
    return StageState(stage, axes, len(op.axis), domain, spatial, tuple(Loop(a) for a in axes),
                      sched)


def _bound(e: Expr, who: str) -> str:
    s = size_str(e)
    if s is None:
        raise NotImplementedError(
            f"{who}: extent {e} is not affine in the size variables; tensorlang's isl model "
            "needs sums of constant multiples of tl.var sizes and of their products "
            "(n * m is a parameter of its own); a division or modulo by a size is not "
            "representable"
        )
    return s


def stage_domain(stage: str, op: ComputeOp, params: str, spatial_only: bool = False) -> isl.Set:
    axes: list[IterVar] = list(op.axis) + ([] if spatial_only else list(op.reduce_axis))
    conds = []
    for a in axes:
        lo = _bound(a.min, f"stage {stage} axis {a.name}")
        ext = _bound(a.extent, f"stage {stage} axis {a.name}")
        conds.append(f"{lo} <= {a.name} < {lo} + {ext}")
    names = ", ".join(a.name for a in axes)
    body = " and ".join(conds) if conds else "1 = 1"
    dom = isl.Set(f"[{params}] -> {{ {stage}[{names}] : {body} }}")
    red = op.body
    if not spatial_only and isinstance(red, Reduce) and not (
            isinstance(red.where, Const) and red.where.value):
        # an affine where= bounds the reduction's domain: its updates never run elsewhere
        cs, _ = affine_part(red.where, f"{stage}[{names}]", params)
        if cs is not None:
            dom = dom.intersect(cs)
    return dom


# ---------------------------------------------------------------------------- statements
@dataclass(frozen=True)
class Statement:
    """One isl statement: `body` is an IR statement over the domain's variables."""

    name: str
    stage: str
    dims: tuple[str, ...]
    domain: isl.Set
    body: Stmt
    is_init: bool = False


def stage_statements(stage: str, op: ComputeOp, state: StageState,
                     accumulators: tuple[object, ...]) -> list[Statement]:
    """The statements of one compute stage.

    `accumulators` are the buffers a reduction keeps its running values in; the one at
    `value_index` is the stage's output tensor.
    """
    if isinstance(op, ExternOp):      # one instance, at root: the call on whole buffers
        call = ExternCall(op.name, op.fn, op.inputs, (op.output,), op.library, op.what,
                          op.reads, op.writes)
        return [Statement(stage, stage, (), state.domain, call)]
    if isinstance(op, UpdateOp):      # one statement over the reduce axes: out[index] = value
        return [Statement(stage, stage, state.axes, state.domain,
                          Store(op.output, op.body.index, op.body.value))]
    spatial = tuple(a.name for a in op.axis)
    idx = tuple(a.var for a in op.axis)
    body = op.body
    if isinstance(body, TupleBody):   # several outputs: one store each, at the same point
        return [Statement(stage, stage, spatial, state.domain,
                          seq(Store(t, idx, v) for t, v in zip(op.outputs, body.values)))]
    if not isinstance(body, Reduce):
        return [Statement(stage, stage, spatial, state.domain, Store(op.output, idx, body))]
    comb = body.combiner
    inits = seq(Store(acc, idx, ident) for acc, ident in zip(accumulators, comb.identity))
    # the spatial bounds alone: an empty reduce axis still initialises every output
    init_dom = state.spatial_domain.set_tuple_name(f"{stage}_init")
    old = tuple(Load(acc, idx) for acc in accumulators)
    new = comb.combine(old, body.source)
    temps = tuple(Var(f"{op.name}_next{j}" if len(new) > 1 else f"{op.name}_next", e.dtype)
                  for j, e in enumerate(new))
    if len(new) == 1:
        update: Stmt = Store(accumulators[0], idx, new[0])
    else:  # every new value is computed from the old ones before any is stored
        update = seq(Store(acc, idx, t) for acc, t in zip(accumulators, temps))
        for t, e in reversed(list(zip(temps, new))):
            update = Let(t, e, update)
    if not (isinstance(body.where, Const) and body.where.value):
        sp = state.domain.get_space()
        params = ", ".join(sp.get_dim_name(isl.dim_type.param, k)
                           for k in range(sp.dim(isl.dim_type.param)))
        # affine conjuncts of where= already bound the domain; the others guard the update
        space = f"{stage}[{', '.join(state.axes)}]"
        rest = [c for c in conjuncts(body.where) if condition_set(c, space, params) is None]
        if rest:
            cond = rest[0]
            for c in rest[1:]:
                cond = And(cond, c)
            update = If(cond, update)
    upd_dom = state.domain.set_tuple_name(f"{stage}_update")
    return [Statement(f"{stage}_init", stage, spatial, init_dom, inits, is_init=True),
            Statement(f"{stage}_update", stage, state.axes, upd_dom, update)]


# ----------------------------------------------------------------------------- accesses
@dataclass
class Access:
    """A read of `buffer` at `indices` under `guard` (a bool expression or None)."""

    buffer: object
    indices: tuple[Expr, ...]
    guard: tuple[Expr, ...]
    affine: bool


def statement_reads(st: Statement) -> list[Access]:
    """Every load of a statement with the conditions under which it is evaluated."""
    out: list[Access] = []

    def visit(e: Expr, guard: tuple[Expr, ...]) -> None:
        if isinstance(e, Select):
            visit(e.cond, guard)
            visit(e.true_value, guard + (e.cond,))
            visit(e.false_value, guard + (~e.cond,))
            return
        if isinstance(e, Load):
            aff = all(affine_str(i) is not None for i in e.indices)
            out.append(Access(e.buffer, e.indices, guard, aff))
        for k in e.children:
            visit(k, guard)

    def visit_stmt(s: Stmt, guard: tuple[Expr, ...]) -> None:
        if isinstance(s, Store):
            for i in s.indices:
                visit(i, guard)
            visit(s.value, guard)
        elif isinstance(s, Let):
            visit(s.value, guard)
            visit_stmt(s.body, guard)
        elif isinstance(s, If):
            visit(s.cond, guard)
            visit_stmt(s.then_body, guard + (s.cond,))
            if s.else_body is not None:
                visit_stmt(s.else_body, guard + (~s.cond,))
        else:
            for k in getattr(s, "stmts", ()):
                visit_stmt(k, guard)

    visit_stmt(st.body, ())
    return out


def statement_writes(st: Statement) -> list[tuple[object, tuple[Expr, ...]]]:
    from ..ir.visit import walk_stmt

    return [(s.buffer, s.indices) for s in walk_stmt(st.body) if isinstance(s, Store)]


def access_map(st: Statement, buffer, indices, guard, params: str, bufname: str,
               box: isl.Set) -> isl.Map:
    """isl relation statement -> buffer element; the whole buffer when not affine."""
    dims = ", ".join(st.dims)
    idx = [affine_str(i) for i in indices]
    if any(i is None for i in idx):
        anywhere = ", ".join(f"a{d}" for d in range(len(indices)))
        m = isl.Map(f"[{params}] -> {{ {st.name}[{dims}] -> {bufname}[{anywhere}] }}")
        return m.intersect_domain(st.domain).intersect_range(box)
    m = isl.Map(f"[{params}] -> {{ {st.name}[{dims}] -> {bufname}[{', '.join(idx)}] }}")
    dom = st.domain
    for g in guard:
        cs, _ = affine_part(g, f"{st.name}[{dims}]", params)
        if cs is not None:
            dom = dom.intersect(cs)
    return m.intersect_domain(dom)


def buffer_box(bufname: str, shape: tuple[Expr, ...], params: str) -> isl.Set:
    names = [f"a{d}" for d in range(len(shape))]
    conds = [f"0 <= {n} < {_bound(s, f'buffer {bufname}')}" for n, s in zip(names, shape)]
    body = " and ".join(conds) if conds else "1 = 1"
    return isl.Set(f"[{params}] -> {{ {bufname}[{', '.join(names)}] : {body} }}")


def accumulator_buffers(op: ComputeOp) -> tuple[object, ...]:
    """The running values of a reduction: the output tensor and internal buffers for the rest
    (a tuple reduction's values are all outputs); a pure compute's outputs."""
    body = op.body
    if not isinstance(body, Reduce) or len(op.outputs) > 1:
        return tuple(op.outputs)
    out = []
    for j, ident in enumerate(body.combiner.identity):
        if j == body.value_index:
            out.append(op.output)
        else:
            out.append(Buffer(f"{op.name}_acc{j}", op.output.shape, ident.dtype))
    return tuple(out)




def union_all(maps, space: isl.Space) -> isl.UnionMap:
    """The union of `maps` (isl maps or union maps), empty in `space` when there are none.

    Unioned in pairs, not one by one: each union copies its operands' tables, so adding n
    maps to a growing union one at a time costs n^2 copies."""
    level = [isl.UnionMap.from_map(m) if isinstance(m, isl.Map) else m for m in maps]
    if not level:
        return isl.UnionMap.empty(space)
    while len(level) > 1:
        level = [level[k].union(level[k + 1]) if k + 1 < len(level) else level[k]
                 for k in range(0, len(level), 2)]
    return level[0]


class AccessRelations:
    """The isl access relations of a program, built once and shared by every analysis.

    `per_read` keeps each read's own map (with its statement and access) for messages;
    `reads` (may) and `writes` (must) are their unions, statement instance -> element,
    made when first asked for (a legality check needs only the maps of the statements it
    checks; lowering and the bounds check need all of them).
    """

    def __init__(self, per_read: list[tuple[Statement, Access, isl.Map]],
                 boxes: dict[int, isl.Set], write_maps: list[isl.Map], space: isl.Space):
        self.per_read = per_read
        self.boxes = boxes
        self.write_maps = write_maps
        self.space = space
        self._reads: isl.UnionMap | None = None
        self._writes: isl.UnionMap | None = None

    @property
    def reads(self) -> isl.UnionMap:
        if self._reads is None:
            self._reads = union_all([m for _st, _acc, m in self.per_read], self.space)
        return self._reads

    @property
    def writes(self) -> isl.UnionMap:
        if self._writes is None:
            self._writes = union_all(self.write_maps, self.space)
        return self._writes


def statement_accesses(st: Statement, names: dict[int, str], box, params: str
                       ) -> tuple[list[tuple[Statement, Access, isl.Map]],
                                  list[tuple[object, isl.Map]]]:
    """One statement's reads (with their accesses) and writes (with their buffers) as isl
    maps, for the buffers in `names`; `box(buf)` is a buffer's index box."""
    if isinstance(st.body, ExternCall):
        return _extern_accesses(st, st.body, names, box, params)
    reads = []
    for acc in statement_reads(st):
        if id(acc.buffer) in names:
            m = access_map(st, acc.buffer, acc.indices, acc.guard, params,
                           names[id(acc.buffer)], box(acc.buffer))
            reads.append((st, acc, m))
    writes = [(buf, access_map(st, buf, idx, (), params, names[id(buf)], box(buf)))
              for buf, idx in statement_writes(st) if id(buf) in names]
    return reads, writes


def _region_map(st: Statement, buf, region, bufname: str, box: isl.Set,
                params: str) -> isl.Map:
    """{ st[] -> buf[a...] } over `region` ((begin, end) per dimension), or the whole box."""
    names = [f"a{d}" for d in range(len(buf.shape))]
    m = isl.Map(f"[{params}] -> {{ {st.name}[] -> {bufname}[{', '.join(names)}] }}")
    if region is None:
        return m.intersect_range(box)
    conds = [f"{_bound(lo, f'{st.stage} region of {bufname}')} <= {n} < "
             f"{_bound(hi, f'{st.stage} region of {bufname}')}"
             for n, (lo, hi) in zip(names, region)]
    body = " and ".join(conds) or "1 = 1"
    return m.intersect_range(isl.Set(f"[{params}] -> {{ {bufname}[{', '.join(names)}] : "
                                      f"{body} }}"))


def _extern_accesses(st: Statement, call: ExternCall, names: dict[int, str], box,
                     params: str):
    """An extern call's declared accesses: each input's region (may-reads, left unclipped
    so that the bounds check sees a region outside its tensor) and the output's region
    (must-writes)."""
    from ..ir.dtype import int32
    from ..ir.printer import expr_str

    reads = []
    for k, buf in enumerate(call.inputs):
        if id(buf) not in names:
            continue
        region = call.reads[k] if k < len(call.reads) else None
        m = _region_map(st, buf, region, names[id(buf)], box(buf), params)
        # the region as the read's "indices", for the bounds check's message
        shown = tuple(Var(f"{expr_str(lo)}:{expr_str(hi)}", int32) for lo, hi in region) \
            if region is not None else tuple(Var(":", int32) for _ in buf.shape)
        reads.append((st, Access(buf, shown, (), True), m))
    writes = [(buf, _region_map(st, buf, call.writes, names[id(buf)], box(buf), params))
              for buf in call.outputs if id(buf) in names]
    return reads, writes


@dataclass(frozen=True)
class TimedStatement:
    """A statement with its time map and the loops (names, tags) its time dims stand for;
    `path`: the constants of its time (statements with the same constants before a loop's
    dim share that loop)."""

    stmt: Statement
    time: isl.Map
    loops: tuple[Loop, ...]
    path: tuple[int, ...] = ()
