"""Schedule primitives as pure functions on a stage's polyhedral state.

Each function takes a `StageState` and returns a new one whose schedule map is the old one
composed with an affine (or quasi-affine) map on the loops. Nothing here checks legality:
that is `deps.check_legality`, asked after every primitive. Loop names follow TVM
(`i.outer`, `i.inner`, `i.j.fused`); the loop IR spells them with `_` for `.`.
"""

from __future__ import annotations

import islpy as isl

from ..errors import ScheduleError
from ..ir.stmt import LoopKind
from .model import Loop, StageState


def _loop_map(n: int, outs: list[str], extra: str = "") -> isl.Map:
    ls = [f"l{d}" for d in range(n)]
    cond = f" : {extra}" if extra else ""
    return isl.Map(f"{{ [{', '.join(ls)}] -> [{', '.join(outs)}]{cond} }}")


def dim_range(img: isl.Set, d: int) -> isl.Set:
    """Values of dim d of `img` as a set in one dimension whose parameters include dims
    0..d-1 (named __l0, __l1, ...)."""
    n = img.dim(isl.dim_type.set)
    img = img.project_out(isl.dim_type.set, d + 1, n - d - 1)
    nparams = img.dim(isl.dim_type.param)
    img = img.move_dims(isl.dim_type.param, nparams, isl.dim_type.set, 0, d)
    for k in range(d):
        img = img.set_dim_name(isl.dim_type.param, nparams + k, f"__l{k}")
    return img


def _set_var(space: isl.Space, d: int) -> isl.Aff:
    return isl.Aff.var_on_domain(isl.LocalSpace.from_space(space), isl.dim_type.set, d)


def extent_bound(r: isl.Set) -> int | None:
    """The largest number of values a `dim_range` takes for fixed outer dims (0 when empty),
    or None when it grows with the sizes.

    Asked of the set of pairs (a, b) of the range under the same parameters, as the largest
    b - a: `dim_max - dim_min` can be a quasi-affine piece with rational coefficients, whose
    `max_val` isl refuses."""
    if r.is_empty():
        return 0
    pairs = r.flat_product(r)
    sp = pairs.get_space()
    v = pairs.max_val(_set_var(sp, 1).sub(_set_var(sp, 0)))
    return v.to_python() + 1 if v.is_int() else None


def pw_extremes(pa: isl.PwAff) -> tuple[isl.Val, isl.Val]:
    """(min, max) of a piecewise quasi-affine expression over its domain and all parameter
    values (infinite when unbounded). Asked of the expression's graph, as `PwAff.min_val`
    fails on pieces with rational coefficients."""
    if pa.get_space().is_set():          # a function of the parameters only
        graph = isl.Set.from_pw_aff(pa)
    else:
        graph = isl.Map.from_pw_aff(pa).range()
    if graph.is_empty():
        return isl.Val.nan(graph.get_ctx()), isl.Val.nan(graph.get_ctx())
    x = _set_var(graph.get_space(), 0)
    return graph.min_val(x), graph.max_val(x)


def loop_range(state: StageState, d: int) -> isl.Set:
    """Values of loop d as a set in one dimension whose parameters include loops 0..d-1."""
    return dim_range(state.sched.intersect_domain(state.domain).range(), d)


def _const(pa: isl.PwAff) -> int | None:
    """The value of a piecewise-affine expression that is one constant, else None."""
    lo, hi = pw_extremes(pa)
    if lo.is_int() and hi.is_int() and lo.eq(hi):
        return lo.to_python()
    return None


def loop_min(state: StageState, d: int) -> int | None:
    """Loop d's lower bound when it is one constant (independent of sizes and outer loops)."""
    r = loop_range(state, d)
    if r.is_empty():
        return 0
    return _const(r.dim_min(0))


def loop_extent_bound(state: StageState, d: int) -> int | None:
    """The largest number of iterations loop d makes, or None when it grows with the sizes."""
    return extent_bound(loop_range(state, d))


def loop_const_range(state: StageState, d: int) -> tuple[int, int] | None:
    """(min, extent) of loop d when both are constants, the same for every outer iteration."""
    r = loop_range(state, d)
    if r.is_empty():
        return None
    lo, hi = _const(r.dim_min(0)), _const(r.dim_max(0))
    if lo is None or hi is None:
        return None
    return lo, hi - lo + 1


# ------------------------------------------------------------------------- primitives
def split_dim(state: StageState, name: str, factor: int) -> StageState:
    """Split loop `name` into `name.outer` and `name.inner`: x == off + factor*outer + inner.

    `off` is the loop's constant lower bound (0 when it varies), so the first tile is full.
    The inner loop runs min(factor, rest) times: extents need not divide.
    """
    d = state.loop_index(name)
    n = len(state.loops)
    off = loop_min(state, d) or 0
    x = f"(l{d} - ({off}))"
    outs = [f"l{k}" for k in range(n)]
    outs[d:d + 1] = [f"floor({x}/{factor})", f"{x} - {factor}*floor({x}/{factor})"]
    sched = state.sched.apply_range(_loop_map(n, outs))
    old = state.loops[d]
    loops = list(state.loops)
    loops[d:d + 1] = [Loop(f"{old.name}.outer"), Loop(f"{old.name}.inner")]
    return state.with_loops(loops, sched, f"split({name}, factor={factor})")


def reorder_dims(state: StageState, names: list[str]) -> StageState:
    """Put the named loops, in the given order, into the positions they occupy together."""
    idx = [state.loop_index(x) for x in names]
    slots = sorted(idx)
    perm = list(range(len(state.loops)))
    for slot, src in zip(slots, idx):
        perm[slot] = src
    n = len(state.loops)
    sched = state.sched.apply_range(_loop_map(n, [f"l{p}" for p in perm]))
    loops = [state.loops[p] for p in perm]
    return state.with_loops(loops, sched, f"reorder({', '.join(names)})")


def fuse_dims(state: StageState, outer: str, inner: str) -> StageState:
    """Fuse adjacent loops into `outer.inner.fused` == outer*E + (inner - min).

    E is the inner loop's largest extent, which must be a constant (a symbolic one would make
    the map non-affine); a shorter last inner loop leaves a gap that the fused loop skips.
    """
    d = state.loop_index(outer)
    if state.loop_index(inner) != d + 1:
        raise ScheduleError(
            f"fuse({outer}, {inner}) on stage {state.stage}: the loops must be adjacent with "
            f"{outer} directly outside {inner}; the loops are {[lp.name for lp in state.loops]}"
        )
    r = loop_range(state, d + 1)
    lo = 0 if r.is_empty() else _const(r.dim_min(0))
    ext = loop_extent_bound(state, d + 1)
    if lo is None or ext is None:
        raise NotImplementedError(
            f"fuse({outer}, {inner}) on stage {state.stage}: the inner loop's range depends on "
            "the sizes; tensorlang fuses only loops whose inner loop starts at a constant and "
            "runs a bounded number of iterations (split it first, e.g. split(..., factor=...))"
        )
    ext = max(ext, 1)
    n = len(state.loops)
    outs = [f"l{k}" for k in range(n)]
    outs[d:d + 2] = [f"{ext}*l{d} + l{d + 1} - ({lo})"]
    sched = state.sched.apply_range(_loop_map(n, outs))
    loops = list(state.loops)
    loops[d:d + 2] = [Loop(f"{outer}.{inner}.fused")]
    return state.with_loops(loops, sched, f"fuse({outer}, {inner})")


def skew_dims(state: StageState, outer: str, inner: str, factor: int) -> StageState:
    """Replace loop `inner` by inner + factor*outer (a wavefront skew); names are kept."""
    a, b = state.loop_index(outer), state.loop_index(inner)
    n = len(state.loops)
    outs = [f"l{k}" for k in range(n)]
    outs[b] = f"l{b} {'+' if factor > 0 else '-'} {abs(factor)}*l{a}"
    sched = state.sched.apply_range(_loop_map(n, outs))
    return state.with_loops(state.loops, sched, f"skew({outer}, {inner}, factor={factor})")


def tag_dim(state: StageState, name: str, kind: LoopKind, thread_tag: str = "") -> StageState:
    """Mark loop `name` as parallel, vectorized, unrolled or bound to a GPU index."""
    d = state.loop_index(name)
    loops = list(state.loops)
    loops[d] = Loop(loops[d].name, kind, thread_tag, loop_extent_bound(state, d)
                    if kind in (LoopKind.VECTORIZED, LoopKind.UNROLLED) else None)
    prim = {LoopKind.PARALLEL: "parallel", LoopKind.VECTORIZED: "vectorize",
            LoopKind.UNROLLED: "unroll", LoopKind.SERIAL: "serial"}.get(kind, "bind")
    return state.with_loops(loops, state.sched, f"{prim}({name})")
