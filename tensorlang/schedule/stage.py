"""Stages: the loops of one compute and the primitives that reorder them (split, tile,
reorder, fuse, skew, the loop tags, bind, compute_at/root/inline); each is an edit of the
stage's isl schedule map, kept only after the exact check (`Stage._apply`)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from ..errors import IllegalScheduleError, ScheduleError
from ..ir.expr import Load, Var
from ..ir.stmt import LoopKind
from ..ir.visit import map_expr, substitute
from ..polyhedral.astgen import placed_loop_bound
from ..polyhedral.transform import (
    fuse_dims, loop_const_range, loop_extent_bound, reorder_dims, skew_dims, split_dim, tag_dim,
)
from ..te.extern import ExternOp
from ..te.tensor import ComputeOp, IterVar, Tensor
from . import update
from .program import reads_tensor
from .trace import Call, TraceEntry

if TYPE_CHECKING:
    from .schedule import Schedule


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
# Stage.pragma's keys: those with a meaning here (TVM's parallel_* keys describe its own
# thread pool's launch and barriers, which this runtime does not expose)
PRAGMA_KEYS = ("auto_unroll_max_step", "unroll_explicit")
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
        self.inlined = False
        self.cache_scope = "local"  # where its values live when computed inside a loop
        self._gone: dict[str, str] = {}  # loop name -> the primitive that removed it
        # pragma: loop name -> its keys' latest values, and the loops they unrolled
        self._pragmas: dict[str, dict] = {}
        self._pragma_unrolled: dict[str, tuple[str, ...]] = {}
        # (loop, TensorIntrin, its Plan, the trace's length then) once tensorized
        self._tensorize = None
        # after cache_write: the op that took over this stage's axes (the cache stage's),
        # whose spatial axes name this write-back stage's axes too (TVM's idiom)
        self.cached_from: ComputeOp | None = None

    @property
    def name(self) -> str:
        return self.op.name

    @property
    def loops(self) -> list[str]:
        """The names of the stage's loops, outer first."""
        return [lp.name for lp in self.state.loops]

    @property
    def leaf_iter_vars(self) -> list[LoopAxis]:
        """The stage's loops, outer first, as handles for primitives (TVM's name)."""
        return [LoopAxis(self, n) for n in self.loops]

    def __repr__(self) -> str:
        return f"Stage({self.id}: {', '.join(self.loops)})"

    def _loop(self, x, prim: str, argname: str) -> str:
        """The loop name of a primitive's argument, checked against this stage."""
        self._refuse_extern(prim)
        if isinstance(x, LoopAxis):
            if x.stage is not self:
                raise ScheduleError(f"{prim}: {argname} is loop {x.name} of stage {x.stage.id}, "
                                    f"not of stage {self.id}")
            name = x.name
        elif isinstance(x, IterVar):
            mine = list(self.op.axis) + list(self.op.reduce_axis)
            old = self.cached_from
            if old is not None and not any(x is a for a in mine) and \
                    any(x is a for a in old.axis):
                # the tensor's original axis after cache_write: TVM keeps those for the
                # write-back (`s[C].tile(C.op.axis[0], C.op.axis[1], ...)` after
                # `s.cache_write(C, ...)`), which is this stage: its axis at that position
                return self.op.axis[[a is x for a in old.axis].index(True)].name
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

    def _refuse_extern(self, prim: str) -> None:
        if isinstance(self.op, ExternOp):
            raise ScheduleError(
                f"{prim}: stage {self.id} is an extern stage (fn {self.op.what}): it has no "
                "loops to split, reorder, vectorize, parallelize or attach; it runs once, at "
                "root. Schedule the stages before and after it")

    def _apply(self, new, data: Call, removed: tuple[str, ...] = (), check_all: bool = False,
               renamed: dict[str, str] | None = None, moves: bool = False) -> None:
        """Keep `new` as this stage's state once it is checked. The check asks about the
        dependences of the stages whose statements the change moves (this stage, and the
        stages placed by its statements: `Program.moved`), or of every stage when
        `check_all`; any other dependence keeps its order, as the schedule was legal before.
        `moves` (compute_at, compute_root) names no stage in the messages, as a check of
        the whole schedule does."""
        call = str(data)
        if self.inlined:
            raise ScheduleError(f"{data.prim}: stage {self.id} was inlined into its "
                                "readers (compute_inline); it has no loops of its own")
        new = self._refresh_tags(new, call)
        states = {st.id: st.state for st in self.schedule.stages}
        states[self.id] = new
        # stages computed at a loop this primitive removes follow it to its replacement
        for sid, st in states.items():
            if st.attach is not None and st.attach[0] == self.id and st.attach[1] in removed:
                target = (renamed or {}).get(st.attach[1])
                if target is None:
                    raise ScheduleError(
                        f"{call} on stage {self.id}: stage {sid} is computed at loop "
                        f"{st.attach[1]}, which this primitive removes; apply {call} before "
                        f"compute_at, or compute {sid} elsewhere first")
                states[sid] = replace(st, attach=(self.id, target))
                moves = True
            st = states[sid]
            if isinstance(st.store, tuple) and st.store[0] == self.id and \
                    st.store[1] in removed:     # a store_at loop follows it the same way
                target = (renamed or {}).get(st.store[1])
                if target is None:
                    raise ScheduleError(
                        f"{call} on stage {self.id}: stage {sid} is stored at loop "
                        f"{st.store[1]}, which this primitive removes; apply {call} before "
                        f"store_at, or store {sid} elsewhere first")
                states[sid] = replace(st, store=(self.id, target))
                moves = True
        prog = self.schedule.program
        touching = None if check_all else prog.moved(states, {self.id})
        prog.check(call, None if check_all or moves else self.id, states, touching)
        for st in self.schedule.stages:
            st.state = states[st.id]
        for r in removed:
            self._gone[r] = call
        self.schedule.trace.append(TraceEntry(self.id, data))

    def _placed_bound(self, state, name: str) -> int | None:
        """The most iterations loop `name` of this stage makes per iteration of the loop it
        is computed at (its statements placed by compute_at; None when that still grows
        with the sizes)."""
        prog = self.schedule.program
        states = {st.id: st.state for st in self.schedule.stages}
        states[self.id] = state
        out = 0
        for ts in prog.times(states):
            info = prog.info.get(ts.stmt.name.split("__")[0])   # placed copies: name__at
            if info is None or info.stage != self.id:
                continue
            idx = [li for li, lp in enumerate(ts.loops) if lp.name == name]
            if not idx:
                continue
            b = placed_loop_bound(ts.time.intersect_domain(ts.stmt.domain).range(), idx[-1])
            if b is None:
                return None
            out = max(out, b)
        return out or None

    def _refresh_tags(self, state, call: str):
        """Vector and unrolled loops keep a constant trip-count bound, and nothing inside a
        vector loop is vectorized or parallel, whatever primitive comes after. (Serial and
        unrolled loops may run inside a vector loop, as in TVM and Halide: each iteration
        of them is one vector operation per statement. The lanes run at the same time, so
        the vector loop carries no dependence — the legality check says so — and running
        it innermost keeps every dependence's order.)"""
        loops = list(state.loops)
        for d, lp in enumerate(loops):
            if lp.kind not in (LoopKind.VECTORIZED, LoopKind.UNROLLED):
                continue
            what = "vectorized" if lp.kind is LoopKind.VECTORIZED else "unrolled"
            inner = [x for x in loops[d + 1:] if x.kind in (LoopKind.VECTORIZED,
                                                             LoopKind.PARALLEL)]
            if lp.kind is LoopKind.VECTORIZED and inner:
                raise ScheduleError(f"{call} on stage {self.id}: loop {inner[0].name} "
                                    f"({inner[0].kind.name.lower()}) would run inside the "
                                    f"vectorized loop {lp.name}; only serial or unrolled "
                                    "loops may")
            bound = loop_extent_bound(state, d)
            if bound is None and state.attach is not None:
                bound = self._placed_bound(state, lp.name)
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
        call = Call("split", (name,), (("factor", f),))
        self._apply(split_dim(self.state, name, f), call, (name,),
                    renamed={name: f"{name}.inner"})
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
        self._apply(st, Call("tile", (x, y, fx, fy)), (x, y),
                    renamed={x: f"{x}.inner", y: f"{y}.inner"})
        return tuple(self._ax(n) for n in names)

    def reorder(self, *loops) -> None:
        """Put the given loops in this order, in the positions they occupy together."""
        if len(loops) == 1 and isinstance(loops[0], (list, tuple)):
            loops = tuple(loops[0])
        names = [self._loop(x, "reorder", f"argument {k}") for k, x in enumerate(loops)]
        if len(set(names)) != len(names):
            raise ScheduleError(f"reorder: each loop may appear once, got {names}")
        self._apply(reorder_dims(self.state, names), Call("reorder", tuple(names)))

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
        self._apply(st, Call("fuse", tuple(names)), tuple(names))
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
        self._apply(skew_dims(self.state, a, b, f), Call("skew", (a, b), (("factor", f),)))
        return self._ax(b)

    def _tag(self, x, prim: str, kind: LoopKind) -> None:
        name = self._loop(x, prim, "loop")
        d = self.state.loop_index(name)
        new = tag_dim(self.state, name, kind)  # vector/unrolled loops get their extent bound
        if kind in (LoopKind.VECTORIZED, LoopKind.UNROLLED):
            bound = new.loops[d].max_extent
            limit = MAX_LANES if kind is LoopKind.VECTORIZED else MAX_UNROLL
            if (bound is None or bound > limit) and new.attach is not None:
                # computed at a loop of another stage: the loop runs over one tile
                bound = self._placed_bound(new, name)
                loops = list(new.loops)
                loops[d] = replace(loops[d], max_extent=bound)
                new = replace(new, loops=tuple(loops))
            if bound is None:
                raise ScheduleError(
                    f"{prim}: loop {name} of stage {self.id} has an extent that grows with the "
                    f"sizes (symbolic); split it first, e.g. split({name}, factor=8), and "
                    f"{prim} the inner loop")
            if bound > limit:
                raise ScheduleError(f"{prim}: loop {name} runs up to {bound} iterations; at "
                                    f"most {limit} are supported; split it first")
        self._apply(new, Call(prim, (name,)))

    def unroll(self, loop) -> None:
        """Unroll a loop of constant (or constant-bounded) extent."""
        self._tag(loop, "unroll", LoopKind.UNROLLED)

    def pragma(self, loop, key: str, value=None) -> None:
        """TVM's `s[C].pragma(axis, key, value)`: a hint about the loops inside `loop` (not
        `loop` itself). The keys with a meaning here (PRAGMA_KEYS):

        - ``"auto_unroll_max_step"`` (an int >= 0): unroll the loops inside `loop`,
          innermost first, while the product of their constant trip counts is at most
          `value` (a vectorized loop counts as one step; a parallel or bound loop, or one
          whose extent grows with the sizes, stops it), as TVM's unroll pass does. Before
          and after, for `pragma(i.outer, "auto_unroll_max_step", 16)` on an i.inner of 4 and
          a j.inner of 8 inside it, j.inner (8 steps) is unrolled and i.inner is not
          (4 * 8 = 32 > 16); with 32 both are::

              for i.outer in range(...):
                for i.inner in range(4):
                  for j.inner in range(8):  # unrolled
        - ``"unroll_explicit"`` (a bool, default True as in TVM): whether the loops that
          auto_unroll_max_step picks are unrolled in the loop IR (True: `tl.lower` shows
          them unrolled and the code generator copies their bodies) or left as serial
          loops for LLVM's own unroller to decide on (False).

        Loops this stage's loops only (not those of stages computed inside `loop`), as
        they are when the pragma is applied: apply it after the splits and reorders. A
        later pragma on the same loop re-decides with both keys' latest values, whatever
        their order; loops unrolled by `unroll` stay unrolled. TVM's other keys
        (``parallel_launch_point``, ``parallel_stride_pattern``,
        ``parallel_barrier_when_finish``, ...) have no meaning in this thread pool's
        model and are refused."""
        name = self._loop(loop, "pragma", "loop")
        if not isinstance(key, str) or key not in PRAGMA_KEYS:
            raise ScheduleError(f"pragma: unknown key {key!r}; the supported keys are "
                                f"{', '.join(repr(k) for k in PRAGMA_KEYS)}")
        if key == "auto_unroll_max_step":
            value = _int_arg(value, "pragma", "the value of 'auto_unroll_max_step'",
                             minimum=0)
        else:
            if value is None:
                value = True
            if not isinstance(value, (bool, int, np.integer)) or value not in (0, 1):
                raise ScheduleError(f"pragma: the value of 'unroll_explicit' must be True or "
                                    f"False, got {value!r}")
            value = bool(value)
        keys = {**self._pragmas.get(name, {}), key: value}
        state = self.state
        for lp in self._pragma_unrolled.get(name, ()):      # this loop's earlier choice
            if lp in self.loops and self.state.loops[self.state.loop_index(lp)].kind \
                    is LoopKind.UNROLLED:
                state = tag_dim(state, lp, LoopKind.SERIAL)
        chosen = self._auto_unroll(state, name, keys.get("auto_unroll_max_step", 0)) \
            if keys.get("unroll_explicit", True) else []
        for lp in chosen:
            state = tag_dim(state, lp, LoopKind.UNROLLED)
        value_arg = value if isinstance(value, bool) else int(value)
        self._apply(state, Call("pragma", (name, key, value_arg)))
        self._pragmas[name] = keys
        self._pragma_unrolled[name] = tuple(chosen)

    def _auto_unroll(self, state, name: str, max_step: int) -> list[str]:
        """The serial loops inside loop `name` that auto_unroll_max_step unrolls: innermost
        first while the product of the trip counts stays at most `max_step`."""
        d = state.loop_index(name)
        chosen, steps = [], 1
        for e in range(len(state.loops) - 1, d, -1):
            lp = state.loops[e]
            if lp.kind is LoopKind.VECTORIZED:
                continue                      # one vector operation: one step
            if lp.kind not in (LoopKind.SERIAL, LoopKind.UNROLLED):
                break
            bound = loop_extent_bound(state, e)
            if state.attach is not None:      # computed at a loop: it runs over one tile
                placed = self._placed_bound(state, lp.name)
                bound = placed if bound is None or placed is not None and placed < bound \
                    else bound
            if bound is None or steps * bound > max_step or bound > MAX_UNROLL:
                break
            steps *= bound
            if lp.kind is LoopKind.SERIAL:
                chosen.append(lp.name)
        return chosen

    def tensorize(self, axis, intrin) -> None:
        """Replace the loop nest below `axis` (`axis` included) by one use of a declared
        instruction (`tl.TensorIntrin`, or a built-in's name such as
        "x86.vnni_u8s8_i32") per iteration of the loops around it. isl checks that the nest
        computes what the instruction does, over a box of its extents, with each operand's
        elements where the instruction reads them; a mismatch is refused with the iteration
        and elements that differ (schedule/tensorize.py). Where the sizes leave a partial
        box (the last tile of a split that does not divide), that use runs as plain
        code. Apply it after the primitives that shape the nest."""
        from .tensorize import MARK, match, resolve

        name = self._loop(axis, "tensorize", "axis")
        found = resolve(intrin, self.schedule.intrinsics)
        if self._tensorize is not None:
            raise ScheduleError(f"tensorize: stage {self.id} is tensorized already (one "
                                "instruction per stage)")
        plan = match(self, name, found)
        d = self.state.loop_index(name)
        loops = list(self.state.loops)
        loops[d] = replace(loops[d], thread_tag=MARK)
        known = self.schedule.intrinsics.get(found.name)
        if known is not None and known is not found:
            raise ScheduleError(f"tensorize: this schedule uses another instruction named "
                                f"{found.name!r}; give each TensorIntrin its own name")
        self.schedule.intrinsics[found.name] = found
        self._apply(replace(self.state, loops=tuple(loops)),
                    Call("tensorize", (name,), (("intrin", found.name),)))
        # the plan holds while no primitive follows (lower matches again after one)
        self._tensorize = (name, found, plan, len(self.schedule.trace))

    def tensorized(self):
        """(loop, TensorIntrin) of this stage's tensorize, or None."""
        return None if self._tensorize is None else self._tensorize[:2]

    def vectorize(self, loop) -> None:
        """Run a loop as one vector operation per statement (LLVM vector types). Serial or
        unrolled loops inside it run once for all lanes (a vector accumulator over an inner
        reduction loop, as TVM and Halide allow); the loop must carry no dependence."""
        try:
            self._tag(loop, "vectorize", LoopKind.VECTORIZED)
        except IllegalScheduleError as err:
            raise update.explain_race(self, err, "vectorize") from None

    def parallel(self, loop, atomic: bool = False) -> None:
        """Run a loop's iterations on the thread pool (TL_NUM_THREADS threads). On an
        update stage (tl.update) whose value is old + x, max(old, x) or min(old, x),
        `atomic=True` makes each update an atomic read-modify-write, so iterations that
        write the same element may run at once (schedule/update.py)."""
        if atomic is True:
            update.parallel_atomic(self, loop)
            return
        if atomic is not False:
            raise ScheduleError(f"parallel: atomic must be True or False, got {atomic!r}")
        try:
            self._tag(loop, "parallel", LoopKind.PARALLEL)
        except IllegalScheduleError as err:
            raise update.explain_race(self, err, "parallel") from None

    def bind(self, loop, thread, atomic: bool = False) -> None:
        """Run a loop's iterations as GPU blocks or threads: `thread` is
        `tl.thread_axis("blockIdx.x")` (or y, z; threadIdx.x/y/z) or that name. Like
        `parallel`, it is refused with a witness when the loop carries a dependence; each
        index binds at most one loop of a stage. Kernels with bound loops build for
        target="cuda" only. `atomic=True`: as `parallel`'s, for an update stage's loop."""
        tag = thread.tag if isinstance(thread, ThreadAxis) else thread
        if tag not in THREAD_TAGS:
            raise ScheduleError(f"bind: thread must be tl.thread_axis(name) or a name among "
                                f"{', '.join(THREAD_TAGS)}, got {thread!r}")
        name = self._loop(loop, "bind", "loop")
        for lp in self.state.loops:
            if lp.thread_tag == tag and lp.name != name:
                raise ScheduleError(f"bind: {tag} already binds loop {lp.name} of stage "
                                    f"{self.id}; each GPU index binds one loop")
        kind = LoopKind.GPU_BLOCK if tag.startswith("blockIdx") else LoopKind.GPU_THREAD
        if atomic is True:
            update.bind_atomic(self, name, tag, kind)
            return
        if atomic is not False:
            raise ScheduleError(f"bind: atomic must be True or False, got {atomic!r}")
        new = tag_dim(self.state, name, kind, tag)
        try:
            self._apply(new, Call("bind", (name, tag)))
        except IllegalScheduleError as err:
            raise update.explain_race(self, err, "bind") from None

    def compute_at(self, parent, axis) -> None:
        """Compute this stage inside loop `axis` of stage `parent`, for each iteration of it
        over exactly the elements read there (its footprint), into a local buffer shaped
        like the footprint's bounding box. Elements read in several iterations are computed
        in each (recomputation is the schedule's choice)."""
        sch = self.schedule
        if isinstance(parent, str):
            parent = sch.stage(parent)
        elif isinstance(parent, Tensor):
            parent = sch[parent]
        if not isinstance(parent, Stage) or parent.schedule is not sch:
            raise ScheduleError(f"compute_at: parent must be a stage of this schedule "
                                f"(s[T]), got {parent!r}")
        if parent is self:
            raise ScheduleError(f"compute_at: stage {self.id} cannot be computed inside "
                                "its own loop")
        self._refuse_extern("compute_at")
        update.refuse_update(sch, "compute_at", self.op.output)
        ext = [st.id for st in sch.stages if isinstance(st.op, ExternOp) and
               any(t is self.op.output for t in st.op.inputs)]
        if ext:
            raise ScheduleError(f"compute_at: {self.id} is read by the extern stage(s) {ext}, "
                                "which run once at root and read its whole buffer; leave "
                                f"{self.id} at root")
        loop = parent._loop(axis, "compute_at", "axis")
        if any(t is o for t in self.op.outputs for o in sch.outputs):
            raise ScheduleError(f"compute_at: {self.id} is an output of the schedule; outputs "
                                "are computed at root, in their own buffers")
        p = parent
        while p.state.attach is not None:
            p = sch.stage(p.state.attach[0])
            if p is self:
                raise ScheduleError(f"compute_at({self.id}, {parent.id}.{loop}): "
                                    f"{parent.id} is itself computed inside {self.id}; the "
                                    "placement would be a cycle")
        new = replace(self.state, attach=(parent.id, loop),
                      trace=self.state.trace + (f"compute_at({parent.id}, {loop})",))
        self._apply(new, Call("compute_at", (parent.id, loop)), moves=True)

    def store_at(self, parent, axis) -> None:
        """Allocate this stage's buffer in loop `axis` of stage `parent` — the loop it is
        computed at (`compute_at`) or one outside it — as Halide's `store_at`. Values
        computed in earlier iterations of the loops between stay in the buffer, and each
        iteration computes only what they did not (the sliding window), while the footprint
        advances monotonically; see `fold_storage` to keep only the rows in flight. Halide's
        lesson 08 (`s[blur_x].store_root()`, `s[blur_x].compute_at(s[out], y)`)::

            blur_x = allocate(float32, [h + 2, w], 'local')
            for y in range(h):
              if y >= 1:                       # one new row per row of out
                for x in range(w):
                  blur_x[y + 2, x] = (input[y + 2, x] + ...) / 3.0
              else:                            # the first three rows
                for y_1 in range(3):
                  for x in range(w):
                    blur_x[y_1, x] = (input[y_1, x] + ...) / 3.0
              for x in range(w):
                out[y, x] = (blur_x[y, x] + blur_x[y + 1, x] + blur_x[y + 2, x]) / 3.0
        """
        parent = self._storage_parent(parent, "store_at")
        loop = parent._loop(axis, "store_at", "axis")
        new = replace(self.state, store=(parent.id, loop),
                      trace=self.state.trace + (f"store_at({parent.id}, {loop})",))
        self._apply(new, Call("store_at", (parent.id, loop)), moves=True)

    def store_root(self) -> None:
        """Allocate this stage's buffer once, outside every loop, while it is computed at
        a loop (`compute_at`): Halide's `store_root().compute_at(...)`, the sliding window
        over all the consumer's loops down to the compute level."""
        self._storage_parent(None, "store_root")
        new = replace(self.state, store="root", trace=self.state.trace + ("store_root()",))
        self._apply(new, Call("store_root"), moves=True)

    def fold_storage(self, dim, factor: int) -> None:
        """Store element x of this stage at x[dim] mod `factor` along `dim` (an axis of
        the stage, its name or its position): a circular buffer of `factor` rows. Refused
        with the two elements that would share a slot while both are live when `factor` is
        too small; `tl.analyze(...).buffer(name).smallest_fold` gives the smallest correct
        factor (isl's liveness of the values in flight). Needs `compute_at`."""
        self._storage_parent(None, "fold_storage")
        axes = list(self.state.axes[:self.state.n_spatial])
        if isinstance(dim, IterVar) and any(dim is a for a in self.op.axis):
            d = axes.index(dim.name)
        elif isinstance(dim, str) and dim in axes:
            d = axes.index(dim)
        elif isinstance(dim, (int, np.integer)) and not isinstance(dim, bool) and \
                0 <= int(dim) < len(axes):
            d = int(dim)
        else:
            raise ScheduleError(f"fold_storage: dim must be a spatial axis of stage "
                                f"{self.id} (one of {axes}, or its position), got {dim!r}")
        f = _int_arg(factor, "fold_storage", "factor")
        folds = tuple((x, g) for x, g in self.state.folds if x != d) + ((d, f),)
        new = replace(self.state, folds=folds,
                      trace=self.state.trace + (f"fold_storage({axes[d]}, {f})",))
        self._apply(new, Call("fold_storage", (axes[d], f)), moves=True)

    def _storage_parent(self, parent, prim: str):
        """The stage `parent` names (None: no parent), after checking that this stage's
        storage may move: not an output, not an extern stage, not inlined."""
        self._refuse_extern(prim)
        sch = self.schedule
        if any(t is o for t in self.op.outputs for o in sch.outputs):
            raise ScheduleError(f"{prim}: {self.id} is an output of the schedule; outputs "
                                "are stored in their own buffers")
        if parent is None:
            return None
        if isinstance(parent, str):
            parent = sch.stage(parent)
        elif isinstance(parent, Tensor):
            parent = sch[parent]
        if not isinstance(parent, Stage) or parent.schedule is not sch:
            raise ScheduleError(f"{prim}: parent must be a stage of this schedule (s[T]), "
                                f"got {parent!r}")
        if parent is self:
            raise ScheduleError(f"{prim}: stage {self.id} cannot be stored inside its own loop")
        return parent

    def no_sync(self) -> None:
        """Leave out the barriers around this shared stage's copy inside a GPU block (the
        one before it and the one after it). Checked like every primitive: when a thread
        could then read (or overwrite) an element of the tile that another thread wrote
        with no barrier between them, it is refused with the two threads and the element.
        Useful when each thread reads only what it copied itself."""
        if self.state.scope != "shared":
            raise ScheduleError(f"no_sync: stage {self.id} is not in shared memory "
                                f"(its scope is {self.state.scope!r}); barriers order "
                                "only shared tiles")
        new = replace(self.state, sync=False, trace=self.state.trace + ("no_sync()",))
        self._apply(new, Call("no_sync"), check_all=True)

    def compute_root(self) -> None:
        """Compute this stage in full before the stages that read it (the default)."""
        if self.state.attach is None and not self.inlined:
            return
        # computed at root, it is stored there too (a store_at loop no longer applies)
        store = None if isinstance(self.state.store, tuple) else self.state.store
        new = replace(self.state, attach=None, store=store,
                      trace=self.state.trace + ("compute_root()",))
        self._apply(new, Call("compute_root"), moves=True)

    def compute_inline(self) -> None:
        """Substitute this stage's expression into every stage that reads it; the stage
        disappears (no loops, no buffer)."""
        sch = self.schedule
        if self.inlined:
            raise ScheduleError(f"compute_inline: {self.id} is inlined already")
        self._refuse_extern("compute_inline")
        update.refuse_update(sch, "compute_inline", self.op.output)
        ext = [st.id for st in sch.stages if isinstance(st.op, ExternOp) and
               any(t is self.op.output for t in st.op.inputs)]
        if ext:
            raise ScheduleError(f"compute_inline: {self.id} is read by the extern stage(s) "
                                f"{ext}, whose function reads its buffer; leave it at root")
        if self.op.reduce_axis or self.op.is_recurrence:
            kind = "a reduction" if self.op.reduce_axis else "a recurrence"
            raise ScheduleError(f"compute_inline: {self.id} is {kind}; only a pure "
                                "elementwise compute can be substituted into its readers "
                                "(compute it at a loop of its reader with compute_at instead)")
        if any(t is o for t in self.op.outputs for o in sch.outputs):
            raise ScheduleError(f"compute_inline: {self.id} is an output of the schedule; "
                                "outputs are stored in their own buffers")
        if len(self.op.outputs) > 1:
            raise ScheduleError(f"compute_inline: {self.id} computes several outputs in one "
                                "stage (a tuple compute); inlining would compute each value "
                                "apart, so, as in TVM, it is refused: compute it at a loop of "
                                "its reader with compute_at instead")
        inside = [st.id for st in sch.stages
                  if st.state.attach is not None and st.state.attach[0] == self.id]
        if inside:
            raise ScheduleError(f"compute_inline: stage(s) {inside} are computed inside "
                                f"{self.id}'s loops; compute them elsewhere first")
        out = self.op.output
        axis = [a.var for a in self.op.axis]
        body = self.op.body
        # only the readers change; the others keep their computes (and so their parts of
        # the isl program: see Schedule._edit)
        readers = [st for st in sch.stages if st is not self and reads_tensor(st.op, out)]

        def edit():
            for st in readers:
                st.op = st.op.with_body(_substitute_tensor(st.op.body, out, axis, body))
            sch.stages.remove(self)
            self.inlined = True

        sch._edit(Call("compute_inline"), edit, self.id)

    def reorder_storage(self, *axes) -> Tensor:
        """Lay this stage's tensor out with its dimensions in the order of `axes` (all its
        spatial axes, outermost first), as Halide's `reorder_storage`: a register tile
        whose vectors run along a dimension that is not last (a convolution's output
        channels) makes that dimension last. Its loops keep their order; its readers read
        the permuted indices. Returns the new tensor (see dataflow.reorder_storage)."""
        if len(axes) == 1 and isinstance(axes[0], (list, tuple)):
            axes = tuple(axes[0])
        return self.schedule._reorder_storage(self, axes)


THREAD_TAGS = ("blockIdx.x", "blockIdx.y", "blockIdx.z", "threadIdx.x", "threadIdx.y",
               "threadIdx.z")


@dataclass(frozen=True)
class ThreadAxis:
    """A GPU index to `bind` a loop to (TVM's `te.thread_axis`)."""

    tag: str


def thread_axis(tag: str) -> ThreadAxis:
    """`tl.thread_axis("threadIdx.x")`: the GPU index `tag` (blockIdx/threadIdx .x/.y/.z)."""
    if tag not in THREAD_TAGS:
        raise ScheduleError(f"thread_axis: expected one of {', '.join(THREAD_TAGS)}, got "
                            f"{tag!r}")
    return ThreadAxis(tag)


def _substitute_tensor(body, tensor: Tensor, axis: list[Var] | None, value):
    """`body` with loads of `tensor` replaced: by `value`'s tensor at the same indices (when
    `axis` is None), or by the expression `value` with its axes := the indices."""
    def fn(e):
        if isinstance(e, Load) and e.buffer is tensor:
            if axis is None:
                return Load(value, e.indices)
            if all(isinstance(i, Var) and i.name == a.name and i.dtype == a.dtype
                   for i, a in zip(e.indices, axis)):
                # read at its own point (a chain of elementwise stages): `value` as it is;
                # substituting would copy it, and along a chain of n stages the copies
                # grow to n^2 nodes
                return value
            return substitute(value, {a.name: i for a, i in zip(axis, e.indices)})
        return None

    return map_expr(body, fn)
