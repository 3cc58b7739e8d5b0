"""Schedules and stages: the user's handle on each compute's loops."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ..errors import ScheduleError, TensorlangError
from ..ir.stmt import LoopKind
from ..polyhedral.transform import (
    fuse_dims, loop_const_range, loop_extent_bound, reorder_dims, skew_dims, split_dim, tag_dim,
)
from ..te.tensor import ComputeOp, IterVar, Operation, PlaceholderOp, Tensor


class LoopAxis:
    """A loop made by a schedule primitive (`i.outer`, `i.j.fused`): pass it to later ones."""

    def __init__(self, stage: Stage, name: str):
        self.stage = stage
        self.name = name

    def __repr__(self) -> str:
        return f"LoopAxis({self.stage.id}: {self.name})"


def _int_arg(value, prim: str, argname: str, minimum: int | None = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ScheduleError(f"{prim}: {argname} must be an int, got {value!r}")
    v = int(value)
    if minimum is not None and v < minimum:
        raise ScheduleError(f"{prim}: {argname} must be >= {minimum}, got {v}")
    return v


MAX_UNROLL = 1024   # iterations; more would swamp the compiler
MAX_LANES = 256


class Stage:
    """The schedule of one compute operation (TVM's Stage / Halide's Func schedule).

    Each primitive is a thin wrapper: it resolves its loop arguments, applies a pure function
    of `polyhedral.transform` to the stage's state, checks the result's legality exactly and
    only then keeps it (an illegal primitive leaves the schedule as it was).
    """

    def __init__(self, schedule: Schedule, op: ComputeOp, stage_id: str):
        self.schedule = schedule
        self.op = op
        self.id = stage_id
        self.state = None  # polyhedral StageState, made when the schedule is created
        self._gone: dict[str, str] = {}  # loop name -> the primitive that removed it

    @property
    def name(self) -> str:
        return self.op.name

    @property
    def loops(self) -> list[str]:
        """The names of the stage's loops, outer first."""
        return [lp.name for lp in self.state.loops]

    def __repr__(self) -> str:
        return f"Stage({self.id}: {', '.join(self.loops)})"

    def _not_yet(self, primitive: str):
        raise NotImplementedError(
            f"{primitive} is not implemented yet (see the README's status table)"
        )

    # ----------------------------------------------------------------------- helpers
    def _loop(self, x, prim: str, argname: str) -> str:
        """The loop name of a primitive's argument, checked against this stage."""
        if isinstance(x, LoopAxis):
            if x.stage is not self:
                raise ScheduleError(f"{prim}: {argname} is loop {x.name} of stage {x.stage.id}, "
                                    f"not of stage {self.id}")
            name = x.name
        elif isinstance(x, IterVar):
            mine = list(self.op.axis) + list(self.op.reduce_axis)
            if not any(x is a for a in mine):
                raise ScheduleError(f"{prim}: {argname} is the axis {x.name} of another stage, "
                                    f"not of stage {self.id} (whose axes are "
                                    f"{[a.name for a in mine]})")
            name = x.name
        elif isinstance(x, str):
            name = x
        else:
            raise ScheduleError(f"{prim}: {argname} must be a loop (an axis or the result of a "
                                f"primitive), got {x!r}")
        if name not in self.loops:
            if name in self._gone:
                raise ScheduleError(f"{prim}: {argname} {name} of stage {self.id} no longer "
                                    f"exists: {self._gone[name]} replaced it; the loops are "
                                    f"{self.loops}")
            raise ScheduleError(f"{prim}: {argname} {name!r} is not a loop of stage {self.id}; "
                                f"the loops are {self.loops}")
        return name

    def _apply(self, new, call: str, removed: tuple[str, ...] = ()) -> None:
        new = self._refresh_tags(new, call)
        states = {st.id: st.state for st in self.schedule.stages}
        states[self.id] = new
        self.schedule.program.check(call, self.id, states)
        self.state = new
        for r in removed:
            self._gone[r] = call
        self.schedule.trace.append(TraceEntry(self.id, call))

    def _refresh_tags(self, state, call: str):
        """Vector and unrolled loops keep a constant trip-count bound, and a vector loop stays
        innermost, whatever primitive comes after."""
        loops = list(state.loops)
        for d, lp in enumerate(loops):
            if lp.kind not in (LoopKind.VECTORIZED, LoopKind.UNROLLED):
                continue
            what = "vectorized" if lp.kind is LoopKind.VECTORIZED else "unrolled"
            if lp.kind is LoopKind.VECTORIZED and d != len(loops) - 1:
                raise ScheduleError(f"{call} on stage {self.id}: the vectorized loop {lp.name} "
                                    "would no longer be the innermost loop")
            bound = loop_extent_bound(state, d)
            if bound is None:
                raise ScheduleError(f"{call} on stage {self.id}: the {what} loop {lp.name} "
                                    "would have an extent that grows with the sizes")
            if bound != lp.max_extent:
                loops[d] = replace(lp, max_extent=bound)
        return replace(state, loops=tuple(loops))

    def _ax(self, name: str) -> LoopAxis:
        return LoopAxis(self, name)

    # -------------------------------------------------------------------- primitives
    def split(self, parent, factor=None, nparts=None) -> tuple[LoopAxis, LoopAxis]:
        """Split a loop into (outer, inner) with parent == outer * factor + inner.

        Give `factor` (the inner extent) or `nparts` (the outer extent, for a constant
        extent); the extent need not divide: the last inner loop runs the rest.
        """
        name = self._loop(parent, "split", "parent")
        if (factor is None) == (nparts is None):
            raise ScheduleError("split: give exactly one of factor= and nparts=")
        if factor is not None:
            f = _int_arg(factor, "split", "factor")
        else:
            parts = _int_arg(nparts, "split", "nparts")
            rng = loop_const_range(self.state, self.state.loop_index(name))
            if rng is None:
                raise ScheduleError(f"split: nparts needs loop {name} to have a constant "
                                    "extent; use factor= for a symbolic one")
            f = max(1, -(-rng[1] // parts))
        call = f"split({name}, factor={f})"
        self._apply(split_dim(self.state, name, f), call, (name,))
        return self._ax(f"{name}.outer"), self._ax(f"{name}.inner")

    def tile(self, x_parent, y_parent, x_factor, y_factor):
        """Split two loops and order them (x.outer, y.outer, x.inner, y.inner)."""
        x = self._loop(x_parent, "tile", "x_parent")
        y = self._loop(y_parent, "tile", "y_parent")
        if x == y:
            raise ScheduleError("tile: x_parent and y_parent must be different loops")
        fx = _int_arg(x_factor, "tile", "x_factor")
        fy = _int_arg(y_factor, "tile", "y_factor")
        st = split_dim(self.state, x, fx)
        st = split_dim(st, y, fy)
        names = [f"{x}.outer", f"{y}.outer", f"{x}.inner", f"{y}.inner"]
        st = reorder_dims(st, names)
        self._apply(st, f"tile({x}, {y}, {fx}, {fy})", (x, y))
        return tuple(self._ax(n) for n in names)

    def reorder(self, *loops) -> None:
        """Put the given loops in this order, in the positions they occupy together."""
        if len(loops) == 1 and isinstance(loops[0], (list, tuple)):
            loops = tuple(loops[0])
        names = [self._loop(x, "reorder", f"argument {k}") for k, x in enumerate(loops)]
        if len(set(names)) != len(names):
            raise ScheduleError(f"reorder: each loop may appear once, got {names}")
        self._apply(reorder_dims(self.state, names), f"reorder({', '.join(names)})")

    def fuse(self, *loops) -> LoopAxis:
        """Fuse adjacent loops (outer first) into one: `i.j.fused`."""
        if len(loops) == 1 and isinstance(loops[0], (list, tuple)):
            loops = tuple(loops[0])
        if len(loops) < 2:
            raise ScheduleError("fuse: give at least two adjacent loops, outer first")
        names = [self._loop(x, "fuse", f"argument {k}") for k, x in enumerate(loops)]
        st, cur = self.state, names[0]
        for nxt in names[1:]:
            st = fuse_dims(st, cur, nxt)
            cur = f"{cur}.{nxt}.fused"
        self._apply(st, f"fuse({', '.join(names)})", tuple(names))
        return self._ax(cur)

    def skew(self, outer, inner, factor: int = 1) -> LoopAxis:
        """Replace loop `inner` by inner + factor * outer (a wavefront); names stay."""
        a = self._loop(outer, "skew", "outer")
        b = self._loop(inner, "skew", "inner")
        if a == b:
            raise ScheduleError("skew: outer and inner must be different loops")
        f = _int_arg(factor, "skew", "factor", minimum=None)
        if f == 0:
            raise ScheduleError("skew: factor must not be 0")
        self._apply(skew_dims(self.state, a, b, f), f"skew({a}, {b}, factor={f})")
        return self._ax(b)

    def _tag(self, x, prim: str, kind: LoopKind) -> None:
        name = self._loop(x, prim, "loop")
        d = self.state.loop_index(name)
        new = tag_dim(self.state, name, kind)  # vector/unrolled loops get their extent bound
        if kind in (LoopKind.VECTORIZED, LoopKind.UNROLLED):
            bound = new.loops[d].max_extent
            if bound is None:
                raise ScheduleError(
                    f"{prim}: loop {name} of stage {self.id} has an extent that grows with the "
                    f"sizes (symbolic); split it first, e.g. split({name}, factor=8), and "
                    f"{prim} the inner loop")
            limit = MAX_LANES if kind is LoopKind.VECTORIZED else MAX_UNROLL
            if bound > limit:
                raise ScheduleError(f"{prim}: loop {name} runs up to {bound} iterations; at "
                                    f"most {limit} are supported; split it first")
        if kind is LoopKind.VECTORIZED and d != len(self.state.loops) - 1:
            raise ScheduleError(f"vectorize: loop {name} of stage {self.id} is not the "
                                f"innermost loop ({self.loops[-1]} is); reorder it inwards first")
        self._apply(new, f"{prim}({name})")

    def unroll(self, loop) -> None:
        """Unroll a loop of constant (or constant-bounded) extent."""
        self._tag(loop, "unroll", LoopKind.UNROLLED)

    def vectorize(self, loop) -> None:
        """Run the innermost loop as one vector operation per statement (LLVM vector types)."""
        self._tag(loop, "vectorize", LoopKind.VECTORIZED)

    def parallel(self, loop) -> None:
        """Run a loop's iterations on the thread pool (TL_NUM_THREADS threads)."""
        self._tag(loop, "parallel", LoopKind.PARALLEL)

    def bind(self, *args, **kwargs):
        self._not_yet("bind")

    def compute_at(self, *args, **kwargs):
        self._not_yet("compute_at")

    def compute_inline(self, *args, **kwargs):
        self._not_yet("compute_inline")

    def compute_root(self, *args, **kwargs):
        self._not_yet("compute_root")


@dataclass(frozen=True)
class TraceEntry:
    """One applied primitive: `s[stage].call`, replayable by loop names."""

    stage: str
    call: str

    def __str__(self) -> str:
        return f"s[{self.stage}].{self.call}"


class Schedule:
    """The stages of every compute reachable from the outputs, in dependence order."""

    def __init__(self, outputs: list[Tensor]):
        from ..polyhedral.model import identity_state
        from .program import build_program, program_params

        self.outputs = outputs
        self.trace: list[TraceEntry] = []
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
        params = ", ".join(program_params(self)[0])
        for st in self.stages:
            st.state = identity_state(st.id, st.op, params)
        self.program = build_program(self, {st.id: st.state for st in self.stages})

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

    def stage(self, stage_id: str) -> Stage:
        """The stage with this id (its compute's name, made unique)."""
        for st in self.stages:
            if st.id == stage_id:
                return st
        raise ScheduleError(f"stage: no stage {stage_id!r}; the stages are "
                            f"{[st.id for st in self.stages]}")

    def trace_text(self) -> str:
        """The applied primitives, one per line, as Python calls on loop names."""
        return "\n".join(str(t) for t in self.trace)

    def replay(self, other: Schedule) -> Schedule:
        """Apply this schedule's primitives, by stage id and loop name, to `other`."""
        for t in self.trace:
            name, _, rest = t.call.partition("(")
            args, kwargs = _parse_call(rest[:-1])
            getattr(other.stage(t.stage), name)(*args, **kwargs)
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


def _parse_call(text: str) -> tuple[list, dict]:
    """'i.outer, j, factor=4' -> (['i.outer', 'j'], {'factor': 4}); loop names as strings."""
    args: list = []
    kwargs: dict = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, eq, value = part.partition("=")
        if eq:
            kwargs[key.strip()] = int(value)
        else:
            try:
                args.append(int(part))
            except ValueError:
                args.append(part)
    return args, kwargs
