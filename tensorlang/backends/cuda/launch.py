"""The launches of a GPU kernel, shared by the CUDA C writer (codegen.py) and NVPTX
(nvptx.py): each top-level statement of the kernel body (after the allocations of the
intermediate tensors the host allocates) is one launch, whose outermost bound loops (through
conditions on the sizes and per-level allocations) are its geometry — a blockIdx loop the
grid dimension, a threadIdx loop the block dimension — and whose remaining statement is what
each thread runs, with its shared and register arrays and the buffers and sizes it takes."""

from __future__ import annotations

from dataclasses import dataclass, field

from ...errors import ScheduleError
from ...ir.expr import EQ, Const, Expr, Load, Var, compare
from ...ir.stmt import Allocate, Buffer, For, If, LoopKind, Seq, Stmt, Store, TensorCall
from ...ir.unswitch import unswitch
from ...ir.visit import map_children, stmt_exprs, uses_buffer, walk, walk_stmt

MAX_GUARDED_UNROLL = 64         # loops over register arrays up to this bound are unrolled
MAX_STATIC_SHARED = 48 * 1024   # bytes of __shared__ arrays a kernel may declare


@dataclass
class Launch:
    """One kernel launch: its name, grid and block extents (IR expressions of the sizes;
    None for an unused dimension) and the buffers and sizes it takes, in order."""

    name: str
    grid: list[Expr | None] = field(default_factory=lambda: [None, None, None])
    block: list[Expr | None] = field(default_factory=lambda: [None, None, None])
    buffers: list[Buffer] = field(default_factory=list)
    params: list[Var] = field(default_factory=list)
    threads: int = 1                 # per block
    body: Stmt | None = None         # the kernel's loop nest as emitted (bound loops first)
    bound: list[For] = field(default_factory=list)   # the bound loops, outermost first
    inner: Stmt | None = None        # what each thread runs, inside the bound loops
    shared: list[Buffer] = field(default_factory=list)
    registers: list[Buffer] = field(default_factory=list)
    # conditions around bound loops: (how many bound loops are outside it, condition)
    conds: list[tuple[int, Expr]] = field(default_factory=list)


def buffer_elements(buf: Buffer) -> int:
    """The elements of a local buffer (shared or registers), whose shape is constant."""
    count = 1
    for x in buf.shape:
        if not isinstance(x, Const):
            raise NotImplementedError(
                f"cuda backend: local buffer {buf.name} has a symbolic size")
        count *= int(x.value)
    return max(count, 1)


def _used(s: Stmt) -> tuple[list[Buffer], set[str]]:
    bufs: dict[int, Buffer] = {}
    names: set[str] = set()
    local: set[int] = set()
    for st in walk_stmt(s):
        if isinstance(st, Allocate):
            local.add(id(st.buffer))
        if isinstance(st, Store):
            bufs.setdefault(id(st.buffer), st.buffer)
        for e in stmt_exprs(st):
            for x in walk(e):
                if isinstance(x, Load):
                    bufs.setdefault(id(x.buffer), x.buffer)
                elif isinstance(x, Var):
                    names.add(x.name)
    for b in list(bufs.values()):
        for x in b.shape:
            names |= {v.name for v in walk(x) if isinstance(v, Var)}
    return [b for k, b in bufs.items() if k not in local], names


_DIM = {"x": 0, "y": 1, "z": 2}


def _full_tiles(s: Stmt, registers: list[Buffer]) -> Stmt:
    """A loop over a register array whose extent varies (a partial tile) becomes
    `if extent == bound: <unrolled, constant extent> else: <guarded>`, so that unswitching
    can give the full tiles code without a branch."""
    def go(x: Stmt) -> Stmt:
        if isinstance(x, For):
            body = go(x.body)
            if x.max_extent is not None and x.max_extent <= MAX_GUARDED_UNROLL and \
                    not isinstance(x.extent, Const) and \
                    any(uses_buffer(body, b) for b in registers):
                full = Const(x.max_extent, x.extent.dtype)
                return If(compare(EQ, x.extent, full),
                          For(x.var, x.min, full, body, LoopKind.UNROLLED),
                          For(x.var, x.min, x.extent, body, x.kind, x.thread_tag,
                              x.max_extent))
            return For(x.var, x.min, x.extent, body, x.kind, x.thread_tag, x.max_extent)
        return map_children(x, go)
    return go(s)


def _bound_below(s: Stmt, buf: Buffer) -> bool:
    """Whether `s` is a bound loop (through allocations) that allocates `buf` again before
    any use: the allocation around it is then redundant."""
    while isinstance(s, Allocate) and s.buffer is not buf:
        s = s.body
    if isinstance(s, Allocate):
        return True
    if isinstance(s, For) and s.kind in (LoopKind.GPU_BLOCK, LoopKind.GPU_THREAD):
        return _bound_below(s.body, buf)
    return False


def _launch_invariant(cond: Expr, bound: list[For], params: list[Var]) -> bool:
    names = {p.name for p in params} | {lp.var.name for lp in bound}
    return all(x.name in names for x in walk(cond) if isinstance(x, Var))


def _binds_below(s: Stmt) -> bool:
    while isinstance(s, (Allocate, If)) and not (isinstance(s, If) and s.else_body):
        s = s.body if isinstance(s, Allocate) else s.then_body
    return isinstance(s, For) and s.kind in (LoopKind.GPU_BLOCK, LoopKind.GPU_THREAD)


def _refuse_cpu_only(name: str, buffers: list[Buffer], body: Stmt) -> None:
    """What only the CPU backend compiles so far, refused by name: bfloat16 and float8 (the
    GPU kernels' conversions are not written) and a declared CPU instruction (TensorCall;
    tensor cores come with the GPU issue)."""
    dts = {b.dtype.name for b in buffers if b.dtype.is_small_float}
    for st in walk_stmt(body):
        if isinstance(st, TensorCall):
            raise NotImplementedError(
                f"cuda: kernel {name} uses the CPU instruction {st.intrin.name} (tensorize); "
                "the GPU backends emit no declared instructions yet (tensor cores come with "
                "the GPU issue). Tensorize with a TensorIntrin whose impl is plain IR, or "
                "build for a CPU target")
        if isinstance(st, Allocate) and st.buffer.dtype.is_small_float:
            dts.add(st.buffer.dtype.name)
        for e in stmt_exprs(st):
            dts.update(x.dtype.name for x in walk(e) if x.dtype.is_small_float)
    if dts:
        raise NotImplementedError(
            f"cuda: kernel {name} uses {', '.join(sorted(dts))}, which the GPU backends do "
            f"not compile yet; build it for a CPU target (llvm), where they are supported")


def plan(name: str, buffers: list[Buffer], params: list[Var], body: Stmt):
    """The launches of a kernel, target-independent (CUDA C and NVPTX write them): for each
    top-level statement, its bound loops (the geometry), what each thread runs, its shared
    and register arrays, and the buffers and sizes it takes. Also the intermediate buffers
    the host allocates."""
    _refuse_cpu_only(name, buffers, body)
    temps: list[Buffer] = []
    while isinstance(body, Allocate):
        temps.append(body.buffer)
        body = body.body
    stmts = list(body.stmts) if isinstance(body, Seq) else [body]
    order = {id(b): k for k, b in enumerate(buffers + temps)}
    launches = []
    for k, st in enumerate(stmts):
        launch = Launch(f"{name}_k{k}")
        inner = st
        while True:
            if isinstance(inner, For) and inner.kind in (LoopKind.GPU_BLOCK,
                                                         LoopKind.GPU_THREAD):
                launch.bound.append(inner)
                inner = inner.body
            elif isinstance(inner, If) and inner.else_body is None and \
                    _launch_invariant(inner.cond, launch.bound, params) and \
                    _binds_below(inner.then_body):
                # a condition on the sizes (or on the blocks) around bound loops: every
                # thread tests it and leaves, as for the loops' own guards
                launch.conds.append((len(launch.bound), inner.cond))
                inner = inner.then_body
            elif isinstance(inner, Allocate) and _bound_below(inner.body, inner.buffer):
                inner = inner.body  # compute_at under a bound loop allocates at each level;
            else:                   # the innermost allocation (one per thread) is the one
                break
        for loop in launch.bound:
            kind, dim = loop.thread_tag.split(".")
            ext = loop.extent
            target = launch.grid if kind == "blockIdx" else launch.block
            if kind == "threadIdx" and not isinstance(ext, Const) and \
                    loop.max_extent is not None:
                # a partial tile launches the full tile's threads (isl's bound), guarded
                target[_DIM[dim]] = Const(loop.max_extent, ext.dtype)
            else:
                target[_DIM[dim]] = ext
        launch.registers = [x.buffer for x in walk_stmt(inner)
                            if isinstance(x, Allocate) and x.buffer.scope != "shared"]
        shared: dict[int, Buffer] = {}
        for x in walk_stmt(inner):
            if isinstance(x, Allocate) and x.buffer.scope == "shared":
                shared.setdefault(id(x.buffer), x.buffer)
        launch.shared = list(shared.values())
        nbytes = sum(buffer_elements(b) * b.dtype.itemsize for b in launch.shared)
        if nbytes > MAX_STATIC_SHARED:
            raise ScheduleError(
                f"cuda: kernel {launch.name} uses {nbytes} bytes of shared memory per "
                f"block ({', '.join(b.name for b in launch.shared)}); the limit is "
                f"{MAX_STATIC_SHARED} (48 KiB of static shared memory): use smaller tiles")
        launch.inner = unswitch(_full_tiles(inner, launch.registers),
                                {lp.var.name for lp in launch.bound
                                 if lp.thread_tag.startswith("threadIdx")})
        body = launch.inner
        for k in range(len(launch.bound), -1, -1):
            for at, cond in reversed(launch.conds):
                if at == k:
                    body = If(cond, body)
            if k:
                loop = launch.bound[k - 1]
                body = For(loop.var, loop.min, loop.extent, body, loop.kind, loop.thread_tag)
        launch.body = body
        bufs, names = _used(st)
        bufs.sort(key=lambda b: order.get(id(b), len(order)))
        launch.buffers = bufs
        launch.params = [p for p in params if p.name in names]
        threads = 1
        for x in launch.block:
            if x is not None:
                if not isinstance(x, Const):
                    raise ScheduleError(
                        f"cuda: the threadIdx loops of kernel {launch.name} need a constant "
                        f"extent (split by a constant first), got {x}")
                threads *= int(x.value)
        if threads > 1024:
            raise ScheduleError(f"cuda: kernel {launch.name} launches {threads} threads per "
                                "block; the limit is 1024")
        launch.threads = max(threads, 1)
        launches.append(launch)
    return launches, temps
