"""The graph executor's default CPU schedules, by kind of group: elementwise (fused,
vectorised, parallel), matmul and conv2d (register-blocked from the target's vector
registers), reductions and softmax (vector partial sums, rows computed per row), pooling
and the conv adjoints (vectors along the last axis). A primitive that refuses is never
silent: TL_DEBUG=1 says so, TL_STRICT=1 makes it an error."""

from __future__ import annotations

import numpy as np

import tensorlang as tl

from ..config import debug_print, strict
from ..errors import ScheduleError, TensorlangError
from ..ir.stmt import LoopKind
from ..schedule.recipes import (accumulate_channels, accumulate_in_registers, compute_at_rows,
                                names, tile_columns, vector_sum, vector_tile,
                                vectors_inside_reduction)
from ..target import MAX_TILE_ROWS
from .bfloat16 import schedule_conv_bf16, schedule_matmul_bf16
from .quantized import schedule_conv_integer, schedule_matmul_integer
from ..te.reduce import MINMAX_COMBINERS


def _host() -> tl.Target:
    """The target the executor builds for (this machine)."""
    return tl.Target.parse("llvm")


def _lanes(dtype: str) -> int:
    return _host().vector_lanes(dtype)


def register_tile(m: int, n: int, dtype: str, target: tl.Target | None = None):
    """(rows, vectors per row) of a register-blocked tile: `Target.register_tile` of
    `target` (default this machine)."""
    return (target or _host()).register_tile(m, n, dtype)


LATENCY_ACCUMULATORS = 8   # independent FMA chains that hide the FMA latency (4 cycles x 2)
# The channel-blocked conv2d (`conv_block`) writes each tile to the NCHW output as vectors
# along the channels (a scatter, one element per channel plane). It wins over the direct
# form when the reduction per output (C * kh * kw) is at least SCATTER_REDUCTION, so the
# scatter is paid over enough work, and a channel plane (oh * ow) is at most SCATTER_PLANE
# elements (the 16 planes a scatter touches stay in the TLB); below or above, the scatter
# costs more than the direct form's partial vectors (measured: benchmarks/RESULTS-onnx.md).
SCATTER_REDUCTION = 256
SCATTER_PLANE = 64 * 64


def _fill(n: int, tile: int) -> float:
    """The fraction of `ceil(n / tile) * tile` lanes or columns that do useful work."""
    return n / (-(-n // tile) * tile)


def conv_columns(ow: int, regs: int, one_fma_a_cycle: bool = False) -> int | None:
    """Output columns per tile of the channel-blocked conv2d, one vector of channels per
    column: the largest divisor of the output width up to half the vector registers
    (`schedule.recipes.tile_columns`: LLVM keeps the overlapping input broadcasts of the
    unrolled kw loop in the other half; more columns spill), except at
    `WIDE_CONV_COLUMNS`, all registers but the weights, a broadcast and two spares (TVM's
    reg_n): every FMA then takes its broadcast from memory, one load per FMA. A core that
    issues one FMA a cycle at the vector width (`one_fma_a_cycle`: Zen 4's 512-bit FMA in two
    halves) has the loads to spare, and the wider tile halves the tiles' overhead (their
    starts, the row buffer's stores); a core with two FMA pipes at the width (AVX-512
    Xeons) is then load-bound and keeps the narrower tile. A partial last tile spills
    likewise. None when no such divisor reaches 4 columns."""
    if one_fma_a_cycle and regs >= WIDE_CONV_COLUMNS + 4 and ow % WIDE_CONV_COLUMNS == 0:
        return WIDE_CONV_COLUMNS
    fits = tile_columns(ow, regs)
    return fits[-1] if fits else None


WIDE_CONV_COLUMNS = 28


def _one_fma_a_cycle(t: tl.Target, dtype: str) -> bool:
    """Whether `t`'s cores issue at most one FMA a cycle on vectors of `dtype` at the
    target's width (its CPU model; a target without one counts as two)."""
    try:
        m = t.cpu_model
    except TensorlangError:
        return False
    bits = t.vector_lanes(dtype) * np.dtype(dtype).itemsize * 8
    return m.per_cycle(m.fma_pipes, bits) <= 1


def conv_block(out_shape, w_shape, dtype: str, target: tl.Target | None = None):
    """The register tile of the channel-blocked conv2d (`nnops.conv2d_blocked_te`):
    (block of output channels = one vector, output columns per tile), or None for the
    direct form (vectors along the output columns). A tile holds one accumulator vector of
    the block's channels per column; the weights are one vector load per step and the
    input is broadcast. It is taken when the output channels fill whole vectors, the
    scatter of its copy-out is cheap (SCATTER_REDUCTION, SCATTER_PLANE) and its lanes and
    FMA chains are used better than the direct form's: at 56 x 56, the direct form's
    4-vector rows fill 56 of 64 lanes."""
    t = target or _host()
    lanes = t.vector_lanes(dtype)
    _, k, oh, ow = (int(x) for x in out_shape)
    reduction = int(np.prod([int(x) for x in w_shape[1:]]))
    rn = conv_columns(ow, t.vector_registers, _one_fma_a_cycle(t, dtype))
    if rn is None or k % lanes or reduction < SCATTER_REDUCTION or oh * ow > SCATTER_PLANE:
        return None
    mr, nv = register_tile(k, ow, dtype, t)
    direct = _fill(ow, nv * lanes) * _fill(k, mr) * \
        min(mr * nv, LATENCY_ACCUMULATORS) / LATENCY_ACCUMULATORS
    blocked = min(rn, LATENCY_ACCUMULATORS) / LATENCY_ACCUMULATORS
    return (lanes, rn) if blocked > direct + 1e-9 else None


def default_schedule(out: tl.Tensor, kind: str, work: int, fresh=None,
                     anchor: tl.Tensor | None = None,
                     target: tl.Target | None = None) -> tl.Schedule:
    """Elementwise: all axes fused, split by the vector width, vectorised, and parallel when
    large. Matmul: register-blocked tiles (`_block_matmul`). Other kinds: the first axis in
    parallel when the work is large. `fresh()` makes the schedule to start from (default:
    `create_schedule(out)`); when a primitive is refused, that schedule is used as it is.
    `anchor` is the matmul whose elementwise epilogue `out` is (kind "matmul"). An integer
    matmul (kind "matmul_integer") and a bfloat16 one ("matmul_bf16") take `target`'s
    dot-product instruction where it has one (`quantized.schedule_matmul_integer`,
    `bfloat16.schedule_matmul_bf16`; `target` default this machine)."""
    fresh = fresh or (lambda: tl.create_schedule(out))
    try:
        s = fresh()
        st = s[out]
        axes = list(st.op.axis)
        if not axes and kind not in ("softmax", "reduce", "rows"):
            return s
        big = work >= 1 << 16
        if kind == "elementwise":
            lanes = _lanes(str(out.dtype))
            if _pieces_elementwise(st, lanes, big):
                return s
            fused = axes[0]
            for a in axes[1:]:
                fused = st.fuse(fused, a)
            size = int(np.prod([int(x.value) for x in out.shape]))
            if size >= 2 * lanes:
                outer, inner = st.split(fused, factor=lanes)
                st.vectorize(inner)
                if big:
                    st.parallel(outer)
            elif big:
                st.parallel(fused)
        elif kind == "matmul":
            _block_matmul(s, anchor if anchor is not None else out, out, big)
            return s
        elif kind == "matmul_integer":
            schedule_matmul_integer(s, out, target or _host())
            return s
        elif kind == "matmul_bf16":
            schedule_matmul_bf16(s, out, target or _host())
            return s
        elif kind == "conv_bf16":
            schedule_conv_bf16(s, out, target or _host())
            return s
        elif kind == "conv_integer":
            schedule_conv_integer(s, out, target or _host())
            return s
        elif kind == "conv2d":
            _block_conv(s, anchor if anchor is not None else out, out, big)
            return s
        elif kind in ("softmax", "reduce", "rows"):
            _vector_reduce(s, _lanes(str(out.dtype)), big,
                           rows_of=out if kind in ("softmax", "rows") else None)
            return s
        elif kind == "conv":
            _window_schedule(s, out, big)
            return s
        elif big and int(out.shape[0].value) > 1:
            st.parallel(axes[0])
        return s
    except ScheduleError as e:
        # never silent: the declared loop nest can be far slower. TL_STRICT=1 (set by the
        # test suite) makes it an error, so a refusal fails the tests that meet it.
        what = (f"executor: the default {kind} schedule of {out.name} "
                f"{tuple(int(x.value) for x in out.shape)} was refused ({e})")
        if strict():
            raise ScheduleError(f"{what}; TL_STRICT=1 forbids the fallback") from e
        debug_print(1, f"{what}; running the declared loop nest")
        return fresh()


def _condition_axis(st) -> int | None:
    """The outermost axis of stage `st` that a condition of its body (an `if_then_else`:
    which input of a concat, a pad's border) reads, or None."""
    from ..ir.expr import Select, Var
    from ..ir.visit import walk

    names_ = [a.var.name for a in st.op.axis]
    read = {x.name for e in walk(st.op.body) if isinstance(e, Select)
            for x in walk(e.cond) if isinstance(x, Var)}
    return next((d for d, n in enumerate(names_) if n in read), None)


def _permuted_axis(st) -> int | None:
    """The last axis of stage `st` that some read indexes other than as its own trailing
    dimensions in order (a transpose's permuted axes), or None: the axes after it are read
    as the output writes them, so a loop over them fused moves every read by one."""
    from ..ir.expr import Const, Load, Var
    from ..ir.visit import walk

    names_ = [a.var.name for a in st.op.axis]
    last = None
    for x in walk(st.op.body):
        if not isinstance(x, Load):
            continue
        if not all(isinstance(ix, (Var, Const)) for ix in x.indices):
            return None     # index arithmetic (a reshape's): the fused loop's reads move
                            # by one as a whole (`vector._flat_moves_by_one`)
        for d in range(len(names_)):
            tail = names_[d:]
            used = [k for k, ix in enumerate(x.indices)
                    if any(isinstance(v, Var) and v.name in tail for v in walk(ix))]
            if not used:            # the read does not move with these axes: uniform
                break
            k0 = len(x.indices) - len(tail)
            if k0 >= 0 and used == list(range(k0, len(x.indices))) and all(
                    isinstance(ix, Var) and ix.name == n
                    for ix, n in zip(x.indices[k0:], tail)):
                break
            last = d if last is None else max(last, d)
    return last


def _pieces_elementwise(st, lanes: int, parallel: bool) -> bool:
    """An elementwise stage whose body chooses between arms by an outer axis (a concat
    along channels: which input a channel comes from), or reads its inputs permuted up to
    an axis (a transpose that keeps the trailing axes): the axes up to that one fused into
    the outer loop (parallel when large), the axes after it fused into a contiguous inner
    loop in vectors. The choice is then one branch per vector, taken the same way by all
    its lanes, and each arm's reads move by one per lane: contiguous vector loads. With
    all axes fused into one loop the arm of each lane depends on a division of the fused
    index, and the reads become gathers. False (nothing done) where no condition reads an
    axis before the last, or where the inner run is shorter than two vectors."""
    cond, perm = _condition_axis(st), _permuted_axis(st)
    ds = [x for x in (cond, perm) if x is not None]
    d = max(ds) if ds else None
    axes = list(st.op.axis)
    if d is None or d + 1 >= len(axes):
        return False
    ext = [int(x.value) for x in st.op.output.shape]
    if d == perm and ext[-1] >= lanes:
        # a transpose: the last axis alone in vectors (its indices stay plain; the fused
        # trailing axes' would be divisions the vectoriser reads as gathers)
        d = len(axes) - 2
    inner_size = int(np.prod(ext[d + 1:]))
    if inner_size < 2 * lanes:
        return False
    inner = axes[d + 1]
    for a in axes[d + 2:]:
        inner = st.fuse(inner, a)
    outer = axes[0]
    for a in axes[1:d + 1]:
        outer = st.fuse(outer, a)
    st.vectorize(st.split(inner, factor=lanes)[1])
    if parallel and int(np.prod(ext[:d + 1])) > 1:
        st.parallel(outer)
    return True


def _last_index(st) -> object:
    """The last index of the stage's first tensor read (what varies along memory)."""
    from ..ir.expr import Load
    from ..ir.visit import walk

    for x in walk(st.op.body):
        if isinstance(x, Load) and x.indices:
            return x.indices[-1]
    return None


def _combiner(st) -> str:
    from ..te.reduce import combiner_name

    return combiner_name(st.op)


ROW_BUFFER_BYTES = 8192     # a softmax row of exponentials kept per row (stack, L1)
SMALL_BODY_NODES = 24       # a larger intermediate is kept per row, not recomputed


def _vector_reduce(s: tl.Schedule, lanes: int, parallel: bool,
                   rows_of: tl.Tensor | None = None) -> None:
    """Reductions (sum, mean, max, ... over some axes) and softmax-like groups (row
    reductions, then an elementwise stage reading them). A sum over the axis that runs
    along memory is rfactored into vectors of partial sums per output row, two independent
    chains when long enough (`_vector_sum`), then combine (a max or min there is left to
    LLVM's vectoriser, which does it well; a sum it may not reassociate). When a kept axis
    runs along memory (a sum over the batch), that axis is split by the vector width and
    its vector of outputs accumulates with the reduction loops outside it. Elementwise
    stages (a mean's scaling, softmax's quotient) are vectorised along their last axis;
    the first axis of every stage runs in parallel when the work is large.

    `rows_of` (softmax, log-softmax, fused row groups such as layer norm): the row
    statistics (max, sum, mean) and per-row values whose leading axes are the output's are
    computed inside the output's row loop (its leading axes, fused), so each row is read
    from memory once and its passes run in the cache (`schedule.recipes.compute_at_rows`).
    A row of an intermediate value (softmax's exponentials) is kept per row when it fits
    ROW_BUFFER_BYTES or when recomputing it would not be cheap."""
    from ..ir.expr import Var
    from ..ir.visit import walk

    def lead(t):
        return [int(x.value) for x in t.shape[:-1]]

    attach, row_loop = [], None
    if rows_of is not None:
        others = [st for st in s.stages if not any(st.op.output is o for o in s.outputs)
                  and not st.inlined and st.state.attach is None and st.op.axis]
        if len(rows_of.shape) < 2 or np.prod(lead(rows_of)) <= 1 or \
                any(st.op.reduce_axis and lead(st.op.output) != lead(rows_of) for st in others):
            rows_of = None               # the statistics are not per row of the output
        for st in others:                # intermediate values (softmax's exponentials):
            t = st.op.output             # a row of them kept per row, else recomputed
            if st.op.reduce_axis or (len(t.shape) >= 2 and int(t.shape[-1].value) == 1):
                continue
            small = sum(1 for _ in walk(st.op.body)) <= SMALL_BODY_NODES
            if small and (rows_of is None or
                          int(t.shape[-1].value) * t.dtype.itemsize > ROW_BUFFER_BYTES):
                st.compute_inline()
        if rows_of is not None:
            axes = s[rows_of].op.axis
            row_loop = axes[0] if len(axes) == 2 else s[rows_of].fuse(*axes[:-1])
    for st in list(s.stages):
        if st.inlined or st.state.attach is not None or \
                not (st.op.axis or st.op.reduce_axis):
            continue
        t = st.op.output
        red = list(st.op.reduce_axis)
        last = _last_index(st)
        spatial = list(st.op.axis)
        if red and spatial and isinstance(last, Var) and last.name == spatial[-1].var.name and \
                int(t.shape[-1].value) >= lanes:
            vectors_inside_reduction(st, lanes)
        elif red and isinstance(last, Var) and last.name == red[-1].var.name and \
                int(red[-1].extent.value) >= 2 * lanes and _combiner(st) not in MINMAX_COMBINERS:
            _vector_sum(s, st, red[-1], lanes, spatial)
        elif not red and int(t.shape[-1].value) >= 2 * lanes:
            jo, ji = st.split(spatial[-1], factor=lanes)
            st.vectorize(ji)
        if not spatial:
            continue
        if row_loop is not None and t is not rows_of and len(t.shape) >= 2 and \
                lead(t) == lead(rows_of):
            attach.append(st)
            continue
        outer = st.leaf_iter_vars[0]
        if parallel and st.state.loops[0].kind is not LoopKind.VECTORIZED and \
                not outer.name.startswith(tuple(r.var.name for r in red)):
            st.parallel(outer)
    if attach:
        compute_at_rows(attach, s[rows_of], row_loop)


SUM_CHAINS = 2   # independent vector partial sums a sum along memory keeps (see below)


def _vector_sum(s: tl.Schedule, st, k, lanes: int, spatial: list) -> None:
    """The sum of stage `st` over its reduce axis `k` (along memory) as SUM_CHAINS vectors
    of partial sums (`schedule.recipes.vector_sum`). One vector of partial sums waits an
    add's latency (3-4 cycles) a vector, where the core could start two a cycle: with two
    independent chains a compute-bound row sum (layer norm's) keeps the adds busy. Four
    chains are slower: LLVM unrolls both passes of a long row completely and keeps the
    first pass's loaded vectors for the second, spilling them. A sum shorter than
    2 * SUM_CHAINS vectors keeps one chain."""
    chains = SUM_CHAINS if int(k.extent.value) >= 2 * SUM_CHAINS * lanes else 1
    vector_sum(s, st, k, lanes, chains, place=bool(spatial))


PACK_MIN_FLOPS = 1 << 21   # a matmul this large packs B (the copy costs n*k, the reuse m/mr)


def _block_matmul(s: tl.Schedule, mm: tl.Tensor, out: tl.Tensor, parallel: bool) -> None:
    """Register-blocked matmul: each (mr x nr) tile of the output accumulates in a local
    buffer (cache_write at the tile) over the whole reduction, with the k loop outside the
    unrolled rows and vector columns, so the accumulators stay in registers. Batch axes stay
    outermost; the first of them (or the row tiles) runs in parallel when `parallel` or when
    the matmul makes at least 2**16 multiply-adds.

    When `out` is an elementwise epilogue of the matmul `mm` (same shape, already inlined
    down to its read of `mm`), the copy-out stage of cache_write is inlined into it: each
    tile goes from the accumulators through the epilogue to memory once."""
    m, n = (int(x.value) for x in mm.shape[-2:])
    lanes = _lanes(str(mm.dtype))
    mr, nv = register_tile(m, n, str(mm.dtype))
    k = int(np.prod([int(r.extent.value) for r in mm.op.reduce_axis]))
    flops = int(np.prod([int(x.value) for x in mm.shape])) * k
    parallel = parallel or flops >= 1 << 16
    packed = None
    B = mm.op.input_tensors[-1]
    item = mm.dtype.itemsize
    b_bytes = int(np.prod([int(x.value) for x in B.shape[-2:]])) * item
    l2 = _host().cache_bytes[1]
    if flops >= PACK_MIN_FLOPS and n > nv * lanes and \
            (b_bytes > l2 // 2 or not _rows_of_b_along_j(mm, B)):
        # B in panels of the tile's width (TVM's and Halide's packed B): the k loop then
        # reads one contiguous run per k instead of a row n floats away. A B read along
        # its rows that fits half the L2 is read in place (there the copy costs about what
        # it saves). A larger one read in place walks B's rows through few cache sets and
        # misses even in an L2 that could hold it.
        packed = s.pack(B, len(B.shape) - 1, nv * lanes, readers=[s[mm]])
    local = s.cache_write(mm, "local")
    if mm is not out:
        s[mm].compute_inline()                  # the copy-out stage: out reads the tile
    st = s[out]
    axes = list(st.op.axis)
    nb = len(axes) - 2
    io, jo, _, _ = vector_tile(st, axes[-2], axes[-1], mr, nv, lanes)
    # Packed B larger than half the L2 goes in blocks of panels that fit it, outermost:
    # every row tile reads the block from L2 and A streams (once per block). With the row
    # tiles outermost each row tile reads all of B from the last-level cache, as fast as
    # that cache is: slower where B does not fit it or where the cache is shared.
    panel_bytes = k * nv * lanes * item
    per_block = max(1, l2 // 2 // panel_bytes)
    blocked = packed is not None and nb == 0 and b_bytes > l2 // 2
    threads = _host().cores
    few_rows = -(-m // mr) < 2 * threads
    by_blocks = False
    if blocked and parallel:
        # The blocks in parallel, each packing its own panels, when A has few rows (A
        # streams again per block, cheap then) or when the blocks share evenly among the
        # threads. With the row tiles in parallel instead, every thread reads every panel,
        # half of them just packed by the other thread and fetched from that core's cache.
        # Uneven blocks (a partial last panel, or a count the threads do not divide) stay
        # by row tiles: there the last block leaves threads idle.
        panels, part = divmod(n, nv * lanes)
        even = [b for b in range(per_block, (per_block - 1) // 2, -1)   # down to half
                if panels % b == 0 and panels // b % threads == 0] if part == 0 else []
        if few_rows:
            by_blocks = True
        elif even:
            per_block, by_blocks = even[0], True
    if blocked:
        jb, jo = st.split(jo, factor=per_block)
        st.reorder(jb, io, jo)
    accumulate_in_registers(s, local, st, jo, -2, lanes)
    if parallel:
        batch = next((a for a, e in zip(axes[:nb], out.shape[:nb]) if int(e.value) > 1), None)
        st.parallel(batch if batch is not None else jb if by_blocks else io)
    if packed is not None:
        pa = s[packed].op.axis
        s[packed].vectorize(s[packed].split(pa[-1], factor=lanes)[1])
        if blocked:
            # each block packed just before its row tiles read it (it stays in L2):
            # packing all of B first writes and re-reads all of B, as long as the multiply
            # itself when A has few rows
            s[packed].compute_at(st, jb)
            if per_block < 2 * threads:     # a block of few panels: k in parallel
                s[packed].reorder(pa[1], pa[0])
                pa = [pa[1], pa[0]]
        if parallel and not by_blocks:
            s[packed].parallel(pa[0])


def _rows_of_b_along_j(mm: tl.Tensor, B: tl.Tensor) -> bool:
    """Whether the matmul reads B with the output's last axis as B's last index (B[k, j]:
    a vector of j is contiguous), not transposed (B[j, k])."""
    from ..ir.expr import Load, Var
    from ..ir.visit import walk

    j = mm.op.axis[-1].var
    return all(isinstance(x.indices[-1], Var) and x.indices[-1].name == j.name
               for x in walk(mm.op.body) if isinstance(x, Load) and x.buffer is B)


def _block_conv(s: tl.Schedule, conv: tl.Tensor, out: tl.Tensor, parallel: bool) -> None:
    """Direct conv2d (NCHW, OIHW) as a register-blocked matmul: each tile of mr output
    channels by nv vectors of output columns accumulates in registers over (c, kh, kw) —
    every step loads nv vectors of one input row (shared by the mr channels) and
    broadcasts mr weights. The padded input is its own stage, vectorised along its rows;
    (batch, channel tiles, output rows) run in parallel. `out` is the conv or its
    elementwise epilogue (bias, relu), which each tile passes through on its way out."""
    blocked = _blocked_conv_stage(conv)
    if blocked is not None:
        _block_conv_channels(s, conv, blocked, out, parallel)
        return
    grouped = _blocked_conv_stage(conv, "conv_grouped")
    if grouped is not None:
        _block_conv_groups(s, conv, grouped, out, parallel)
        return
    lanes = _lanes(str(out.dtype))
    nb, oc, oh, ow = (int(x.value) for x in out.shape)
    flops = nb * oc * oh * ow * int(np.prod([int(r.extent.value) for r in conv.op.reduce_axis]))
    parallel = parallel or flops >= 1 << 16
    mr, nv = register_tile(oc, ow, str(out.dtype))
    for st in s.stages:             # the padded copy of the input
        if st.op is not out.op and st.op is not conv.op and st.op.axis and \
                not st.op.reduce_axis and not st.inlined and st.state.attach is None:
            _padded_input_stage(s, st, lanes, parallel)
    local = s.cache_write(conv, "local")
    if conv is not out:
        s[conv].compute_inline()                # the copy-out stage: out reads the tile
    st = s[out]
    n, o, i, j = names(st.op.axis)
    oo, jo, _, _ = vector_tile(st, o, j, mr, nv, lanes,
                               order=(n, f"{o}.outer", i, f"{j}.outer", f"{o}.inner", f"{j}.inner"))
    accumulate_in_registers(s, local, st, jo, 1, lanes)
    if parallel:
        st.parallel(oo)


def _blocked_conv_stage(conv: tl.Tensor, name: str = "conv_blocked") -> tl.Tensor | None:
    """The 5-D stage named `name` that `conv` reads: [n, K/block, oh, ow, block] of
    `nnops.conv2d_blocked_te` ("conv_blocked"), [n, groups, K/groups, oh, ow] of
    `model_ops.conv_grouped_te` ("conv_grouped"); None for the direct form."""
    from ..ir.expr import Load
    from ..ir.visit import walk

    if conv.op.reduce_axis:
        return None
    for x in walk(conv.op.body):
        if isinstance(x, Load) and x.buffer.op.name == name:
            return x.buffer
    return None


def _block_conv_groups(s: tl.Schedule, conv: tl.Tensor, grouped: tl.Tensor,
                       out: tl.Tensor, parallel: bool) -> None:
    """The general convolution (`model_ops.conv_grouped_te`: groups, strides, pads,
    dilations) as `_block_conv`'s direct form per group: each tile of mr output channels
    of one group by nv vectors of output columns accumulates in registers over the group's
    (c, kh, kw), every step loading nv vectors of one input row (shared by the tile's
    channels, which read the same group) and broadcasting mr weights. The output's channel
    axis is split by the group's channels first, so no tile straddles two groups:

        for n, g, og.outer (parallel, fused), i, j.outer:
          for rc, rp, rq:
            for og (unrolled), j (nv vectors, unrolled), lanes (vectorised):
              acc[og, j] += xpad[n, g*C/groups + rc, ...] * w[g*K/groups + og, rc, rp, rq]
          out[n, g*K/groups + og, i, j] = epilogue(acc[og, j])

    Groups of one output channel (depthwise) tile mr output rows instead of channels
    (`for n, g (parallel, fused), i.outer, j.outer: ... acc[i, j]`): the same number of
    independent accumulators, and a tap's input row is the next row's tap below it. The
    padded input is its own stage (`_padded_input_stage`)."""
    dtype = str(out.dtype)
    lanes = _lanes(dtype)
    nb, groups, kg, oh, ow = (int(x.value) for x in grouped.shape)
    taps = int(np.prod([int(r.extent.value) for r in grouped.op.reduce_axis]))
    parallel = parallel or nb * groups * kg * oh * ow * taps >= 1 << 16
    for st in s.stages:
        if st.op.name == "xpad" and not st.inlined and st.state.attach is None:
            _padded_input_stage(s, st, lanes, parallel)
    if conv is not out:
        s[conv].compute_inline()        # the NCHW copy: the epilogue reads the tile
    st = s[out]
    n, o, i, j = names(st.op.axis)
    st.split(o, factor=kg)
    go, og = f"{o}.outer", f"{o}.inner"
    if kg == 1:
        mr, nv = register_tile(oh, ow, dtype)
        # rows that divide the output's: a partial tile's rows are not unrolled, and its
        # accumulators then live in memory
        cap = min(MAX_TILE_ROWS, (_host().vector_registers - nv - 1) // nv)
        mr = next((r for r in range(cap, (cap + 1) // 2 - 1, -1) if oh % r == 0), mr)
        vector_tile(st, i, j, mr, nv, lanes,
                    order=(n, go, og, f"{i}.outer", f"{j}.outer", f"{i}.inner", f"{j}.inner"))
        accumulate_in_registers(s, grouped, st, f"{j}.outer", 3, lanes)
        tiles, rows = 1, f"{i}.outer"
    else:
        mr, nv = register_tile(kg, ow, dtype)
        vector_tile(st, og, j, mr, nv, lanes,
                    order=(n, go, f"{og}.outer", i, f"{j}.outer", f"{og}.inner",
                           f"{j}.inner"))
        accumulate_in_registers(s, grouped, st, f"{j}.outer", 2, lanes)
        tiles, rows = -(-kg // mr), i
    # the groups in parallel where they share evenly among the threads, else each group's
    # channel tiles, else (few of those: one group of few channels) the rows of a tile
    threads = _host().cores
    if groups % threads == 0 or groups >= 4 * threads:
        across = go
    elif tiles >= 2 * threads:
        across = f"{og}.outer"
    else:
        across = rows
    if parallel:
        # one loop, not the outer loops fused: the tile's footprint in a fused loop is
        # a modulo that isl's bounds do not narrow, and the tile would span all channels
        st.parallel(across)


def _padded_input_stage(s: tl.Schedule, st, lanes: int, parallel: bool,
                        rows_first: bool = False) -> None:
    """The padded copy of the input: vectors along its rows (rows of at least a vector),
    the rest fused in parallel (a row narrower than a vector too: left as declared, the
    copy would run serially). `rows_first` (an NCHW input whose conv runs
    its output rows in parallel): the rows (n, h) in parallel with the channels inside,
    so that each thread pads the rows its own output rows read (`_rows_first`)."""
    pa = st.op.axis
    if int(st.op.output.shape[-1].value) >= lanes:
        st.vectorize(st.split(pa[-1], factor=lanes)[1])
    if len(pa) == 5:
        # columns dealt by a stride's phases (`model_ops._columns_by_stride`): the rows
        # (n, c, h) in parallel, the phases a loop of their own (fused in, they would
        # cost a division per row)
        if parallel:
            st.parallel(st.fuse(*pa[:3]))
    elif rows_first and len(pa) == 4:
        st.reorder(pa[0], pa[2], pa[1])
        st.parallel(st.fuse(pa[0], pa[2]))
    elif parallel and len(pa) > 1:
        st.parallel(st.fuse(*pa[:-1]))


def _rows_first(weight_bytes: int) -> bool:
    """Whether the channel-blocked conv runs (batch, output rows) outside its channel
    blocks. A parallel loop hands each thread a contiguous run of its iterations; with
    the channel blocks outermost each thread reads every row of the padded input, half of
    it just written by the other thread and fetched from that core's cache. With the rows
    outermost each thread reads the rows it padded itself (and the halo), but it cycles
    through all the weights per row: worth it while they fit half the L2."""
    return weight_bytes <= _host().cache_bytes[1] // 2


def _block_conv_channels(s: tl.Schedule, conv: tl.Tensor, blocked: tl.Tensor,
                         out: tl.Tensor, parallel: bool) -> None:
    """The channel-blocked conv2d (`nnops.conv2d_blocked_te`; TVM's conv2d_NCHWc schedule):
    each tile of rn output columns by `block` output channels (one vector: `conv_block`)
    accumulates in rn registers over (c, kh, kw) — every step loads the block's weights
    as a vector and broadcasts rn input elements of one row (an FMA with a broadcast
    operand on AVX-512). A row of one tile is written to the NCHW output (and its
    epilogue) as vectors along the channels; a row of several tiles goes through a row
    buffer, a channel at a time along the row. (batch, channel blocks, output rows) run
    in parallel — (batch, output rows, channel blocks) where all the packed weights fit
    half the L2 (`_rows_first`)."""
    dtype = str(out.dtype)
    lanes = _lanes(dtype)
    nb, kb, oh, ow, block = (int(x.value) for x in blocked.shape)
    red = s[blocked].op.reduce_axis
    taps = int(np.prod([int(r.extent.value) for r in red]))    # c * kh * kw
    flops = nb * kb * block * oh * ow * taps
    parallel = parallel or flops >= 1 << 16
    rn = conv_columns(ow, _host().vector_registers, _one_fma_a_cycle(_host(), dtype)) \
        or min(ow, LATENCY_ACCUMULATORS)
    rows_first = parallel and _rows_first(kb * block * taps * out.dtype.itemsize)
    for st in s.stages:
        name = st.op.name
        if st.inlined or st.state.attach is not None or not st.op.axis or \
                st.op.reduce_axis:
            continue
        if name == "xpad":
            _padded_input_stage(s, st, lanes, parallel, rows_first=rows_first)
        elif name == "wpack":
            wa = st.op.axis
            st.vectorize(wa[-1])
            if parallel and kb > 1:
                st.parallel(wa[0])
    if conv is not out:
        s[conv].compute_inline()            # the NCHW copy: the epilogue reads the tile
    st = s[out]
    n, o, i, j = st.op.axis
    ko, ki = st.split(o, factor=block)
    if ow <= rn:
        # one tile per output row: its vectors of channels are scattered to the NCHW
        # output (`block` channel planes)
        jo, ji = st.split(j, factor=rn)
        if rows_first:
            st.reorder(n, i, ko, jo, ji, ki)
            rows = st.fuse(st.fuse(n, i), ko)
        else:
            st.reorder(n, ko, i, jo, ji, ki)
            rows = st.fuse(st.fuse(n, ko), i)
        st.vectorize(ki)
        if parallel:
            st.parallel(rows)
        tile, at_stage, at = s[blocked], st, jo
    else:
        # several tiles per row: the row (ow x block, in L1) is computed tile by tile, then
        # written a channel at a time in vectors along the row, a strided read of the row
        # (a gather from L1) instead of a scatter per column. With one tile per row the
        # copy costs more than the scatter it replaces, so that keeps the scatter
        local = s.cache_write(blocked, "local")
        jo, ji = st.split(j, factor=lanes)
        if rows_first:
            st.reorder(n, i, ko, jo, ki, ji)
            rows = st.fuse(st.fuse(n, i), ko)
        else:
            st.reorder(n, ko, i, jo, ki, ji)
            rows = st.fuse(st.fuse(n, ko), i)
        st.vectorize(ji)
        if parallel:
            st.parallel(rows)
        s[blocked].compute_at(st, rows)
        bt = s[blocked]
        bjo, _ = bt.split(bt.op.axis[3], factor=rn)
        bt.vectorize(bt.op.axis[4])
        tile, at_stage, at = s[local], bt, bjo
    a, b, c, d, e = names(tile.op.axis)
    accumulate_channels(tile, at_stage, at, (a, b, c), d, e)


def _window_schedule(s: tl.Schedule, out: tl.Tensor, parallel: bool) -> None:
    """Pooling and the convolution adjoints (a small reduction per output element): the
    last output axis in vectors, with the reduction loops outside the vector lanes (each
    lane accumulates its own output), every other output axis fused into one parallel
    loop. Helper stages (max pooling's maxima and counts) get the same at root."""
    lanes = _lanes(str(out.dtype))
    for st in list(s.stages):
        if st.inlined or st.state.attach is not None or not st.op.axis:
            continue
        outer = list(st.op.axis)[:-1]
        if int(st.op.output.shape[-1].value) >= 2 * lanes:
            vectors_inside_reduction(st, lanes)
        if parallel and outer:
            st.parallel(st.fuse(*outer) if len(outer) > 1 else outer[0])
