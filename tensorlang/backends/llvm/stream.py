"""Streaming (non-temporal) stores: output arrays written past the caches.

A kernel that writes an array it never reads, when everything it touches outgrows the caches
that would keep it (the cores' L2s; AMD Zen's last level), gains nothing from the written
lines sitting in cache: a plain store first reads each line from memory (read for ownership)
and later writes it back, so the output costs twice its size in memory traffic. A
non-temporal store (`movntps`) writes the line without reading it, so such a kernel moves
less and runs faster once its arrays outgrow the L2s; while they fit the L2, plain stores
are faster, hence the size rule. On AMD Zen the last-level cache keeps an output the L2s let
go at a high rate, and streaming it to DRAM is slower until everything outgrows that cache
(`Target.stream_store_bytes`). The measurements behind both rules:
benchmarks/RESULTS-decisions.md.

x86-64 only (the stores were tried there alone; AArch64's `stnp` orders differently). A
non-temporal vector store must be aligned to its size, which numpy's arrays (16-byte
aligned) often are not: each vector store tests its address at run time, one store of the
whole vector when aligned, 16-byte pieces when only that is, a plain store otherwise.
Non-temporal stores are weakly ordered, so a function that made them ends on `sfence` (each
parallel task too) before its results are read by another thread.
"""

from __future__ import annotations

from llvmlite import ir

from ...config import debug_print, stream_stores
from ...ir.expr import Add, Const, Expr, Load, Mul, binary
from ...ir.stmt import Allocate, Buffer, For, If, Let, LoopKind, Seq, Stmt, Store, TensorCall
from ...ir.affine import linear_coeff
from ...ir.visit import stmt_exprs, substitute, walk, walk_stmt

I32, I64 = ir.IntType(32), ir.IntType(64)
_X86 = ("x86_64", "amd64")
PIECE = 16          # bytes: the narrowest non-temporal vector store (`movntps xmm`)
RUN = 1024          # bytes a store must write in one ascending run to stream


def streamed_buffers(name: str, buffers: list[Buffer], body: Stmt, target) -> set[int]:
    """The ids of the arguments whose vector stores stream: on x86-64, in a kernel that
    allocates nothing (a map from its inputs to its outputs, each element written as the
    inputs are read), arrays it never reads, when all its arrays together (constant sizes)
    exceed `Target.stream_store_bytes` (the cores' L2s; AMD Zen's last level), and whose
    every store is a vector store that the loops around it continue in one ascending run
    of at least RUN bytes.

    Where that does not hold streaming is slower: a matmul's register tile written back a
    few vectors per row (short runs, several lines open at once), and a layer norm whose
    rows are read again from cache through its row statistics; softmax, alike, gains
    nothing either way."""
    if target is None or target.arch not in _X86 or not stream_stores():
        return set()
    total = 0
    for b in buffers:
        if not all(isinstance(x, Const) for x in b.shape):
            return set()        # sizes known only at run time: left to the caches
        n = b.dtype.itemsize
        for x in b.shape:
            n *= int(x.value)
        total += n
    limit = target.stream_store_bytes
    if total <= limit:
        return set()
    loaded = set()
    for st in walk_stmt(body):
        if isinstance(st, (Allocate, TensorCall)):
            return set()
        loaded.update(id(x.buffer) for e in stmt_exprs(st) for x in walk(e)
                      if isinstance(x, Load))
    runs = _runs(body)
    out = {id(b) for b in buffers if id(b) not in loaded and not b.dtype.is_bool
           and runs.get(id(b)) and min(runs[id(b)]) * b.dtype.itemsize >= RUN}
    if out:
        names = ", ".join(b.name for b in buffers if id(b) in out)
        debug_print(1, f"llvm: {name} streams its stores to {names} past the caches "
                       f"(non-temporal: {total >> 20} MiB in all > {limit >> 20} MiB, "
                       f"Target.stream_store_bytes)")
    return out


def _flat(st: Store) -> Expr | None:
    """The store's row-major element offset, or None if the buffer's shape is not constant."""
    if not all(isinstance(x, Const) for x in st.buffer.shape):
        return None
    flat: Expr | None = None
    stride = 1
    for i, n in zip(reversed(st.indices), reversed(st.buffer.shape)):
        term = binary(Mul, i, stride) if stride != 1 else i
        flat = term if flat is None else binary(Add, flat, term)
        stride *= int(n.value)
    return flat


def _runs(body: Stmt) -> dict[int, list[int]]:
    """For each buffer stored to: per store, the elements written in one ascending run by
    the vector loop around it and the loops that continue it (0: not a vector store)."""
    runs: dict[int, list[int]] = {}

    def visit(s: Stmt, loops: list[For], lets: dict[str, Expr]) -> None:
        if isinstance(s, Seq):
            for x in s.stmts:
                visit(x, loops, lets)
        elif isinstance(s, For):
            visit(s.body, loops + [s], lets)
        elif isinstance(s, Allocate):
            visit(s.body, loops, lets)
        elif isinstance(s, Let):
            visit(s.body, loops, {**lets, s.var.name: substitute(s.value, lets)})
        elif isinstance(s, If):
            visit(s.then_body, loops, lets)
            if s.else_body is not None:
                visit(s.else_body, loops, lets)
        elif isinstance(s, Store):
            runs.setdefault(id(s.buffer), []).append(_run(s, loops, lets))

    visit(body, [], {})
    return runs


def _run(st: Store, loops: list[For], lets: dict[str, Expr]) -> int:
    flat = _flat(st)
    vec = [k for k, f in enumerate(loops) if f.kind is LoopKind.VECTORIZED]
    if flat is None or not vec or not isinstance(loops[vec[-1]].extent, Const):
        return 0
    flat = substitute(flat, lets)
    k = vec[-1]
    if linear_coeff(flat, loops[k].var.name) != 1 or \
            any(linear_coeff(flat, f.var.name) != 0 for f in loops[k + 1:]):
        return 0                     # not one element per lane, or loops inside the vector
    run = int(loops[k].extent.value)
    for f in reversed(loops[:k]):     # enclosing loops that carry the run on
        if linear_coeff(flat, f.var.name) != run or not isinstance(f.extent, Const):
            break
        run *= int(f.extent.value)
    return run


def stream_store(cg, v: ir.Value, ptr: ir.Value, buf) -> bool:
    """Store the vector `v` at `ptr` (into the Buffer `buf`) non-temporally where its
    address allows (see the module's docstring); False (nothing written) when the vector's
    size does not suit."""
    itemsize = buf.dtype.itemsize
    size = v.type.count * itemsize
    if size not in (16, 32, 64):
        return False
    b = cg.builder
    md = cg.module.add_metadata([ir.Constant(I32, 1)])
    addr = b.ptrtoint(ptr, I64)

    def aligned(n):
        return b.icmp_unsigned("==", b.and_(addr, ir.Constant(I64, n - 1)),
                               ir.Constant(I64, 0))

    def pieces():
        per = PIECE // itemsize
        pt = ir.VectorType(v.type.element, per)
        base = b.bitcast(ptr, pt.as_pointer())
        for k in range(size // PIECE):
            part = b.shuffle_vector(v, ir.Constant(v.type, ir.Undefined), ir.Constant(
                ir.VectorType(I32, per), list(range(k * per, (k + 1) * per))))
            st = cg.tag(b.store(part, b.gep(base, [ir.Constant(I32, k)]), align=PIECE), buf)
            st.set_metadata("nontemporal", md)

    with b.if_else(aligned(size)) as (whole, other):
        with whole:
            cg.tag(b.store(v, ptr, align=size), buf).set_metadata("nontemporal", md)
        with other:
            if size == PIECE:
                cg.tag(b.store(v, ptr, align=itemsize), buf)
            else:
                with b.if_else(aligned(PIECE)) as (part, plain):
                    with part:
                        pieces()
                    with plain:
                        cg.tag(b.store(v, ptr, align=itemsize), buf)
    cg.streams = True
    return True


def fence(cg) -> None:
    """Order the function's non-temporal stores before what follows its return."""
    f = cg._declare("llvm.x86.sse.sfence", ir.VoidType(), [])
    cg.builder.call(f, [])
