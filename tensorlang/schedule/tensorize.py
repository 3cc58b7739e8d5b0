"""`Stage.tensorize`: the loop nest below a loop becomes one use of a declared instruction
(`te.TensorIntrin`) per iteration of the loops around it.

The match is a polyhedral question, answered exactly (`match`):

- the body: the stage computes what the description computes, operand for operand (the
  same operations, dtypes, casts and reduction), its tensors standing for the
  description's placeholders;
- the iterations: the loops below the tensorized one run over a box of the description's
  extents from 0, one loop per axis of the description with more than one value, in its
  order (spatial axes, then reduce axes). Where the sizes leave a smaller box (the last
  tile of a split that does not divide) that use runs as plain code;
- the accesses: for every iteration of the box, each operand's element read (or written)
  is the element at the use's origin plus the description's index, laid along the tensor's
  last dimensions. isl compares the two relations over every full box; a difference is
  refused with the iteration and the two elements (the witness).

`expand` replaces each tensorized loop of the generated nest (the loop astgen marks) by
`if <the box is full>: <the instruction> else: <the loop as it was>`.
"""

from __future__ import annotations

from dataclasses import dataclass

import islpy as isl

from ..config import debug_print
from ..errors import ScheduleError
from ..ir.affine import affine_str
from ..ir.expr import (
    EQ, And, BinaryOp, Call, Cast, CmpOp, Const, Expr, Load, Not, Or, Select, Var, compare,
)
from ..ir.stmt import For, If, LoopKind, Seq, Stmt, Store, TensorCall, seq
from ..ir.simplify import simplify
from ..ir.visit import free_vars, substitute, walk, walk_stmt
from ..te.tensor import ComputeOp, Reduce
from ..te.tensorize import Lowering, Region, TensorIntrin

MARK = "tensorize"      # the thread_tag of a tensorized loop, from the stage to astgen


@dataclass(frozen=True)
class Plan:
    """A checked tensorize: the stage's tensors for the description's operands (inputs,
    then output), and the loops the instruction replaces."""

    intrin: TensorIntrin
    stage: str
    loop: str
    tensors: tuple
    inner: tuple[str, ...]


def resolve(intrin, known: dict) -> TensorIntrin:
    """The instruction a tensorize names: a TensorIntrin, or the name of a built-in one
    (`tl.intrin`) or of one this schedule has used (a replayed trace names it)."""
    if isinstance(intrin, TensorIntrin):
        return intrin
    if isinstance(intrin, str):
        if intrin in known:
            return known[intrin]
        from ..intrin import builtin

        found = builtin(intrin)
        if found is not None:
            return found
        raise ScheduleError(f"tensorize: intrin {intrin!r} is not a built-in instruction "
                            f"(tl.intrin) nor one this schedule used; pass the TensorIntrin")
    raise ScheduleError(f"tensorize: intrin must be a tl.TensorIntrin (or a built-in's name, "
                        f"such as 'x86.vnni_u8s8_i32'), got {intrin!r}")


# ------------------------------------------------------------------------------ the body
def _pair(real: Expr, desc: Expr, tensors: dict, loads: list, what: str) -> None:
    """Walk the stage's expression and the description's together; record the tensor that
    stands for each placeholder and each pair of loads."""
    def fail(why: str):
        raise ScheduleError(f"{what}: the stage computes {real} where the instruction "
                            f"computes {desc}: {why}")

    if type(real) is not type(desc):
        fail(f"{type(real).__name__} against {type(desc).__name__}")
    if real.dtype != desc.dtype:
        fail(f"dtype {real.dtype} against {desc.dtype}")
    if isinstance(desc, Load):
        prev = tensors.get(id(desc.buffer))
        if prev is None:
            if any(t is real.buffer for t in tensors.values()):
                fail(f"{real.buffer.name} stands for two of the instruction's operands")
            tensors[id(desc.buffer)] = real.buffer
        elif prev is not real.buffer:
            fail(f"{desc.buffer.name} is {prev.name} elsewhere, {real.buffer.name} here")
        loads.append((real, desc))
        return
    if isinstance(desc, Const):
        if real.value != desc.value:
            fail("different constants")
        return
    if isinstance(desc, Call) and real.name != desc.name:
        fail(f"{real.name} against {desc.name}")
    if isinstance(desc, Var):
        fail("a variable outside an index")
    if not isinstance(desc, (BinaryOp, CmpOp, Cast, Call, Select, And, Or, Not)):
        fail(f"{type(desc).__name__} is not matched")
    rk, dk = real.children, desc.children
    if len(rk) != len(dk):
        fail("different operands")
    for a, b in zip(rk, dk):
        _pair(a, b, tensors, loads, what)


def _body(op, intrin: TensorIntrin, what: str):
    """(the stage's tensors for the operands, the pairs of loads: stage's, description's)."""
    dop = intrin.desc.op
    rb, db = op.body, dop.body
    if isinstance(db, Reduce) != isinstance(rb, Reduce):
        def kind(x):
            return "is" if isinstance(x, Reduce) else "is not"
        raise ScheduleError(f"{what}: the instruction {kind(db)} a reduction; stage "
                            f"{op.name} {kind(rb)}")
    if isinstance(db, Reduce):
        if rb.combiner.name != db.combiner.name or len(rb.source) != 1:
            raise ScheduleError(f"{what}: stage {op.name} reduces with {rb.combiner.name}, "
                                f"the instruction with {db.combiner.name}")
        if not (isinstance(rb.where, Const) and rb.where.value):
            raise ScheduleError(f"{what}: stage {op.name}'s reduction has a where= condition; "
                                "the instruction reduces over every point of its box")
        real, desc = rb.source[0], db.source[0]
    else:
        real, desc = rb, db
    if len(op.outputs) != 1 or op.output.dtype != intrin.desc.dtype:
        raise ScheduleError(f"{what}: stage {op.name} writes {op.output.dtype}, the "
                            f"instruction {intrin.desc.dtype}")
    tensors: dict = {}
    loads: list = []
    _pair(real, desc, tensors, loads, what)
    ordered = tuple(tensors[id(t)] for t in intrin.inputs) + (op.output,)
    return ordered, loads


# ---------------------------------------------------------------------------- the match
def _params(space) -> str:
    return ", ".join(space.get_dim_name(isl.dim_type.param, k)
                     for k in range(space.dim(isl.dim_type.param)))


def _point(p: isl.Point, n: int) -> list[int]:
    return [p.get_coordinate_val(isl.dim_type.set, k).to_python() for k in range(n)]


def _index_str(indices, what: str) -> str:
    out = []
    for i in indices:
        s = affine_str(i)
        if s is None:
            raise ScheduleError(f"{what}: index {i} is not affine; the match needs affine "
                                "accesses")
        out.append(s)
    return ", ".join(out)


def match(stage, loop: str, intrin: TensorIntrin) -> Plan:
    """Check that the nest below `loop` of `stage` is one use of `intrin` per iteration of
    the loops around it (see the module); ScheduleError with a witness otherwise."""
    what = f"tensorize({loop}, {intrin.name}) on stage {stage.id}"
    op = stage.op
    if not isinstance(op, ComputeOp) or op.is_recurrence:
        raise ScheduleError(f"{what}: only a compute stage can be tensorized")
    st = stage.state
    d = st.loop_index(loop)
    inner = st.loops[d:]
    for lp in st.loops[:d]:
        if lp.kind is LoopKind.VECTORIZED:
            raise ScheduleError(f"{what}: loop {lp.name} around it is vectorized; an "
                                "instruction runs once per iteration of the loops around it")
    if inner[0].kind is not LoopKind.SERIAL:
        raise ScheduleError(f"{what}: loop {loop} is {inner[0].kind.name.lower()}; the "
                            "tensorized loop must be a plain serial loop")
    for lp in inner:
        if lp.kind not in (LoopKind.SERIAL, LoopKind.UNROLLED) or \
                (lp.thread_tag and lp.name != loop):
            raise ScheduleError(f"{what}: loop {lp.name} is {lp.kind.name.lower()}; the loops "
                                "an instruction replaces must be plain serial loops")
    for other in stage.schedule.stages:
        if other.state.attach is not None and other.state.attach[0] == stage.id and \
                other.state.attach[1] in [lp.name for lp in inner]:
            raise ScheduleError(f"{what}: stage {other.id} is computed at loop "
                                f"{other.state.attach[1]}, inside the instruction's nest")
    tensors, loads = _body(op, intrin, what)
    ext = intrin.extents
    axes = intrin.axes
    keep = [t for t, e in enumerate(ext) if e > 1]
    if len(inner) != len(keep):
        want = ", ".join(f"{axes[t].name} ({ext[t]})" for t in keep)
        raise ScheduleError(f"{what}: the nest below {loop} has {len(inner)} loops "
                            f"({', '.join(lp.name for lp in inner)}); the instruction has "
                            f"{len(keep)} axes of more than one value: {want}. Split and "
                            "reorder the loops so that one loop runs over each, in that order")
    n = len(st.loops)
    params = _params(st.domain.get_space())
    names = [f"t{k}" for k in range(n)]
    lspace = f"L[{', '.join(names)}]"
    sched = st.sched.intersect_domain(st.domain).set_tuple_name(isl.dim_type.out, "L")
    times = sched.range()
    box_c = " and ".join(f"0 <= t{d + q} < {ext[t]}" for q, t in enumerate(keep)) or "1 = 1"
    box = isl.Set(f"[{params}] -> {{ {lspace} : {box_c} }}")
    outside = times.subtract(box)
    if not outside.is_empty():
        p = _point(outside.lexmin().sample_point(), n)
        for q, t in enumerate(keep):
            v = p[d + q]
            if not 0 <= v < ext[t]:
                raise ScheduleError(
                    f"{what}: loop {inner[q].name} takes the value {v} (at "
                    f"{_loops_text(st.loops, p)}); the instruction's axis {axes[t].name} has "
                    f"{ext[t]} values from 0: split {inner[q].name} by {ext[t]}")
        raise ScheduleError(f"{what}: the nest below {loop} is not a box of "
                            f"{'x'.join(str(ext[t]) for t in keep)}")
    # a loop the schedule itself bounds (a split's inner loop) must run over the box's
    # extent: narrower, it would never make a whole box and run as plain code everywhere;
    # wider, it leaves the box at larger sizes
    ge = " and ".join(f"{a} >= 0" for a in st.axes) or "1 = 1"
    universe = isl.Set(f"[{params}] -> {{ {op.name}[{', '.join(st.axes)}] : {ge} }}")
    anywhere = st.sched.intersect_domain(universe).range()
    for q, t in enumerate(keep):
        one = anywhere.project_out(isl.dim_type.set, d + q + 1, n - d - q - 1) \
            .project_out(isl.dim_type.set, 0, d + q)
        if one.is_bounded() and not one.is_empty():
            hi = one.lexmax().sample_point().get_coordinate_val(isl.dim_type.set, 0).to_python()
            if hi + 1 != ext[t]:
                raise ScheduleError(
                    f"{what}: loop {inner[q].name} runs over {hi + 1} values; the "
                    f"instruction's axis {axes[t].name} has {ext[t]}: split by {ext[t]}")
    outer = times.project_out(isl.dim_type.set, d, n - d)
    lifted = outer.insert_dims(isl.dim_type.set, d, n - d).set_tuple_name("L")
    missing = lifted.intersect(box).subtract(times)
    partial = missing.project_out(isl.dim_type.set, d, n - d)
    full = outer.subtract(partial)
    region = times.intersect(full.insert_dims(isl.dim_type.set, d, n - d).set_tuple_name("L"))
    if region.is_empty():
        debug_print(1, f"{what}: no iteration of the loops around {loop} has a whole box; "
                       "every use runs as plain code")
        return Plan(intrin, stage.id, loop, tensors, tuple(lp.name for lp in inner))
    inv = sched.reverse()
    space = f"{op.name}[{', '.join(st.axes)}]"
    origin = isl.Map(f"[{params}] -> {{ {lspace} -> L[{', '.join(names[:d] + ['0'] * (n - d))}] }}")
    # the description's axes as the loops (an axis of one value: 0)
    dsub = {a.name: Const(0, a.var.dtype) for a in axes}
    dsub.update({axes[t].name: Var(f"t{d + q}", axes[t].var.dtype) for q, t in enumerate(keep)})

    def check(real_tensor, real_idx, desc_tensor, desc_idx, role: str) -> None:
        rank = len(desc_idx)
        if len(real_idx) < rank:
            raise ScheduleError(f"{what}: {real_tensor.name} has {len(real_idx)} dimensions, "
                                f"fewer than the instruction's {desc_tensor.name} ({rank})")
        tname = f"T_{real_tensor.name}"
        acc = isl.Map(f"[{params}] -> {{ {space} -> {tname}[{_index_str(real_idx, what)}] }}")
        real = inv.apply_range(acc).intersect_domain(region)
        didx = []
        for i in desc_idx:
            x = affine_str(substitute(i, dsub))
            if x is None:
                raise ScheduleError(f"{what}: the instruction's index {i} is not affine")
            didx.append(x)
        lead = ["0"] * (len(real_idx) - rank)
        offs = isl.Map(f"[{params}] -> {{ {lspace} -> {tname}[{', '.join(lead + didx)}] }}")
        expect = origin.apply_range(real).sum(offs.intersect_domain(region))
        bad = real.subtract(expect).union(expect.subtract(real))
        if bad.is_empty():
            return
        p = _point(bad.domain().lexmin().sample_point(), n)
        at = isl.Set(f"[{params}] -> {{ L[{', '.join(map(str, p))}] }}")
        got = _first(real.intersect_domain(at))
        want = _first(expect.intersect_domain(at))
        raise ScheduleError(
            f"{what}: at {_loops_text(st.loops, p)} the nest {role} {real_tensor.name}"
            f"[{', '.join(map(str, got))}] where the instruction's {desc_tensor.name}"
            f"[{', '.join(_desc_point(desc_idx, axes, keep, p, d))}] would be "
            f"{real_tensor.name}[{', '.join(map(str, want))}]. The instruction's "
            f"{desc_tensor.name} lies along {real_tensor.name}'s last {rank} dimension(s) in its "
            f"order: reorder the loops to the instruction's axes "
            f"({', '.join(axes[t].name for t in keep)}), or pack {real_tensor.name} into a "
            f"layout whose last dimensions run as {desc_tensor.name}'s")

    for real, desc in loads:
        check(real.buffer, real.indices, desc.buffer, desc.indices, "reads")
    check(op.output, tuple(a.var for a in op.axis), intrin.desc,
          tuple(a.var for a in intrin.desc.op.axis), "writes")
    if isinstance(intrin.impl, Lowering):
        for k, t in enumerate(tensors):
            _contiguous(t, intrin, k, what)
    return Plan(intrin, stage.id, loop, tensors, tuple(lp.name for lp in inner))


def _first(m: isl.Map) -> list[int]:
    r = m.range()
    p = r.sample_point()
    return [p.get_coordinate_val(isl.dim_type.set, k).to_python()
            for k in range(r.dim(isl.dim_type.set))]


def _loops_text(loops, p) -> str:
    return "(" + ", ".join(f"{lp.name}={v}" for lp, v in zip(loops, p)) + ")"


def _desc_point(desc_idx, axes, keep, p, d) -> list[str]:
    vals = {a.name: 0 for a in axes}
    for q, t in enumerate(keep):
        vals[axes[t].name] = p[d + q]
    out = []
    for i in desc_idx:
        e = simplify(substitute(i, {k: Const(v, i.dtype) for k, v in vals.items()}))
        out.append(str(e.value) if isinstance(e, Const) else str(e))
    return out


def _contiguous(t, intrin: TensorIntrin, k: int, what: str) -> None:
    """A backend's instruction reads each operand as one block of memory: the description's
    dimensions after its first are the tensor's whole last dimensions."""
    shape = intrin.shape(k)
    name = intrin.operands[k].name
    tail = t.shape[len(t.shape) - len(shape) + 1:] if len(shape) > 1 else ()
    want = shape[1:]
    if len(tail) != len(want) or not all(isinstance(s, Const) and int(s.value) == w
                                         for s, w in zip(tail, want)):
        have = ", ".join(str(s) for s in t.shape)
        raise ScheduleError(
            f"{what}: the instruction reads its {name} ({'x'.join(map(str, shape))}) as one "
            f"block of memory, but {t.name} has shape ({have}): its last dimensions must be "
            f"({', '.join(map(str, want))}). Pack {t.name} into that layout (a compute stage "
            f"of shape (..., {', '.join(map(str, shape))}))")


# ---------------------------------------------------------------------------- lowering
def _chain(loop: For, plan: Plan, tensor_of: dict):
    """The loops of a tensorized nest, outer first, and the statements besides them at each
    level (a reduction's initial values): (loops, the update store) or None when the nest
    is not a plain chain (a partial box that isl wrote another way)."""
    loops = [loop]
    cur = loop.body
    while True:
        if isinstance(cur, For) and cur.kind in (LoopKind.SERIAL, LoopKind.UNROLLED):
            loops.append(cur)
            cur = cur.body
            continue
        if isinstance(cur, Seq):
            rest = [s for s in cur.stmts if not _is_init(s, plan, tensor_of)]
            if len(rest) != 1:
                return None
            cur = rest[0]
            continue
        if isinstance(cur, Store) and len(loops) == len(plan.inner):
            return loops, cur
        return None


def _is_init(s: Stmt, plan: Plan, tensor_of: dict) -> bool:
    """A reduction's initial value: a store of the output without a load."""
    return isinstance(s, Store) and \
        tensor_of.get(id(s.buffer), s.buffer) is plan.tensors[-1] and \
        not any(isinstance(x, Load) for x in walk(s.value))


def _inits(s: Stmt, plan: Plan, tensor_of: dict) -> Stmt | None:
    """`s` with only its initial-value stores (and the loops around them)."""
    if _is_init(s, plan, tensor_of):
        return s
    if isinstance(s, For):
        b = _inits(s.body, plan, tensor_of)
        return None if b is None else For(s.var, s.min, s.extent, b, LoopKind.SERIAL)
    if isinstance(s, Seq):
        kept = [x for x in (_inits(y, plan, tensor_of) for y in s.stmts) if x is not None]
        return seq(kept) if kept else None
    return None


def _bases(store: Store, plan: Plan, loops: list[For], tensor_of: dict) -> tuple:
    """(the buffer of each operand in the generated nest — its tensor, or the local buffer
    that stands for it where it is computed at a loop — and the element at the use's
    origin: the description's index 0). The origin is the generated read's indices with the
    nest's loops at their first values, less the description's index there (each operand
    is read once: `TensorIntrin`)."""
    at = {lp.var.name: lp.min for lp in loops}
    intrin = plan.intrin
    desc_loads = {id(x.buffer): x for x in walk(intrin.desc_source) if isinstance(x, Load)}
    first: dict[int, Load] = {}
    for x in walk(store.value):
        if isinstance(x, Load):
            first.setdefault(id(tensor_of.get(id(x.buffer), x.buffer)), x)
    zero = {a.name: Const(0, a.var.dtype) for a in intrin.axes}
    bufs, out = [], []
    for k, t in enumerate(plan.tensors):
        if k < len(plan.tensors) - 1:
            if id(t) not in first:
                raise ScheduleError(f"tensorize({plan.loop}): internal: no read of {t.name} "
                                    "in the generated nest")
            buf, real = first[id(t)].buffer, first[id(t)].indices
            dz = desc_loads[id(intrin.inputs[k])].indices
        else:
            buf, real = store.buffer, store.indices
            dz = tuple(a.var for a in intrin.desc.op.axis)
        idx = [simplify(substitute(i, at)) for i in real]
        lead = len(idx) - len(dz)
        for j, e in enumerate(dz):
            off = simplify(substitute(e, zero))
            idx[lead + j] = simplify(idx[lead + j] - off)
        if buf is not t and isinstance(intrin.impl, Lowering):
            _contiguous(buf, intrin, k, f"tensorize({plan.loop}, {intrin.name}) on stage "
                        f"{plan.stage} (where {t.name} is computed at a loop)")
        bufs.append(buf)
        out.append(tuple(idx))
    return tuple(bufs), tuple(out)


def _use(plan: Plan, bufs: tuple, bases: tuple) -> Stmt:
    """One use of the instruction at `bases` of `bufs`: the backend's (a TensorCall) or the
    impl's plain IR."""
    intrin = plan.intrin
    if isinstance(intrin.impl, Lowering):
        return TensorCall(intrin, bufs, bases)
    regions = [Region(t, b, intrin.shape(k), intrin.operands[k].name)
               for k, (t, b) in enumerate(zip(bufs, bases))]
    out = intrin.impl(*regions)
    if not isinstance(out, Stmt):
        raise ScheduleError(f"tensorize: the impl of {intrin.name} must return a statement "
                            f"(Region.store(...), or several in a list), got {out!r}")
    return out


def described(s: TensorCall) -> Stmt:
    """One use of an instruction as its description computes it, in plain loop IR: what
    the interpreter runs for a backend's instruction (the reference it is tested against)."""
    from ..ir.dtype import int64
    from ..ir.visit import map_expr

    intrin = s.intrin
    regions = [Region(t, b, intrin.shape(k), intrin.operands[k].name)
               for k, (t, b) in enumerate(zip(s.buffers, s.bases))]
    loop_vars = {a.name: Var(f"tz_{a.name}", int64) for a in intrin.axes}
    by_input = {id(t): r for t, r in zip(intrin.inputs, regions)}

    def fn(x):
        if isinstance(x, Var) and x.name in loop_vars:
            return loop_vars[x.name]
        if isinstance(x, Load) and id(x.buffer) in by_input:
            return by_input[id(x.buffer)][tuple(map_expr(i, fn) for i in x.indices)]
        return None

    value = map_expr(intrin.desc_source, fn)
    out = regions[-1]
    at = tuple(loop_vars[a.name] for a in intrin.desc.op.axis)
    body = intrin.desc.op.body
    if isinstance(body, Reduce):
        value = body.combiner.combine((out[at],), (value,))[0]
    stmt: Stmt = out.store(at, value)
    for a in reversed(intrin.axes):
        stmt = For(loop_vars[a.name], Const(0, int64), Const(int(a.extent.value), int64), stmt)
    return stmt


def plans(schedule) -> dict[str, Plan]:
    """Each tensorized stage's plan, matched again on the final schedule when a primitive
    was applied after tensorize (it may have changed the nest)."""
    out = {}
    for st in schedule.stages:
        if st.tensorized() is None:
            continue
        loop, intrin, plan, at = st._tensorize
        if len(schedule.trace) == at:
            out[st.id] = plan
            continue
        if loop not in st.loops or \
                st.state.loops[st.state.loop_index(loop)].thread_tag != MARK:
            raise ScheduleError(f"tensorize({loop}, {intrin.name}) on stage {st.id}: a "
                                f"primitive applied after it changed loop {loop}; apply "
                                "tensorize after the primitives that shape the nest")
        out[st.id] = match(st, loop, intrin)
    return out


def expand(body: Stmt, plans: dict[str, Plan], locals_=()) -> Stmt:
    """Each loop astgen marked tensorized: the instruction where its box is whole, the loop
    as it was elsewhere. `locals_` (placement's LocalBuffers) name the tensor each local
    buffer of the nest stands for."""
    from ..ir.visit import map_children

    tensor_of = {id(L.buffer): L.tensor for L in locals_}
    by_output = {id(p.tensors[-1]): p for p in plans.values()}

    def plan_of(x):
        return by_output.get(id(tensor_of.get(id(x.buffer), x.buffer)))

    def go(s: Stmt) -> Stmt:
        if isinstance(s, For) and s.thread_tag == MARK:
            plain = For(s.var, s.min, s.extent, s.body, s.kind, "", s.max_extent)
            plan = next((plan_of(x) for x in walk_stmt(s)
                         if isinstance(x, Store) and plan_of(x) is not None), None)
            if plan is None:
                raise ScheduleError(f"tensorize: internal: the tensorized loop {s.var.name} "
                                    "stores to no tensorized stage")
            got = _chain(s, plan, tensor_of)
            if got is None:
                debug_print(1, f"tensorize({plan.loop}, {plan.intrin.name}): a nest that is "
                               "not a whole box runs as plain code")
                return plain
            loops, store = got
            ext = [e for e in plan.intrin.extents if e > 1]
            inner_vars = {lp.var.name for lp in loops}
            if any(free_vars(x) & inner_vars for lp in loops for x in (lp.min, lp.extent)):
                # a loop's bounds follow another's of the nest: not a box here
                debug_print(1, f"tensorize({plan.loop}, {plan.intrin.name}): a nest whose "
                               "loops bound each other runs as plain code")
                return plain
            conds = []
            for lp, e in zip(loops, ext):
                c = simplify(compare(EQ, lp.extent, Const(e, lp.extent.dtype)))
                if isinstance(c, Const):
                    if not c.value:
                        return plain
                    continue
                conds.append(c)
            use = seq([x for x in (_inits(s, plan, tensor_of),
                                   _use(plan, *_bases(store, plan, loops, tensor_of)))
                       if x is not None])
            if not conds:
                return use
            cond = conds[0]
            for c in conds[1:]:
                cond = And(cond, c)
            return If(cond, use, plain)
        return map_children(s, go)

    return go(body)
