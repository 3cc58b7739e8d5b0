"""Candidates for `tl.auto_schedule`, sampled from sketches (as Ansor's sketches), legal by
construction.

Per stage: elementwise producers inlined or placed at a loop of their reader; a dot product
or a convolution whose types a dot-product instruction of the target takes on that
instruction (`_dot_sketch`, `_conv_instruction_tile`: the operands packed into its layout,
the block below the register tile tensorized); a reduction with two or more spatial axes
register-tiled (cache_write into a local tile of mr rows by
nv vectors, the reduction outside the unrolled rows and vector columns, B optionally
packed) or, when a spatial axis other than the last indexes an input on its own (a
convolution's output channels), channel-blocked; a reduction along memory rfactored into
vector partials; a recurrence carried along both of its last axes as a wavefront; every
other stage tiled with its last axis in vectors, an inner tile unrolled, the outer loops
fused and parallel. The register tile, the channel-blocked tile, the vector partial sums
and the row statistics are the recipes of `schedule/recipes.py` (the executor's defaults
call the same ones with fixed sizes), here with sizes drawn. Each primitive is checked
exactly by isl as it is applied; one that is refused is left out of the trace (`_try`), so
every candidate is legal. `sample` makes one candidate; `lowers` says whether the code
generator takes it.
"""

from __future__ import annotations

import random

import islpy as isl

from ..config import debug_print
from ..errors import ScheduleError, TensorlangError
from ..ir.stmt import LoopKind
from ..schedule.recipes import (accumulate_channels, accumulate_in_registers, compute_at_rows,
                                tile_columns, vector_sum, vector_tile)
from ..schedule.recipes import apply_or_skip as _try
from ..schedule.schedule import Schedule, create_schedule
from ..target import Target


def as_outputs(outputs) -> list:
    """The outputs of an auto-scheduler call as a non-empty list (one tensor or several)."""
    outs = list(outputs) if isinstance(outputs, (list, tuple)) else [outputs]
    if not outs:
        raise TensorlangError("auto_schedule: expected at least one output tensor")
    return outs


def as_target(target) -> Target:
    """`target` as a `tl.Target` (a target string parsed)."""
    return Target.parse(target) if not isinstance(target, Target) else target


def _extent(ax) -> int | None:
    try:
        return int(ax.dom.extent.value) if hasattr(ax, "dom") else int(ax.extent.value)
    except (AttributeError, TypeError, ValueError):
        return None


def _is_output(s: Schedule, st) -> bool:
    return any(st.op.output is o for o in s.outputs)


def _reads_along(st, axis_name: str) -> bool:
    """Whether some read of the stage moves along memory with `axis_name`: its last index
    uses the axis (`j`, or `j + rq` in a convolution's window)."""
    from ..ir.expr import Load, Var
    from ..ir.visit import walk

    return any(isinstance(e, Load) and e.indices and
               any(isinstance(x, Var) and x.name == axis_name for x in walk(e.indices[-1]))
               for e in walk(st.op.body))


def _minmax(st) -> bool:
    from ..te.reduce import MINMAX_COMBINERS, combiner_name

    return combiner_name(st.op) in MINMAX_COMBINERS


def _inline_odds(s: Schedule, st) -> float:
    """How often a producer is inlined into its readers: usually; less often when that
    would recompute a transcendental (softmax's exponentials, read twice) or put a
    bounds test into a reduction's inner loop (a convolution's padded input)."""
    from ..ir.expr import Call, Select
    from ..ir.visit import walk

    body = list(walk(st.op.body))
    readers = [r for r in s.stages if any(t is st.op.output
                                          for t in getattr(r.op, "input_tensors", ()))]
    if any(isinstance(x, Select) for x in body) and any(r.op.reduce_axis for r in readers):
        return 0.25
    if any(isinstance(x, Call) for x in body):
        return 0.3
    return 0.7


def sample(outputs, target, rng: random.Random) -> Schedule:
    """One candidate schedule (see the module), every primitive checked as applied."""
    outs = as_outputs(outputs)
    tgt = as_target(target)
    s = create_schedule(outs)
    lanes = tgt.vector_lanes(str(outs[0].dtype))
    for st in list(s.stages):                       # producers: inline, or placed later
        if not _is_output(s, st) and not st.op.reduce_axis and not st.op.is_recurrence \
                and rng.random() < _inline_odds(s, st):
            _try(st, "compute_inline")
    placed = []
    # row statistics computed per row of the output (softmax, layer norm): those stages
    # get no parallel loop of their own (they will run inside the output's)
    per_row = _row_stages(s) if rng.random() < 0.6 else []
    for st in reversed(list(s.stages)):
        if st.inlined or st not in s.stages:
            continue
        spatial = list(st.op.axis)
        red = list(st.op.reduce_axis)
        wide = len(spatial) >= 2 and (_extent(spatial[-1]) or 0) >= lanes and \
            _reads_along(st, spatial[-1].var.name)
        along = red and _reads_along(st, red[-1].var.name)
        chan = _channel_axis(s, st, lanes) if red and len(spatial) >= 2 else None
        dot = _dot_operands(st, tgt) if red else None
        if dot is not None and rng.random() < 0.75:
            _dot_sketch(s, st, tgt, rng, *dot)
        elif st.op.is_recurrence and len(spatial) >= 2 and rng.random() < 0.4:
            _wavefront(st, rng, lanes, tgt)
        elif red and (wide or chan) and rng.random() < 0.75:
            conv = _conv_operands(st, tgt, *chan) if chan is not None else None
            if conv is not None and rng.random() < 0.75:
                _conv_instruction_tile(s, st, tgt, rng, *chan, *conv)
            elif chan is not None and rng.random() < _channel_odds(st, lanes, wide):
                _channel_tile(s, st, tgt, lanes, rng, *chan)
            else:
                _register_tile(s, st, tgt, lanes, rng)
        elif red and (along and rng.random() < (0.3 if _minmax(st) else 0.8) or
                      rng.random() < 0.3):
            # (a max or min along memory is vectorised by LLVM itself, with several
            # accumulators: a rfactor keeps one, its NaN-propagating steps a chain)
            _vector_partials(s, st, lanes, rng, parallel=st not in per_row)
        else:
            _tile_vector(s, st, lanes, rng, parallel=st not in per_row)
        if not _is_output(s, st) and rng.random() < 0.5:
            placed.append(st)
    if per_row:
        _rows(s, per_row)
    for st in placed:                               # a producer at a loop of its reader
        if st.inlined or st.state.attach is not None:
            continue
        readers = [r for r in s.stages if r is not st and not r.inlined and
                   any(t is st.op.output for t in getattr(r.op, "input_tensors", ()))]
        if readers:
            r = rng.choice(readers)
            # a loop of the reader outside its reduction: placed inside it, the producer
            # would run between a register tile's updates (a conv's padded input at `rc`,
            # recomputed for every step of the reduction)
            loops = []
            for lp, over in zip(r.state.loops, _reduction_loops(r)):
                if over:
                    break
                if lp.kind is not LoopKind.VECTORIZED:
                    loops.append(lp.name)
            if loops:
                _try(st, "compute_at", r, rng.choice(loops[:3]))
    return s


def lowers(s: Schedule) -> bool:
    """Whether the candidate lowers to a loop nest (a few legal combinations are not
    implemented by the code generator; they are dropped, never measured)."""
    return lower_candidate(s) is not None


def lower_candidate(s: Schedule, name: str = "main"):
    """The candidate's loop nest (`lower`'s LoweredFunc, its function called `name`), or
    None where the code generator does not implement it (TL_DEBUG=2 says why)."""
    from ..schedule.lower import lower

    try:
        return lower(s, [*s.placeholders, *s.outputs], name)
    except (NotImplementedError, TensorlangError) as e:
        debug_print(2, f"auto_schedule: candidate dropped: {str(e).splitlines()[0]}")
        return None


def _row_stages(s: Schedule) -> list:
    """The stages `_rows` would place at the output's row loop: not the output, not
    inlined, with the output's leading extents."""
    out = s[s.outputs[0]]
    if len(out.op.axis) < 2:
        return []
    lead = [_extent(a) for a in out.op.axis[:-1]]
    return [st for st in s.stages if st is not out and not st.inlined and st.op.axis and
            [_extent(a) for a in st.op.axis[:len(lead)]] == lead]


def _rows(s: Schedule, stages: list) -> None:
    """Row statistics at the output's row loop (softmax, layer norm): `stages` (from
    `_row_stages`) are computed inside the output's first loop, readers first, so each
    row is read from memory once (`schedule.recipes.compute_at_rows`)."""
    out = s[s.outputs[0]]
    if not out.state.loops:
        return
    row = out.state.loops[0].name
    if row != out.op.axis[0].var.name and not row.startswith(out.op.axis[0].var.name + "."):
        return           # the row loop was fused with another: its rows are not whole
    compute_at_rows(stages, out, row, apply=_try)


def _reduction_loops(st) -> list[bool]:
    """Per loop of the stage, whether it moves with a reduce axis (isl: that output of the
    stage's schedule map involves the reduce dimensions of its space)."""
    state = st.state
    m = state.sched
    n_out, n_in = m.dim(isl.dim_type.out), m.dim(isl.dim_type.in_)
    red = n_in - state.n_spatial
    return [red > 0 and m.project_out(isl.dim_type.out, d + 1, n_out - d - 1)
            .project_out(isl.dim_type.out, 0, d)
            .involves_dims(isl.dim_type.in_, state.n_spatial, red) for d in range(n_out)]


def _parallel_outer(st, rng: random.Random) -> None:
    """The outermost loops fused and parallel; a loop that carries a dependence is refused
    (isl's witness) and the next one is tried."""
    from ..polyhedral.transform import loop_extent_bound

    red = _reduction_loops(st)
    # a leading loop of one iteration (a batch of 1) is fused into the next: parallel, it
    # would run everything on one core (a conv's padded input, `parallel("a")`: serial)
    while len(st.state.loops) >= 2 and not any(red[:2]) and \
            loop_extent_bound(st.state, 0) == 1 and \
            all(lp.kind is LoopKind.SERIAL for lp in st.state.loops[:2]):
        if _try(st, "fuse", st.state.loops[0].name, st.state.loops[1].name) is None:
            break
        red = _reduction_loops(st)
    loops = [lp.name for lp in st.state.loops]
    if len(loops) >= 2 and rng.random() < 0.5 and not any(red[:2]) and \
            all(lp.kind is LoopKind.SERIAL for lp in st.state.loops[:2]):
        f = _try(st, "fuse", loops[0], loops[1])
        if f is not None and _try(st, "parallel", f) is not None:
            return
    for name, over in list(zip(loops, red))[:2]:
        if over:
            return                          # a reduction loop: rfactor first, not parallel
        if _try(st, "parallel", name) is not None or \
                name not in [lp.name for lp in st.state.loops]:
            return


def _wavefront(st, rng: random.Random, lanes: int = 16, tgt=None) -> None:
    """A recurrence whose last two axes both carry dependences (u[i, j] from u[i - 1, j]
    and u[i, j - 1]): tiles of them, the column-tile loop skewed by the row-tile loop and
    moved outside it, so the tiles of one anti-diagonal are independent and run in
    parallel (isl checks each step; a recurrence that does not allow it keeps the steps
    that were accepted, or falls back to parallel outer loops). A stencil stepped in time
    (u[t, i] from u[t - 1, i - 1 .. i + 1]) refuses those tiles — a step reads the tile to
    its right — and is time-tiled instead (`_time_tile`) where two steps of its rows do
    not fit the L1: a step at a time keeps them there otherwise, and time tiles only add
    wavefronts."""
    axes = [a.var.name for a in st.op.axis]
    i, j = axes[-2], axes[-1]
    tiled = _try(st, "tile", i, j, rng.choice([16, 32, 64]), rng.choice([16, 32, 64, 128]))
    if tiled is None:
        row = (_extent(st.op.axis[-1]) or 0) * st.op.output.dtype.itemsize
        if tgt is None or 2 * row <= tgt.cache_bytes[0] or not _time_tile(st, rng, lanes):
            _parallel_outer(st, rng)
        return
    io, jo = f"{i}.outer", f"{j}.outer"
    if _try(st, "skew", io, jo, factor=1) is None or \
            _try(st, "reorder", *axes[:-2], jo, io) is None or \
            _try(st, "parallel", io) is None:
        _parallel_outer(st, rng)


def _time_tile(st, rng: random.Random, lanes: int) -> bool:
    """Time tiling of a stencil stepped along its first axis t: its last axis i skewed by
    t (i + t: every dependence then points forward along both), parallelogram tiles of
    (t, i) that keep a few steps of a strip in cache, the tiles' wavefront in parallel as
    in `_wavefront`, and each step's row of a tile in vectors (Pluto's and Tiramisu's
    time-tiled stencils: a stencil whose rows outgrow the L1 then reads each row from
    memory once per few steps). False when isl refuses the skew (the stage is left as it
    was); a skew whose tiles are refused stays, its loops then parallel where
    isl allows."""
    axes = [a.var.name for a in st.op.axis]
    t, i = axes[-2], axes[-1]
    if _try(st, "skew", t, i, factor=1) is None:
        return False
    if _try(st, "tile", t, i, rng.choice([4, 8, 16, 32]),
            rng.choice([64, 128, 256, 512, 1024])) is None:
        _parallel_outer(st, rng)
        return True
    to, io = f"{t}.outer", f"{i}.outer"
    if _try(st, "skew", to, io, factor=1) is not None and \
            _try(st, "reorder", *axes[:-2], io, to) is not None:
        _try(st, "parallel", to)
    if _try(st, "split", f"{i}.inner", factor=lanes) is not None:
        _try(st, "vectorize", f"{i}.inner.inner")
    return True


def _tile_vector(s: Schedule, st, lanes: int, rng: random.Random,
                 parallel: bool = True) -> None:
    """The last axis in vectors (a few of them unrolled), optionally a row tile with the
    reduction loops outside it, the outer loops parallel. (The executor's
    `recipes.vectors_inside_reduction` is its one-vector, untiled case; the draws here come
    between the primitives, each where the one before it was taken, so it is not shared:
    drawing them first would change the candidates a seed gives.)"""
    spatial = [a.var.name for a in st.op.axis]
    red = [a.var.name for a in st.op.reduce_axis]
    if not spatial:
        return
    j = spatial[-1]
    ext = _extent(st.op.axis[-1])
    if ext is not None and ext >= lanes and rng.random() < 0.9:
        # vectors a column tile: a few (unrolled), or a wide tile whose producers fit the
        # L1 beside it (Adams2019's blur: 4 rows x 256 columns, its first stage per tile)
        u = rng.choice([1, 1, 2, 4, 8, 16])
        jo, ji = (_try(st, "split", j, factor=lanes * u) or (None, None))
        if ji is not None:
            vec = ji
            if u > 1:
                jm, vec = (_try(st, "split", ji, factor=lanes) or (None, None))
            inner = [x for x in (f"{j}.inner.outer",) if u > 1]
            if len(spatial) >= 2 and rng.random() < 0.5:
                i = spatial[-2]
                ti = rng.choice([2, 4, 8, 16, 32])
                if _try(st, "split", i, factor=ti) is not None:
                    order = spatial[:-2] + [f"{i}.outer", f"{j}.outer", *red,
                                            f"{i}.inner", *inner, vec.name if vec else ""]
                    _try(st, "reorder", *[x for x in order if x])
                    if ti <= 8 and rng.random() < 0.5:
                        _try(st, "unroll", f"{i}.inner")
            elif red:
                _try(st, "reorder", *spatial[:-1], f"{j}.outer", *red, *inner,
                     vec.name if vec else f"{j}.inner")
            if vec is not None:
                _try(st, "vectorize", vec)
            if inner and u <= 4 and rng.random() < 0.5:
                _try(st, "unroll", inner[0])
    if parallel:
        _parallel_outer(st, rng)


def _vector_partials(s: Schedule, st, lanes: int, rng: random.Random,
                     parallel: bool = True) -> None:
    """A reduction along memory: its last reduce loop split by the lanes and rfactored,
    the partial sums accumulating in one vector or two independent ones (`vector_sum`)."""
    red = st.op.reduce_axis
    ext = _extent(red[-1])
    if ext is None or ext < 2 * lanes or not _reads_along(st, red[-1].var.name):
        _tile_vector(s, st, lanes, rng, parallel)
        return
    # one vector of partial sums, or two (independent chains, then added into one: the
    # executor's; layer norm's row sums wait on one add's latency a vector)
    chains = 2 if ext >= 4 * lanes and rng.random() < 0.5 else 1
    try:
        vector_sum(s, st, red[-1], lanes, chains, place=rng.random() < 0.8)
    except ScheduleError as e:          # a refused step: the schedule as far as it got
        debug_print(2, f"sample: vector partials refused ({e})")
    main = s[st.op.output]
    if parallel:
        _parallel_outer(main, rng)


def _register_tile(s: Schedule, st, tgt, lanes: int, rng: random.Random) -> None:
    """A register tile (TVM's and the executor's matmul structure: `recipes.vector_tile`
    and `recipes.accumulate_in_registers`) with sampled sizes, row axis and tile order."""
    out = st.op.output
    regs = tgt.vector_registers
    n = _extent(st.op.axis[-1]) or lanes
    nv = rng.choice([v for v in (1, 2, 3, 4) if v <= max(1, regs // 8) and
                     (v - 1) * lanes < n] or [1])       # no vector wholly past the axis
    # rows up to what the registers hold: one vector wide, a convolution's channel block
    # takes 28 output columns (TVM's conv2d_NCHWc tile, the executor's)
    mr = rng.choice([r for r in (1, 2, 3, 4, 6, 8, 12, 14, 16, 24, 28)
                     if r * nv + nv + 2 <= regs] or [1])
    if rng.random() < 0.4 and n > nv * lanes:
        from ..ir.expr import Load, Var
        from ..ir.visit import walk

        j = st.op.axis[-1].var.name
        for e in walk(st.op.body):
            if isinstance(e, Load) and e.indices and isinstance(e.indices[-1], Var) and \
                    e.indices[-1].name == j and hasattr(e.buffer, "op") and \
                    any(e.buffer is p for p in s.placeholders):
                _try(s, "pack", e.buffer, len(e.buffer.shape) - 1, nv * lanes, [st])
                break
    local = _try(s, "cache_write", out, "local")
    if local is None:
        _tile_vector(s, st, lanes, rng)
        return
    cs = s[out]
    axes = [a.var.name for a in cs.op.axis]
    row = rng.choice(axes[:-1]) if rng.random() < 0.5 else axes[-2]  # conv: channels
    tiled = vector_tile(cs, row, axes[-1], mr, nv, lanes, apply=_try)
    if tiled is None:
        _parallel_outer(cs, rng)
        return
    io, jo, _, _ = tiled
    k_row = axes.index(row)
    if row != axes[-2]:        # the tile's row loop after the other spatial loops
        rest = [x for x in axes[:-1] if x != row]
        _try(cs, "reorder", *rest[:k_row], f"{row}.outer", *rest[k_row:],
             f"{axes[-1]}.outer", f"{row}.inner", f"{axes[-1]}.inner.outer",
             f"{axes[-1]}.inner.inner")
    at = jo
    if rng.random() < 0.5 and _try(cs, "reorder", jo, io) is not None:
        # column tiles outside the row tiles (the executor's matmul order): a column
        # panel of B stays in the L2 while every row tile passes over it, where rows
        # outside sweep all of B once per row tile
        at = io
    accumulate_in_registers(s, local, cs, at, k_row, lanes, apply=_try)
    _parallel_outer(cs, rng)


def _index_dims(load) -> dict[str, int] | None:
    """{variable name: dimension} of a read whose every index is one loop variable (A[i, k]);
    None otherwise (A[i, k + 1], A[2 * i, k])."""
    from ..ir.expr import Var

    if not all(isinstance(x, Var) for x in load.indices):
        return None
    dims = {x.name: d for d, x in enumerate(load.indices)}
    return dims if len(dims) == len(load.indices) else None


def _dot_operands(st, tgt):
    """(instruction, a, b) where stage `st` is a dot product that one of the target's
    dot-product instructions computes (`tl.intrin.dot_instructions`): C[..., i, j] =
    sum_k a[..., i, k] * b[..., k, j], each operand's dimensions in any order, one reduce
    axis, the operands' and the sum's dtypes the instruction's (a, the operand shared by
    the instruction's lanes, does not move with j; b does not move with i); None
    otherwise."""
    from ..intrin import dot_instructions
    from ..ir.expr import Load
    from ..ir.visit import walk
    from ..te.reduce import combiner_name

    if len(st.op.reduce_axis) != 1 or len(st.op.axis) < 2 or combiner_name(st.op) != "sum":
        return None
    loads = [e for e in walk(st.op.body) if isinstance(e, Load)]
    if len(loads) != 2 or any(_index_dims(x) is None for x in loads):
        return None
    i, j = (a.var.name for a in st.op.axis[-2:])
    k = st.op.reduce_axis[0].var.name
    for intrin in dot_instructions(tgt):
        if str(st.op.output.dtype) != str(intrin.desc.dtype):
            continue
        want = [str(t.dtype) for t in intrin.inputs]
        for a, b in (loads, loads[::-1]):
            da, db = _index_dims(a), _index_dims(b)
            if [str(a.buffer.dtype), str(b.buffer.dtype)] == want and k in da and k in db \
                    and j in db and j not in da and i not in db:
                return intrin, a, b
    return None


def _dot_sketch(s: Schedule, st, tgt, rng: random.Random, intrin, a, b) -> None:
    """A dot product on the target's instruction (`_dot_operands`): b packed into the
    instruction's layout ([..., j / lanes, k / depth, lanes, depth]:
    `dot_products.pack_blocks`), a packed along k where k is not
    its last dimension, then `dot_products.dot_tile` with drawn sizes (rows x vectors of
    sums, B's column panels blocked to fit half the L2 or not). Where isl refuses the
    instruction (a body it does not compute) the same nest runs vectorized."""
    from ..schedule.dot_products import dot_tile, pack_blocks, panels_per_block

    lanes, depth = intrin.extents[0], intrin.extents[-1]
    j, k = st.op.axis[-1].var.name, st.op.reduce_axis[0].var.name
    da, db = _index_dims(a), _index_dims(b)
    if da[k] != len(a.indices) - 1:
        ap = _try(s, "pack", a.buffer, da[k], depth, [st])
        if ap is not None:
            _try(s[ap], "parallel", s[ap].op.axis[0].var.name)
    # b as [..., j / lanes, k / depth, lanes, depth]: a column panel's blocks one after the
    # other, as the tile reads them
    if pack_blocks(s, st, b.buffer, db[j], db[k], lanes, depth, others_first=True,
                   apply=_try) is None:
        _register_tile(s, st, tgt, tgt.vector_lanes(str(st.op.output.dtype)), rng)
        return
    regs = tgt.vector_registers
    n = _extent(st.op.axis[-1]) or lanes
    vecs = rng.choice([v for v in (1, 2, 3, 4) if (v - 1) * lanes < n] or [1])
    rows = rng.choice([r for r in (1, 2, 3, 4, 6, 8) if r * vecs + vecs + 1 <= regs] or [1])
    kext = _extent(st.op.reduce_axis[0]) or depth
    per_block = panels_per_block(kext, lanes * vecs, b.buffer.dtype.itemsize,
                                 tgt.cache_bytes[1] // 2) if rng.random() < 0.5 else 0
    dot_tile(st, lanes, depth, intrin, rows, vecs, per_block, apply=_try)


def _conv_operands(st, tgt, v: str, src, dim: int):
    """(instruction, x, c) where the channel-blocked stage `st` (output channel axis `v`,
    which indexes dimension `dim` of weights `src`: `_channel_axis`) computes sums of
    products that a dot-product instruction of the target takes: its two reads are the
    weights and an input x, a reduce axis c indexes both plainly (the input channels), the
    operands' and the sum's types are the instruction's (the weights its `b`, whose rows
    the instruction's lanes take); None otherwise."""
    from ..intrin import dot_instructions
    from ..ir.expr import Load, Var
    from ..ir.visit import walk
    from ..te.reduce import combiner_name

    if combiner_name(st.op) != "sum":
        return None
    loads = [e for e in walk(st.op.body) if isinstance(e, Load)]
    ws = [e for e in loads if e.buffer is src]
    xs = [e for e in loads if e.buffer is not src]
    if len(loads) != 2 or len(ws) != 1 or _index_dims(ws[0]) is None:
        return None
    w, x = ws[0], xs[0]
    plain_x = {i.name for i in x.indices if isinstance(i, Var)}
    for intrin in dot_instructions(tgt):
        if str(st.op.output.dtype) != str(intrin.desc.dtype) or \
                [str(x.buffer.dtype), str(w.buffer.dtype)] != [str(t.dtype)
                                                               for t in intrin.inputs]:
            continue
        for ax in st.op.reduce_axis:
            c = ax.var.name
            if c in _index_dims(w) and c in plain_x:
                return intrin, x, c
    return None


def _conv_instruction_tile(s: Schedule, st, tgt, rng: random.Random, v: str, src, dim: int,
                           intrin, x, c: str) -> None:
    """The channel-blocked tile (`_channel_tile`) on a dot-product instruction: the operands
    packed into its layout (`dot_products.pack_conv_operands`), a local tile (cache_write)
    of cv vectors of channels x rn columns (drawn) on the instruction
    (`dot_products.channel_dot_tile`)."""
    from ..schedule.dot_products import channel_dot_tile, pack_conv_operands

    lanes = intrin.extents[0]
    out = st.op.output
    if not pack_conv_operands(s, st, x, src, c, dim, lanes, intrin.extents[-1], apply=_try):
        _channel_tile(s, st, tgt, tgt.vector_lanes(str(out.dtype)), rng, v, src, dim)
        return
    local = _try(s, "cache_write", out, "local")
    if local is None:
        _parallel_outer(s[out], rng)
        return
    axes = [a.var.name for a in st.op.axis]
    nj = _extent(st.op.axis[-1]) or 1
    nv = _extent(st.op.axis[axes.index(v)]) or lanes
    regs = tgt.vector_registers
    # cv vectors of channels x rn columns of sums: one vector of channels and up to 14
    # columns (the executor's int8 conv), or several vectors of channels sharing each
    # column's broadcast and fewer columns
    cv = rng.choice([x for x in (1, 1, 2, 4) if x == 1 or x * lanes <= nv])
    fits = [r for r in tile_columns(nj, regs) if cv * r + cv + 2 <= regs]
    rn = fits[-1] if fits and rng.random() < 0.5 else rng.choice(
        [r for r in (2, 3, 4, 6, 7, 8, 12, 14) if r <= max(nj, 2) and cv * r + cv + 2 <= regs]
        or [2])
    channel_dot_tile(s, s[local], s[out], v, axes[-1], c, lanes, intrin.extents[-1], intrin,
                     cv, rn, apply=_try)
    if not any(lp.kind is LoopKind.PARALLEL for lp in s[out].state.loops):
        _parallel_outer(s[out], rng)


def _channel_axis(s: Schedule, st, lanes: int):
    """(axis, input, dimension) for a channel-blocked register tile of a reduction: a
    spatial axis other than the last, at least a vector long, that indexes an input
    directly (a convolution's output channel `o` in its weights `W[o, c, p, q]`) in a
    read that does not move with the last axis (so one vector of that input serves every
    column of the tile), where the last axis has columns (at least 4) that some read
    moves with; None when there is none (a row sum kept as [n, 1]: vectorising along its
    rows would transpose its input)."""
    from ..ir.expr import Load, Var
    from ..ir.visit import walk

    axes = [a.var.name for a in st.op.axis]
    if len(axes) < 2 or (_extent(st.op.axis[-1]) or 0) < 4 or not any(
            isinstance(e, Load) and any(isinstance(x, Var) and x.name == axes[-1]
                                        for i in e.indices for x in walk(i))
            for e in walk(st.op.body)):
        return None           # no columns whose reads a vector of the channel axis shares
    for ax in st.op.axis[:-1]:
        if (_extent(ax) or 0) < lanes:
            continue
        for e in walk(st.op.body):
            if not (isinstance(e, Load) and any(e.buffer is p for p in s.placeholders)):
                continue
            used = {x.name for i in e.indices for x in walk(i) if isinstance(x, Var)}
            if axes[-1] in used:
                continue
            for d, i in enumerate(e.indices[:-1]):
                if isinstance(i, Var) and i.name == ax.var.name:
                    return ax.var.name, e.buffer, d
    return None


def _channel_odds(st, lanes: int, wide: bool) -> float:
    """How often a reduction with a channel axis gets the channel-blocked tile rather than
    rows of vectors along its last axis: mostly when that axis is narrower than a vector
    or read through a window (`j + rq`: a convolution, whose output columns are a poor
    vector axis: 28 = 16 + 12 lanes, 7 = a part of one); rarely otherwise (a matmul,
    whose rows of B are the natural vectors)."""
    from ..ir.expr import Load, Var
    from ..ir.visit import walk

    if not wide:
        return 1.0
    j = st.op.axis[-1].var.name
    red = {a.var.name for a in st.op.reduce_axis}
    for e in walk(st.op.body):
        if isinstance(e, Load) and e.indices:
            used = {x.name for x in walk(e.indices[-1]) if isinstance(x, Var)}
            if j in used and used & red:
                return 0.6
    return 0.15


def _channel_tile(s: Schedule, st, tgt, lanes: int, rng: random.Random,
                  v: str, src, dim: int) -> None:
    """A channel-blocked register tile (TVM's conv2d_NCHWc schedule on the declared
    program): `src` packed along `dim` in vectors of the axis `v`, the result computed in
    a local tile laid out with `v` last (`reorder_storage`), whose rn columns of the last
    axis are unrolled, each a vector of `v` accumulating over the reduction — every step
    one vector load of `src` and a broadcast per column (`recipes.accumulate_channels`).
    The tile is written out a vector of `v` at a time."""
    out = st.op.output
    axes = [a.var.name for a in st.op.axis]
    j = axes[-1]
    nj = _extent(st.op.axis[-1]) or 1
    regs = tgt.vector_registers
    # columns: mostly a divisor of the width up to half the registers (a partial tile, or
    # more columns, spill: the executor's `conv_columns`), sometimes any count that fits
    fits = tile_columns(nj, regs)
    if fits and rng.random() < 0.4:
        rn = fits[-1]           # the most columns that divide the width (conv_columns)
    else:
        rn = rng.choice(fits if fits and rng.random() < 0.7 else
                        [r for r in (4, 6, 7, 8, 12, 14, 16, 24, 28)
                         if r + 2 <= regs and r <= nj] or [max(1, min(nj, regs - 2))])
    packed = _try(s, "pack", src, dim, lanes, [st])
    if packed is not None:
        _try(s[packed], "vectorize", "ax_i")
    local = _try(s, "cache_write", out, "local")
    if local is None:
        _tile_vector(s, st, lanes, rng)
        return
    local = _try(s[local], "reorder_storage", *[x for x in axes if x != v], v) or local
    cs = s[out]
    if _try(cs, "tile", v, j, lanes, rn) is None:
        _parallel_outer(cs, rng)
        return
    k = axes.index(v)
    pre, mid = axes[:k], [x for x in axes[k + 1:-1]]
    _try(cs, "reorder", *pre, f"{v}.outer", *mid, f"{j}.outer", f"{j}.inner", f"{v}.inner")
    _try(cs, "vectorize", f"{v}.inner")
    accumulate_channels(s[local], cs, f"{j}.outer", [x for x in axes if x not in (v, j)], j, v,
                        apply=_try)
    outer = [*pre, f"{v}.outer", *mid]
    if len(outer) >= 2 and rng.random() < 0.7:
        f = _try(cs, "fuse", *outer)
        if f is not None and _try(cs, "parallel", f) is not None:
            return
    _parallel_outer(cs, rng)
