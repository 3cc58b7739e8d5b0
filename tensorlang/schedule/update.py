"""Update stages in a schedule (te/update.py): the checks that keep an update in place,
`parallel(r, atomic=True)` / `bind(r, thread, atomic=True)`, and the atomic stores that
lowering makes of such an update.

An update stage U and its init stage share one buffer, so the init must stay a root stage
of its own that only U reads, and neither may be inlined, attached to another stage's loop,
cached or re-laid out. An update whose index reads data may write any element of U (a
may-write in the isl model), so a parallel or vector loop over it is refused with a witness
(two iterations that may write the same element) unless its value is an associative and
commutative combiner (old + x, max(old, x), min(old, x)) and the loop is declared atomic:
then every update is one indivisible read-modify-write, and their order does not matter.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from ..errors import IllegalScheduleError, ScheduleError, TensorlangError
from ..ir.expr import Expr, Load
from ..ir.printer import expr_str
from ..ir.stmt import LoopKind, Stmt, Store
from ..ir.visit import map_children, walk
from ..polyhedral.affine import affine_str
from ..polyhedral.checks import strip_index_checks
from ..polyhedral.transform import tag_dim
from ..te.extern import ExternOp
from ..te.update import ATOMIC_COMBINERS, UpdateOp, atomic_form
from .trace import Call

if TYPE_CHECKING:
    from .schedule import Schedule
    from .stage import Stage

# dtypes with an atomic read-modify-write on the CPU (atomicrmw, or a compare-and-swap
# loop) and in CUDA C (atomicAdd/atomicMax/atomicMin, or atomicCAS)
ATOMIC_DTYPES = ("float32", "float64", "int32", "int64")


def update_of(schedule: Schedule, st) -> UpdateOp | None:
    """The update op whose init stage is `st`, or None."""
    for x in schedule.stages:
        if isinstance(x.op, UpdateOp) and st.op.output is x.op.init:
            return x.op
    return None


def check_update_stage(schedule: Schedule, st) -> None:
    """Raise TensorlangError when update stage `st` cannot run in place: its init stage
    must be a stage of the schedule that only `st` reads and that is not an output."""
    op: UpdateOp = st.op
    init = op.init
    owner = [x for x in schedule.stages if x.op.output is init]
    if not owner:
        raise TensorlangError(f"update {op.name}: its init stage {init.name} is not a stage "
                              "of this schedule (it was inlined or replaced); the update "
                              "stores into the init's buffer, which must exist")
    if any(init is o for o in schedule.outputs):
        raise TensorlangError(f"update {op.name}: its init {init.name} is an output of the "
                              f"schedule; pass {op.name} instead (the init's buffer is the "
                              "update's)")
    for x in schedule.stages:
        if x is st:
            continue
        reads = list(x.op.inputs) if isinstance(x.op, ExternOp) else \
            [e.buffer for e in walk(x.op.body) if isinstance(e, Load)]
        if any(t is init for t in reads):
            raise TensorlangError(f"update {op.name}: stage {x.id} reads its init "
                                  f"{init.name}, whose buffer the update overwrites; read "
                                  f"the tensor the update started from instead")
        if isinstance(x.op, UpdateOp) and x is not st and x.op.init is init:
            raise TensorlangError(f"updates {op.name} and {x.op.name} share one init")
    init_stage = owner[0]
    if init_stage.state is not None and init_stage.state.attach is not None:
        raise TensorlangError(f"update {op.name}: its init stage {init_stage.id} is computed "
                              "inside another stage's loop; it must stay at root")


def refuse_update(schedule: Schedule, prim: str, tensor) -> None:
    """Raise ScheduleError when `prim` would move or replace the buffer of an update stage
    or of its init (the two share it): compute_at, compute_inline, cache_write, rfactor,
    reorder_storage, pack of what the stage produces."""
    if tensor is None:
        return
    st = next((x for x in schedule.stages if any(t is tensor for t in x.op.outputs)), None)
    if st is None:
        return
    if isinstance(st.op, UpdateOp):
        raise ScheduleError(f"{prim}: stage {st.id} is an update stage; it runs in place in "
                            f"the buffer of its init ({st.op.init.name}) at root, so {prim} "
                            "cannot apply to it; schedule its loops (split, reorder, "
                            "parallel(atomic=True), ...) instead")
    up = update_of(schedule, st)
    if up is not None:
        raise ScheduleError(f"{prim}: stage {st.id} computes the first value of the update "
                            f"{up.name}, which then updates its buffer in place; it must stay "
                            "a root stage with its own buffer")


def _atomic_loop(stage: Stage, loop, prim: str) -> str:
    """Check that `loop` of `stage` may be atomic; its name."""
    op = stage.op
    if not isinstance(op, UpdateOp):
        raise ScheduleError(f"{prim}: atomic=True applies to an update stage's loops "
                            f"(tl.update); stage {stage.id} is not one")
    form = atomic_form(op)
    if form is None:
        raise ScheduleError(
            f"{prim}(atomic=True) on stage {stage.id}: the update's value "
            f"{expr_str(op.body.value)} is not old + x, max(old, x) or min(old, x) with x "
            f"and the index reading nothing of {op.name}; only such associative and "
            "commutative updates can run as atomic read-modify-writes in any order")
    if any(isinstance(e, Load) and e.buffer is op.output for i in op.body.index
           for e in walk(i)):
        raise ScheduleError(f"{prim}(atomic=True) on stage {stage.id}: the index reads "
                            f"{op.name} itself, which other iterations update at the same "
                            "time")
    if op.output.dtype.name not in ATOMIC_DTYPES:
        raise ScheduleError(f"{prim}(atomic=True) on stage {stage.id}: no atomic update for "
                            f"dtype {op.output.dtype}; supported: {', '.join(ATOMIC_DTYPES)}")
    return stage._loop(loop, prim, "loop")


def _with_atomic(state, name: str):
    d = state.loop_index(name)
    loops = list(state.loops)
    loops[d] = replace(loops[d], atomic=True)
    return replace(state, loops=tuple(loops))


def parallel_atomic(stage: Stage, loop) -> None:
    """`stage.parallel(loop, atomic=True)`: see the module."""
    name = _atomic_loop(stage, loop, "parallel")
    new = _with_atomic(tag_dim(stage.state, name, LoopKind.PARALLEL), name)
    stage._apply(new, Call("parallel", (name,), (("atomic", True),)))


def bind_atomic(stage: Stage, loop, tag: str, kind: LoopKind) -> None:
    """`stage.bind(loop, thread, atomic=True)`: see the module."""
    name = _atomic_loop(stage, loop, "bind")
    new = _with_atomic(tag_dim(stage.state, name, kind, tag), name)
    stage._apply(new, Call("bind", (name, tag), (("atomic", True),)))


def explain_race(stage: Stage, err: IllegalScheduleError, prim: str) -> IllegalScheduleError:
    """`err` (a refused parallel/vector loop of an update stage) with what to do about it;
    the witness is kept."""
    if not isinstance(stage.op, UpdateOp) or \
            all(affine_str(i) is not None for i in stage.op.body.index):
        return err      # an exact (affine) write: the witness says it all
    why = (f" The update's index reads data, so tensorlang assumes that any two iterations "
           f"may write the same element of {stage.op.name}.")
    if atomic_form(stage.op) is not None and prim != "vectorize":
        why += (f" Its value is an associative and commutative update: "
                f"{prim}(..., atomic=True) runs it with atomic read-modify-writes.")
    return IllegalScheduleError(str(err) + why, err.witness)


def atomic_stores(body: Stmt, schedule: Schedule) -> Stmt:
    """The loop nest with the stores of every update stage that has an atomic loop made
    atomic (Store.atomic, its value the combiner's operand). Called on the loop nest whose
    stores still name tensors."""
    kinds = {}
    for st in schedule.stages:
        if isinstance(st.op, UpdateOp) and any(lp.atomic for lp in st.state.loops):
            kinds[id(st.op.output)] = atomic_form(st.op)[0]
    if not kinds:
        return body

    def go(s: Stmt) -> Stmt:
        s = map_children(s, go)
        if isinstance(s, Store) and id(s.buffer) in kinds:
            operand = _operand(s, kinds[id(s.buffer)])
            return Store(s.buffer, s.indices, operand, kinds[id(s.buffer)])
        return s

    return go(body)


def _operand(s: Store, kind: str) -> Expr:
    """x of the store buffer[idx] = buffer[idx] (+, max, min) x."""
    v = s.value
    here = [expr_str(strip_index_checks(i)) for i in s.indices]
    if ATOMIC_COMBINERS.get(type(v)) == kind:
        for a, b in ((v.a, v.b), (v.b, v.a)):
            if isinstance(a, Load) and a.buffer is s.buffer and \
                    [expr_str(strip_index_checks(i)) for i in a.indices] == here:
                return b
    raise TensorlangError(f"lowering an atomic update of {s.buffer.name}: the store "
                          f"{expr_str(v)} lost its form old {kind} x; please report this")
