"""Loop IR -> LLVM IR with llvmlite's IR builder.

The kernel's C ABI: `int32 name(T0* buf0, T1* buf1, ..., int64 p0, int64 p1, ...)`, one pointer
per tensor argument (row-major, contiguous) and one int64 per size or scalar parameter. It
returns 0, or 1 when a heap allocation failed.
Buffers are flattened here: the element (i, j) of a [n, m] buffer is at i*m + j.
"""

from __future__ import annotations

import contextlib

from llvmlite import ir

from ...config import fastmath, fp_contract
from ...errors import TensorlangError
from ...ir.dtype import DType
from ...ir.expr import (
    EQ, GE, GT, LE, LT, NE, Add, And, Call, Cast, CmpOp, Const, Div, Expr, FloorDiv, FloorMod,
    IndexCheck, Load, Max, Min, Mul, Not, Or, Select, Sub, Var, binary,
)
from ...ir.stmt import Allocate, Buffer, For, If, Let, LoopKind, Seq, Stmt, Store
from ...ir.visit import free_vars, map_stmt, stmt_exprs, substitute, walk, walk_stmt
from ..abi import ERROR_RECORD_LEN, Status
from .alias import AliasScopes, kernel_buffers
from .carry import carried_loads
from .half import native_conversions
from ...ir.unswitch import hoist_tile_guards
from .registers import (
    MAX_GUARDED_UNROLL, REGISTER_ARRAY_BYTES, UNROLL_BUDGET, VECTOR_PAD, indexes,
    rebase_register_loops, register_code_size,
)
from .stream import fence, streamed_buffers
from .vector import VectorContext, type_suffix
from .vmath import erf_f32, exp_f32, log_f32, tanh_f32
# after .stream and .vector, whose imports of each other run in that order
from .arith import I1, I8, I32, I64, ArithCodegen  # noqa: F401 (I1..I64: codegen's API)

STACK_LIMIT = 16 * 1024  # bytes; larger or symbolic allocations go to the heap
def llvm_type(d: DType) -> ir.Type:
    if d.is_bool:
        t = I1
    elif d.is_int:
        t = ir.IntType(d.bits)
    elif d.name == "float16":
        t = ir.HalfType()
    elif d.name == "float32":
        t = ir.FloatType()
    else:
        t = ir.DoubleType()
    return t if d.lanes == 1 else ir.VectorType(t, d.lanes)


def memory_type(d: DType) -> ir.Type:
    """How an element is stored: bools take a byte, as in numpy."""
    return I8 if d.is_bool else llvm_type(d)


_ICMP = {LT: "<", LE: "<=", GT: ">", GE: ">=", EQ: "==", NE: "!="}
_FCMP = {LT: "olt", LE: "ole", GT: "ogt", GE: "oge", EQ: "oeq", NE: "une"}
_INTRINSICS = {"exp", "log", "sqrt", "sin", "cos", "floor", "ceil", "fabs", "pow", "tanh"}
_LIBM = {"erf": ("erff", "erf")}
_NAN_IGNORING = {"fmax": "maxnum", "fmin": "minnum"}
INLINE_F32 = {"exp": exp_f32, "log": log_f32, "tanh": tanh_f32, "erf": erf_f32}  # vmath.py


# a*b + c may become one fused multiply-add (one rounding instead of two), as in TVM and
# Halide's LLVM backends; nothing else is reassociated. TL_FP_CONTRACT=0 turns it off.
AOT_THREADS = -1  # `threads` of an object file's kernel: asks the runtime at each launch

# A failed index check stops the kernel with this status after writing, once per call, the
# global `<kernel>_tl_error`: [site + 1, index, extent, the iteration's first values...]
STATUS_INDEX = Status.INDEX


RECORD_ENTRY = ".record"   # suffix of the entry that takes the record as its last argument
RECORD_VAR = "tl.record"    # the record's pointer among a function's values (closures too)


def error_record_name(kernel: str) -> str:
    return f"{kernel}_tl_error"


def record_entry_name(kernel: str) -> str:
    """The kernel's entry that writes a failed check to the record its caller passes (the
    last argument, [ERROR_RECORD_LEN x i64]): one record per call, so that threads calling
    one kernel at once each get their own failure. `kernel` itself (the C entry point of
    an object file) passes the global `error_record_name(kernel)`."""
    return kernel + RECORD_ENTRY


class FunctionCodegen(ArithCodegen):
    def __init__(self, module: ir.Module, name: str, buffers: list[Buffer], params: list[Var],
                 threads: int = 1, target=None, void: bool = False, record: bool = False):
        self.module = module
        self.threads = threads
        # (float32 <-> float16, float64 -> float16) in one instruction; else integer IR
        self.half_native = native_conversions(target) if target is not None else (False, False)
        self.target = target
        # AVX-512 instructions that plain IR does not reach (`vscalefps` in exp)
        self.avx512 = target is not None and target.arch in ("x86_64", "amd64") and \
            (target.cpu == "x86-64-v4" or "+avx512f" in target.feature_set)
        self.fast = fastmath()
        self.fp_flags = ("fast",) if self.fast else ("contract",) if fp_contract() else ()
        self.in_parallel = False
        self.vec: VectorContext | None = None
        self.outlined = 0
        argtys = [memory_type(b.dtype).as_pointer() for b in buffers] + [I64] * len(params)
        if record:                  # the caller's error record, last (`record_entry_name`)
            argtys.append(ir.ArrayType(I64, ERROR_RECORD_LEN).as_pointer())
        # a GPU kernel returns nothing; its status is its error record
        self.fn = ir.Function(module, ir.FunctionType(ir.VoidType() if void else I32, argtys),
                              record_entry_name(name) if record else name)
        self.ptrs: dict[int, ir.Value] = {}
        self.env: dict[str, ir.Value] = {}
        for b, a in zip(buffers, self.fn.args):
            a.name = b.name
            a.add_attribute("noalias")
            self.ptrs[id(b)] = a
        for p, a in zip(params, self.fn.args[len(buffers):]):
            a.name = p.name
            self.env[p.name] = a
        if record:
            self.fn.args[-1].name = "record"
            self.fn.args[-1].add_attribute("noalias")
            self.env[RECORD_VAR] = self.fn.args[-1]
        self.entry = self.fn.append_basic_block("entry")
        self.builder = ir.IRBuilder(self.fn.append_basic_block("body"))
        self.heap: list[ir.Value] = []
        self.kernel = name
        self.check_guard: ir.Value | None = None  # i1: some vector lane is on (scalar reads)
        self.registers: list[Buffer] = []    # small local arrays SROA can keep in registers
        self.padded: set[int] = set()        # arrays with VECTOR_PAD spare elements
        self.row_shape: dict[int, tuple] = {}  # small arrays whose rows are padded
        self.streamed: set[int] = set()      # arguments stored non-temporally (stream.py)
        self.streams = False                 # some store was non-temporal: fence at the end
        self.carried: dict[int, tuple] = {}  # Load id -> (first iteration?, phi) (carry.py)
        self.carry_store: Store | None = None  # the store whose value the loop carries
        self.carry_value: ir.Value | None = None  # ... and the value it stored
        self.scopes: AliasScopes | None = None  # alias metadata per buffer (alias.py)

    def ty(self, d: DType) -> ir.Type:
        """The LLVM type of a value of dtype `d`: a vector inside a vectorized loop."""
        t = llvm_type(d)
        return ir.VectorType(t, self.vec.lanes) if self.vec is not None else t

    def splat(self, v: ir.Value) -> ir.Value:
        """Broadcast a scalar to every lane of the current vector loop."""
        if self.vec is None or isinstance(v.type, ir.VectorType):
            return v
        n = self.vec.lanes
        b = self.builder
        undef = ir.Constant(ir.VectorType(v.type, n), ir.Undefined)
        one = b.insert_element(undef, v, ir.Constant(I32, 0))
        return b.shuffle_vector(one, undef, ir.Constant(ir.VectorType(I32, n), [0] * n))

    # ------------------------------------------------------------------------ helpers
    def _declare(self, name: str, ret: ir.Type, args: list[ir.Type]) -> ir.Function:
        f = self.module.globals.get(name)
        if f is None:
            f = ir.Function(self.module, ir.FunctionType(ret, args), name)
        return f

    def _intrinsic(self, name: str, t: ir.Type, nargs: int = 1) -> ir.Function:
        return self._declare(f"llvm.{name}.{type_suffix(t)}", t, [t] * nargs)

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

    def to_i64(self, v: ir.Value, d: DType) -> ir.Value:
        if d.bits == 64:
            return v
        t = ir.VectorType(I64, v.type.count) if isinstance(v.type, ir.VectorType) else I64
        return self.builder.zext(v, t) if d.is_unsigned or d.is_bool else \
            self.builder.sext(v, t)

    def tag(self, inst: ir.Instruction, buf: Buffer) -> ir.Instruction:
        """`inst`, a load, store or masked access of `buf`'s memory alone, marked as not
        aliasing any other buffer's accesses (alias.py)."""
        return inst if self.scopes is None else self.scopes.tag(inst, buf)

    def address(self, buf: Buffer, indices) -> ir.Value:
        ptr = self.ptrs.get(id(buf))
        if ptr is None:
            raise TensorlangError(f"internal: buffer {buf.name} is not allocated")
        return self.builder.gep(ptr, [self.flat_index(buf, indices)], inbounds=True)

    # --------------------------------------------------------------------- expressions
    def expr(self, e: Expr) -> ir.Value:
        b = self.builder
        if isinstance(e, Var):
            if self.vec is not None:
                if e.name == self.vec.var:
                    return self.vec.iota(self)
                if e.name in self.vec.vals:
                    return self.vec.vals[e.name]
            v = self.env.get(e.name)
            if v is None:
                raise TensorlangError(f"internal: unbound variable {e.name}")
            return self.splat(v)
        if isinstance(e, Const):
            t = self.ty(e.dtype)
            if e.dtype.is_bool:
                return ir.Constant(t, int(e.value))
            if e.dtype.is_int:
                return ir.Constant(t, int(e.value) & ((1 << e.dtype.bits) - 1))
            return ir.Constant(t, float(e.value))
        if isinstance(e, Load):
            if self.vec is not None:
                return self.vec.load(self, e)
            if id(e) in self.carried:
                return self.carried_load(e)
            v = self.tag(b.load(self.address(e.buffer, e.indices)), e.buffer)
            return b.icmp_unsigned("!=", v, ir.Constant(I8, 0)) if e.dtype.is_bool else v
        if isinstance(e, (Add, Sub, Mul, Div, FloorDiv, FloorMod, Min, Max)):
            return self.arith(e)
        if isinstance(e, CmpOp):
            x, y = self.expr(e.a), self.expr(e.b)
            d = e.a.dtype
            if d.name == "float16" and not self.half_native[0]:
                x, y = self.widen_half(x), self.widen_half(y)
            if d.is_float:
                return b.fcmp_ordered(_FCMP[type(e)], x, y) if not isinstance(e, NE) else \
                    b.fcmp_unordered("!=", x, y)
            op = _ICMP[type(e)]
            return b.icmp_unsigned(op, x, y) if d.is_unsigned or d.is_bool else \
                b.icmp_signed(op, x, y)
        if isinstance(e, And):
            return b.and_(self.expr(e.a), self.expr(e.b))
        if isinstance(e, Or):
            return b.or_(self.expr(e.a), self.expr(e.b))
        if isinstance(e, Not):
            v = self.expr(e.a)
            return b.xor(v, ir.Constant(v.type, 1))
        if isinstance(e, Select):
            return self.select(e)
        if isinstance(e, Cast):
            return self.cast(self.expr(e.value), e.value.dtype, e.dtype)
        if isinstance(e, Call):
            return self.call(e)
        if isinstance(e, IndexCheck):
            return self.index_check(e)
        raise TensorlangError(f"llvm backend: unsupported expression {type(e).__name__}")

    # ------------------------------------------------------------------- index checks
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
        """Record the failure (the first one wins) and return STATUS_INDEX."""
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
        self.return_status(STATUS_INDEX)

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

    def call(self, e: Call) -> ir.Value:
        b = self.builder
        args = [self.expr(a) for a in e.args]
        if e.name == "isnan":
            a = args[0]
            if e.args[0].dtype.name == "float16" and not self.half_native[0]:
                a = self.widen_half(a)
            return b.fcmp_unordered("uno", a, a)
        d = e.dtype
        half = d.name == "float16"
        if half:  # libm and most targets compute half math in float
            args = [self.widen_half(a) for a in args]
        t = args[0].type
        scalar_t = t.element if isinstance(t, ir.VectorType) else t
        if e.name in INLINE_F32 and isinstance(scalar_t, ir.FloatType):
            # inline: vectorises, no libm call per lane
            kw = {"scalef": self.avx512} if e.name == "exp" else {}
            out = INLINE_F32[e.name](b, args[0], self._declare, fast=self.fast, **kw)
        elif e.name in _NAN_IGNORING:      # maxnum: NaN ignored, one vmaxps on x86
            out = b.call(self._intrinsic(_NAN_IGNORING[e.name], t, 2), args)
        elif e.name in _INTRINSICS:
            out = b.call(self._intrinsic(e.name, t, len(args)), args)
        elif e.name in _LIBM:
            scalar = t.element if isinstance(t, ir.VectorType) else t
            fname = _LIBM[e.name][0 if isinstance(scalar, ir.FloatType) else 1]
            fn = self._declare(fname, scalar, [scalar] * len(args))
            if isinstance(t, ir.VectorType):  # no vector libm here: one call per lane
                out = ir.Constant(t, ir.Undefined)
                for k in range(t.count):
                    lane = [b.extract_element(a, ir.Constant(I32, k)) for a in args]
                    out = b.insert_element(out, b.call(fn, lane), ir.Constant(I32, k))
            else:
                out = b.call(fn, args)
        else:
            raise TensorlangError(f"llvm backend: unknown function {e.name}")
        if half:
            return self.narrow_half(out)
        return out

    # ---------------------------------------------------------------------- statements
    def lane_if(self, s: If) -> None:
        """An `if` inside a vector loop whose condition differs between lanes: each branch
        runs with the lanes that take it on."""
        b = self.builder
        c = self.expr(s.cond)
        # `lane var < bound` (a vector tail's guard, bound > first lane) keeps lane 0 on
        tail = isinstance(s.cond, LT) and isinstance(s.cond.a, Var) and \
            s.cond.a.name == self.vec.var
        with self.vec.masked(self, c, keeps_first_lane=tail):
            self.stmt(s.then_body)
        if s.else_body is not None:
            with self.vec.masked(self, b.xor(c, ir.Constant(c.type, 1))):
                self.stmt(s.else_body)

    def stmt(self, s: Stmt) -> None:
        b = self.builder
        if isinstance(s, Seq):
            for x in s.stmts:
                self.stmt(x)
        elif isinstance(s, Store):
            v = self.expr(s.value)
            v = self.cast(v, s.value.dtype, s.buffer.dtype)
            if s.buffer.dtype.is_bool:
                v = b.zext(v, ir.VectorType(I8, self.vec.lanes) if self.vec is not None else I8)
            if self.vec is not None:
                self.vec.store(self, s, v)
            else:
                self.tag(b.store(v, self.address(s.buffer, s.indices)), s.buffer)
                if self.carry_store is s:
                    self.carry_value = v
        elif isinstance(s, For):
            self.loop(s)
        elif isinstance(s, If) and self.vec is not None and not self.vec.uniform(s.cond):
            cond = self.vec.interval(s.cond)
            if cond is not None:
                # the lanes where it holds are an interval: the whole vector (all but the
                # edges' vectors) runs the then-branch unmasked (see `select`)
                with b.if_else(self.vec.all_lanes(self, cond)) as (every, some):
                    with every:
                        self.stmt(s.then_body)
                    with some:
                        self.lane_if(s)
            else:
                self.lane_if(s)
        elif isinstance(s, If):
            c = self.expr(s.cond)
            if isinstance(c.type, ir.VectorType):    # a condition alike in every lane
                c = b.extract_element(c, ir.Constant(I32, 0))
            if s.else_body is None:
                with b.if_then(c):
                    self.stmt(s.then_body)
            else:
                with b.if_else(c) as (then, other):
                    with then:
                        self.stmt(s.then_body)
                    with other:
                        self.stmt(s.else_body)
        elif isinstance(s, Let) and self.vec is not None:
            self.vec.let(self, s)
            self.stmt(s.body)
        elif isinstance(s, Let):
            value = self.cast(self.expr(s.value), s.value.dtype, s.var.dtype)
            with self.bound(s.var.name, value):
                self.stmt(s.body)
        elif isinstance(s, Allocate):
            self.allocate(s)
        else:
            raise TensorlangError(f"llvm backend: unsupported statement {type(s).__name__}")

    def loop(self, s: For) -> None:
        if self.vec is not None:
            self.loop_in_vector(s)
            return
        if s.kind in (LoopKind.GPU_BLOCK, LoopKind.GPU_THREAD):
            raise TensorlangError(f"llvm backend: loop {s.var.name} is bound to a GPU index; "
                                  "build it for target='cuda'")
        b = self.builder
        lo = self.to_i64(self.expr(s.min), s.min.dtype)
        if isinstance(s.extent, Const) and s.kind is LoopKind.UNROLLED:
            for k in range(int(s.extent.value)):
                with self.bound(s.var.name, b.add(lo, ir.Constant(I64, k))):
                    self.stmt(s.body)
            return
        if isinstance(s.extent, Const) and s.kind is LoopKind.VECTORIZED and s.extent.value > 1:
            body = s.body
            if not (isinstance(s.min, Const) and int(s.min.value) == 0) and \
                    s.var.name not in free_vars(s.min):
                # counted from zero (v -> v + min): an index `(v + 16*q) // 16` into a
                # packed buffer is then seen as uniform and `(v + 16*q) % 16` as the lanes
                # (`lane_divmod`), one vector load instead of a gather (a register tile
                # placed in a channel-tile loop: the conv's packed weights)
                shifted = binary(Add, s.var, s.min)
                body = map_stmt(body, lambda e: substitute(e, {s.var.name: shifted}))
                lo = ir.Constant(I64, 0)
            self.vec = VectorContext(s.var.name, int(s.extent.value), lo, starts_at_zero=True)
            try:
                self.stmt(body)
            finally:
                self.vec = None
            return
        bound = int(s.extent.value) if isinstance(s.extent, Const) else s.max_extent
        if bound is not None and bound <= MAX_GUARDED_UNROLL and \
                s.kind in (LoopKind.SERIAL, LoopKind.UNROLLED) and \
                any(indexes(s, r) for r in self.registers):
            # a loop whose variable indexes a register array (a partial tile, a tile's
            # copy-out): unrolled to isl's bound, each iteration guarded, so that every
            # index into the array is a constant and SROA keeps it in registers (one
            # dynamic index would put the whole tile in memory: 4x slower matmuls)
            self.guarded_unroll(s, lo, b.add(lo, self.to_i64(self.expr(s.extent),
                                                             s.extent.dtype)), bound)
            return
        if s.kind is LoopKind.PARALLEL and not self.in_parallel and \
                (self.threads > 1 or self.threads == AOT_THREADS):
            self.parallel_loop(s, lo)
            return
        hi = b.add(lo, self.to_i64(self.expr(s.extent), s.extent.dtype))
        self.serial_loop(s.var.name, lo, hi, s.body)

    def loop_in_vector(self, s: For) -> None:
        """A serial or unrolled loop inside a vector loop runs once for all lanes, each
        iteration one vector operation per statement of its body. When its bounds differ
        between lanes (a split's tail: `k < n - 16 * jo - ji`), it runs from the smallest
        first iteration of the lanes that are on to their largest end, each lane masked
        off outside its own range."""
        if s.kind not in (LoopKind.SERIAL, LoopKind.UNROLLED):
            raise TensorlangError(f"internal: {s.kind.name.lower()} loop {s.var.name} inside "
                                  "a vectorized loop")
        b = self.builder
        if any(isinstance(x, Var) and x.name in (self.vec.var, *self.vec.lets)
               for e in (s.min, s.extent) for x in walk(e)):
            self._lane_varying_loop(s)
            return
        vec, self.vec = self.vec, None          # the bounds are scalars
        try:
            lo = self.to_i64(self.expr(s.min), s.min.dtype)
            n = self.to_i64(self.expr(s.extent), s.extent.dtype)
        finally:
            self.vec = vec
        bound = int(s.extent.value) if isinstance(s.extent, Const) else s.max_extent
        unroll = s.kind is LoopKind.UNROLLED or any(indexes(s, r) for r in self.registers)
        if bound is not None and unroll and bound <= MAX_GUARDED_UNROLL:
            self.guarded_unroll(s, lo, b.add(lo, n), bound)
            return
        self.serial_loop(s.var.name, lo, b.add(lo, n), s.body)

    def guarded_unroll(self, s: For, lo: ir.Value, hi: ir.Value, bound: int) -> None:
        """`s` unrolled to `bound` iterations, each guarded by `i < hi` unless the extent
        is a constant."""
        b = self.builder
        for k in range(bound):
            i = b.add(lo, ir.Constant(I64, k))
            with self.bound(s.var.name, i):
                if isinstance(s.extent, Const):
                    self.stmt(s.body)
                    continue
                with b.if_then(b.icmp_signed("<", i, hi)):
                    self.stmt(s.body)

    def _lane_varying_loop(self, s: For) -> None:
        b = self.builder
        lo = self.to_i64(self.expr(s.min), s.min.dtype)
        hi = b.add(lo, self.to_i64(self.expr(s.extent), s.extent.dtype))
        lo, hi = self.splat(lo), self.splat(hi)
        vt = lo.type
        on = self.vec.mask
        if on is not None:      # lanes that are off do not widen the range
            big = (1 << 63) - 1
            lo = b.select(on, lo, ir.Constant(vt, [big] * vt.count))
            hi = b.select(on, hi, ir.Constant(vt, [-big - 1] * vt.count))
        first = b.call(self._declare(f"llvm.vector.reduce.smin.{type_suffix(vt)}", I64, [vt]),
                       [lo])
        last = b.call(self._declare(f"llvm.vector.reduce.smax.{type_suffix(vt)}", I64, [vt]),
                      [hi])

        def own_range(i):                # each lane on only inside its own [lo, hi)
            iv = self.splat(i)
            inside = b.and_(b.icmp_signed(">=", iv, lo), b.icmp_signed("<", iv, hi))
            return self.vec.masked(self, inside)
        self.serial_loop(s.var.name, first, last, s.body, within=own_range)

    @contextlib.contextmanager
    def bound(self, name: str, value: ir.Value):
        """`name` means `value` inside the block, and what it meant before (or nothing)
        after it: a stale loop variable would otherwise be captured by a later parallel
        loop's closure (an SSA value that does not dominate its use)."""
        saved = self.env.get(name)
        self.env[name] = value
        try:
            yield
        finally:
            if saved is None:
                del self.env[name]
            else:
                self.env[name] = saved

    def serial_loop(self, name: str, lo: ir.Value, hi: ir.Value, body_stmt: Stmt,
                    within=None) -> None:
        """for name in [lo, hi): body; `within(i)`, a context the body runs in (a mask)."""
        b = self.builder
        pre = b.block
        head = b.append_basic_block(f"{name}.head")
        body = b.append_basic_block(f"{name}.body")
        end = b.append_basic_block(f"{name}.end")
        b.branch(head)
        b.position_at_end(head)
        i = b.phi(I64, name=name)
        i.add_incoming(lo, pre)
        carry = carried_loads(body_stmt, name) if self.vec is None and within is None else None
        if carry is not None:    # the value the last iteration stored (carry.py)
            store, loads = carry
            prev = b.phi(memory_type(store.buffer.dtype), name=f"{name}.carried")
            prev.add_incoming(ir.Constant(prev.type, ir.Undefined), pre)
        b.cbranch(b.icmp_signed("<", i, hi), body, end)
        b.position_at_end(body)
        with self.bound(name, i), (within(i) if within else contextlib.nullcontext()):
            if carry is None:
                self.stmt(body_stmt)
            else:
                first = b.icmp_signed("==", i, lo)
                saved = self.carried, self.carry_store
                self.carried = {**self.carried, **{id(x): (first, prev) for x in loads}}
                self.carry_store, self.carry_value = store, None
                try:
                    self.stmt(body_stmt)
                    stored = self.carry_value
                finally:
                    self.carried, self.carry_store = saved
        nxt = b.add(i, ir.Constant(I64, 1), flags=["nsw"])
        i.add_incoming(nxt, b.block)
        if carry is not None:
            prev.add_incoming(stored, b.block)
        latch = b.branch(head)
        hint = self.vector_width_hint(body_stmt) if self.vec is None else None
        if hint is not None:
            latch.set_metadata("llvm.loop", hint)
        b.position_at_end(end)

    def vector_width_hint(self, body_stmt: Stmt):
        """Loop metadata giving LLVM's loop vectorizer its vector width, for a scalar loop
        that computes a NaN-ignoring float min or max (`llvm.maxnum`/`minnum`: fmax, fmin,
        nanmax, nanmin; min and max under fast math); else None. LLVM 22 (llvmlite 0.50,
        an assertions build) aborts the process choosing the width of such a loop by its
        cost models ("VPlan cost model and legacy cost model disagreed": a plain
        `tl.nanmax` reduction over 8, 16, 72 or 1024 floats); a given width skips that
        choice, and LLVM still vectorizes the loop where it is legal. The width: the
        target's vector lanes for the widest float the NaN-ignoring operation takes.

        Only a loop that stays innermost in LLVM IR (no serial or parallel loop inside:
        vectorized and unrolled loops are straight-line code here) gets it: LLVM reports a
        loop given a width that it cannot vectorize (an outer loop) on stderr."""
        if any(isinstance(st, For) and st.kind in (LoopKind.SERIAL, LoopKind.PARALLEL)
               for st in walk_stmt(body_stmt)):
            return None
        widest = None
        for st in walk_stmt(body_stmt):
            for e in stmt_exprs(st):
                for x in walk(e):
                    nan_ignoring = isinstance(x, Call) and x.name in _NAN_IGNORING or \
                        self.fast and isinstance(x, (Min, Max))
                    if nan_ignoring and x.dtype.is_float and \
                            (widest is None or x.dtype.itemsize > widest.itemsize):
                        widest = x.dtype
        if widest is None:
            return None
        lanes = self.target.vector_lanes(widest.name) if self.target is not None else 4
        m = self.module
        width = m.add_metadata([ir.MetaDataString(m, "llvm.loop.vectorize.width"),
                                ir.Constant(I32, max(lanes, 2))])
        loop = m.add_metadata([ir.MetaDataString(m, f"tl.loop.{len(m.metadata)}")])
        loop.operands = (loop, width)      # a loop's id names itself first
        return loop

    def carried_load(self, e: Load) -> ir.Value:
        """A load of what the previous iteration stored: memory in the first iteration,
        else the stored value (`serial_loop`)."""
        first, prev = self.carried[id(e)]
        return self.branch_value(
            first, lambda: self.tag(self.builder.load(self.address(e.buffer, e.indices)),
                                    e.buffer),
            lambda: prev, "carry")

    def parallel_loop(self, s: For, lo: ir.Value) -> None:
        """Outline the loop and run it on the thread pool (outline.py)."""
        from .outline import emit_parallel_loop

        emit_parallel_loop(self, s, lo)

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
            if small and len(buf.shape) >= 2 and not buf.dtype.is_bool:
                # rows of whole vectors: a register tile 56 wide would otherwise put the
                # masked tail vector of one row over the next row's start, and SROA keeps
                # overlapping vectors in memory (a conv's 4 x 56 tile: 30 -> 60 GFLOPS)
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
        # line. Measured on a 2-core Zen 4 with the matmul's packed B at +16 bytes against
        # aligned: no difference at 512^3 or 2048^3 (its loads come from L1/L2, where a
        # split load costs little); kept for the model's count of split loads (cost.py)
        off = b.and_(b.sub(ir.Constant(I64, 0), b.ptrtoint(raw, I64)), ir.Constant(I64, 63))
        start = b.gep(raw, [off], inbounds=True)
        with self.allocated(buf, b.bitcast(start, et.as_pointer(), name=buf.name)):
            self.stmt(s.body)
        free = self._declare("free", ir.VoidType(), [ir.IntType(8).as_pointer()])
        b.call(free, [raw])

    def finish(self) -> None:
        if self.streams:
            fence(self)
        self.return_status(Status.OK)
        with self.builder.goto_block(self.entry):
            self.builder.branch(self.fn.blocks[1])


def emit_function(module: ir.Module, name: str, buffers, params, body: Stmt,
                  threads: int = 1, refuse: Expr | None = None, target=None) -> ir.Function:
    """The kernel `name` for `target` (a `tl.Target`: which conversions it has in hardware);
    with `refuse`, it first returns 2 where that condition holds (sizes the kernel must not
    run with)."""
    checks = any(isinstance(x, IndexCheck) for st in walk_stmt(body) for e in stmt_exprs(st)
                 for x in walk(e))
    cg = FunctionCodegen(module, name, buffers, params, threads, target, record=checks)
    cg.scopes = AliasScopes(module, name, kernel_buffers(buffers, body))
    cg.streamed = streamed_buffers(name, buffers, body, target)
    if refuse is not None:
        b = cg.builder
        with b.if_then(cg.expr(refuse), likely=False):
            b.ret(ir.Constant(I32, Status.BAD_SIZES))
    # isl's partial-tile tests inside a reduction loop: their conjunction is tested once
    # outside it (`hoist_tile_guards`: one copy of the loop without them). Hoisting each
    # test separately (`unswitch`, as the CUDA backend does) quadrupled awkward-size builds,
    # 0.9 -> 3.8 s at 127x781x253
    cg.stmt(hoist_tile_guards(body))
    cg.finish()
    if not checks:
        return cg.fn
    # the C entry point: the record entry (kept out of line) with the global record
    cg.fn.attributes.add("noinline")
    outer = ir.Function(module, ir.FunctionType(I32, cg.fn.function_type.args[:-1]), name)
    b = ir.IRBuilder(outer.append_basic_block("entry"))
    b.ret(b.call(cg.fn, [*outer.args, global_record(module, name)]))
    return outer


def global_record(module: ir.Module, kernel: str) -> ir.GlobalVariable:
    """The module's global [i64 x ERROR_RECORD_LEN] record of `kernel` (made once)."""
    rec = module.globals.get(error_record_name(kernel))
    if rec is None:
        t = ir.ArrayType(I64, ERROR_RECORD_LEN)
        rec = ir.GlobalVariable(module, t, error_record_name(kernel))
        rec.initializer = ir.Constant(t, None)
        rec.align = 8
    return rec
