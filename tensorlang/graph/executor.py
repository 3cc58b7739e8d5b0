"""The executor: every op of a graph runs as a tensorlang kernel.

For each signature of fed shapes and dtypes, `Executor` makes a plan once: concrete shapes of
every node, nodes fused into groups (elementwise chains, and a matmul with its elementwise
epilogue), one compiled kernel per group (shared between groups and executors with the same
structure, attributes, shapes and dtypes, and between processes through the kernel cache on
disk: `kernel_cache.py`), and buffers assigned so that an intermediate's
memory is reused once its last user has run. A run then only calls kernels, on the fed
arrays in place and on fresh output arrays, which come from the array cache
(`backends/array_cache.py`: the memory of outputs the caller has let go of, pages already
mapped) unless `run(..., out=)` names arrays to write into. A plan is not for two threads
at once.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

import tensorlang as tl

from ..errors import NoGPUScheduleError, ScheduleError
from ..config import cache_dir, debug_print, strict, tune_budget, tune_log
from ..autoschedule.records import program_key, recorded
from .cpu_schedules import conv_block, default_schedule, register_tile  # noqa: F401 (API)
from ..backends import array_cache
from ..backends.abi import Status
from ..backends.runtime import aligned_empty
from ..driver import with_kernel
from . import kernel_cache as KC
from .model_ops import conv_grouped_te
from .nnops import conv2d_blocked_te, pack_conv_weights
from .fusion import ANCHORS, fuse, inline_members, reads_tensor
from .node import GraphError, Node, topological_order
from .ops import OPS
from ..target import GPU_KINDS, backend_kind

# compiled group kernels by (members, shapes, dtypes, target, schedules), the most recently
# used KERNEL_CACHE_SIZE kept (a plan holds its own kernels alive)
KERNEL_CACHE_SIZE = 128
_KERNELS: OrderedDict[tuple, tuple] = OrderedDict()
_KERNELS_LOCK = threading.Lock()


GPU_ROW_MIN = 64   # a row (or reduction) this long gets a block of threads; shorter: one


GPU_MIN_BLOCKS = 256   # blocks a matmul's grid should have (two per SM of a large GPU)


def _gpu_matmul_tiles(m: int, n: int, batch: int = 1):
    """The block and thread tiles of a GPU matmul: 4 x 4 outputs per thread (16 x 16
    threads, a 64 x 64 block) when that still gives GPU_MIN_BLOCKS blocks, else 2 x 2,
    else 1 x 1: a small matmul (an MLP's 1024 x 256) needs more, smaller threads to fill
    the GPU, a large one the register reuse."""
    for t in (4, 2, 1):
        block = (min(16 * t, _pow2(m)), min(16 * t, _pow2(n)))
        thread = (min(t, block[0]), min(t, block[1]))
        blocks = -(-m // block[0]) * -(-n // block[1]) * batch
        if blocks >= GPU_MIN_BLOCKS:
            break
    return block, thread


def gpu_schedule(out: tl.Tensor, kind: str, fresh, anchor: tl.Tensor | None = None,
                 ops: tuple = ()):
    """The default GPU schedule of a group: a matmul (with its epilogue) tiled through
    shared memory and registers (`schedule.gpu.matmul`); a softmax or layer norm as one
    kernel, a block per row (`schedule.gpu.rows`); a reduction across the threads of a
    block (`schedule.gpu.reduce`); then every other stage at root with one thread per
    output element. Never the declared nest: a kernel with no bound loop would run on one
    GPU thread, so a refused primitive is a `NoGPUScheduleError` naming the group's
    operators `ops`."""
    from ..schedule import gpu

    s = fresh()
    try:
        if kind == "matmul":
            mm = anchor if anchor is not None else out
            m, n = (int(x.value) for x in mm.shape[-2:])
            batch = 1
            for x in mm.shape[:-2]:
                batch *= int(x.value)
            block, thread = _gpu_matmul_tiles(m, n, batch)
            gpu.matmul(s, mm, block, thread, 8, out=out)
        if kind == "softmax":
            for st in list(s.stages):    # intermediate rows (softmax's exponentials) inline
                if not any(st.op.output is o for o in s.outputs) and not st.inlined and \
                        not st.op.reduce_axis and st.op.axis and st.state.attach is None:
                    st.compute_inline()
        if kind == "softmax" and len(out.shape) >= 2 and \
                int(out.shape[-1].value) >= GPU_ROW_MIN:
            gpu.rows(s, out, min(256, _pow2(int(out.shape[-1].value))))
        if kind in ("softmax", "reduce"):
            for st in list(s.stages):
                if st.inlined or st.state.attach is not None or \
                        len(st.op.reduce_axis) != 1 or \
                        any(lp.thread_tag for lp in st.state.loops):
                    continue
                n = int(st.op.reduce_axis[0].extent.value)
                if n >= GPU_ROW_MIN:
                    gpu.reduce(s, st.op.output, min(256, _pow2(n)))
        gpu.bind_all(s)
    except ScheduleError as e:
        raise NoGPUScheduleError(
            f"executor: no GPU schedule for {' + '.join(ops) or out.name} -> "
            f"{tuple(int(x.value) for x in out.shape)} ({kind} kernel): {e}") from e
    return s


def _pow2(n: int) -> int:
    """The smallest power of two >= n (tiles no larger than the matrix)."""
    p = 1
    while p < n:
        p *= 2
    return p


def _work(out_shape: tuple, shapes: tuple) -> int:
    size = int(np.prod(out_shape or (1,)))
    return size * max([int(np.prod(s)) // max(size, 1) for s in shapes] + [1])


def compile_op(op: str, attrs: tuple, shapes: tuple, dtypes: tuple,
               schedules: str = "default"):
    """The kernel of one op for concrete input shapes and dtypes, and the inputs it reads
    (cached); `schedules` as `schedule_group` takes it."""
    return compile_group(((op, attrs, tuple(("in", k) for k in range(len(shapes)))),),
                         shapes, dtypes, "llvm", schedules)


def compile_group(members: tuple, shapes: tuple, dtypes: tuple, target: str = "llvm",
                  schedules: str = "default"):
    """The kernel of a fused group for concrete input shapes and dtypes, and the inputs it
    reads (cached: `compile_groups`).

    `members` lists (op, attrs, operands) in topological order, the last being the group's
    output; an operand is ("in", k) for the group's input k or ("node", j) for member j.
    Members are inlined into their readers where `fusion.inline_members` allows; a matmul
    heads the group with the rest as its epilogue, and a group whose reductions or per-row
    values stay stages is scheduled row by row (kind "rows", `cpu_schedules`).
    """
    return compile_groups([(members, shapes, dtypes)], target, schedules)[0]


def compile_groups(groups: list, target: str = "llvm", schedules: str = "default") -> list:
    """`compile_group` of each (members, shapes, dtypes) in `groups`: (module, inputs read)
    each. A group already compiled in this process is shared; a host kernel compiled
    before, by this process or another, comes from the kernel cache on disk; the rest are
    compiled, by several processes at once when there are several (`graph/kernel_cache.py`,
    TL_COMPILE_JOBS), with a progress bar on a terminal."""
    keys = [(m, sh, dt, target, schedules) for m, sh, dt in groups]
    out: list = [None] * len(keys)
    todo: dict[tuple, list[int]] = {}
    with _KERNELS_LOCK:
        for k, key in enumerate(keys):
            hit = _KERNELS.get(key)
            if hit is not None:
                _KERNELS.move_to_end(key)
                out[k] = hit
            else:
                todo.setdefault(key, []).append(k)
    if not todo:
        return out
    made = _compile_missing(list(todo), target, schedules)
    with _KERNELS_LOCK:
        for key, got in made.items():
            _KERNELS[key] = got
            for k in todo[key]:
                out[k] = got
        while len(_KERNELS) > KERNEL_CACHE_SIZE:
            _KERNELS.popitem(last=False)
    return out


def _build_here(members: tuple, shapes: tuple, dtypes: tuple, target: str, schedules: str):
    """One group compiled and loaded in this process, no disk cache: (module, inputs read)."""
    s, ins, out = schedule_group(members, shapes, dtypes, target, schedules)
    read = {id(t.op) for t in s.placeholders}
    used = tuple(k for k, t in enumerate(ins) if id(t.op) in read)  # "like" inputs: shape only
    name = "graph_" + "_".join(dict.fromkeys(m[0] for m in members))[:48]
    return tl.build(s, [*(ins[k] for k in used), out], name=name, target=target), used


def _compile_missing(keys: list, target: str, schedules: str) -> dict:
    """The kernels of the groups `keys` (of `compile_groups`) that this process does not
    have: from the disk cache, else compiled (see `graph/kernel_cache.py`)."""
    if not KC.host_cacheable(target):
        update, close = KC.progress_bar(len(keys) if len(keys) >= KC.PARALLEL_MIN else 0)
        try:
            made = {}
            for key in keys:
                made[key] = _build_here(*key)
                update()
            return made
        finally:
            close()
    store = KC.store()
    made, pending = {}, []
    for key in keys:
        members, shapes, dtypes = key[:3]
        mode = resolved_mode(members, shapes, schedules, dtypes)
        digest = KC.group_digest(members, shapes, dtypes, mode) if store is not None else None
        if store is not None and digest is None:
            debug_print(1, f"kernel cache: the group {members!r} does not print as plain "
                           "data; not cached")
        got = store.get(digest) if digest is not None else None
        if got is not None:
            mod = _from_entry(key, mode, *got)
            if mod is not None:
                made[key] = mod
                continue
        pending.append((key, digest, mode))
    if not pending:
        return made
    update, close = KC.progress_bar(len(pending) if len(pending) >= KC.PARALLEL_MIN else 0)
    try:
        forked = [None] * len(pending)
        if KC.can_fork(len(pending)) and all(m != "auto" for _, _, m in pending):
            forked = KC.compile_forked([(*key[:3], schedules, schedule_group_for_cache)
                                        for key, _, _ in pending], update)
        for (key, digest, _), got in zip(pending, forked):
            if got is not None and got[0] == "ok":
                meta, obj = got[1], got[2]
                mod = KC.load_entry(meta, obj, _rebuilder(key))
                KC.COUNTS["workers"] += 1
            else:
                if got is not None:
                    debug_print(1, f"kernel cache: a worker failed on {key[0][-1][0]} "
                                   f"({got[1]}); compiling it here")
                entry, code, module = KC.compile_host(*key[:3], schedules,
                                                      schedule_group_for_cache)
                meta, obj = KC.entry_payload(entry, code)
                mod = with_kernel(module, code)
                if got is None:
                    update()
            KC.COUNTS["compiled"] += 1
            if store is not None and digest is not None:
                store.put(digest, meta, obj)
            made[key] = (mod, tuple(meta["used"]))
    finally:
        close()
    return made


def _rebuilder(key: tuple):
    """A cached module's full form when it is asked for: the group compiled here."""
    return lambda: _build_here(*key)[0]


def _from_entry(key: tuple, mode: str, meta: dict, obj: bytes):
    """The (module, inputs read) of a disk entry, or None when it no longer holds: its
    schedule came from tuning-log records that have changed since, or it does not load
    (said at TL_DEBUG=1; the caller compiles the group)."""
    log = _auto_log() if mode in ("auto", "model") else None
    try:
        if meta.get("log") != log or \
                meta.get("records") != KC.records_digest(log, meta.get("program_key"),
                                                         mode == "model"):
            debug_print(1, f"kernel cache: the tuning log's records of {key[0][-1][0]} "
                           "changed since its entry was made; compiling it again")
            return None
        mod = KC.load_entry(meta, obj, _rebuilder(key))
        used = tuple(meta["used"])
    except (tl.TensorlangError, KeyError, TypeError, ValueError) as e:
        debug_print(1, f"kernel cache: an entry of {key[0][-1][0]} does not load "
                       f"({type(e).__name__}: {e}); compiling it again")
        return None
    KC.COUNTS["disk"] += 1
    return mod, used


def resolved_mode(members: tuple, shapes: tuple, schedules: str, dtypes: tuple = ()) -> str:
    """Which schedule a CPU group gets (`schedule_group`'s `schedules` resolved): "auto",
    "model" or "hand"."""
    if schedules == "default":
        schedules = "auto" if tune_log() is not None else "model"
    if schedules in ("model", "auto") and (
            any(op in HAND_ONLY for op, _, _ in members) or
            "bfloat16" in dtypes and any(op in ("matmul", "conv2d") for op, _, _ in members)):
        debug_print(1, f"executor: {members[-1][0]} keeps its hand schedule: its kernel is "
                       "written in a dot-product instruction's packed layout, which the "
                       "search's sketches do not take")
        return "hand"
    if schedules == "model":
        tshapes: list = []
        for op, attrs, operands in members:
            arg_shapes = [shapes[k] if src == "in" else tshapes[k] for src, k in operands]
            tshapes.append(tuple(OPS[op].shape(*arg_shapes, **dict(attrs))))
        if _work(tshapes[-1], shapes) < MODEL_MIN_WORK:
            return "hand"
    return schedules


def schedule_group(members: tuple, shapes: tuple, dtypes: tuple, target: str = "llvm",
                   schedules: str = "default"):
    """The schedule of a fused group (see `compile_group`), before building: (schedule,
    input placeholders, output tensor); `schedule_group_for_cache` says more."""
    return schedule_group_for_cache(members, shapes, dtypes, target, schedules)[:3]


def schedule_group_for_cache(members: tuple, shapes: tuple, dtypes: tuple,
                             target: str = "llvm", schedules: str = "default"):
    """The schedule of a fused group (see `compile_group`), before building: (schedule,
    input placeholders, output tensor, the tuning log read, the program's key there (None
    without a log), the resolved mode: what the kernel cache keys an entry with).

    `schedules` (CPU targets; a GPU target takes the library schedules of
    `schedule/gpu.py`):
    - "model": the auto-scheduler's model-only mode (`tl.auto_schedule(...,
      measure_on_host=False)`): a fixed number of candidates sampled and refined from the
      hand-written schedule as a seed, ranked by the cost model, nothing measured; the
      seed is kept unless a candidate is predicted `autoschedule.search.MODEL_MARGIN`
      times faster. The choice is recorded in the tuning log (`tune_log()`, default
      `cache_dir()/tuning.jsonl`), which later runs read instead of searching; a measured
      record there (`tensorlang tune`) wins over it. A kernel of less than
      `MODEL_MIN_WORK` multiply-adds keeps the hand schedule (it runs in microseconds:
      seconds of search would not pay back); TL_DEBUG=1 says so.
    - "auto": the same search with its best predicted candidates measured (TL_TUNE_BUDGET
      seconds, default 10), the hand schedule measured beside them, recorded.
    - "hand": the hand-written schedule (`cpu_schedules.default_schedule`).
    - "default": "auto" when a tuning log is set (`tune_log()`: TL_TUNE_LOG, or the one
      `tensorlang tune script.py` gives the script: a script tuned once runs with the
      recorded schedules after), else "model".
    """
    ins = [tl.placeholder(s, d, name=f"in{k}") for k, (s, d) in enumerate(zip(shapes, dtypes))]
    tensors, tshapes, kinds = [], [], []
    for op, attrs, operands in members:
        kw = dict(attrs)
        args = [ins[k] if src == "in" else tensors[k] for src, k in operands]
        arg_shapes = [shapes[k] if src == "in" else tshapes[k] for src, k in operands]
        out_shape = tuple(OPS[op].shape(*arg_shapes, **kw))
        cpu = backend_kind(target) not in GPU_KINDS
        block = conv_block(out_shape, arg_shapes[1], str(args[0].dtype)) \
            if op == "conv2d" and cpu and str(args[0].dtype) != "bfloat16" else None
        if op == "conv2d" and cpu and str(args[0].dtype) == str(args[1].dtype) == "bfloat16":
            from .bfloat16 import conv2d_te      # float32 sums on vdpbf16ps
            t, kind = conv2d_te(args, arg_shapes, out_shape, **kw)
        elif block is not None:     # channels in vectors (NCHW[x]c), see cpu_schedules
            t, kind = conv2d_blocked_te(args, arg_shapes, out_shape, block=block[0], **kw)
        elif op == "conv" and cpu:  # the general conv: register tiles per group
            debug_print(1, f"executor: conv {tuple(arg_shapes[0])} * {tuple(arg_shapes[1])}"
                           f" (groups={kw['groups']}) takes the general conv's register "
                           "tiles per group")
            t, kind = conv_grouped_te(args, arg_shapes, out_shape, **kw)
        elif op == "conv2d" and cpu and kw["stride"] > 1:
            # strided, direct: the general conv's form, whose input columns are dealt by
            # the stride's phases (conv2d's direct form gathers every tap's vector)
            debug_print(1, f"executor: conv2d {tuple(arg_shapes[0])} * "
                           f"{tuple(arg_shapes[1])} (stride {kw['stride']}) takes the general "
                           "conv's register tiles")
            t, kind = conv_grouped_te(args, arg_shapes, out_shape, strides=(kw["stride"],) * 2,
                                      pads=(kw["padding"],) * 4, dilations=(1, 1), groups=1)
        else:
            t, kind = OPS[op].te(args, arg_shapes, out_shape, **kw)
        tensors.append(t)
        tshapes.append(out_shape)
        kinds.append(kind)
    out = tensors[-1]
    heads = [(t, k) for t, k in zip(tensors[:-1], kinds) if k in ANCHORS]
    anchor, anchor_kind = heads[0] if heads else (None, None)
    kept = inline_members(tensors, anchor)

    def fresh():
        return tl.create_schedule(out)
    if anchor is not None and not reads_tensor(out, anchor):
        anchor = None       # the output reads only the matmul's shape (an `unreduce`)
    kind = anchor_kind if anchor is not None else "rows" if kept else kinds[-1]
    if backend_kind(target) in GPU_KINDS:
        return gpu_schedule(out, kind, fresh, anchor, tuple(m[0] for m in members)), ins, \
            out, None, None, "gpu"
    work = _work(tshapes[-1], shapes)
    mode = resolved_mode(members, shapes, schedules, dtypes)
    if schedules in ("default", "model") and mode == "hand":
        debug_print(1, f"executor: {out.name} ({work} multiply-adds) keeps the hand schedule: "
                       f"below MODEL_MIN_WORK ({MODEL_MIN_WORK}), no search")
    schedules = mode
    log = _auto_log() if schedules in ("auto", "model") else None
    pkey = program_key(out, target) if log is not None else None
    s = recorded(out, target, log, model=schedules == "model", key=pkey)
    if s is not None:           # a record: the hand schedule (its seed) is not needed
        return s, ins, out, log, pkey, mode
    hand = default_schedule(out, kind, work, fresh, anchor, tl.Target.parse(target))
    if schedules == "auto":     # the hand schedule seeds the search: never slower than it
        s = tl.auto_schedule(out, target=target, budget_s=tune_budget(10.0), log=log,
                             seeds=[hand])
    elif schedules == "model":
        try:
            s = tl.auto_schedule(out, target=target, budget_s=tune_budget(MODEL_BUDGET_S),
                                 log=log, measure_on_host=False, seeds=[hand])
        except Exception as e:      # noqa: BLE001 (a bug of the search must not end a run
            if strict():            # that has a correct hand schedule; the tests see it)
                raise
            debug_print(1, f"executor: the model-only search failed on {out.name} "
                           f"({type(e).__name__}: {e}); its hand schedule runs")
            s = hand
    else:
        s = hand
    return s, ins, out, log, pkey, mode


SCHEDULES = ("default", "model", "auto", "hand")
# ops whose kernels keep the hand schedule, and so do bfloat16 matmuls: their kernels are
# written in an instruction's packed layout (the search's dot-product sketch takes a plain
# dot product and packs it itself)
HAND_ONLY = frozenset({"matmul_integer", "conv_integer"})
MODEL_BUDGET_S = 30.0    # seconds at most of the model-only search per kernel (a cap: the
                         # search is a fixed number of candidates, well under it)
MODEL_MIN_WORK = 1 << 20     # multiply-adds below which a kernel keeps its hand schedule


def _auto_log() -> str | None:
    """TL_TUNE_LOG, else the tuning log in `cache_dir()` — None where that folder cannot
    be made or written (a read-only home): the searches then run without a log, and
    TL_DEBUG=1 says so."""
    import os
    import pathlib

    if tune_log() is not None:
        return tune_log()
    p = pathlib.Path(cache_dir()) / "tuning.jsonl"
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        if not os.access(p.parent, os.W_OK) or (p.exists() and not os.access(p, os.W_OK)):
            raise PermissionError("not writable")
    except OSError as e:
        debug_print(1, f"executor: no tuning log in {p.parent} ({e}): each new kernel's "
                       f"schedule is searched in every run")
        return None
    return str(p)


@dataclass(frozen=True)
class KernelTime:
    """One kernel of a plan in `Executor.profile`: the node it stores, the graph nodes fused
    into it ("op name"), its mean seconds a run and its share of the run."""

    node: str
    fused: tuple[str, ...]
    seconds: float
    share: float

    def __str__(self) -> str:
        return (f"{self.seconds * 1e3:9.3f} ms {100 * self.share:5.1f}%  {self.node}: "
                + ", ".join(self.fused))


@dataclass
class _Step:
    nodes: list[Node]     # the fused group; the last one's value is stored
    kernel: tl.Module
    inputs: list[int]     # slots
    output: int           # slot
    pointers: list[int] | None = None   # of the first buffer set's arrays, checked once

    @property
    def node(self) -> Node:
        return self.nodes[-1]


def _members(g: list[Node], ins: list[Node]) -> tuple:
    """A group's members as `compile_group` takes them."""
    local = {m.id: j for j, m in enumerate(g)}
    pos = {i.id: k for k, i in enumerate(ins)}
    return tuple((m.op, m.attrs, tuple(("node", local[i.id]) if i.id in local
                                       else ("in", pos[i.id]) for i in m.inputs))
                 for m in g)


def _infer(order, fed: dict[int, tuple]) -> tuple[dict, dict]:
    """Every node's shape and dtype, from the fed variables' (shape, dtype)."""
    shapes: dict[int, tuple] = {}
    dtypes: dict[int, str] = {}
    for n in order:
        if n.op == "variable":
            shapes[n.id], dtypes[n.id] = fed[n.id]
            continue
        if n.op == "constant":
            shapes[n.id], dtypes[n.id] = tuple(n.shape), n.dtype
            continue
        ins = [shapes[i.id] for i in n.inputs]
        try:
            shapes[n.id] = tuple(OPS[n.op].shape(*ins, **n.kwargs))
        except ValueError as e:
            raise GraphError(f"node {n.name} ({n.op}): {e} (input shapes "
                             f"{', '.join(map(str, ins))})") from None
        dtypes[n.id] = n.dtype  # inferred when the node was made; feeds are checked
    return shapes, dtypes


def declared_groups(nodes: list, what: str, target: str = "llvm"):
    """(shapes, dtypes, fused groups) of a graph whose Variables all declare their shapes
    (no feeds needed); `what` names the caller in the error for one that does not."""
    order = topological_order(nodes)
    fed = {}
    for n in order:
        if n.op == "variable":
            if n.shape is None:
                raise GraphError(f"{what}: Variable {n.name} has no declared shape")
            fed[n.id] = (tuple(n.shape), n.dtype)
    shapes, dtypes = _infer(order, fed)
    return shapes, dtypes, fuse(order, shapes, dtypes, nodes, target)


def default_schedules(nodes, target: str = "llvm",
                      schedules: str = "default") -> list[tuple[tuple, tl.Schedule]]:
    """The executor's kernels for `nodes`, scheduled but not built: a list of (the
    group's nodes, its schedule), in launch order. Every Variable needs a declared shape.
    Shows which schedule each group gets (`schedules` as `schedule_group` takes it;
    `TL_STRICT=1` makes a refused hand schedule an error)."""
    nodes = list(nodes) if isinstance(nodes, (list, tuple)) else [nodes]
    shapes, dtypes, groups = declared_groups(nodes, "default_schedules", target)
    out = []
    for g in groups:
        ins = _Plan._inputs(g)
        members, ishapes, idtypes = _members(g, ins), tuple(shapes[i.id] for i in ins), \
            tuple(dtypes[i.id] for i in ins)
        if backend_kind(target) not in GPU_KINDS:      # as the plan runs it
            members, ishapes, idtypes, _ = prepacked_members(g, ins, members, shapes, dtypes)
        s, _, _ = schedule_group(members, ishapes, idtypes, target, schedules)
        out.append((tuple(g), s))
    return out


def prepacked_members(g, ins, members, shapes, dtypes) -> tuple:
    """A CPU group's (members, input shapes, input dtypes, packs) with each conv2d whose
    weights are a constant and which takes the channel-blocked form
    (`cpu_schedules.conv_block`) made a `conv2d_nchwc` that reads those weights packed
    (`nnops.pack_conv_weights`, done once per plan) as an extra input after the group's
    own; `packs` lists (the constant, the block) of each extra input, in order."""
    members, ishapes = list(members), [shapes[i.id] for i in ins]
    idtypes, packs = [dtypes[i.id] for i in ins], []
    for j, (op, attrs, operands) in enumerate(members):
        src, k = operands[1] if op == "conv2d" else (None, None)
        if src != "in" or ins[k].op != "constant" or dtypes[ins[k].id] == "bfloat16":
            continue                # (a bfloat16 conv packs its own: graph/bfloat16.py)
        w, node = ins[k], g[j]
        block = conv_block(shapes[node.id], shapes[w.id], dtypes[w.id])
        if block is None:
            continue
        kc, c, kh, kw = shapes[w.id]
        packed_shape = (-(-kc // block[0]), c, kh, kw, block[0])
        members[j] = ("conv2d_nchwc", tuple(sorted(
            dict(attrs, channels=shapes[node.id][1]).items())),
            (operands[0], ("in", len(ishapes))))
        ishapes.append(packed_shape)
        idtypes.append(dtypes[w.id])
        packs.append((w, block[0]))
        debug_print(1, f"executor: {node.name}: constant weights {w.name} packed once per "
                       f"plan {packed_shape}, conv2d_nchwc")
    return tuple(members), tuple(ishapes), tuple(idtypes), packs


class _Plan:
    def __init__(self, order, shapes, dtypes, outputs, fused=True, target="llvm",
                 schedules="default"):
        self.target = target
        self.on_gpu = backend_kind(target) in GPU_KINDS
        self.steps: list[_Step] = []
        self.slot_of: dict[int, int] = {}
        self.arrays: list[np.ndarray] = []
        self.constant_slots_extra: set[int] = set()     # packed weights (`_prepacked`)
        groups = fuse(order, shapes, dtypes, outputs, target) if fused else \
            [[n] for n in order if n.op not in ("variable", "constant")]
        uses: dict[int, int] = {}
        for g in groups:
            for i in self._inputs(g):
                uses[i.id] = uses.get(i.id, 0) + 1
        keep = {o.id for o in outputs}
        free: dict[tuple, list[int]] = {}
        for n in order:
            if n.op in ("variable", "constant"):
                self.slot_of[n.id] = self._new(shapes[n.id], dtypes[n.id])
                if n.op == "constant":
                    self._set(self.slot_of[n.id], n.attr("value").array)
        specs, extra = [], []
        packed: dict[tuple, int] = {}       # (constant id, block): the packed weights' slot
        for g in groups:
            ins = self._inputs(g)
            members, ishapes, idtypes, slots = self._prepacked(
                g, ins, _members(g, ins), shapes, dtypes, packed)
            specs.append((members, ishapes, idtypes))
            extra.append(slots)
        try:        # every kernel at once: the missing ones compile side by side
            compiled = compile_groups(specs, target, schedules)
        except tl.TensorlangError:
            compiled = [None] * len(groups)     # one by one below, to name the failing node
        for g, spec, got, slots in zip(groups, specs, compiled, extra):
            n = g[-1]
            key = (shapes[n.id], dtypes[n.id])
            pool = free.get(key)
            slot = pool.pop() if pool else self._new(*key)
            self.slot_of[n.id] = slot
            ins = self._inputs(g)
            try:
                kernel, used = got if got is not None else compile_group(*spec, target,
                                                                         schedules)
            except tl.TensorlangError as e:
                raise GraphError(f"node {n.name} ({n.op}): cannot compile: {e}") from e
            step = _Step(g, kernel, [self.slot_of[ins[k].id] if k < len(ins)
                                     else slots[k - len(ins)] for k in used], slot)
            arrays = [self.arrays[i] for i in step.inputs] + [self.arrays[slot]]
            cpu = backend_kind(target) not in GPU_KINDS
            if cpu:
                kernel.check_arguments(arrays)  # once: the plan's arrays never change
            if cpu and not kernel.params:   # constant sizes
                step.pointers = [a.ctypes.data for a in arrays]
            self.steps.append(step)
            for i in ins:        # (one read for its shape only may be inside another kernel)
                uses[i.id] -= 1
                if uses[i.id] == 0 and i.id not in keep and i.id in self.slot_of and \
                        i.op not in ("variable", "constant"):
                    free.setdefault((shapes[i.id], dtypes[i.id]), []).append(self.slot_of[i.id])
        # per run, fed arrays and fresh output arrays take the place of their slots
        self.fed = [n.id for n in order if n.op == "variable"]
        outs = list(dict.fromkeys(o.id for o in outputs if o.op not in ("variable", "constant")))
        self.fresh = [(self.slot_of[i], shapes[i], dtypes[i]) for i in outs]
        swapped = {self.slot_of[i] for i in self.fed} | {slot for slot, _, _ in self.fresh}
        self.patches = [(k, j, slot) for k, st in enumerate(self.steps) if st.pointers
                        for j, slot in enumerate(st.inputs + [st.output]) if slot in swapped]
        self.constant_slots = {self.slot_of[n.id] for n in order if n.op == "constant"} | \
            self.constant_slots_extra
        # a run takes a buffer set no other run holds (`Executor.run`): runs from several
        # threads at once each write their own intermediates
        self.idle = [_Buffers(self.arrays, [st.pointers for st in self.steps])]
        self.lock = threading.Lock()      # a GPU plan's device arrays: one run at a time

    def buffers(self) -> _Buffers:
        """A buffer set for one run: an idle one, else a new one (another thread's run holds
        every one made so far). Give it back with `self.idle.append`."""
        try:
            return self.idle.pop()      # (atomic: list.pop and append hold the GIL)
        except IndexError:
            pass
        arrays = [a if slot in self.constant_slots else _zeros(a.shape, a.dtype)
                  for slot, a in enumerate(self.arrays)]
        pointers = [None if st.pointers is None else [arrays[i].ctypes.data for i in
                                                      st.inputs + [st.output]]
                    for st in self.steps]
        debug_print(1, f"executor: a new buffer set ({len(arrays)} arrays) for a run while "
                       "another thread runs this plan")
        return _Buffers(arrays, pointers)

    def _prepacked(self, g, ins, members, shapes, dtypes, packed) -> tuple:
        """`prepacked_members` of the group, each packed filter in a constant slot of the
        plan (one per constant and block: `packed`); the slots, in order, come last."""
        if self.on_gpu:
            return tuple(members), tuple(shapes[i.id] for i in ins), \
                tuple(dtypes[i.id] for i in ins), []
        members, ishapes, idtypes, packs = prepacked_members(g, ins, members, shapes, dtypes)
        slots = []
        for w, block in packs:
            key = (w.id, block)
            if key not in packed:
                wp = pack_conv_weights(w.attr("value").array, block)
                packed[key] = self._new(wp.shape, wp.dtype)
                self._set(packed[key], wp)
                self.constant_slots_extra.add(packed[key])
            slots.append(packed[key])
        return members, ishapes, idtypes, slots

    @staticmethod
    def _inputs(group: list[Node]) -> list[Node]:
        """The nodes a group reads from outside, in first-use order."""
        inside = {m.id for m in group}
        return list({i.id: i for m in group for i in m.inputs if i.id not in inside}.values())

    def _new(self, shape, dtype) -> int:
        if self.on_gpu:   # tensors stay on the device between kernels
            import pycuda.gpuarray as gpuarray

            self.arrays.append(gpuarray.zeros(shape, dtype))
        else:
            self.arrays.append(_zeros(shape, dtype))   # (a row's vectors: one cache line)
        return len(self.arrays) - 1

    def _set(self, slot: int, value: np.ndarray) -> None:
        if self.on_gpu:
            dst = self.arrays[slot]
            dst.set(np.ascontiguousarray(value, dst.dtype).reshape(dst.shape))
        else:
            self.arrays[slot][...] = value


def _scalar_feed(var: Node, v) -> np.ndarray:
    """A Python or numpy number fed for `var`, as a 0-d array of its dtype: a float for an
    integer Variable, or an integer outside its dtype's range, is refused (numpy would
    truncate or wrap it), as a float array fed for it is."""
    dt = np.dtype(var.dtype)
    if dt.kind in "iub":
        if isinstance(v, (float, np.floating)):
            raise GraphError(f"run: Variable {var.name} is {var.dtype}; it cannot be fed the "
                             f"float {v!r} (give an integer)")
        info = np.iinfo(dt) if dt.kind != "b" else None
        if info is not None and not info.min <= int(v) <= info.max:
            raise GraphError(f"run: Variable {var.name} is {var.dtype}; {int(v)} is outside "
                             f"its range [{info.min}, {info.max}]")
    return np.asarray(v, dt)


def _zeros(shape, dtype) -> np.ndarray:
    """A zeroed line-aligned array."""
    a = aligned_empty(shape, dtype)
    a.fill(0)
    return a


class _Buffers:
    """The arrays one run of a plan writes (intermediates; fed arrays and outputs take
    their slots per run) and the kernels' argument pointers into them."""

    def __init__(self, arrays: list, pointers: list):
        self.arrays = arrays
        self.pointers = pointers      # per step: its argument pointers, or None
        # the array last put in each swapped slot (a weak reference) and its address: a
        # caller that passes the same arrays again (a training loop, a benchmark) skips
        # numpy's `ctypes` object per pointer, a large part of a small run's overhead.
        # An array keeps its address while it lives (numpy reallocates only on a resize
        # to another size, which the shape checks refuse); a freed one's reference is
        # dead, so a new array at its id is never taken for it.
        self.last_ptr: dict[int, tuple[weakref.ref, int]] = {}

    def address(self, slot: int, a: np.ndarray) -> int:
        ptr = array_cache.data_address(a)       # a fresh output: its block's address
        if ptr is not None:
            return ptr
        got = self.last_ptr.get(slot)
        if got is not None and got[0]() is a:
            return got[1]
        ptr = a.ctypes.data
        self.last_ptr[slot] = (weakref.ref(a), ptr)
        return ptr


def _cuda_context() -> None:
    try:
        from ..backends.cuda.module import _driver

        _driver()
        import pycuda.gpuarray  # noqa: F401
    except Exception as e:  # noqa: BLE001 (no pycuda, no driver or no device)
        raise tl.TensorlangError(
            f"Executor(target='cuda' or 'nvptx') needs pycuda, a CUDA driver and a GPU "
            f"({e})") from None


@dataclass(frozen=True)
class Kernel:
    """One compiled kernel of a plan: the module and the graph nodes it computes (a fused
    group: the last node's value is what it stores)."""

    module: object
    nodes: tuple

    def __repr__(self) -> str:
        return f"Kernel({self.module.name}: {', '.join(n.name for n in self.nodes)})"


class Executor:
    """Compiles and runs the graph that computes `nodes`; `run(feed_dict)` returns their
    values (numpy arrays) in order. The nodes run in fused groups (`graph/fusion.py`;
    `kernels` lists them after a run); `fuse=False` runs one kernel per node instead,
    the baseline that `benchmarks/graph_opt.py` compares against. `schedules="auto"` takes
    each kernel's schedule from `tl.auto_schedule` (through the tuning log) instead of the
    hand-written defaults (CPU targets); `schedules="model"` its quick model-only mode (no
    kernel measured: the cost model ranks the sampled candidates).

    Plans: a plan (kernels and buffers) is made for each new combination of fed shapes and
    dtypes, and the `max_plans` (default 16) most recently used are kept (an LRU cache; a
    plan made again after it was dropped takes its compiled kernels from the kernel
    cache). Threads: one Executor may run from several threads at once; each run takes
    its own set of intermediate buffers (made when every set is in use), so runs never
    share memory, and a failed index check reports the failing call's own index. A GPU
    Executor's runs take turns (its device buffers are one set)."""

    def __init__(self, nodes, target: str = "llvm", fuse: bool = True,
                 schedules: str = "default", max_plans: int = 16):
        if isinstance(max_plans, bool) or not isinstance(max_plans, (int, np.integer)) or \
                max_plans < 1:
            raise GraphError(f"Executor: max_plans must be an int >= 1, got {max_plans!r}")
        self.max_plans = int(max_plans)
        self.outputs = list(nodes) if isinstance(nodes, (list, tuple)) else [nodes]
        self.fuse = bool(fuse)      # False: one kernel per node (a baseline to compare)
        if schedules not in SCHEDULES:
            raise GraphError(f"Executor: schedules must be one of "
                             f"{', '.join(map(repr, SCHEDULES))}, got {schedules!r}")
        self.schedules = schedules
        if not self.outputs:
            raise GraphError("Executor: expected at least one node")
        if target not in GPU_KINDS and not str(target).startswith("llvm"):
            raise GraphError(f"Executor: target must be 'llvm', 'cuda' or 'nvptx', got "
                             f"{target!r}")
        self.target = target
        self.on_gpu = backend_kind(target) in GPU_KINDS
        if self.on_gpu:
            _cuda_context()
        self.order = topological_order(self.outputs)
        self.variables = [n for n in self.order if n.op == "variable"]
        self._plans: OrderedDict[tuple, _Plan] = OrderedDict()   # LRU, max_plans
        self._plans_lock = threading.Lock()
        self._last: _Plan | None = None

    @property
    def kernels(self) -> list[Kernel]:
        """The compiled kernels of the last run's plan, in launch order, each with the
        graph nodes it computes (empty before the first run)."""
        if self._last is None:
            return []
        return [Kernel(st.kernel, tuple(st.nodes)) for st in self._last.steps]

    def _feeds(self, feed_dict) -> dict[int, np.ndarray]:
        if not isinstance(feed_dict, dict):
            raise GraphError(f"run: feed_dict must be a dict {{Variable: value}}, got "
                             f"{type(feed_dict).__name__}")
        by_id = {}
        for k, v in feed_dict.items():
            if not isinstance(k, Node) or k.op != "variable":
                raise GraphError(f"run: feed_dict keys must be Variables, got {k!r}")
            by_id[k.id] = (k, v)
        out = {}
        for var in self.variables:
            if var.id not in by_id:
                raise GraphError(f"run: no value fed for Variable {var.name}")
            _, v = by_id[var.id]
            if isinstance(v, np.ndarray):
                if v.dtype != np.dtype(var.dtype):
                    raise GraphError(f"run: Variable {var.name} is {var.dtype}, but the fed "
                                     f"array is {v.dtype}")
            elif isinstance(v, (int, float, np.floating, np.integer)) and not isinstance(v, bool):
                v = _scalar_feed(var, v)
            else:
                raise GraphError(f"run: Variable {var.name} must be fed a numpy array or a "
                                 f"number, got {type(v).__name__}")
            if var.shape is not None and tuple(v.shape) != tuple(var.shape):
                raise GraphError(f"run: Variable {var.name} has shape {var.shape}, but the fed "
                                 f"array has shape {v.shape}")
            out[var.id] = v if v.flags.c_contiguous else \
                np.require(v, requirements="C")        # (keeps 0-d arrays 0-d)
        return out

    def _plan(self, feeds) -> _Plan:
        shapes, dtypes = _infer(self.order, {i: (tuple(v.shape), str(v.dtype))
                                             for i, v in feeds.items()})
        return _Plan(self.order, shapes, dtypes, self.outputs, self.fuse, self.target,
                     self.schedules)

    def run(self, feed_dict, out=None) -> list[np.ndarray]:
        """The outputs' values for the fed Variables. Each is a fresh array, or, with `out`
        (a list like the outputs, None where a fresh array will do), written into the
        array given there — C-contiguous, of the output's shape and dtype, sharing no
        memory with a fed array — as numpy's `out=` does (no allocation per run).

        A fresh array is the caller's own (no later run writes it) and comes from the
        array cache: memory of earlier outputs whose arrays, and every view of them, are
        gone, so a loop of runs does not fault in new pages (`G.array_cache_info`,
        `G.empty_array_cache`, TL_ARRAY_CACHE_MB)."""
        feeds = self._feeds(feed_dict)
        sig = tuple((v.id, feeds[v.id].shape, feeds[v.id].dtype.str) for v in self.variables)
        with self._plans_lock:      # (one thread compiles a new plan; the others wait)
            plan = self._plans.get(sig)
            if plan is None:
                plan = self._plans[sig] = self._plan(feeds)
                while len(self._plans) > self.max_plans:
                    dropped, _ = self._plans.popitem(last=False)
                    debug_print(1, f"executor: plan for {dropped} dropped (max_plans = "
                                   f"{self.max_plans})")
            else:
                self._plans.move_to_end(sig)
        self._last = plan
        given = self._outs(out, plan, feeds)
        if plan.on_gpu:
            with plan.lock:
                got = self._run_cuda(plan, feeds)
            return [g if o is None else (np.copyto(o, g), o)[1] for g, o in zip(got, given)]
        bufs = plan.buffers()
        try:
            arrays = self._run_steps(plan, bufs, feeds, given)
        finally:
            plan.idle.append(bufs)
        result, seen = [], set()
        for o, g in zip(self.outputs, given):
            a = arrays[plan.slot_of[o.id]]
            fresh = o.op not in ("variable", "constant") and o.id not in seen
            if g is not None and g is not a:
                np.copyto(g, a)
                a = g
            elif g is None and not fresh:
                a = a.copy()                    # fed arrays and repeats are copied
            result.append(a)
            seen.add(o.id)
        return result

    def _run_steps(self, plan: _Plan, bufs: _Buffers, feeds: dict, given: list,
                   times: list | None = None) -> list:
        """Run the plan's kernels on the buffer set `bufs`: its arrays with this run's fed
        arrays and outputs in their slots (returned). `times`: each step's seconds are
        added to it (`profile`)."""
        arrays = list(bufs.arrays)
        for i in plan.fed:
            arrays[plan.slot_of[i]] = feeds[i]
        mine = {}
        for o, a in zip(self.outputs, given):
            if a is not None and o.op not in ("variable", "constant"):
                mine.setdefault(plan.slot_of[o.id], a)
        for slot, shape, dtype in plan.fresh:
            arrays[slot] = mine[slot] if slot in mine else array_cache.empty(shape, dtype)
        pointers = bufs.pointers
        for k, j, slot in plan.patches:
            pointers[k][j] = bufs.address(slot, arrays[slot])
        for k, (st, ptrs) in enumerate(zip(plan.steps, pointers)):
            t0 = time.perf_counter() if times is not None else 0.0
            if ptrs is None:
                st.kernel(*[arrays[i] for i in st.inputs], arrays[st.output])
                if times is not None:
                    times[k] += time.perf_counter() - t0
                continue
            status, record = st.kernel.kernel.run(*ptrs)
            if times is not None:
                times[k] += time.perf_counter() - t0
            if status == Status.NO_MEMORY:
                raise MemoryError(f"node {st.node.name}: a temporary buffer could not be "
                                  "allocated")
            if status != 0:
                e = st.kernel.status_error(status, record)
                e.add_note(f"(in the kernel of graph node {st.node.name})")
                raise e
        return arrays

    def profile(self, feed_dict, runs: int = 10) -> list[KernelTime]:
        """Each kernel's time in `runs` runs of the plan for these feeds (after one run that
        compiles it): a list of `KernelTime` (the graph nodes the kernel computes, fused
        into it, its mean time and its share of the run), slowest first — what
        onnxruntime's profiler and TVM's debug executor show. CPU targets."""
        if not isinstance(runs, int) or runs < 1:
            raise GraphError(f"profile: runs must be a positive int, got {runs!r}")
        self.run(feed_dict)
        plan = self._last
        if plan.on_gpu:
            raise NotImplementedError("profile: GPU plans are not profiled per kernel yet")
        feeds = self._feeds(feed_dict)
        times = [0.0] * len(plan.steps)
        for _ in range(runs):
            bufs = plan.buffers()
            try:
                self._run_steps(plan, bufs, feeds, [None] * len(self.outputs), times)
            finally:
                plan.idle.append(bufs)
        total = sum(times) or 1.0
        out = [KernelTime(st.node.name, tuple(f"{n.op} {n.name}" for n in st.nodes),
                          t / runs, t / total) for st, t in zip(plan.steps, times)]
        return sorted(out, key=lambda k: -k.seconds)

    def _outs(self, out, plan, feeds) -> list:
        """`run`'s `out`, checked: one entry per output, None or a fitting array."""
        if out is None:
            return [None] * len(self.outputs)
        if not isinstance(out, (list, tuple)) or len(out) != len(self.outputs):
            raise GraphError(f"run: out must be a list of {len(self.outputs)} arrays (or None "
                             f"entries), one per output, got {type(out).__name__}"
                             + (f" of {len(out)}" if isinstance(out, (list, tuple)) else ""))
        for k, (o, a) in enumerate(zip(self.outputs, out)):
            if a is None:
                continue
            shape, dtype = plan.arrays[plan.slot_of[o.id]].shape, \
                plan.arrays[plan.slot_of[o.id]].dtype
            if not isinstance(a, np.ndarray) or a.shape != shape or a.dtype != dtype or \
                    not a.flags.c_contiguous or not a.flags.writeable:
                raise GraphError(f"run: out[{k}] (for {o.name}) must be a writeable "
                                 f"C-contiguous {dtype} array of shape {shape}, got "
                                 + (f"{a.dtype} {a.shape}" if isinstance(a, np.ndarray)
                                    else type(a).__name__))
            for v in self.variables:
                if np.may_share_memory(a, feeds[v.id]):   # C-contiguous: exact
                    raise GraphError(f"run: out[{k}] (for {o.name}) shares memory with the "
                                     f"array fed for {v.name}")
            for j, b in enumerate(out[:k]):
                if b is not None and np.may_share_memory(a, b):
                    raise GraphError(f"run: out[{k}] and out[{j}] share memory")
        return list(out)

    def _run_cuda(self, plan: _Plan, feeds) -> list[np.ndarray]:
        """Feeds are copied to the device once per run, every kernel works on device
        arrays, and the outputs are copied back at the end."""
        for i in plan.fed:
            plan._set(plan.slot_of[i], feeds[i])
        arrays = plan.arrays
        for st in plan.steps:
            st.kernel(*[arrays[i] for i in st.inputs], arrays[st.output])
        out = []
        for o in self.outputs:
            if o.op == "variable":
                out.append(feeds[o.id].copy())
            else:
                out.append(arrays[plan.slot_of[o.id]].get())
        return out
