"""Memory in the LLVM code generator: buffer addresses (flat row-major indices, alias
metadata) and allocations — small constant-size arrays on the stack, padded and sized for
SROA to keep register tiles in registers; the rest on the heap, aligned to a cache line.
A mixin of `FunctionCodegen` (codegen.py)."""

from __future__ import annotations

import contextlib

from llvmlite import ir

from ...errors import TensorlangError
from ...ir.expr import Const, Expr
from ...ir.stmt import Allocate, Buffer, Stmt, TensorCall
from ...ir.visit import walk_stmt
from ..abi import Status
from .registers import REGISTER_ARRAY_BYTES, UNROLL_BUDGET, VECTOR_PAD, rebase_register_loops, \
    register_code_size
from .types import I64, memory_type

STACK_LIMIT = 16 * 1024  # bytes; larger or symbolic allocations go to the heap


class MemoryCodegen:
    """Addresses and allocations (see the module)."""

    def flat_index(self, buf: Buffer, indices: tuple[Expr, ...]) -> ir.Value:
        if not indices:
            return ir.Constant(I64, 0)
        b = self.builder
        idx = self.to_i64(self.expr(indices[0]), indices[0].dtype)
        for ext, ix in zip(self.extents(buf)[1:], indices[1:]):
            idx = b.add(b.mul(idx, self.to_i64(self.expr(ext), ext.dtype)),
                        self.to_i64(self.expr(ix), ix.dtype))
        return idx

    def extents(self, buf: Buffer) -> tuple:
        """The buffer's extents as laid out in memory: its shape, except for a small
        local array whose rows are padded to whole 64-byte vectors (see `allocate`)."""
        return self.row_shape.get(id(buf), buf.shape)

    def tag(self, inst: ir.Instruction, buf: Buffer) -> ir.Instruction:
        """`inst`, a load, store or masked access of `buf`'s memory alone, marked as not
        aliasing any other buffer's accesses (alias.py)."""
        return inst if self.scopes is None else self.scopes.tag(inst, buf)

    def address(self, buf: Buffer, indices) -> ir.Value:
        ptr = self.ptrs.get(id(buf))
        if ptr is None:
            raise TensorlangError(f"internal: buffer {buf.name} is not allocated")
        return self.builder.gep(ptr, [self.flat_index(buf, indices)], inbounds=True)

    @contextlib.contextmanager
    def allocated(self, buf: Buffer, ptr: ir.Value):
        """`buf` lives at `ptr` inside the block; an allocation of the same buffer around
        this one (compute_at under a parallel loop makes both) is in force again after."""
        outer = self.ptrs.get(id(buf))
        self.ptrs[id(buf)] = ptr
        try:
            yield
        finally:
            if outer is None:
                del self.ptrs[id(buf)]
            else:
                self.ptrs[id(buf)] = outer

    def allocate(self, s: Allocate) -> None:
        buf = s.buffer
        b = self.builder
        et = memory_type(buf.dtype)
        count = 1
        const = all(isinstance(x, Const) for x in buf.shape)
        if const:
            for x in buf.shape:
                count *= int(x.value)
        if const and count * buf.dtype.itemsize <= STACK_LIMIT:
            small = count * buf.dtype.itemsize <= REGISTER_ARRAY_BYTES
            if small and len(buf.shape) >= 2 and not buf.dtype.is_bool and \
                    not _read_whole(s.body, buf):
                # rows of whole vectors: a register tile 56 wide would otherwise put the
                # masked tail vector of one row over the next row's start, and SROA keeps
                # overlapping vectors in memory (a conv's 4 x 56 tile)
                last = int(buf.shape[-1].value)
                per = max(1, 64 // buf.dtype.itemsize)
                wide = -(-last // per) * per
                if last > 1 and wide != last and \
                        count // last * wide * buf.dtype.itemsize <= REGISTER_ARRAY_BYTES:
                    self.row_shape[id(buf)] = (*buf.shape[:-1], Const(wide, buf.shape[-1].dtype))
                    count = count // last * wide
            with b.goto_block(self.entry):
                # a small array gets VECTOR_PAD elements more: a masked vector access
                # that starts inside it may then read and write all its lanes (a blend),
                # which SROA can keep in registers, unlike a masked load or store
                ptr = b.alloca(et, max(count, 1) + (VECTOR_PAD if small else 0),
                               name=buf.name)
                ptr.align = 64
            if small:
                self.padded.add(id(buf))
                # a register tile only when every index into it can become a constant,
                # in code of bounded size; otherwise SROA cannot promote it anyway and
                # the unrolled copies would only cost build time. Sized once its loops
                # start at 0: a tile allocated outside its row-tile loop indexes rows as
                # `i0 - 8 * i0_outer`, which is not that loop's index once rebased
                # (counted as one, the row-tile loop looked unrolled: 16 x the code)
                rebased = rebase_register_loops(s.body, buf)
                size = register_code_size(rebased, buf)
                if size is not None and size <= UNROLL_BUDGET:
                    self.registers.append(buf)
                    s = Allocate(buf, rebased)
            with self.allocated(buf, ptr):
                self.stmt(s.body)
            return
        n = ir.Constant(I64, 1)
        for x in buf.shape:
            n = b.mul(n, self.to_i64(self.expr(x), x.dtype))
        size = b.mul(n, ir.Constant(I64, buf.dtype.itemsize if not buf.dtype.is_bool else 1))
        malloc = self._declare("malloc", ir.IntType(8).as_pointer(), [I64])
        raw = b.call(malloc, [b.add(size, ir.Constant(I64, 64))], name=f"{buf.name}.raw")
        with b.if_then(b.icmp_unsigned("==", raw, ir.Constant(raw.type, None)), likely=False):
            self.return_status(Status.NO_MEMORY)
        # aligned to a cache line (malloc promises 16 bytes; glibc's large blocks start 16
        # bytes into a page), so a 512-bit vector at a multiple of 16 elements reads one
        # line. A matmul's packed B runs no faster for it (its loads come from L1/L2, where
        # a split load costs little); kept so that the model's count of split loads holds
        # (cost.py)
        off = b.and_(b.sub(ir.Constant(I64, 0), b.ptrtoint(raw, I64)), ir.Constant(I64, 63))
        start = b.gep(raw, [off], inbounds=True)
        with self.allocated(buf, b.bitcast(start, et.as_pointer(), name=buf.name)):
            self.stmt(s.body)
        free = self._declare("free", ir.VoidType(), [ir.IntType(8).as_pointer()])
        b.call(free, [raw])


def _read_whole(body: Stmt, buf: Buffer) -> bool:
    """Whether a declared instruction (`TensorCall`) reads or writes `buf` as one block of
    memory in its declared layout: its rows are then not padded."""
    return any(isinstance(x, TensorCall) and any(b is buf for b in x.buffers)
               for x in walk_stmt(body))
