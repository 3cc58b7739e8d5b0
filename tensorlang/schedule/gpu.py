"""Ready-made GPU schedules for common kernel shapes, written with the public primitives.

They are what `G.Executor(target="cuda")` uses and what tutorials/06_cuda.py builds step by
step; each returns the loops it made so that callers can schedule further.

- `elementwise(s, T)`: all axes fused, split by the block size, blockIdx.x / threadIdx.x.
- `matmul(s, C)`: a stage `C[i, j] = sum_k ...` (two spatial axes, one reduce axis), the
  classic SGEMM: a `block` tile of C per block, a `thread` tile per thread accumulated in
  registers (`cache_write(C, "local")`), the inputs' k-slices copied to shared memory
  (`cache_read(..., "shared")`, loaded by all the block's threads between two barriers).
- `reduce(s, R)`: a reduction across the threads of a block (ir/gpu_block.py): along
  memory, one block per output and its threads over the reduce axis; otherwise 32 outputs
  per block (threadIdx.x) and 8 threads over the reduce axis (threadIdx.y).
- `rows(s, T)`: a softmax- or layer-norm-shaped group in one kernel: one block per row of
  `T`, the row's reductions computed in the block (`compute_at`) across its threads, then
  the row's outputs spread over the same threads.
"""

from __future__ import annotations

from ..errors import ScheduleError
from ..ir.expr import Load, Var
from ..ir.stmt import LoopKind
from ..ir.visit import walk
from ..te.tensor import Tensor


def _int(x, what: str) -> int:
    if isinstance(x, bool) or not isinstance(x, int) or x < 1:
        raise ScheduleError(f"{what} must be a positive int, got {x!r}")
    return x


def elementwise(s, T: Tensor, threads: int = 256):
    """One thread per element. The axes are fused and split by the block size
    (blockIdx.x, threadIdx.x) when they can be (the inner ones of constant extent);
    otherwise the last axis is split over blockIdx.x / threadIdx.x and the outer ones go
    to blockIdx.y and blockIdx.z (at most two). Returns the (block, thread) loops of the
    split."""
    threads = _int(threads, "threads")
    axes = list(s[T].op.axis)
    if not axes:
        raise ScheduleError(f"elementwise: {T.name} has no axes to spread over threads")
    constant = all(hasattr(x, "value") for x in T.shape[1:])
    if len(axes) == 1 or constant:
        loop = axes[0] if len(axes) == 1 else s[T].fuse(*axes)
        bo, bi = s[T].split(loop, factor=threads)
        s[T].bind(bo, "blockIdx.x")
        s[T].bind(bi, "threadIdx.x")
        return bo, bi
    if len(axes) > 3:
        raise ScheduleError(f"elementwise: {T.name} has {len(axes)} axes of symbolic extent; "
                            "at most 3 map to the grid (give the inner ones constant extents)")
    bo, bi = s[T].split(axes[-1], factor=threads)
    s[T].reorder(*axes[:-1], bo, bi)
    for ax, tag in zip(reversed(axes[:-1]), ("blockIdx.y", "blockIdx.z")):
        s[T].bind(ax, tag)
    s[T].bind(bo, "blockIdx.x")
    s[T].bind(bi, "threadIdx.x")
    return bo, bi


def matmul(s, C: Tensor, block=(64, 64), thread=(4, 4), k_tile: int = 8,
           shared: bool = True, out: Tensor | None = None):
    """Shared-memory and register tiling of a matmul-shaped stage (see the module doc).

    `C[..., i, j] = sum_k ...`: leading batch axes (bound to blockIdx.z, fused when several),
    two spatial axes, one reduce axis. `block` / `thread`: the C tile of a block / of a
    thread (each must divide the other), so a block runs (block[0] // thread[0]) x
    (block[1] // thread[1]) threads. `out`: an elementwise epilogue that reads C (same
    shape); C is then computed into registers and inlined into it, so each tile goes from
    the accumulators through the epilogue to memory once. Returns (C_local, [the shared
    copies]) (an empty list when `shared` is False)."""
    bm, bn = (_int(x, "block") for x in block)
    tm, tn = (_int(x, "thread") for x in thread)
    k_tile = _int(k_tile, "k_tile")
    if bm % tm or bn % tn:
        raise ScheduleError(f"matmul: the thread tile {thread} must divide the block tile "
                            f"{block}")
    if (bm // tm) * (bn // tn) > 1024:
        raise ScheduleError(f"matmul: {bm // tm} x {bn // tn} threads per block; the limit "
                            "is 1024")
    op = s[C].op
    if len(op.axis) < 2 or len(op.reduce_axis) != 1:
        raise ScheduleError(f"matmul: {C.name} must have two spatial axes (after any batch "
                            f"axes) and one reduce axis, has {len(op.axis)} and "
                            f"{len(op.reduce_axis)}")
    inputs = [t for t in op.input_tensors] if shared else []
    CL = s.cache_write(C, "local")
    caches = [s.cache_read(t, "shared", [CL]) for t in inputs]
    T = C
    if out is not None and out is not C:
        s[C].compute_inline()               # the copy-out stage: the epilogue reads the tile
        T = out
    *batch, i, j = s[T].op.axis
    bi, bj, ti, tj = s[T].tile(i, j, bm, bn)
    tio, tii = s[T].split(ti, factor=tm)
    tjo, tji = s[T].split(tj, factor=tn)
    bz = None
    if batch:
        bz = batch[0] if len(batch) == 1 else s[T].fuse(*batch)
        s[T].reorder(bz, bi, bj, tio, tjo, tii, tji)
        s[T].bind(bz, "blockIdx.z")
    else:
        s[T].reorder(bi, bj, tio, tjo, tii, tji)
    s[T].bind(bi, "blockIdx.y")
    s[T].bind(bj, "blockIdx.x")
    s[T].bind(tio, "threadIdx.y")
    s[T].bind(tjo, "threadIdx.x")
    s[CL].compute_at(s[T], tjo)
    *lb, li, lj = s[CL].op.axis
    (lk,) = s[CL].op.reduce_axis
    ko, ki = s[CL].split(lk, factor=k_tile)
    s[CL].reorder(*lb, ko, ki, li, lj)
    s[CL].unroll(li)
    s[CL].unroll(lj)
    for t in caches:
        s[t].compute_at(s[CL], ko)
    return CL, caches


def bind_all(s, threads: int = 256) -> None:
    """Every stage computed at root that binds no loop yet: its spatial axes fused and spread
    over blocks of `threads` threads, one output element per thread (its reductions run in
    the thread). Without a binding a stage would run on one GPU thread."""
    for st in s.stages:
        if st.inlined or st.state.attach is not None:
            continue
        if any(lp.kind in (LoopKind.GPU_BLOCK, LoopKind.GPU_THREAD) for lp in st.state.loops):
            continue
        if not st.op.axis:
            continue
        n = 1
        for x in st.op.output.shape:
            n = n * int(x.value) if hasattr(x, "value") else None
            if n is None:
                break
        elementwise(s, st.op.output, threads if n is None else max(1, min(threads, n)))


def _along_memory(st, axis) -> bool:
    """Whether `axis` is the last index of the stage's first tensor read."""
    for x in walk(st.op.body):
        if isinstance(x, Load) and x.indices:
            last = x.indices[-1]
            return isinstance(last, Var) and last.name == axis.var.name
    return False


def _const(x) -> bool:
    return hasattr(x, "value")


def reduce(s, R: Tensor, threads: int = 256, attached: bool = False):
    """A reduction with one reduce axis, combined across the threads of a block (see the
    module doc). With `attached`, the stage is already computed inside a block (`rows`):
    only its reduce axis is spread over threadIdx.x. Returns the thread loop of the
    reduction."""
    threads = _int(threads, "threads")
    st = s[R]
    if len(st.op.reduce_axis) != 1:
        raise ScheduleError(f"reduce: {R.name} must have one reduce axis, has "
                            f"{len(st.op.reduce_axis)}")
    (k,) = st.op.reduce_axis
    axes = list(st.op.axis)
    if attached or _along_memory(st, k) or not axes:
        ko, ki = st.split(k, factor=threads)
        if axes and not attached:
            row = axes[0] if len(axes) == 1 else st.fuse(*axes)
            st.reorder(row, ki, ko)
            st.bind(row, "blockIdx.x")
        else:
            st.reorder(*axes, ki, ko)
        st.bind(ki, "threadIdx.x")
        return ki
    if not all(_const(x) for x in R.shape[1:]):
        raise ScheduleError(f"reduce: {R.name} needs constant inner extents")
    out = axes[0] if len(axes) == 1 else st.fuse(*axes)
    bo, bi = st.split(out, factor=32)
    ko, ki = st.split(k, factor=8)
    st.reorder(bo, bi, ki, ko)
    st.bind(bo, "blockIdx.x")
    st.bind(bi, "threadIdx.x")
    st.bind(ki, "threadIdx.y")
    return ki


ROW_CACHE_BYTES = 32 * 1024   # the longest row `rows` keeps in shared memory


def rows(s, T: Tensor, threads: int = 256, cache: bool = True):
    """One block per row of `T` (all axes but the last, fused), the row's outputs over
    `threads` threads; every reduction `T` reads (directly or through inlined stages) whose
    outputs are the row's (T's leading axes) and that reduces along memory is computed in
    the block, across its threads. With `cache`, a tensor those reductions read along the
    row is copied to shared memory once per row (`cache_read`, the block's threads taking
    16-byte vectors where the row allows) when its rows have a constant length of at most
    ROW_CACHE_BYTES, so that the reductions and the outputs read it there instead of from
    global memory (softmax reads its input once, not three times). Returns the block loop."""
    threads = _int(threads, "threads")
    st = s[T]
    axes = list(st.op.axis)
    if len(axes) < 2:
        raise ScheduleError(f"rows: {T.name} needs a row axis and a column axis")
    row = axes[0] if len(axes) == 2 else st.fuse(*axes[:-1])
    jo, ji = st.split(axes[-1], factor=threads)
    st.reorder(row, ji, jo)
    st.bind(row, "blockIdx.x")
    st.bind(ji, "threadIdx.x")
    lead = [str(x) for x in T.shape[:-1]]
    found = []
    for other in reversed(s.stages):     # readers before what they read
        if other is st or other.inlined or other.state.attach is not None:
            continue
        r = other.op
        if len(r.reduce_axis) != 1 or [str(x) for x in r.output.shape] != lead or \
                not _along_memory(other, r.reduce_axis[0]):
            continue
        found.append(r.output)
    for R in found:
        s[R].compute_at(st, row)
        reduce(s, R, threads, attached=True)
    if cache:
        for X in _row_inputs(s, found, lead):
            _cache_row(s, X, [T] + found, st, row, threads)
    return row


def _reads(op, X: Tensor) -> bool:
    return any(isinstance(x, Load) and x.buffer is X for x in walk(op.body)) \
        if hasattr(op, "body") else False


def _row_inputs(s, found, lead) -> list[Tensor]:
    """The tensors the row's reductions read along the row whose rows fit in shared memory."""
    out = []
    for R in found:
        for x in walk(s[R].op.body):
            if not isinstance(x, Load) or not isinstance(x.buffer, Tensor):
                continue
            X = x.buffer
            shape = X.shape
            if any(X is y for y in out) or [str(d) for d in shape[:-1]] != lead or \
                    not _const(shape[-1]) or \
                    int(shape[-1].value) * X.dtype.itemsize > ROW_CACHE_BYTES:
                continue
            out.append(X)
    return out


def _cache_row(s, X: Tensor, stages, st, row, threads: int) -> None:
    readers = [R for R in stages if _reads(s[R].op, X)]
    if not readers:
        return
    XS = s.cache_read(X, "shared", readers)
    s[XS].compute_at(st, row)
    axis = s[XS].op.axis[-1]
    m = int(X.shape[-1].value)
    width = 16 // X.dtype.itemsize if X.dtype.itemsize in (4, 8) else 1
    if width > 1 and m % width == 0 and m >= width * threads:
        axis, lanes = s[XS].split(axis, factor=width)
        o, t = s[XS].split(axis, factor=threads)
        s[XS].reorder(t, o, lanes)
        s[XS].vectorize(lanes)
    else:
        o, t = s[XS].split(axis, factor=threads)
        s[XS].reorder(t, o)
    s[XS].bind(t, "threadIdx.x")
