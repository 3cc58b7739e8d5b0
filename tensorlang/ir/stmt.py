"""Loop statements: what isl's AST becomes and what the backends read."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from .dtype import DType
from .expr import PRINTERS, Expr, Var


class LoopKind(enum.Enum):
    SERIAL = "serial"
    PARALLEL = "parallel"
    VECTORIZED = "vectorized"
    UNROLLED = "unrolled"
    GPU_BLOCK = "gpu_block"
    GPU_THREAD = "gpu_thread"


@dataclass(frozen=True, slots=True, eq=False)
class Buffer:
    """A region of memory: an argument tensor or an allocation. Identity matters, not name."""

    name: str
    shape: tuple[Expr, ...]
    dtype: DType
    scope: str = "global"

    def __repr__(self) -> str:
        return f"Buffer({self.name}, {self.dtype}, {list(self.shape)}, {self.scope})"


class Stmt:
    __slots__ = ()

    def __str__(self) -> str:
        return PRINTERS["stmt"](self)    # printer.py's stmt_str

    __repr__ = __str__


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class For(Stmt):
    """for var in range(min, min + extent): body. `max_extent`: a constant the extent never
    exceeds (isl's bound), when the extent is not itself a constant and one is known."""

    var: Var
    min: Expr
    extent: Expr
    body: Stmt
    kind: LoopKind = LoopKind.SERIAL
    thread_tag: str = ""
    max_extent: int | None = None


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Store(Stmt):
    """buffer[indices] = value. With `atomic` ("add", "max" or "min", an update stage's
    associative and commutative combiner), one indivisible read-modify-write instead:
    buffer[indices] = buffer[indices] (+, max, min) value, safe when threads update the
    same element at once."""

    buffer: Buffer
    indices: tuple[Expr, ...]
    value: Expr
    atomic: str = ""


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Allocate(Stmt):
    """`buffer` exists (uninitialised) while `body` runs."""

    buffer: Buffer
    body: Stmt


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class If(Stmt):
    cond: Expr
    then_body: Stmt
    else_body: Stmt | None = None


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Let(Stmt):
    """Evaluate `value` once, name it `var` inside `body`."""

    var: Var
    value: Expr
    body: Stmt


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Barrier(Stmt):
    """Every thread of a GPU block waits here until all have arrived, and their earlier
    writes (shared and global memory) are visible to all (CUDA's `__syncthreads()`).
    scope="warp": the same among the 32 threads of each warp only (`__syncwarp()`)."""

    scope: str = "block"

    def joins(self, prev: Stmt | None) -> bool:
        """Whether this barrier adds nothing right after `prev` (a barrier at least as
        wide)."""
        return isinstance(prev, Barrier) and (prev.scope == "block" or self.scope == "warp")


def joined_barriers(stmts):
    """`stmts` without the barriers that add nothing after the one before them (two in a
    row wait as one)."""
    prev = None
    for x in stmts:
        if not (isinstance(x, Barrier) and x.joins(prev)):
            yield x
        prev = x


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class ExternCall(Stmt):
    """An extern stage's body: a function the user provides reads the whole of each of
    `inputs` and writes `outputs` (buffers or tensors, as Store's `buffer`).

    `fn` is a C symbol name (str), called through the extern C ABI

        int32_t fn(const T0 *in0, const int64_t *in0_shape, ..., T *out0,
                   const int64_t *out0_shape, ...)

    (inputs then outputs, each a row-major contiguous array and its extents; 0 = done, any
    other value stops the kernel), or a Python callable `fn(*arrays)` on numpy views of the
    inputs then the outputs, which the backend calls through that same ABI. `library` is a
    shared library to load for the symbol; `what` names the function in messages.
    `reads[k]` is the region of `inputs[k]` read, `writes` that of the output written, as
    ((begin, end), ...) per dimension (None: all of it): what the isl model sees."""

    stage: str
    fn: object
    inputs: tuple
    outputs: tuple
    library: str | None = None
    what: str = ""
    reads: tuple = ()
    writes: tuple | None = None

    @property
    def buffers(self) -> tuple:
        return self.inputs + self.outputs


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class TensorCall(Stmt):
    """One use of a declared hardware instruction (`Stage.tensorize`): `intrin`, a
    `te.TensorIntrin` whose lowering the backend emits, on one region of each buffer in
    `buffers` (the description's inputs, then its output). `bases[k]` indexes the element
    of `buffers[k]` at the region's origin; the description's operand k lies along the
    buffer's last dimensions from there (`TensorIntrin` says how many). The instruction
    reads the input regions and, for a reduction, adds its result to the output region's
    values; else it writes the output region."""

    intrin: object
    buffers: tuple
    bases: tuple

    @property
    def inputs(self) -> tuple:
        return self.buffers[:-1]

    @property
    def outputs(self) -> tuple:
        return self.buffers[-1:]


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Seq(Stmt):
    stmts: tuple[Stmt, ...]


def seq(stmts) -> Stmt:
    """A Seq of the statements, flattening nested Seqs; one statement stays itself."""
    out: list[Stmt] = []
    for s in stmts:
        if isinstance(s, Seq):
            out.extend(s.stmts)
        elif s is not None:
            out.append(s)
    return out[0] if len(out) == 1 else Seq(tuple(out))
