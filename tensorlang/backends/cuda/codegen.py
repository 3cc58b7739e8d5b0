"""Loop IR -> CUDA C: one `__global__` function per top-level loop nest.

Each statement of the kernel body (after the allocations of intermediate tensors, which
live in device memory the host allocates) becomes one launch (planned in launch.py, which
NVPTX shares). Its outermost loops, as far as
they are perfectly nested and bound with `bind`, become the launch geometry: a blockIdx loop
runs as the grid dimension, a threadIdx loop as the block dimension, each guarded by its
extent (a partial tile's `min(64, n - 64*i.outer)` launches 64 threads and guards). A nest
with no bound loop runs on one thread. Loops inside run serially in each thread (unrolled
ones with `#pragma unroll`); a bound loop below a serial one is refused.

Semantics match the CPU backend: integer // and % floor and give 0 for a zero divisor;
minimum/maximum propagate NaN; float -> int saturates (NaN -> 0); float16 is stored as
`__half` and computed in float. A failed index check writes the kernel's error record
(`tl_error`: [check + 1, index, extent, iteration...]) and returns.

A block's shared tile (`cache_read(..., "shared")` computed inside the thread loops) is a
`__shared__` array; the barriers placed around its copy become `__syncthreads()` (two in a
row wait once). `nvptx.py` writes the same launches as PTX through LLVM.
"""

from __future__ import annotations

from ...errors import ScheduleError, TensorlangError
from ...ir.dtype import DType
from ...ir.expr import (
    EQ, GE, GT, LE, LT, NE, Add, And, Call, Cast, Const, Div, Expr, FloorDiv, FloorMod,
    IndexCheck, Load, Max, Min, Mul, Not, Or, Select, Sub, Var,
)
from ...ir.stmt import (
    Allocate, Barrier, Buffer, For, If, Let, LoopKind, Seq, Stmt, Store, joined_barriers,
)
from ...ir.visit import stmt_exprs, uses_buffer, walk, walk_stmt
from ..abi import ERROR_RECORD_LEN
from ..llvm.vector import VectorContext
from .launch import (  # noqa: F401 (Launch, plan: codegen's API)
    MAX_GUARDED_UNROLL, Launch, buffer_elements, plan,
)

C_TYPES = {"bool": "unsigned char", "int8": "signed char", "int16": "short", "int32": "int",
           "int64": "long long", "uint8": "unsigned char", "float16": "__half",
           "float32": "float", "float64": "double"}
# the type a value of each dtype has in expressions (float16 is computed in float)
VALUE_TYPES = {**C_TYPES, "bool": "bool", "float16": "float"}

_BIN = {Add: "+", Sub: "-", Mul: "*", Div: "/"}
_CMP = {LT: "<", LE: "<=", GT: ">", GE: ">=", EQ: "==", NE: "!="}
_MATH = {"exp": "exp", "log": "log", "sqrt": "sqrt", "sin": "sin", "cos": "cos",
         "tanh": "tanh", "floor": "floor", "roundeven": "rint", "ceil": "ceil",
         "fabs": "fabs", "pow": "pow",
         "erf": "erf", "fmax": "fmax", "fmin": "fmin",
         "fmax_any": "fmax"}

PRELUDE = r"""#include <cuda_fp16.h>

// Index arithmetic (loops, sizes, addresses) is tl_idx: 32-bit, which the host uses only
// after checking that every index value of the launch fits; TL_INDEX_64 builds the 64-bit
// variant it uses otherwise.
#ifdef TL_INDEX_64
typedef long long tl_idx;
#else
typedef int tl_idx;
#endif

template <typename T> __device__ __forceinline__ T tl_floordiv(T a, T b) {
  if (b == 0) return 0;
  T q = a / b, r = a % b;
  return (r != 0 && ((r < 0) != (b < 0))) ? q - 1 : q;
}
template <typename T> __device__ __forceinline__ T tl_floormod(T a, T b) {
  if (b == 0) return 0;
  T r = a % b;
  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}
template <typename T> __device__ __forceinline__ T tl_min(T a, T b) {
  return (a != a) ? a : (b != b) ? b : (a < b || (a == b && signbit((double)a))) ? a : b;
}
template <typename T> __device__ __forceinline__ T tl_max(T a, T b) {
  return (a != a) ? a : (b != b) ? b : (a > b || (a == b && !signbit((double)a))) ? a : b;
}
template <typename T> __device__ __forceinline__ T tl_imin(T a, T b) { return a < b ? a : b; }
template <typename T> __device__ __forceinline__ T tl_imax(T a, T b) { return a > b ? a : b; }
// float -> integer: truncate, saturate, NaN -> 0 (as the CPU backend)
template <typename T> __device__ __forceinline__ T tl_f2i(double x, double lo, double hi) {
  return (x != x) ? (T)0 : (x <= lo) ? (T)lo : (x >= hi) ? (T)hi : (T)x;
}
// an update stage's atomic maximum / minimum of a float (tl_max/tl_min's NaN and zero
// rules): compare-and-swap on the bits until no other thread intervened
__device__ __forceinline__ float tl_atomic_fmax(float *p, float v, bool mx) {
  int *q = (int *)p;
  int old = *q, seen;
  do {
    seen = old;
    float f = __int_as_float(seen);
    old = atomicCAS(q, seen, __float_as_int(mx ? tl_max(f, v) : tl_min(f, v)));
  } while (old != seen);
  return __int_as_float(old);
}
__device__ __forceinline__ double tl_atomic_fmax(double *p, double v, bool mx) {
  unsigned long long *q = (unsigned long long *)p;
  unsigned long long old = *q, seen;
  do {
    seen = old;
    double f = __longlong_as_double((long long)seen);
    old = atomicCAS(q, seen,
                    (unsigned long long)__double_as_longlong(mx ? tl_max(f, v) : tl_min(f, v)));
  } while (old != seen);
  return __longlong_as_double((long long)old);
}
"""


def atomic_update(s: Store, elem: str, v: str) -> str:
    """CUDA C of an atomic store (an update stage's atomic loop): atomicAdd, atomicMax or
    atomicMin on integers (64-bit ones through unsigned long long for add, long long for
    max and min), atomicAdd or tl_atomic_fmax's compare-and-swap on floats."""
    d = s.buffer.dtype
    t = C_TYPES[d.name]
    if d.name == "int64" and s.atomic == "add":    # two's complement: the same bits
        return (f"atomicAdd((unsigned long long *)&{elem}, (unsigned long long)(({t})({v})));")
    if d.is_int or s.atomic == "add":
        fn = {"add": "atomicAdd", "max": "atomicMax", "min": "atomicMin"}[s.atomic]
        return f"{fn}(&{elem}, ({t})({v}));"
    return f"tl_atomic_fmax(&{elem}, ({t})({v}), {'true' if s.atomic == 'max' else 'false'});"


_INDEX_OPS = (Add, Sub, Mul, FloorDiv, FloorMod, Min, Max, Select, Cast, Var, Const,
              LT, LE, GT, GE, EQ, NE, And, Or, Not)


def is_index(e: Expr, index_vars) -> bool:
    """Whether `e` is integer arithmetic on loop variables, sizes and constants only (no
    data): such expressions are computed in `tl_idx`, 32 bits when the host has checked
    that every one of them fits (see `index_intervals`)."""
    if not e.dtype.is_int or e.dtype.is_bool:
        return False
    for x in walk(e):
        if not isinstance(x, _INDEX_OPS):
            return False
        if isinstance(x, Var) and x.name not in index_vars:
            return False
        if isinstance(x, (Cast, Select)) and not x.dtype.is_int:
            return False
        if isinstance(x, Cast) and not (x.value.dtype.is_int or x.value.dtype.is_bool):
            return False
    return True


class KernelWriter:
    def __init__(self, name: str, params: list[Var]):
        self.name = name
        self.params = {p.name: p for p in params}
        self.index_vars: set[str] = set(self.params)
        self.lines: list[str] = []
        self.indent = 1
        self.names: dict[int, str] = {}
        self.registers: list[Buffer] = []   # per-thread arrays allocated so far
        self.lanes: dict[int, str] = {}     # Load -> the lane of a vector that holds it
        self.vectors = 0                    # vector accesses written (for names)

    def emit(self, text: str) -> None:
        self.lines.append("  " * self.indent + text)

    # ------------------------------------------------------------------ expressions
    def ty(self, d: DType) -> str:
        return VALUE_TYPES[d.name]

    def ity(self, e: Expr) -> str:
        """The C type of an integer expression: tl_idx for 64-bit index arithmetic."""
        if e.dtype.name == "int64" and is_index(e, self.index_vars):
            return "tl_idx"
        return self.ty(e.dtype)

    def expr(self, e: Expr) -> str:
        if isinstance(e, Var):
            return e.name
        if isinstance(e, Const):
            if e.dtype.is_bool:
                return "true" if e.value else "false"
            if e.dtype.is_float:
                v = float(e.value)
                if v != v:
                    return "(0.0/0.0)" if e.dtype.name == "float64" else "(0.0f/0.0f)"
                if v in (float("inf"), float("-inf")):
                    s = "(1.0/0.0)" if e.dtype.name == "float64" else "(1.0f/0.0f)"
                    return s if v > 0 else f"(-{s})"
                return f"{v!r}" if e.dtype.name == "float64" else f"{v!r}f"
            v = int(e.value)
            if e.dtype.name in ("int32", "int64") and v != e.dtype.min_value():
                # literals of the right type, for readability (not the minimum: -(2^31)
                # would be a long long literal in C, -(2^63) no literal at all); an int64
                # that fits 32 bits is an int literal (it takes the other operand's type)
                small = -(2 ** 31) < v < 2 ** 31
                text = f"{v}LL" if e.dtype.bits == 64 and not small else str(v)
                return f"({text})" if v < 0 else text
            if v == e.dtype.min_value():
                return f"(({self.ty(e.dtype)})({v + 1}LL - 1LL))"
            return f"(({self.ty(e.dtype)}){v})"
        if isinstance(e, Load):
            if id(e) in self.lanes:         # a lane of a vector loaded before (`vector`)
                return self.lanes[id(e)]
            v = f"{e.buffer.name}[{self.flat(e.buffer, e.indices)}]"
            if e.dtype.name == "float16":
                return f"__half2float({v})"
            return f"({v} != 0)" if e.dtype.is_bool else v
        if type(e) in _BIN:
            return f"({self.expr(e.a)} {_BIN[type(e)]} {self.expr(e.b)})"
        if isinstance(e, (Min, Max)):
            f = ("tl_min" if isinstance(e, Min) else "tl_max") if e.dtype.is_float else \
                ("tl_imin" if isinstance(e, Min) else "tl_imax")
            return f"{f}<{self.ity(e)}>({self.expr(e.a)}, {self.expr(e.b)})"
        if isinstance(e, (FloorDiv, FloorMod)):
            if e.dtype.is_float:
                q = f"floor({self.expr(e.a)} / {self.expr(e.b)})"
                if isinstance(e, FloorDiv):
                    return f"(({self.ty(e.dtype)}){q})"
                return f"(({self.ty(e.dtype)})({self.expr(e.a)} - {q} * {self.expr(e.b)}))"
            f = "tl_floordiv" if isinstance(e, FloorDiv) else "tl_floormod"
            return f"{f}<{self.ity(e)}>({self.expr(e.a)}, {self.expr(e.b)})"
        if type(e) in _CMP:
            return f"({self.expr(e.a)} {_CMP[type(e)]} {self.expr(e.b)})"
        if isinstance(e, And):
            return f"({self.expr(e.a)} && {self.expr(e.b)})"
        if isinstance(e, Or):
            return f"({self.expr(e.a)} || {self.expr(e.b)})"
        if isinstance(e, Not):
            return f"(!{self.expr(e.a)})"
        if isinstance(e, Select):  # C's ?: evaluates only the arm it takes, as required
            t = self.ity(e) if e.dtype.is_int else self.ty(e.dtype)
            return (f"({self.expr(e.cond)} ? ({t})({self.expr(e.true_value)}) : "
                    f"({t})({self.expr(e.false_value)}))")
        if isinstance(e, Cast):
            if e.dtype.name == "int64" and is_index(e, self.index_vars):
                return f"((tl_idx)({self.expr(e.value)}))"
            return self.cast(e.value, e.dtype)
        if isinstance(e, Call):
            if e.name == "isnan":
                return f"isnan({self.expr(e.args[0])})"
            fn = _MATH.get(e.name)
            if fn is None:
                raise TensorlangError(f"cuda backend: unknown function {e.name}")
            single = e.dtype.name in ("float32", "float16")
            args = ", ".join([self.expr(a) for a in e.args])
            return f"{fn}{'f' if single else ''}({args})"
        if isinstance(e, IndexCheck):
            return self.check(e)
        raise TensorlangError(f"cuda backend: unsupported expression {type(e).__name__}")

    def cast(self, value: Expr, d: DType) -> str:
        src = value.dtype
        v = self.expr(value)
        if d.is_bool:
            return f"({v} != 0)"
        if src.is_float and d.is_int:
            lo, hi = d.min_value(), d.max_value()
            return f"tl_f2i<{self.ty(d)}>((double)({v}), {float(lo)!r}, {float(hi)!r})"
        return f"(({self.ty(d)})({v}))"

    def flat(self, buf: Buffer, indices) -> str:
        if not indices:
            return "0"
        def part(x):
            t = "tl_idx" if is_index(x, self.index_vars) else "long long"
            return f"({t})({self.expr(x)})"

        idx = part(indices[0])
        for ext, ix in zip(buf.shape[1:], indices[1:]):
            idx = f"({idx} * {part(ext)} + {part(ix)})"
        return idx

    def check(self, e: IndexCheck) -> str:
        """An index checked before use: the statement that reads it is preceded by the
        check (see `stmt`), so here the index is the value."""
        return f"({self.expr(e.index)})"

    # ------------------------------------------------------------------ statements
    def checks_of(self, s: Stmt) -> list[IndexCheck]:
        """The index checks a statement evaluates unconditionally (not under a select)."""
        out = []

        def visit(e: Expr) -> None:
            if isinstance(e, Select):
                visit(e.cond)
                return   # checks in an arm are made when the arm is taken (see expr)
            if isinstance(e, IndexCheck):
                out.append(e)
            for k in e.children:
                visit(k)

        for e in stmt_exprs(s):
            visit(e)
        return out

    def emit_checks(self, s: Stmt) -> None:
        for e in stmt_exprs(s):
            for x in walk(e):
                if isinstance(x, Select) and any(isinstance(y, IndexCheck)
                                                 for k in (x.true_value, x.false_value)
                                                 for y in walk(k)):
                    raise NotImplementedError(
                        "cuda backend: a data-dependent read inside an if_then_else arm is "
                        "not checked on the GPU yet; build with checks=False if its indices "
                        "are known to be in range")
        for c in self.checks_of(s):
            ix, ext = self.expr(c.index), self.expr(c.extent)
            pts = [self.expr(p) for p in c.point[:ERROR_RECORD_LEN - 3]]
            self.emit(f"if ((unsigned long long)(long long)({ix}) >= "
                      f"(unsigned long long)(long long)({ext})) {{")
            self.indent += 1
            self.emit(f"if (atomicCAS(&tl_error[0], 0ULL, {c.site + 1}ULL) == 0ULL) {{")
            self.indent += 1
            self.emit(f"tl_error[1] = (long long)({ix}); tl_error[2] = (long long)({ext});")
            for k, p in enumerate(pts):
                self.emit(f"tl_error[{3 + k}] = (long long)({p});")
            self.indent -= 1
            self.emit("}")
            self.emit("return;")
            self.indent -= 1
            self.emit("}")

    def stmt(self, s: Stmt) -> None:
        if isinstance(s, Seq):
            for x in joined_barriers(s.stmts):
                self.stmt(x)
        elif isinstance(s, Barrier):
            self.emit("__syncwarp();" if s.scope == "warp" else "__syncthreads();")
        elif isinstance(s, Store) and s.atomic:
            self.emit_checks(s)
            self.emit(atomic_update(s, f"{s.buffer.name}[{self.flat(s.buffer, s.indices)}]",
                                    self.expr(s.value)))
        elif isinstance(s, Store):
            self.emit_checks(s)
            v = self.expr(s.value)
            d = s.buffer.dtype
            if d.name == "float16":
                v = f"__float2half_rn({v})"
            elif d.is_bool:
                v = f"(unsigned char)(({v}) != 0)"
            else:
                v = f"({C_TYPES[d.name]})({v})"
            self.emit(f"{s.buffer.name}[{self.flat(s.buffer, s.indices)}] = {v};")
        elif isinstance(s, For):
            if s.kind in (LoopKind.GPU_BLOCK, LoopKind.GPU_THREAD):
                raise ScheduleError(
                    f"cuda: loop {s.var.name} is bound to {s.thread_tag} but is not among "
                    "the outermost, perfectly nested loops of its stage; bind the outer loops")
            self.emit_checks(s)
            lo, ext = self.expr(s.min), self.expr(s.extent)
            v = s.var.name
            if s.max_extent is not None and s.max_extent <= MAX_GUARDED_UNROLL and \
                    any(uses_buffer(s.body, b) for b in self.registers):
                # a register array indexed by this loop: a constant trip count, fully
                # unrolled, with the real extent as a guard, so that every index is a
                # constant and the array stays in registers (not local memory)
                self.index_vars.add(v)
                self.emit("#pragma unroll")
                self.emit(f"for (tl_idx {v} = {lo}; {v} < {lo} + {s.max_extent}; ++{v}) {{")
                self.indent += 1
                self.emit(f"if ({v} < {lo} + (tl_idx)({ext})) {{")
                self.indent += 1
                self.stmt(s.body)
                self.indent -= 1
                self.emit("}")
                self.indent -= 1
                self.emit("}")
                return
            if s.kind is LoopKind.VECTORIZED and self.vector(s):
                return
            if s.kind is LoopKind.UNROLLED:
                self.emit("#pragma unroll")
            self.index_vars.add(v)
            self.emit(f"for (tl_idx {v} = {lo}; {v} < {lo} + (tl_idx)({ext}); ++{v}) {{")
            self.indent += 1
            self.stmt(s.body)
            self.indent -= 1
            self.emit("}")
        elif isinstance(s, If):
            self.emit_checks(s)
            self.emit(f"if ({self.expr(s.cond)}) {{")
            self.indent += 1
            self.stmt(s.then_body)
            self.indent -= 1
            if s.else_body is not None:
                self.emit("} else {")
                self.indent += 1
                self.stmt(s.else_body)
                self.indent -= 1
            self.emit("}")
        elif isinstance(s, Let):
            self.emit_checks(s)
            self.emit("{")
            self.indent += 1
            t = self.ty(s.var.dtype)
            if s.var.dtype.name == "int64" and is_index(s.value, self.index_vars):
                t = "tl_idx"
                self.index_vars.add(s.var.name)
            self.emit(f"const {t} {s.var.name} = ({t})({self.expr(s.value)});")
            self.stmt(s.body)
            self.indent -= 1
            self.emit("}")
        elif isinstance(s, Allocate) and s.buffer.scope == "shared":
            self.stmt(s.body)     # declared once at the top of the kernel
        elif isinstance(s, Allocate):
            count = buffer_elements(s.buffer)
            self.emit("{")
            self.indent += 1
            self.registers.append(s.buffer)
            self.emit(f"{C_TYPES[s.buffer.dtype.name]} {s.buffer.name}[{count}];")
            self.stmt(s.body)
            self.indent -= 1
            self.emit("}")
        else:
            raise TensorlangError(f"cuda backend: unsupported statement {type(s).__name__}")


    def vector(self, s: For) -> bool:
        """A vector loop whose body stores consecutive elements of global or shared memory
        as one `float4` (`float2`, `int4`, `double2`, ...) access, its contiguous global or
        shared reads as vector loads too, when every such address is a multiple of the
        vector's size; other rows run the loop lane by lane. Returns False (nothing
        written) for a loop it cannot write so."""
        body = s.body
        if not isinstance(s.extent, Const) or not isinstance(body, Store) or \
                self.checks_of(body) or not isinstance(s.min, Const):
            return False
        lanes = int(s.extent.value)
        v = s.var.name
        ctx = VectorContext(v, lanes, None, starts_at_zero=int(s.min.value) == 0)

        def vector_type(buf: Buffer) -> str | None:
            name = _VECTOR_TYPES.get((buf.dtype.name, lanes))
            if name is None or any(buf is r for r in self.registers):
                return None
            return name

        out_t = vector_type(body.buffer)
        if out_t is None or ctx._kind(body.indices, body.buffer)[0] != "contiguous":
            return False
        loads = []
        for x in walk(body.value):
            if isinstance(x, Load) and vector_type(x.buffer) and \
                    ctx._kind(x.indices, x.buffer)[0] == "contiguous" and \
                    not any(isinstance(y, Load) for y in walk(x.indices[-1])) and \
                    all(id(x) != id(y) for y in loads):
                loads.append(x)
        k = self.vectors
        self.vectors += 1
        base, out = f"tl_vb{k}", f"tl_vd{k}"
        c = C_TYPES[body.buffer.dtype.name]
        self.index_vars.add(v)
        self.emit("{")
        self.indent += 1
        self.emit(f"const tl_idx {base} = {self.expr(s.min)};")
        self.emit(f"{c} *{out};")
        for j, x in enumerate(loads):
            self.emit(f"const {C_TYPES[x.buffer.dtype.name]} *tl_vs{k}_{j};")
        self.emit("{")          # the addresses of the first lane
        self.indent += 1
        self.emit(f"const tl_idx {v} = {base};")
        self.emit(f"{out} = &{body.buffer.name}[{self.flat(body.buffer, body.indices)}];")
        for j, x in enumerate(loads):
            self.emit(f"tl_vs{k}_{j} = &{x.buffer.name}[{self.flat(x.buffer, x.indices)}];")
        self.indent -= 1
        self.emit("}")
        size = body.buffer.dtype.itemsize * lanes
        ptrs = " | ".join([f"(unsigned long long){out}"] +
                          [f"(unsigned long long)tl_vs{k}_{j}" for j in range(len(loads))])
        self.emit(f"if ((({ptrs}) & {size - 1}ULL) == 0ULL) {{")
        self.indent += 1
        for j, x in enumerate(loads):
            t = _VECTOR_TYPES[(x.buffer.dtype.name, lanes)]
            self.emit(f"const {t} tl_vl{k}_{j} = *(const {t} *)tl_vs{k}_{j};")
        self.emit(f"{out_t} tl_vr{k};")
        for lane in range(lanes):
            comp = _COMPONENTS[lane]
            for j, x in enumerate(loads):
                self.lanes[id(x)] = f"tl_vl{k}_{j}.{comp}"
            value = f"({c})({self.expr(body.value)})"
            if _uses_var(body.value, v, {id(x) for x in loads}):
                value = f"{{ const tl_idx {v} = {base} + {lane}; tl_vr{k}.{comp} = {value}; }}"
            else:
                value = f"tl_vr{k}.{comp} = {value};"
            self.emit(value)
        for x in loads:
            del self.lanes[id(x)]
        self.emit(f"*({out_t} *){out} = tl_vr{k};")
        self.indent -= 1
        self.emit("} else {")     # a row whose start is not a multiple of the vector
        self.indent += 1
        self.emit(f"for (tl_idx {v} = {base}; {v} < {base} + {lanes}; ++{v}) {{")
        self.indent += 1
        self.stmt(body)
        self.indent -= 1
        self.emit("}")
        self.indent -= 1
        self.emit("}")
        self.indent -= 1
        self.emit("}")
        return True


def _uses_var(e: Expr, name: str, skip: set[int]) -> bool:
    """Whether `e` reads variable `name` outside the loads in `skip`."""
    if id(e) in skip:
        return False
    if isinstance(e, Var):
        return e.name == name
    return any([_uses_var(k, name, skip) for k in e.children])


_VECTOR_TYPES = {("float32", 2): "float2", ("float32", 4): "float4",
                 ("int32", 2): "int2", ("int32", 4): "int4",
                 ("float64", 2): "double2", ("int64", 2): "longlong2"}
_COMPONENTS = "xyzw"


def generate(name: str, buffers: list[Buffer], params: list[Var], body: Stmt):
    """(CUDA C source, launches in order, the intermediate buffers the host allocates)."""
    launches, temps = plan(name, buffers, params, body)
    sources = [PRELUDE, f"__device__ unsigned long long tl_error[{ERROR_RECORD_LEN}];", ""]
    for launch in launches:
        w = KernelWriter(launch.name, params)
        guards = []
        for loop in launch.bound:
            lo = "" if isinstance(loop.min, Const) and loop.min.value == 0 else \
                f"{w.expr(loop.min)} + "
            w.index_vars.add(loop.var.name)
            w.emit(f"const tl_idx {loop.var.name} = {lo}(tl_idx){loop.thread_tag};")
            guards.append(f"{loop.var.name} < {lo}{w.expr(loop.extent)}")
        guards += [f"({w.expr(c)})" for _, c in launch.conds]
        if guards:
            w.emit(f"if (!({' && '.join(guards)})) return;")
        for b in launch.shared:
            n = buffer_elements(b)
            w.emit(f"__shared__ __align__(16) {C_TYPES[b.dtype.name]} {b.name}[{n}];")
        w.stmt(launch.inner)
        # no __restrict__ in a kernel that reads and writes several buffers of its arguments
        # (a tuple reduction's accumulators in global memory): nvcc (CUDA 13) miscompiled
        # such an argmax with restrict pointers — the index kept its identity — and ran it
        # right without them, or with ptxas -O0
        stored = {id(x.buffer) for x in walk_stmt(launch.inner) if isinstance(x, Store)}
        loaded = {id(x.buffer) for st in walk_stmt(launch.inner) for e in stmt_exprs(st)
                  for x in walk(e) if isinstance(x, Load)}
        both = [b for b in launch.buffers if id(b) in stored and id(b) in loaded]
        restrict = "" if len(both) > 1 else "__restrict__ "
        sig = [f"{C_TYPES[b.dtype.name]} *{restrict}{b.name}" for b in launch.buffers] + \
              [f"long long {p.name}_" for p in launch.params]
        w.lines[:0] = [f"  const tl_idx {p.name} = (tl_idx){p.name}_;" for p in launch.params]
        bounds = f"__launch_bounds__({launch.threads}) "
        sources.append(f'extern "C" __global__ void {bounds}{launch.name}({", ".join(sig)}) {{')
        sources.extend(w.lines)
        sources.append("}")
        sources.append("")
    return "\n".join(sources), launches, temps
