"""Schedule primitives that change the dataflow: cache stages, packed layouts, rfactor.

Each adds a stage (a new compute) and rewrites what its readers read; `Schedule._edit`
rebuilds the isl program and checks every stage, so these are legality-checked like the
loop primitives. The `Schedule` methods of the same names call these functions.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from ..errors import ScheduleError
from ..ir.dtype import bool_, int32
from ..ir.expr import Const, Load, ReduceVar, Select, Var
from ..ir.visit import walk
from ..te.tensor import ComputeOp, IterVar, Tensor
from .stage import Stage, _int_arg, _substitute_tensor
from .trace import Call

if TYPE_CHECKING:
    from .schedule import Schedule


def _fresh_axes(op: ComputeOp) -> tuple[IterVar, ...]:
    """New spatial axes with the names and ranges of `op`'s (for a rewritten stage)."""
    return tuple(IterVar(Var(a.name, a.var.dtype), a.extent, IterVar.SPATIAL, a.min)
                 for a in op.axis)


SCOPES = ("global", "local", "shared")


def _scope(scope, prim: str) -> str:
    if scope not in SCOPES:
        raise ScheduleError(f"{prim}: scope must be one of {list(SCOPES)}, got {scope!r}")
    return scope


def _is_true(e) -> bool:
    from ..ir.expr import Const

    return isinstance(e, Const) and bool(e.value)



def cache_read(sch: Schedule, tensor, scope: str, readers) -> Tensor:
    """A copy of `tensor` in `scope` that the given reader stages read instead of it.

    The copy is a stage of its own (`T_<scope>`, computed at root until you place it
    with compute_at); scopes: "global", "local" (registers/stack), "shared" (GPU).
    """
    t = sch._tensor(tensor, "cache_read", "tensor")
    scope = _scope(scope, "cache_read")
    if isinstance(readers, (Tensor, Stage, str)):
        readers = [readers]
    if not isinstance(readers, (list, tuple)) or not readers:
        raise ScheduleError("cache_read: readers must be a non-empty list of the stages "
                            f"that should read the copy, got {readers!r}")
    rs: list[Stage] = []
    for r in readers:
        st = sch.stage(r) if isinstance(r, str) else (r if isinstance(r, Stage) else
                                                        sch[r])
        if not any(isinstance(e, Load) and e.buffer is t for e in walk(st.op.body)):
            raise ScheduleError(f"cache_read: stage {st.id} does not read {t.name}")
        rs.append(st)
    call = Call("cache_read", (sch._ref(t), scope, tuple(st.id for st in rs)))
    producer = next((st for st in sch.stages if any(t is o for o in st.op.outputs)), None)
    if producer is not None and any(r is producer for r in rs):
        # a recurrence reading its own earlier values: a copy made before it runs is stale
        # for every later iteration (a copy inside its loop is not a stage of its own)
        from ..polyhedral.deps import refuse_self_dependence

        prog = sch.program
        refuse_self_dependence(
            str(call), producer.id, prog.deps, prog.info,
            prog.times({st.id: st.state for st in sch.stages}), prog.access.reads,
            prog.access.writes, ", but a copy of its output made for it before it runs "
            "would not hold the value {src} (loops {ls}) writes when {dst} (loops {ld}) "
            "reads it")
    axes = tuple(IterVar(Var(f"ax{d}", int32), ext, IterVar.SPATIAL)
                 for d, ext in enumerate(t.shape))
    body = Load(t, tuple(a.var for a in axes))
    op = ComputeOp(f"{t.name}_{scope}", axes, body, t.dtype)

    def edit():
        first = min(rs, key=sch.stages.index)
        st = sch._new_stage(op, first)
        st.cache_scope = scope
        for r in rs:
            r.op = r.op.with_body(_substitute_tensor(r.op.body, t, None, op.output))

    sch._edit(call, edit)
    return op.output

def cache_write(sch: Schedule, tensor, scope: str) -> Tensor:
    """Compute `tensor` into a cache stage (`T_<scope>`, which takes over its expression
    and its axes) and copy the result out in the original stage (whose axes are new:
    `s[T].op.axis`). Apply it before other primitives on the stage."""
    t = sch._tensor(tensor, "cache_write", "tensor")
    scope = _scope(scope, "cache_write")
    if any(t is p for p in sch.placeholders):
        raise ScheduleError(f"cache_write: {t.name} is an input; cache_read copies inputs")
    st = sch[t]
    if st.state.trace or st.state.attach is not None:
        raise ScheduleError(f"cache_write: stage {st.id} already has primitives "
                            f"({', '.join(st.state.trace)}); apply cache_write first")
    if st.op.is_recurrence:
        raise ScheduleError(f"cache_write: {st.id} is a recurrence, which reads its own "
                            "output; it cannot be computed into a separate cache")
    if len(st.op.outputs) > 1:
        raise NotImplementedError(f"cache_write: {st.id} computes several outputs (a tuple "
                                  "compute); caching them together is not supported yet")
    old = st.op
    cop = ComputeOp(f"{old.name}_{scope}", old.axis, old.body, t.dtype)
    axes = _fresh_axes(old)
    wb = ComputeOp(old.name, axes, Load(cop.output, tuple(a.var for a in axes)), t.dtype,
                   output=t)

    def edit():
        c = sch._new_stage(cop, st)
        st.op = wb
        st.state = None
        st.cached_from = cop
        c.cache_scope = scope

    sch._edit(Call("cache_write", (sch._ref(t), scope)), edit)
    return cop.output

def pack(sch: Schedule, tensor, axis: int, factor: int, readers=None) -> Tensor:
    """Store `tensor` blocked along dimension `axis`: T_packed[a // factor, ..., a % factor]
    (TVM's array packing: B[K][N] -> B_packed[N/bn][K][bn]), so that a loop over a block
    of that dimension reads contiguous memory. The packed copy is a stage (padded with
    zeros past the end when factor does not divide); the readers (default: every stage
    that reads `tensor`) read it instead. Like any stage it can be placed with compute_at.
    """
    from ..ir.expr import Const, LT, compare
    from ..te.intrin import if_then_else

    t = sch._tensor(tensor, "pack", "tensor")
    nd = len(t.shape)
    ax = _int_arg(axis, "pack", "axis", minimum=0)
    if ax >= nd:
        raise ScheduleError(f"pack: axis must be < {nd} (the dimensions of {t.name}), "
                            f"got {ax}")
    f = _int_arg(factor, "pack", "factor")
    if readers is None:
        rs = [st for st in sch.stages
              if any(isinstance(e, Load) and e.buffer is t for e in walk(st.op.body))]
    else:
        rs = [sch.stage(r) if isinstance(r, str) else (r if isinstance(r, Stage)
                                                          else sch[r]) for r in readers]
    if not rs:
        raise ScheduleError(f"pack: no stage reads {t.name}")
    ext = t.shape[ax]
    from ..ir.simplify import simplify

    outer = simplify((ext + (f - 1)) // f)
    shape = (outer,) + tuple(t.shape[d] for d in range(nd) if d != ax) + (Const(f, int32),)
    names = ["ax_o"] + [f"ax{d}" for d in range(nd) if d != ax] + ["ax_i"]
    axes = tuple(IterVar(Var(nm, int32), e, IterVar.SPATIAL) for nm, e in zip(names, shape))
    rest = iter(a.var for a in axes[1:-1])
    full = axes[0].var * f + axes[-1].var
    idx = tuple(full if d == ax else next(rest) for d in range(nd))
    zero = Const(0, t.dtype)
    body = if_then_else(compare(LT, full, ext), Load(t, idx), zero)
    op = ComputeOp(f"{t.name}_packed", axes, body, t.dtype)

    def blocked(indices):
        a = indices[ax]
        others = tuple(x for d, x in enumerate(indices) if d != ax)
        return (a // f,) + others + (a % f,)

    def edit():
        first = min(rs, key=sch.stages.index)
        sch._new_stage(op, first)
        from ..ir.visit import map_expr

        def fn(e):
            if isinstance(e, Load) and e.buffer is t:
                return Load(op.output, blocked(e.indices))
            return None

        for r in rs:
            r.op = r.op.with_body(map_expr(r.op.body, fn))

    sch._edit(Call("pack", (sch._ref(t), ax, f, tuple(r.id for r in rs))), edit)
    return op.output

def rfactor(sch: Schedule, tensor, axis) -> Tensor:
    """Make the reduction loop `axis` of `tensor`'s stage a data-parallel axis.

    A new stage `T_rf[axis, spatial...]` reduces, for each value of the loop, the updates
    that run at it (its loop is an ordinary spatial loop: parallelise or vectorise it);
    `tensor`'s stage then combines those partial results (new axes: `s[T].op`). The loop
    may come from a split that does not divide: each partial result covers exactly the
    updates of its loop value. Returns the new tensor.
    """
    import islpy as isl

    from ..ir.expr import And
    from ..polyhedral.affine import affine_str
    from ..polyhedral.placement import pw_aff_expr, set_expr
    from ..polyhedral.transform import pw_extremes
    from ..te.reduce import Reduce

    t = sch._tensor(tensor, "rfactor", "tensor")
    if any(t is p for p in sch.placeholders):
        raise ScheduleError(f"rfactor: {t.name} is an input, not a reduction")
    st = sch[t]
    body = st.op.body
    if not isinstance(body, Reduce):
        raise ScheduleError(f"rfactor: {st.id} is not a reduction")
    if len(body.combiner.identity) != 1 or len(st.op.outputs) > 1:
        raise NotImplementedError(f"rfactor: {st.id} reduces several values at once "
                                  f"({body.combiner.name}); rfactor supports reducers of "
                                  "one value (sum, min, max, prod, comm_reducer)")
    if st.op.is_recurrence:
        raise ScheduleError(f"rfactor: {st.id} is a recurrence")
    name = st._loop(axis, "rfactor", "axis")
    if st.state.attach is not None or any(
            x.state.attach is not None and x.state.attach[0] == st.id for x in sch.stages):
        raise ScheduleError(f"rfactor: {st.id} is computed at another stage's loop or has "
                            "stages computed inside it; apply rfactor before compute_at")
    state = st.state
    d = state.loop_index(name)
    nsp = state.n_spatial
    nred = len(state.axes) - nsp
    pma = isl.PwMultiAff.from_map(state.sched)
    red_loops = []
    for q in range(len(state.loops)):
        pq = pma.get_pw_aff(q)
        if pq.involves_dims(isl.dim_type.in_, nsp, nred):
            if pq.involves_dims(isl.dim_type.in_, 0, nsp):
                raise ScheduleError(f"rfactor: loop {state.loops[q].name} of {st.id} mixes "
                                    "spatial and reduce axes; rfactor needs reduce loops "
                                    "made from the reduce axes only")
            red_loops.append(q)
    if d not in red_loops:
        raise ScheduleError(f"rfactor: loop {name} of {st.id} is not a reduction loop "
                            f"(those are {[state.loops[q].name for q in red_loops]})")
    # reduce axes -> reduce loops, and back: the partial results are indexed by the chosen
    # loop and reduce over the other reduce loops, with the axes recovered from the loops
    m = state.sched
    for q in reversed(range(len(state.loops))):
        if q not in red_loops:
            m = m.project_out(isl.dim_type.out, q, 1)
    m = m.intersect_domain(state.domain).project_out(isl.dim_type.in_, 0, nsp)
    if not m.is_injective():
        raise NotImplementedError(f"rfactor: the reduce loops of {st.id} do not determine "
                                  "its reduce axes")
    lnames = []
    for q in red_loops:
        ln = state.loops[q].name.replace(".", "_")
        while ln in state.axes or ln in lnames:
            ln += "_rf"
        lnames.append(ln)
    img = m.range()
    for j, ln in enumerate(lnames):
        img = img.set_dim_name(isl.dim_type.set, j, ln)
    params = sch.program.params
    inv = isl.PwMultiAff.from_map(m.reverse())
    lvars = {ln: Var(ln, int32) for ln in lnames}
    red_exprs = [pw_aff_expr(inv.get_pw_aff(j).gist(img), lvars, params, names=lnames)
                 for j in range(nred)]

    def axis_of(j, reduce):
        lo = img.dim_min(j).gist(sch.program.context)
        hi = img.dim_max(j).gist(sch.program.context)
        a, b = pw_extremes(lo)[0], pw_extremes(hi)[1]
        if a.is_int() and b.is_int():   # bounded: a constant range (unused slots keep
            lo_e = Const(a.to_python(), int32)      # the identity)
            ext_e = Const(b.to_python() - a.to_python() + 1, int32)
        else:
            lo_e = pw_aff_expr(lo, {}, params)
            ext_e = pw_aff_expr(hi.sub(lo).add(isl.PwAff.val_on_domain(
                lo.domain(), isl.Val(1))), {}, params)
        for e in (lo_e, ext_e):
            if affine_str(e) is None:
                raise NotImplementedError(
                    f"rfactor: the range of loop {lnames[j]} ({lo_e}, extent {ext_e}) is not "
                    "affine in the sizes")
        v = ReduceVar(lnames[j], int32) if reduce else Var(lnames[j], int32)
        return IterVar(v, ext_e, IterVar.REDUCE if reduce else IterVar.SPATIAL, lo_e)

    c = red_loops.index(d)
    rv = axis_of(c, False)
    others = [axis_of(j, True) for j in range(len(red_loops)) if j != c]
    # the combinations of loop values that occur (a split that does not divide has gaps)
    occurs = set_expr(img.gist_params(sch.program.context), lvars, params, names=lnames)
    sp = _fresh_axes(st.op)
    sub = {a.name: b.var for a, b in zip(st.op.axis, sp)}
    sub.update({a.name: e for a, e in zip(body.axis, red_exprs)})
    sub.update({ln: (rv.var if j == c else None) for j, ln in enumerate(lnames)})
    sub = {k: v for k, v in sub.items() if v is not None}
    from ..ir.visit import substitute

    src = tuple(substitute(x, sub) for x in body.source)
    where = occurs
    w0 = substitute(body.where, sub)
    if not _is_true(w0):
        where = And(where, w0)
    where = substitute(where, sub)
    if others:
        rf_body = Reduce(body.combiner, src, tuple(others), where, 0, body.dtype)
    else:       # the only reduce loop made data-parallel: each partial result is one value
        ident = body.combiner.identity[0]
        rf_body = src[0] if _is_true(where) else Select(where, src[0], ident)
    rf = ComputeOp(f"{st.op.name}_rf", (rv,) + sp, rf_body, body.dtype)
    sp2 = _fresh_axes(st.op)
    k2 = IterVar(ReduceVar(rv.name, int32), rv.extent, IterVar.REDUCE, rv.min)
    fin_body = Reduce(body.combiner, (Load(rf.output, (k2.var,) + tuple(a.var
                                                                         for a in sp2)),),
                      (k2,), Const(True, bool_), 0, body.dtype)
    fin = ComputeOp(st.op.name, sp2, fin_body, t.dtype, output=t)

    def edit():
        sch._new_stage(rf, st)
        st.op = fin
        st.state = None

    sch._edit(Call("rfactor", (sch._ref(t), name)), edit)
    return rf.output



def reorder_storage(sch: Schedule, st: Stage, axes) -> Tensor:
    """Store stage `st`'s tensor with its dimensions in the order of `axes` (its spatial
    axes, outermost first; Halide's `reorder_storage`): the tensor becomes a new one of the
    permuted shape, and every stage that reads it reads the permuted indices. The stage's
    loops keep their order. Only an intermediate stage's layout is the schedule's to
    choose (an input or an output is laid out by the caller), and only before its other
    primitives, as cache_write. Returns the new tensor."""
    from ..ir.visit import map_expr
    from ..polyhedral.model import identity_state
    from ..polyhedral.transform import reorder_dims
    from .program import program_params

    t = st.op.output
    if st.inlined:
        raise ScheduleError(f"reorder_storage: stage {st.id} was inlined; it has no storage")
    if any(t is o for o in sch.outputs):
        raise ScheduleError(f"reorder_storage: {st.id} is an output of the schedule; its "
                            "layout is the caller's (reorder the storage of a cache_write "
                            "stage instead)")
    if len(st.op.outputs) > 1:
        raise NotImplementedError(f"reorder_storage: {st.id} computes several outputs (a "
                                  "tuple compute); reordering their storage together is not "
                                  "supported yet")
    if st.op.is_recurrence:
        raise ScheduleError(f"reorder_storage: {st.id} is a recurrence, which reads its own "
                            "output; its layout is fixed")
    if st.state.trace or st.state.attach is not None:
        raise ScheduleError(f"reorder_storage: stage {st.id} already has primitives "
                            f"({', '.join(st.state.trace)}); apply reorder_storage first")
    spatial = [a.name for a in st.op.axis]
    names = []
    for k, a in enumerate(axes):
        nm = a.name if isinstance(a, IterVar) else a
        if not isinstance(nm, str) or nm not in spatial:
            raise ScheduleError(f"reorder_storage: argument {k} must be a spatial axis of "
                                f"stage {st.id} (one of {spatial}), got {a!r}")
        names.append(nm)
    if sorted(names) != sorted(spatial):
        raise ScheduleError(f"reorder_storage: give each spatial axis of stage {st.id} once "
                            f"({spatial}), got {names}")
    perm = [spatial.index(nm) for nm in names]
    old = st.op
    op = ComputeOp(old.name, tuple(old.axis[p] for p in perm), old.body, t.dtype)
    readers = [r for r in sch.stages if r is not st and
               any(isinstance(e, Load) and e.buffer is t for e in walk(r.op.body))]

    def fn(e):
        if isinstance(e, Load) and e.buffer is t:
            return Load(op.output, tuple(e.indices[p] for p in perm))
        return None

    def edit():
        loops = [lp.name for lp in st.state.loops]
        st.op = op
        sch._by_op.pop(id(t.op), None)
        sch._by_op[id(op)] = st
        params = ", ".join(program_params(sch)[0])
        st.state = replace(reorder_dims(identity_state(st.id, op, params), loops),
                           scope=st.cache_scope, trace=())
        for r in readers:
            r.op = r.op.with_body(map_expr(r.op.body, fn))

    sch._edit(Call("reorder_storage", tuple(names)), edit, st.id)
    return op.output
