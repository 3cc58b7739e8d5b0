"""Schedules and stages: the user's handle on each compute's loops."""

from __future__ import annotations

from ..errors import ScheduleError, TensorlangError
from ..te.tensor import ComputeOp, Operation, PlaceholderOp, Tensor


class Stage:
    """The schedule of one compute operation (TVM's Stage / Halide's Func schedule)."""

    def __init__(self, schedule: Schedule, op: ComputeOp, stage_id: str):
        self.schedule = schedule
        self.op = op
        self.id = stage_id
        self.state = None  # polyhedral StageState, made when the schedule is created

    @property
    def name(self) -> str:
        return self.op.name

    def __repr__(self) -> str:
        return f"Stage({self.id})"

    def _not_yet(self, primitive: str):
        raise NotImplementedError(
            f"{primitive} is not implemented yet: schedule primitives arrive with the "
            "schedule-primitives work (see the README's status table)"
        )

    def split(self, *args, **kwargs):
        self._not_yet("split")

    def tile(self, *args, **kwargs):
        self._not_yet("tile")

    def fuse(self, *args, **kwargs):
        self._not_yet("fuse")

    def reorder(self, *args, **kwargs):
        self._not_yet("reorder")

    def unroll(self, *args, **kwargs):
        self._not_yet("unroll")

    def vectorize(self, *args, **kwargs):
        self._not_yet("vectorize")

    def parallel(self, *args, **kwargs):
        self._not_yet("parallel")

    def skew(self, *args, **kwargs):
        self._not_yet("skew")

    def bind(self, *args, **kwargs):
        self._not_yet("bind")

    def compute_at(self, *args, **kwargs):
        self._not_yet("compute_at")

    def compute_inline(self, *args, **kwargs):
        self._not_yet("compute_inline")

    def compute_root(self, *args, **kwargs):
        self._not_yet("compute_root")


class Schedule:
    """The stages of every compute reachable from the outputs, in dependence order."""

    def __init__(self, outputs: list[Tensor]):
        from ..polyhedral.model import identity_state
        from .lower import isl_params_text

        self.outputs = outputs
        self.stages: list[Stage] = []
        self._by_op: dict[int, Stage] = {}
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
        params = isl_params_text(self)
        for st in self.stages:
            st.state = identity_state(st.id, st.op, params)

    def __getitem__(self, key) -> Stage:
        op = key.op if isinstance(key, Tensor) else key
        if not isinstance(op, Operation):
            raise ScheduleError(f"schedule[...] expects a tensor or operation, got {key!r}")
        if isinstance(op, PlaceholderOp):
            raise ScheduleError(f"{op.name} is a placeholder (an input); it has no stage")
        st = self._by_op.get(id(op))
        if st is None:
            raise ScheduleError(f"{op.name} is not part of this schedule")
        return st

    def __repr__(self) -> str:
        return f"Schedule({', '.join(s.id for s in self.stages)})"


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


def create_schedule(outputs) -> Schedule:
    """A schedule for `outputs` (a tensor or a list of tensors) in the declared loop order."""
    outs = outputs if isinstance(outputs, (list, tuple)) else [outputs]
    if not outs:
        raise TensorlangError("create_schedule: expected at least one output tensor")
    for t in outs:
        if not isinstance(t, Tensor):
            raise TensorlangError(f"create_schedule: expected tensors, got {t!r}")
        if not isinstance(t.op, ComputeOp):
            raise TensorlangError(
                f"create_schedule: {t.name} is a placeholder; pass the computed tensors"
            )
    return Schedule(list(outs))
