"""Schedules: the stages of every compute reachable from the outputs, the primitives that
add stages (their work is in dataflow.py) and replay of a trace."""

from __future__ import annotations

from dataclasses import replace

from ..deep import deep
from ..errors import ScheduleError, TensorlangError
from ..te.extern import ExternOp
from ..te.tensor import ComputeOp, Operation, PlaceholderOp, Tensor
from . import dataflow, update
from .program import build_program
from .stage import (  # noqa: F401 (LoopAxis ... thread_axis: the schedule's API)
    MAX_LANES, MAX_UNROLL, THREAD_TAGS, LoopAxis, Stage, ThreadAxis, _int_arg, _substitute_tensor,
    thread_axis,
)
from .trace import Call, TraceEntry  # noqa: F401 (Call: the schedule's API)


class Schedule:
    """The stages of every compute reachable from the outputs, in dependence order."""

    def __init__(self, outputs: list[Tensor]):
        self.outputs = outputs
        self.trace: list[TraceEntry] = []
        # the instructions tensorize used, by name (a replayed trace names them)
        self.intrinsics: dict = {}
        self.stages: list[Stage] = []
        self._by_op: dict[int, Stage] = {}
        # TVM's names for a scan's stage: its update op (s[s_update] is the scan's stage)
        # and the computes substituted into it (which have no stage: refused, saying why)
        self._aliases: dict[int, Stage] = {}
        self._folded: dict[int, Stage] = {}
        self.placeholders: list[Tensor] = []
        used: set[str] = set()
        for op in _topological_ops(outputs):
            if isinstance(op, PlaceholderOp):
                self.placeholders.append(op.output)
                continue
            sid, n = op.name, 1
            while sid in used:
                sid, n = f"{op.name}_{n}", n + 1
            used.add(sid)
            st = Stage(self, op, sid)
            self.stages.append(st)
            self._by_op[id(op)] = st
            if getattr(op, "scan_update", None) is not None:     # a scan (a ComputeOp)
                self._aliases[id(op.scan_update)] = st
                for c in op.scan_cell:
                    self._folded[id(c)] = st
        self.program = build_program(self)
        for st in self.stages:
            st.state = self.program.initial[st.id]

    def __getitem__(self, key) -> Stage:
        if isinstance(key, str):             # a stage id, as trace_text writes it
            return self.stage(key)
        op = key.op if isinstance(key, Tensor) else key
        if not isinstance(op, Operation):
            raise ScheduleError(f"schedule[...] expects a tensor or operation, got {key!r}")
        if isinstance(op, PlaceholderOp):
            raise ScheduleError(f"{op.name} is a placeholder (an input); it has no stage")
        st = self._by_op.get(id(op)) or self._aliases.get(id(op))
        if st is None:
            sc = self._folded.get(id(op))
            if sc is not None:
                raise ScheduleError(
                    f"{op.name} is part of scan {sc.id}'s cell (it reads the scan's state, "
                    f"so its value at step t needs step t - 1): tensorlang substitutes it into "
                    f"the scan's recurrence, where it has no loops of its own to schedule; "
                    f"schedule s[{sc.op.scan_update.name}] (the scan's stage, {sc.id}) instead")
            raise ScheduleError(f"{op.name} is not part of this schedule")
        return st

    def __repr__(self) -> str:
        return f"Schedule({', '.join(s.id for s in self.stages)})"

    def stage(self, stage_id: str) -> Stage:
        """The stage with this id (its compute's name, made unique)."""
        for st in self.stages:
            if st.id == stage_id:
                return st
        raise ScheduleError(f"stage: no stage {stage_id!r}; the stages are "
                            f"{[st.id for st in self.stages]}")

    def _edit(self, data: Call, fn, stage: str = "") -> None:
        """Change the stages (their computes or their list), update the isl program and
        check the stages the change touched under it; on any failure the schedule is left
        as it was.

        The program is built from the previous one (`build_program(..., prev)`): the stages
        whose compute and state the edit left alone keep their statements, accesses and
        dependences, and, while every stage is computed at root, the check asks only about
        the dependences of the others: every dependence between two untouched stages kept
        its order (the schedule was legal before the edit, and their states and relative
        positions are the same). An edit thus costs what it changes, not the size of the
        program. (A stage computed inside another is placed over what its readers read,
        which an edit of their computes changes: then every dependence is checked.)"""
        call = f"{data}" if not stage else f"{data.prim}({stage})"
        saved = (list(self.stages), {id(st): (st.op, st.state, st.inlined)
                                     for st in self._by_op.values()}, dict(self._by_op),
                 self.program)
        try:
            fn()
            self.program = build_program(self, saved[3])
            touched: set[str] | None = set(self.program.rebuilt)
            for st in self.stages:
                if st.state is None:
                    st.state = replace(self.program.initial[st.id], scope=st.cache_scope)
                old = saved[1].get(id(st))
                if old is None or old[1] is not st.state:
                    touched.add(st.id)
            if any(st.state.attach is not None for st in self.stages):
                touched = None  # placements follow the computes they read: check them all
            self.program.check(call, None, {st.id: st.state for st in self.stages},
                               touching=touched)
        except BaseException:
            self.stages[:] = saved[0]
            self._by_op.clear()
            self._by_op.update(saved[2])
            for st in self._by_op.values():
                st.op, st.state, st.inlined = saved[1][id(st)]
            self.program = saved[3]
            raise
        self.trace.append(TraceEntry(stage, data))

    def _tensor(self, t, prim: str, argname: str) -> Tensor:
        """A tensor of this schedule (an input or a stage's output), or one named so."""
        if isinstance(t, str):      # a stage id first (unique), then a tensor name
            for st in self.stages:
                if st.id == t:
                    return st.op.output
            for x in list(self.placeholders) + [x for st in self.stages
                                                for x in st.op.outputs]:
                if x.name == t:
                    return x
            raise ScheduleError(f"{prim}: {argname} {t!r} names no tensor of this schedule")
        if isinstance(t, Operation):      # TVM's spelling: an operation for its output
            t = t.output
        if not isinstance(t, Tensor):
            raise ScheduleError(f"{prim}: {argname} must be a tensor, got {t!r}")
        if any(t is p for p in self.placeholders) or any(t is x for st in self.stages
                                                         for x in st.op.outputs):
            return t
        raise ScheduleError(f"{prim}: {argname} {t.name} is not part of this schedule")

    def _ref(self, t: Tensor) -> str:
        """How a trace names tensor t: its stage's id (unique) or an input's name (or,
        for the second and later outputs of a tuple compute, the tensor's name)."""
        st = self._by_op.get(id(t.op))
        return st.id if st is not None and t is st.op.output else t.name

    def _new_stage(self, op: ComputeOp, before: Stage) -> Stage:
        used = {st.id for st in self._by_op.values()}
        sid, n = op.name, 1
        while sid in used:
            sid, n = f"{op.name}_{n}", n + 1
        st = Stage(self, op, sid)
        self.stages.insert(self.stages.index(before), st)
        self._by_op[id(op)] = st
        return st

    def _refuse_extern(self, prim: str, tensor=None, readers=None,
                       produced: bool = False) -> None:
        """Refuse `prim` where it would rewrite an extern stage: the stage that computes
        `tensor` (when `produced`), or a stage among `readers` (stages, tensors or ids;
        "all": every stage reading `tensor`). An extern stage's function reads and writes
        whole row-major buffers that no primitive can change."""
        def extern(st: Stage) -> bool:
            return isinstance(st.op, ExternOp)

        if produced and isinstance(tensor, Tensor):   # an update and its init share a buffer
            update.refuse_update(self, prim, tensor)

        if produced and isinstance(tensor, Tensor):
            st = self._by_op.get(id(tensor.op))
            if st is not None and extern(st):
                raise ScheduleError(f"{prim}: {tensor.name} is computed by the extern stage "
                                    f"{st.id} (fn {st.op.what}), whose function writes it "
                                    "whole; schedule the stages that read it instead")
        if readers == "all":
            readers = [st for st in self.stages
                       if isinstance(tensor, Tensor) and extern(st) and
                       any(t is tensor for t in st.op.inputs)]
        elif isinstance(readers, (Tensor, Stage, str)):
            readers = [readers]
        for r in readers if isinstance(readers, (list, tuple)) else ():
            # (readers of another type are refused by the primitive itself)
            if isinstance(r, Stage):
                st = r
            elif isinstance(r, Tensor):
                st = self._by_op.get(id(r.op))
            else:
                st = next((x for x in self.stages if x.id == r), None)
            if st is not None and extern(st):
                raise ScheduleError(f"{prim}: stage {st.id} is an extern stage (fn "
                                    f"{st.op.what}); its function reads its inputs' own "
                                    "buffers, which a primitive cannot replace")

    def cache_read(self, tensor, scope: str, readers) -> Tensor:
        """A copy of `tensor` in `scope` read by `readers` instead (see dataflow.cache_read)."""
        self._refuse_extern("cache_read", tensor, readers)
        return dataflow.cache_read(self, tensor, scope, readers)

    def cache_write(self, tensor, scope: str) -> Tensor:
        """Compute `tensor` into a cache stage, copied out by its stage (dataflow.cache_write)."""
        self._refuse_extern("cache_write", tensor, produced=True)
        return dataflow.cache_write(self, tensor, scope)

    def pack(self, tensor, axis: int, factor: int, readers=None) -> Tensor:
        """Store `tensor` blocked along `axis` for its readers (see dataflow.pack)."""
        self._refuse_extern("pack", tensor, "all" if readers is None else readers)
        return dataflow.pack(self, tensor, axis, factor, readers)

    def rfactor(self, tensor, axis) -> Tensor:
        """Make a reduce loop a data-parallel axis of a new stage (see dataflow.rfactor)."""
        self._refuse_extern("rfactor", tensor, produced=True)
        return dataflow.rfactor(self, tensor, axis)

    def _reorder_storage(self, st: Stage, axes) -> Tensor:
        """`Stage.reorder_storage`'s work (see dataflow.reorder_storage)."""
        self._refuse_extern("reorder_storage", st.op.output, "all", produced=True)
        return dataflow.reorder_storage(self, st, axes)

    def trace_text(self) -> str:
        """The applied primitives, one per line, as Python on `s` that a user can paste
        and edit (`s["C"].split("i", factor=4)`): the rendering of `trace` (data)."""
        return "\n".join(str(t) for t in self.trace)

    def replay(self, other: Schedule, trace=None) -> Schedule:
        """Apply this schedule's primitives (or `trace`, a list of TraceEntry), by stage
        id and loop name, to `other`."""
        for name, intrin in self.intrinsics.items():
            other.intrinsics.setdefault(name, intrin)
        for t in self.trace if trace is None else trace:
            target = other.stage(t.stage) if t.stage else other
            getattr(target, t.call.prim)(*t.call.args, **dict(t.call.kwargs))
        return other


def _topological_ops(outputs: list[Tensor]) -> list[Operation]:
    order: list[Operation] = []
    state: dict[int, int] = {}  # 1 = on the stack, 2 = done

    def visit(op: Operation) -> None:
        s = state.get(id(op))
        if s == 2:
            return
        if s == 1:
            raise TensorlangError(f"the computation has a cycle through {op.name}")
        state[id(op)] = 1
        for t in op.input_tensors:
            visit(t.op)
        state[id(op)] = 2
        order.append(op)

    for t in outputs:
        visit(t.op)
    return order


@deep
def create_schedule(outputs) -> Schedule:
    """A schedule for `outputs` (a tensor or a list of tensors) in the declared loop order."""
    outs = outputs if isinstance(outputs, (list, tuple)) else [outputs]
    if not outs:
        raise TensorlangError("create_schedule: expected at least one output tensor")
    # TVM's spelling: the operations (`create_schedule(B.op)`) for their output tensors
    # (every output of a tuple compute)
    outs = [x for t in outs for x in (t.outputs if isinstance(t, Operation) else (t,))]
    for t in outs:
        if not isinstance(t, Tensor):
            raise TensorlangError(f"create_schedule: expected tensors, got {t!r}")
        if isinstance(t.op, PlaceholderOp):
            raise TensorlangError(
                f"create_schedule: {t.name} is a placeholder; pass the computed tensors"
            )
    return Schedule(list(outs))
