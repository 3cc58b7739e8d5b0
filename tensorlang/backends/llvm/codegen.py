"""Loop IR -> LLVM IR with llvmlite's IR builder.

The kernel's C ABI: `int32 name(T0* buf0, T1* buf1, ..., int64 p0, int64 p1, ...)`, one pointer
per tensor argument (row-major, contiguous) and one int64 per size or scalar parameter. It
returns a `Status` (backends/abi.py): 0, or why it stopped.
Buffers are flattened here: the element (i, j) of a [n, m] buffer is at i*m + j.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir

from ...config import fastmath, fp_contract
from ...errors import TensorlangError
from ...ir.dtype import DType
from ...ir.expr import (
    EQ, GE, GT, LE, LT, NE, Add, And, Call, Cast, CmpOp, Const, Div, Expr, FloorDiv, FloorMod,
    IndexCheck, Load, Max, Min, Mul, Not, Or, Select, Sub, Var,
)
from ...ir.stmt import Allocate, Buffer, ExternCall, For, If, Let, Seq, Stmt, Store, TensorCall
from ...ir.unswitch import hoist_tile_guards
from ...ir.visit import stmt_exprs, walk, walk_stmt
from ..abi import (  # noqa: F401 (AOT_THREADS ... record_entry_name: codegen's API)
    AOT_THREADS, ERROR_RECORD_LEN, Status, error_record_name, record_entry_name,
)
from .alias import AliasScopes, kernel_buffers
from .arith import ArithCodegen
from .atomic import AtomicCodegen
from .checks import RECORD_VAR, CheckCodegen, global_record
from .half import native_conversions
from .loops import NAN_IGNORING, NAN_UNSPECIFIED, LoopCodegen
from .memory import MemoryCodegen
from .stream import fence, streamed_buffers
from .tensorcall import emit as emit_tensor_call
from .transpose import TransposeCodegen
from .types import I1, I8, I32, I64, llvm_type, memory_type, type_suffix  # noqa: F401 (I1: codegen's API)
from .vector import VectorContext
from .vmath import erf_f32, exp_f32, log_f32, tanh_f32

def extern_symbol(s: ExternCall) -> str:
    """The symbol an extern call calls: its C symbol, or the callback of its Python
    function (made for this process's JIT)."""
    if isinstance(s.fn, str):
        return s.fn
    from ..extern import python_symbol

    return python_symbol(s)


_ICMP = {LT: "<", LE: "<=", GT: ">", GE: ">=", EQ: "==", NE: "!="}
_FCMP = {LT: "olt", LE: "ole", GT: "ogt", GE: "oge", EQ: "oeq", NE: "une"}
_INTRINSICS = {"exp", "log", "sqrt", "sin", "cos", "floor", "ceil", "roundeven", "fabs", "pow",
               "tanh"}
_LIBM = {"erf": ("erff", "erf")}
INLINE_F32 = {"exp": exp_f32, "log": log_f32, "tanh": tanh_f32, "erf": erf_f32}  # vmath.py


class FunctionCodegen(AtomicCodegen, ArithCodegen, CheckCodegen, MemoryCodegen, TransposeCodegen,
                      LoopCodegen):
    """One kernel's LLVM function: expressions, calls and statements here; arithmetic
    (arith.py), index checks (checks.py), memory (memory.py) and loops (loops.py) in the
    mixins; transposing copies in transpose.py."""

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
        # a*b + c may become one fused multiply-add (one rounding instead of two), as in TVM
        # and Halide's LLVM backends; nothing else is reassociated. TL_FP_CONTRACT=0 turns
        # it off.
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
            if e.dtype.is_small_float:      # its bits, rounded as ml_dtypes rounds
                bits = np.array(float(e.value), e.dtype.element.np).view(f"u{e.dtype.itemsize}")
                return ir.Constant(t, int(bits))
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
            if self.soft(d):
                x, y = self.widen(x, d), self.widen(y, d)
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

    def call(self, e: Call) -> ir.Value:
        b = self.builder
        args = [self.expr(a) for a in e.args]
        if e.name == "isnan":
            a = args[0]
            if self.soft(e.args[0].dtype):
                a = self.widen(a, e.args[0].dtype)
            return b.fcmp_unordered("uno", a, a)
        d = e.dtype
        half = d.name == "float16" or d.is_small_float
        if half:  # libm and most targets compute half math in float
            args = [self.widen(a, d) if d.is_small_float else self.widen_half(a)
                    for a in args]
        t = args[0].type
        scalar_t = t.element if isinstance(t, ir.VectorType) else t
        if e.name in INLINE_F32 and isinstance(scalar_t, ir.FloatType):
            # inline: vectorises, no libm call per lane
            kw = {"scalef": self.avx512} if e.name == "exp" else {}
            out = INLINE_F32[e.name](b, args[0], self._declare, fast=self.fast, **kw)
        elif e.name in NAN_IGNORING:      # maxnum: NaN ignored, one vmaxps on x86
            out = b.call(self._intrinsic(NAN_IGNORING[e.name], t, 2), args,
                         fastmath=("nnan",) if e.name in NAN_UNSPECIFIED else ())
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
            return self.narrow(out, d) if d.is_small_float else self.narrow_half(out)
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
        elif isinstance(s, Store) and s.atomic:
            self.atomic_store(s)
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
        elif isinstance(s, ExternCall):
            self.extern_call(s)
        elif isinstance(s, TensorCall):
            emit_tensor_call(self, s)
        else:
            raise TensorlangError(f"llvm backend: unsupported statement {type(s).__name__}")

    def extern_call(self, s: ExternCall) -> None:
        """Call an extern stage's function with the extern C ABI (`ExternCall`): a pointer
        and a pointer to the extents of each buffer, inputs then outputs; a nonzero result
        stops the kernel with Status.EXTERN."""
        b = self.builder
        sym = extern_symbol(s)
        i8p = ir.IntType(8).as_pointer()
        fty = ir.FunctionType(I32, [i8p, I64.as_pointer()] * len(s.buffers))
        fn = self.module.globals.get(sym)
        if fn is None:
            fn = ir.Function(self.module, fty, sym)
        elif fn.function_type != fty:
            raise TensorlangError(
                f"extern stage {s.stage}: the C function {sym!r} is called with "
                f"{len(s.buffers)} buffers here and with another number elsewhere in this "
                "kernel; a C function has one signature")
        args = []
        for buf in s.buffers:
            ptr = self.ptrs.get(id(buf))
            if ptr is None:
                raise TensorlangError(f"internal: buffer {buf.name} is not allocated")
            n = max(len(buf.shape), 1)
            with b.goto_block(self.entry):
                shape = b.alloca(I64, n, name=f"{buf.name}.shape")
            for d, x in enumerate(buf.shape):
                b.store(self.to_i64(self.expr(x), x.dtype),
                        b.gep(shape, [ir.Constant(I32, d)], inbounds=True))
            args += [b.bitcast(ptr, i8p), shape]
        status = b.call(fn, args, name=f"{s.stage}.status")
        with b.if_then(b.icmp_signed("!=", status, ir.Constant(I32, 0)), likely=False):
            self.return_status(Status.EXTERN)

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
    # test separately (`unswitch`, as the CUDA backend does) multiplies the copies of the
    # loop, and an awkward-size build's time with them
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
