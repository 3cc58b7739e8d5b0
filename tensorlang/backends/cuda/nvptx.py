"""Loop IR -> PTX through LLVM's NVPTX backend (target="nvptx"): no nvcc needed.

The launches are the CUDA C writer's (`codegen.plan`: the same geometry, shared tiles,
register tiles, guards and unswitched full tiles); each becomes an LLVM function written by
the CPU backend's `FunctionCodegen` with the GPU's parts overridden:

- a bound loop's variable is `min + %tid.x` (or `%ctaid`), and the thread leaves when it is
  past the loop's extent;
- a shared tile is an `addrspace(3)` array, its barriers `llvm.nvvm.barrier0` (bar.sync);
- a register tile is an `alloca` whose loops are unrolled to isl's bound, so that SROA keeps
  it in registers;
- a failed index check writes the global record `tl_error` (as the CUDA C kernels do) and
  returns;
- float32 `exp` is the backend's own polynomial (`llvm/vmath.py`); sqrt, floor, ceil and
  fabs are LLVM intrinsics that NVPTX selects; every other function comes from libdevice
  (`__nv_logf`, ...), the bitcode library that ships with the CUDA toolkit, linked in only
  when a kernel needs it (`TL_LIBDEVICE` names the file where it is not found).

Index arithmetic is 64-bit (the CUDA C kernels have a 32-bit variant).
"""

from __future__ import annotations

import functools
import glob
import os
import shutil

import llvmlite.binding as llvm
from llvmlite import ir

from ...config import debug_print, libdevice_path, timed
from ...errors import ScheduleError, TensorlangError
from ...ir.expr import Call, Const, IndexCheck, Load
from ...ir.stmt import joined_barriers, Allocate, Barrier, For, LoopKind, Seq, Stmt, Store
from ...ir.visit import stmt_exprs, uses_buffer, walk
from ..llvm.codegen import FunctionCodegen
from ..llvm.types import I32, I64, memory_type
from ..llvm.jit import parse_and_optimise
from ..llvm.vector import VectorContext
from ...llvm_targets import init as _init
from ..abi import ERROR_RECORD_LEN
from .launch import MAX_GUARDED_UNROLL, Launch, buffer_elements

TRIPLE = "nvptx64-nvidia-cuda"
DEFAULT_ARCH = "sm_70"   # PTX for Volta and every later GPU (the driver compiles it further)
SHARED, GLOBAL = 3, 1    # NVPTX address spaces
_NATIVE = {"isnan", "sqrt", "floor", "ceil", "roundeven", "fabs",   # selected by NVPTX itself
           "fmax_any"}                               # llvm.maxnum under nnan: max.f32


def needs_libdevice(e: Call) -> bool:
    if e.name in _NATIVE:
        return False
    return not (e.name == "exp" and e.dtype.name in ("float32", "float16"))


@functools.cache
def find_libdevice() -> str | None:
    """libdevice's bitcode: $TL_LIBDEVICE, or next to the CUDA toolkit (CUDA_HOME, CUDA_PATH,
    nvcc's folder, /usr/local/cuda*, Debian's nvidia-cuda-toolkit)."""
    if libdevice_path():
        return libdevice_path()
    roots = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH")]
    nvcc = shutil.which("nvcc")
    if nvcc:
        roots.append(os.path.dirname(os.path.dirname(os.path.realpath(nvcc))))
    roots += ["/usr/local/cuda", *sorted(glob.glob("/usr/local/cuda-*"), reverse=True)]
    candidates = [os.path.join(r, "nvvm", "libdevice", "libdevice.10.bc") for r in roots if r]
    candidates.append("/usr/lib/nvidia-cuda-toolkit/libdevice/libdevice.10.bc")
    for c in candidates:
        if os.path.isfile(c):
            return c
    return None


class PtxCodegen(FunctionCodegen):
    """One launch as an LLVM function for NVPTX (see the module's docstring)."""

    def __init__(self, module: ir.Module, launch: Launch):
        super().__init__(module, launch.name, launch.buffers, launch.params, void=True)
        self.half_native = (True, True)     # cvt between f16, f32 and f64 (sm_53 and later)
        self.registers: list = []           # register arrays allocated so far
        self.libdevice: set[str] = set()    # libdevice functions called

    def error_record(self) -> ir.GlobalVariable:
        return self.module.globals["tl_error"]

    def stmt(self, s: Stmt) -> None:
        if isinstance(s, Seq):
            for x in joined_barriers(s.stmts):
                self.stmt(x)
        elif isinstance(s, Barrier) and s.scope == "warp":
            sync = self._declare("llvm.nvvm.bar.warp.sync", ir.VoidType(), [I32])
            self.builder.call(sync, [ir.Constant(I32, -1)])
        elif isinstance(s, Barrier):
            self.builder.call(self._declare("llvm.nvvm.barrier0", ir.VoidType(), []), [])
        else:
            super().stmt(s)

    def loop(self, s: For) -> None:
        if s.kind in (LoopKind.GPU_BLOCK, LoopKind.GPU_THREAD):
            raise ScheduleError(
                f"nvptx: loop {s.var.name} is bound to {s.thread_tag} but is not among the "
                "outermost, perfectly nested loops of its stage; bind the outer loops")
        # the CUDA writer's rule (any loop over a register array up to its bound of 64),
        # not the CPU's stricter one (`llvm/registers.py`): GPU thread tiles need it
        if s.max_extent is not None and s.max_extent <= MAX_GUARDED_UNROLL and \
                not (s.kind is LoopKind.UNROLLED and isinstance(s.extent, Const)) and \
                any(uses_buffer(s.body, b) for b in self.registers):
            # a register array indexed by this loop: unrolled to isl's bound, each
            # iteration guarded by the real extent, so that every index is a constant
            b = self.builder
            lo = self.to_i64(self.expr(s.min), s.min.dtype)
            hi = b.add(lo, self.to_i64(self.expr(s.extent), s.extent.dtype))
            for k in range(s.max_extent):
                i = b.add(lo, ir.Constant(I64, k))
                with b.if_then(b.icmp_signed("<", i, hi)):
                    with self.bound(s.var.name, i):
                        self.stmt(s.body)
            return
        if s.kind is LoopKind.VECTORIZED and isinstance(s.extent, Const) and \
                self.aligned_vector(s):
            return
        super().loop(s)

    def aligned_vector(self, s: For) -> bool:
        """A vector loop storing consecutive elements of global or shared memory: its
        contiguous accesses become `ld/st.v4` (`.v2`) when their first lanes' addresses are
        multiples of the vector's size, tested at run time (the CUDA C writer's rule); the
        loop runs lane by lane otherwise. False (nothing written) for other loops."""
        body = s.body
        if not isinstance(body, Store) or not isinstance(s.min, Const) or \
                any(isinstance(x, IndexCheck) for e in stmt_exprs(body) for x in walk(e)):
            return False
        lanes = int(s.extent.value)
        b = self.builder
        lo = self.to_i64(self.expr(s.min), s.min.dtype)
        ctx = VectorContext(s.var.name, lanes, lo, starts_at_zero=int(s.min.value) == 0)

        def size(buf) -> int:
            n = buf.dtype.itemsize * lanes
            if buf.dtype.is_bool or n not in (8, 16) or any(buf is r for r in self.registers):
                return 0
            return n

        accesses = [body] + [x for x in walk(body.value) if isinstance(x, Load)]
        tested = {}
        for x in accesses:
            kind, idx = ctx._kind(x.indices, x.buffer)
            if kind == "contiguous" and size(x.buffer):
                tested[id(x)] = (x, idx, size(x.buffer))
        if id(body) not in tested:
            return False
        bad = None
        for x, idx, n in tested.values():
            addr = b.ptrtoint(ctx._scalar_address(self, x.buffer, idx), I64)
            low = b.and_(addr, ir.Constant(I64, n - 1))
            bad = low if bad is None else b.or_(bad, low)
        with b.if_else(b.icmp_unsigned("==", bad, ir.Constant(I64, 0))) as (vector, lanewise):
            with vector:
                ctx.aligned = {k: n for k, (_, _, n) in tested.items()}
                self.vec = ctx
                try:
                    self.stmt(body)
                finally:
                    self.vec = None
            with lanewise:
                hi = b.add(lo, ir.Constant(I64, lanes))
                self.serial_loop(s.var.name, lo, hi, body)
        return True

    def allocate(self, s: Allocate) -> None:
        buf = s.buffer
        if buf.scope == "shared":
            name = f"{self.kernel}.{buf.name}"
            t = ir.ArrayType(memory_type(buf.dtype), buffer_elements(buf))
            g = ir.GlobalVariable(self.module, t, name, addrspace=SHARED)
            g.linkage = "internal"
            g.initializer = ir.Constant(t, ir.Undefined)
            g.align = 16
            b = self.builder
            with b.goto_block(self.entry):
                first = b.gep(g, [ir.Constant(I32, 0), ir.Constant(I32, 0)])
                ptr = b.addrspacecast(first, memory_type(buf.dtype).as_pointer())
            with self.allocated(buf, ptr):
                self.stmt(s.body)
            return
        buffer_elements(buf)     # a per-thread array needs a constant size
        self.registers.append(buf)
        super().allocate(s)

    def call(self, e: Call) -> ir.Value:
        if not needs_libdevice(e):
            return super().call(e)
        b = self.builder
        args = [self.expr(a) for a in e.args]
        half = e.dtype.name == "float16"
        if half:
            args = [self.widen_half(a) for a in args]
        t = args[0].type
        scalar = t.element if isinstance(t, ir.VectorType) else t
        name = f"__nv_{e.name}{'f' if isinstance(scalar, ir.FloatType) else ''}"
        self.libdevice.add(name)
        fn = self._declare(name, scalar, [scalar] * len(args))
        if isinstance(t, ir.VectorType):
            out = ir.Constant(t, ir.Undefined)
            for k in range(t.count):
                lane = [b.extract_element(a, ir.Constant(I32, k)) for a in args]
                out = b.insert_element(out, b.call(fn, lane), ir.Constant(I32, k))
        else:
            out = b.call(fn, args)
        return self.narrow_half(out) if half else out


def emit_launch(module: ir.Module, launch: Launch) -> PtxCodegen:
    cg = PtxCodegen(module, launch)
    b = cg.builder
    inside = None
    for loop in launch.bound:
        kind, dim = loop.thread_tag.split(".")
        sreg = "tid" if kind == "threadIdx" else "ctaid"
        read = cg._declare(f"llvm.nvvm.read.ptx.sreg.{sreg}.{dim}", I32, [])
        lo = cg.to_i64(cg.expr(loop.min), loop.min.dtype)
        v = b.add(lo, b.zext(b.call(read, []), I64), name=loop.var.name)
        cg.env[loop.var.name] = v
        ok = b.icmp_signed("<", v, b.add(lo, cg.to_i64(cg.expr(loop.extent),
                                                       loop.extent.dtype)))
        inside = ok if inside is None else b.and_(inside, ok)
    for _, cond in launch.conds:
        ok = cg.expr(cond)
        inside = ok if inside is None else b.and_(inside, ok)
    if inside is not None:
        with b.if_then(b.not_(inside), likely=False):
            cg.return_status(0)
    cg.stmt(launch.inner)
    cg.finish()
    md = module.add_named_metadata("nvvm.annotations")
    md.add(module.add_metadata([cg.fn, "kernel", ir.Constant(I32, 1)]))
    md.add(module.add_metadata([cg.fn, "maxntidx", ir.Constant(I32, launch.threads)]))
    return cg


@functools.cache
def _target_machine(arch: str) -> llvm.TargetMachine:
    _init()
    return llvm.Target.from_triple(TRIPLE).create_target_machine(cpu=arch, opt=3)


def check_arch(arch: str) -> str:
    if not (isinstance(arch, str) and arch.startswith("sm_") and
            arch[3:].rstrip("af").isdigit() and int(arch[3:].rstrip("af")) >= 53):
        raise TensorlangError(f"nvptx: -mcpu must name a GPU architecture sm_53 or later, such "
                              f"as 'sm_70' or 'sm_90', got {arch!r}")
    return arch


def compile_ptx(name: str, launches: list[Launch], arch: str = DEFAULT_ARCH) -> str:
    """PTX text for every launch of a kernel, for GPUs of architecture `arch` and later."""
    _init()
    module = ir.Module(name=name)
    module.triple = TRIPLE
    t = ir.ArrayType(I64, ERROR_RECORD_LEN)
    rec = ir.GlobalVariable(module, t, "tl_error", addrspace=GLOBAL)
    rec.initializer = ir.Constant(t, None)
    rec.align = 8
    needed: set[str] = set()
    with timed("llvm codegen"):
        for launch in launches:
            needed |= emit_launch(module, launch).libdevice
    tm = _target_machine(arch)
    kernels = {la.name for la in launches}

    def link(mod: llvm.ModuleRef) -> None:
        if not needed:
            return
        path = find_libdevice()
        if path is None:
            raise TensorlangError(
                f"nvptx: kernel {name} calls {', '.join(sorted(needed))}, which come from "
                "libdevice (part of the CUDA toolkit), and no libdevice.10.bc was found; set "
                "TL_LIBDEVICE to its path, or build for target='cuda'")
        with open(path, "rb") as f:
            lib = llvm.parse_bitcode(f.read())
        lib.triple = TRIPLE
        lib.data_layout = str(tm.target_data)
        mod.link_in(lib)
        for fn in mod.functions:     # only the kernels stay visible; the rest is inlined
            if not fn.is_declaration and fn.name not in kernels:     # or removed
                fn.linkage = llvm.Linkage.internal

    mod = parse_and_optimise(str(module), tm, link)
    debug_print(3, "LLVM IR (nvptx)", str(mod))
    with timed("llvm ptx"):
        ptx = tm.emit_assembly(mod)
    for fn in needed:
        if f".func {fn}" in ptx or f"call.uni {fn}" in ptx:
            raise TensorlangError(f"internal: nvptx: {fn} was not linked from libdevice")
    return ptx
