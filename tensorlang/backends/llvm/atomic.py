"""Atomic stores of the LLVM code generator (an update stage's parallel loop declared
atomic, `Store.atomic`): `atomicrmw` add / fadd, signed or unsigned max / min for integers,
and a compare-and-swap loop for a float maximum or minimum (whose NaN and signed-zero rules
are the compiled `Max`/`Min`'s, which no atomicrmw operation has). A mixin of
`FunctionCodegen` (codegen.py)."""

from __future__ import annotations

from llvmlite import ir

from ...errors import TensorlangError
from ...ir.expr import Max, Min, Var
from ...ir.stmt import Store

OLD, NEW = "tl.atomic.old", "tl.atomic.operand"


class AtomicCodegen:
    """`Store` with `atomic` set: buffer[idx] = buffer[idx] (+, max, min) value, at once."""

    def atomic_store(self, s: Store) -> None:
        b = self.builder
        d = s.buffer.dtype
        if self.vec is not None:
            raise TensorlangError(f"internal: an atomic update of {s.buffer.name} in a vector "
                                  "loop")
        v = self.cast(self.expr(s.value), s.value.dtype, d)
        ptr = self.address(s.buffer, s.indices)
        if d.is_int and not d.is_bool:
            op = {"add": "add", "max": "max", "min": "min"}[s.atomic]
            if op != "add" and d.name.startswith("uint"):
                op = "u" + op
            b.atomic_rmw(op, ptr, v, "monotonic")
            return
        if s.atomic == "add":
            b.atomic_rmw("fadd", ptr, v, "monotonic")
            return
        # float max / min: compare-and-swap on the bits until no other thread intervened
        ity = ir.IntType(d.bits)
        iptr = b.bitcast(ptr, ity.as_pointer())
        first = b.load(ptr)
        entry = b.block
        loop = b.append_basic_block("atomic.cas")
        done = b.append_basic_block("atomic.done")
        b.branch(loop)
        b.position_at_end(loop)
        old = b.phi(first.type)
        old.add_incoming(first, entry)
        node = Max if s.atomic == "max" else Min
        with self.bound(OLD, old), self.bound(NEW, v):
            new = self.expr(node(Var(OLD, d), Var(NEW, d)))
        pair = b.cmpxchg(iptr, b.bitcast(old, ity), b.bitcast(new, ity), "monotonic",
                         "monotonic")
        got = b.bitcast(b.extract_value(pair, 0), first.type)
        old.add_incoming(got, b.block)
        b.cbranch(b.extract_value(pair, 1), done, loop)
        b.position_at_end(done)
