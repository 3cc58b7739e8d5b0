"""Run-time index checks of the LLVM code generator: a failed check writes the kernel's
error record (the first failure wins) and leaves the kernel with `Status.INDEX`. A mixin of
`FunctionCodegen` (codegen.py): it uses the builder, `expr`, `splat` and the vector context.

The record is the caller's (the last argument of the record entry, `record_entry_name`, so
that threads calling one kernel at once each get their own) or, from the C entry point of an
object file, the module's global `error_record_name(kernel)`."""

from __future__ import annotations

from llvmlite import ir

from ...ir.expr import IndexCheck
from ..abi import ERROR_RECORD_LEN, Status, error_record_name
from .types import I1, I32, I64

RECORD_VAR = "tl.record"    # the record's pointer among a function's values (closures too)


class CheckCodegen:
    """Index checks and the kernel's status (see the module)."""

    def index_check(self, e: IndexCheck) -> ir.Value:
        """The index, after a check that it lies in [0, extent) (in every lane that is on)."""
        b = self.builder
        v = self.expr(e.index)
        idx = self.to_i64(v, e.index.dtype)
        ext = self.to_i64(self.expr(e.extent), e.extent.dtype)
        if isinstance(idx.type, ir.VectorType):
            lanes = idx.type.count
            if not isinstance(ext.type, ir.VectorType):
                ext = self.splat(ext)
            bad = b.icmp_unsigned(">=", idx, ext)        # a negative index is huge unsigned
            if self.vec is not None and self.vec.mask is not None:
                bad = b.and_(bad, self.vec.mask)
            bits = b.bitcast(bad, ir.IntType(lanes))
            with b.if_then(b.icmp_unsigned("!=", bits, ir.Constant(bits.type, 0)),
                           likely=False):
                cttz = self._declare(f"llvm.cttz.i{lanes}", bits.type, [bits.type, I1])
                lane = b.call(cttz, [bits, ir.Constant(I1, 1)])
                lane = b.zext(lane, I32) if lanes < 32 else b.trunc(lane, I32) \
                    if lanes > 32 else lane

                def pick(x: ir.Value) -> ir.Value:
                    return b.extract_element(x, lane) if isinstance(x.type, ir.VectorType) \
                        else x

                self.fail_check(e, pick(idx), pick(ext), pick)
            return v
        bad = b.icmp_unsigned(">=", idx, ext)
        if self.check_guard is not None:
            bad = b.and_(bad, self.check_guard)
        with b.if_then(bad, likely=False):
            self.fail_check(e, idx, ext, lambda x: x)
        return v

    def fail_check(self, e: IndexCheck, idx: ir.Value, ext: ir.Value, pick) -> None:
        """Record the failure (the first one wins) and return Status.INDEX."""
        b = self.builder
        rec = self.error_record()

        def slot(k: int) -> ir.Value:
            return b.gep(rec, [ir.Constant(I32, 0), ir.Constant(I32, k)])

        pair = b.cmpxchg(slot(0), ir.Constant(I64, 0), ir.Constant(I64, e.site + 1),
                         "monotonic", "monotonic")
        with b.if_then(b.extract_value(pair, 1)):
            b.store(idx, slot(1))
            b.store(ext, slot(2))
            for k, p in enumerate(e.point[:ERROR_RECORD_LEN - 3]):
                val = self.to_i64(pick(self.expr(p)), p.dtype)
                b.store(val, slot(3 + k))
        self.return_status(Status.INDEX)

    def error_record(self) -> ir.Value:
        """The [i64 x ERROR_RECORD_LEN] a failed index check writes: the caller's record
        (an argument, carried into parallel bodies by their closure), else the global."""
        if RECORD_VAR in self.env:
            return self.env[RECORD_VAR]
        return global_record(self.module, self.kernel)

    def return_status(self, status: int) -> None:
        """Leave the kernel with `status` (0: done)."""
        if isinstance(self.fn.function_type.return_type, ir.VoidType):
            self.builder.ret_void()
        else:
            self.builder.ret(ir.Constant(I32, status))


def global_record(module: ir.Module, kernel: str) -> ir.GlobalVariable:
    """The module's global [i64 x ERROR_RECORD_LEN] record of `kernel` (made once)."""
    rec = module.globals.get(error_record_name(kernel))
    if rec is None:
        t = ir.ArrayType(I64, ERROR_RECORD_LEN)
        rec = ir.GlobalVariable(module, t, error_record_name(kernel))
        rec.initializer = ir.Constant(t, None)
        rec.align = 8
    return rec
