"""Scoped-noalias metadata: each buffer's loads and stores touch that buffer alone.

Every `Buffer` of a kernel is its own region of memory (an argument, which the runtime
refuses to overlap an output, or an allocation of the kernel), so an access to one buffer
never aliases an access to another. LLVM learns that for the kernel's own arguments from
their `noalias` attributes, and for an allocation only while its capture analysis can
follow every use of the pointer. Neither reaches far enough: a parallel loop's outlined
body reads its buffers' pointers from a closure (no attribute), and capture analysis gives
up on an allocation with more than about 100 uses (a 32 x 32 `cache_write` tile whose
copy-out loop LLVM unrolled). LLVM then keeps, after every multiply-add into the tile, a
store that the next one overwrites, since a load of A in between might read it (TVM's
opt_gemm Opt6: 8 stores of the accumulator per row and k step instead of 2). The metadata
states the fact once per access, as TVM does with a type-based alias tag per buffer:
`!alias.scope` names the buffer's scope, `!noalias` every other buffer's.
"""

from __future__ import annotations

from llvmlite import ir

from ...ir.stmt import Allocate, Buffer, Stmt
from ...ir.visit import walk_stmt

# above this many buffers the metadata (a list of the others per buffer: quadratic) is
# left out and LLVM's own analysis decides alone
MAX_SCOPED_BUFFERS = 256


def kernel_buffers(args: list[Buffer], body: Stmt) -> list[Buffer]:
    """The argument buffers and those the body allocates, each once."""
    out: dict[int, Buffer] = {id(b): b for b in args}
    for s in walk_stmt(body):
        if isinstance(s, Allocate):
            out.setdefault(id(s.buffer), s.buffer)
    return list(out.values())


class AliasScopes:
    """One alias scope per buffer of a kernel, in one domain named after the kernel."""

    def __init__(self, module: ir.Module, kernel: str, buffers: list[Buffer]):
        self.scope: dict[int, ir.MDValue] = {}
        self.others: dict[int, ir.MDValue] = {}
        if len(buffers) < 2 or len(buffers) > MAX_SCOPED_BUFFERS:
            return
        domain = module.add_metadata([ir.MetaDataString(module, f"tl.{kernel}")])
        # the names make the nodes distinct (LLVM uniques metadata by content): numbered,
        # since two buffers may share a name
        scopes = {id(b): module.add_metadata(
            [ir.MetaDataString(module, f"tl.{kernel}.{k}.{b.name}"), domain])
            for k, b in enumerate(buffers)}
        for key, node in scopes.items():
            self.scope[key] = module.add_metadata([node])
            self.others[key] = module.add_metadata([n for k, n in scopes.items() if k != key])

    def tag(self, inst: ir.Instruction, buf: Buffer) -> ir.Instruction:
        """`inst`, an access of `buf`'s memory alone, marked so (nothing for a buffer
        without a scope)."""
        key = id(buf)
        if key in self.scope:
            inst.set_metadata("alias.scope", self.scope[key])
            inst.set_metadata("noalias", self.others[key])
        return inst
