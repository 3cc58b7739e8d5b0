"""Schedule recipes: the CPU sketches written once, each as a function of its parameters.

The graph executor's default schedules (`graph/cpu_schedules.py`) call them with sizes
fixed from the target; the auto-scheduler's sampler (`autoschedule/sample.py`) calls them
with sizes it draws. Each recipe applies its primitives through `apply`:
`apply_or_raise` (the executor: a refused primitive is an error, and its caller falls back
to the declared loop nest) or `apply_or_skip` (the sampler: a refused primitive is left out
of the trace and the rest goes on, so every candidate is legal). Loops are named as the
primitives name them (`split("j")` makes `j.outer` and `j.inner`).

The register tile of a matmul, as the executor gives it (`vector_tile`, then
`accumulate_in_registers` at the column tile; `local` is the cache_write stage)::

    for i0.outer, i1.outer:                                   # the output's tiles
      for i0 (unrolled), i1.outer (unrolled), i1.inner (vectorised):
        local[i0, i1] = 0.0
      for k:                                                  # outside the tile
        for i0 (unrolled), i1.outer (unrolled), i1.inner (vectorised):
          local[i0, i1] = local[i0, i1] + A[i0, k] * B[k, i1]
      for i0.inner, i1.inner.outer, i1.inner.inner (vectorised):
        out[...] = local[...]
"""

from __future__ import annotations

from collections.abc import Callable

from ..config import debug_print
from ..errors import ScheduleError

Apply = Callable[..., object]


def apply_or_raise(obj, prim: str, *args, **kw):
    """Apply primitive `prim` of `obj` (a Schedule or a Stage): its result (True for the
    primitives that return nothing). A refused primitive raises its ScheduleError."""
    out = getattr(obj, prim)(*args, **kw)
    return True if out is None else out


def apply_or_skip(obj, prim: str, *args, **kw):
    """Apply a primitive: its result (True for those that return nothing), or None when it
    is refused (the schedule stays as it was; TL_DEBUG=3 says why)."""
    try:
        return apply_or_raise(obj, prim, *args, **kw)
    except ScheduleError as e:
        debug_print(3, f"auto_schedule: {prim} refused: {str(e).splitlines()[0]}")
        return None


def names(axes) -> list[str]:
    """The loop names of a stage's axes (`op.axis`, `op.reduce_axis`)."""
    return [a.var.name for a in axes]


def tile_columns(width: int, registers: int) -> list[int]:
    """The column counts of a channel-blocked tile (one accumulator vector per column)
    that divide the output width `width`, from 4 up to half the vector registers (the
    other half holds the overlapping input broadcasts of the unrolled window; a partial
    tile or more columns spill)."""
    return [r for r in range(4, registers // 2 + 1) if width % r == 0]


def vector_tile(st, row, column, rows: int, vectors: int, lanes: int, order=None,
                apply: Apply = apply_or_raise):
    """Tile loops `row` and `column` of stage `st` by `rows` x `vectors` vectors of `lanes`,
    reorder its loops to `order` (loop names) when given, then split the column tile into
    vectors and vectorise the lanes:
    `row.outer, column.outer, row.inner, column.inner.outer, column.inner.inner`.
    Returns the tile's four loops (`tile`'s result), or None where the tile is refused."""
    tiled = apply(st, "tile", row, column, rows, vectors * lanes)
    if tiled is None:
        return None
    if order is not None:
        apply(st, "reorder", *order)
    parts = apply(st, "split", tiled[3], factor=lanes)
    if parts is not None:
        apply(st, "vectorize", parts[1])
    return tiled


def vectors_inside_reduction(st, lanes: int, apply: Apply = apply_or_raise) -> bool:
    """Stage `st`'s last axis split into vectors of `lanes` (vectorised) with its reduction
    loops between the vectors and the lanes, so each lane accumulates its own output
    (a sum over the batch, pooling windows): `..., j.outer, <reduction>, j.inner`.
    False where the split is refused."""
    spatial = names(st.op.axis)
    j = spatial[-1]
    if apply(st, "split", j, factor=lanes) is None:
        return False
    apply(st, "reorder", *spatial[:-1], f"{j}.outer", *names(st.op.reduce_axis), f"{j}.inner")
    apply(st, "vectorize", f"{j}.inner")
    return True


def accumulate_in_registers(s, local, st, at, row_dim: int, lanes: int,
                            apply: Apply = apply_or_raise) -> bool:
    """A register tile's accumulators: `local` (the tensor of `cache_write`) computed at
    loop `at` of stage `st`, its last axis split into vectors of `lanes`, and the reduction
    loops moved outside the tile's rows (axis `row_dim`, unrolled), its vectors (unrolled)
    and the lanes (vectorised), so the accumulators stay in registers over the whole
    reduction. False where compute_at is refused (the tile is then left as it was)."""
    lt = s[local]
    if apply(lt, "compute_at", st, at) is None:
        return False
    lax = names(lt.op.axis)
    li, lj = lax[row_dim], lax[-1]
    rest = [x for x in lax[:-1] if x != li]
    if apply(lt, "split", lj, factor=lanes) is not None:
        apply(lt, "reorder", *rest, *names(lt.op.reduce_axis), li,
              f"{lj}.outer", f"{lj}.inner")
        apply(lt, "unroll", li)
        apply(lt, "unroll", f"{lj}.outer")
        apply(lt, "vectorize", f"{lj}.inner")
    return True


def accumulate_channels(tile, st, at, outer, column: str, channel: str,
                        apply: Apply = apply_or_raise) -> bool:
    """A channel-blocked tile's accumulators (TVM's conv2d_NCHWc): stage `tile`, whose
    last two axes are the tile's output columns and a vector of output channels, computed
    at loop `at` of stage `st`, with the reduction loops (over input channels and the
    window) outside the columns (unrolled: one accumulator vector each) and the channels
    (vectorised): every step loads the weights of the channel block as one vector and
    broadcasts one input element per column. `outer` are its other axes, kept first.
    False where compute_at is refused."""
    if apply(tile, "compute_at", st, at) is None:
        return False
    apply(tile, "reorder", *outer, *names(tile.op.reduce_axis), column, channel)
    apply(tile, "unroll", column)
    apply(tile, "vectorize", channel)
    return True


def compute_at_rows(stages, out, row, apply: Apply = apply_or_raise) -> None:
    """Row statistics (softmax's max and sum, layer norm's mean) and per-row values:
    `stages` computed inside loop `row` of stage `out` (the output's row loop), readers
    first, so each row is read from memory once and its passes run in the cache."""
    for st in reversed(stages):
        if not st.inlined and st.state.attach is None:
            apply(st, "compute_at", out, row)


def vector_sum(s, st, k, lanes: int, chains: int = 1, place: bool = True) -> None:
    """Stage `st`'s sum over its reduce axis `k` (along memory) in `chains` vectors of
    partial sums: k split by chains x lanes and rfactored, the partials' stage vectorised
    (its chains unrolled); with two or more chains, the chains' vectors added into one by
    a second rfactor; then the lanes added in order by `st`. `place`: the partial stages
    computed at `st`'s last axis (per output element; readers first), else at root.
    Raises ScheduleError where a primitive is refused."""
    t = st.op.output
    _, ki = st.split(k, factor=lanes * chains)
    rf = s.rfactor(t, ki)
    kk, *rest = s[rf].op.axis
    if chains > 1:
        kc, kk = s[rf].split(kk, factor=lanes)
        s[rf].reorder(*rest, *s[rf].op.reduce_axis, kc, kk)
        s[rf].unroll(kc)
    else:
        s[rf].reorder(*rest, *s[rf].op.reduce_axis, kk)
    s[rf].vectorize(kk)
    stages = [rf]
    if chains > 1:                      # the chains' vectors into one
        _, ci = st.split(st.leaf_iter_vars[-1], factor=lanes)
        rf2 = s.rfactor(t, ci)
        kk2, *rest2 = s[rf2].op.axis
        s[rf2].reorder(*rest2, *s[rf2].op.reduce_axis, kk2)
        s[rf2].vectorize(kk2)
        stages.append(rf2)
    if place and st.op.axis:
        for x in reversed(stages):      # readers first
            s[x].compute_at(st, st.op.axis[-1])
