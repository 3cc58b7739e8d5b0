"""Compile loop IR to machine code in this process (MCJIT), with a structural cache."""

from __future__ import annotations

import ctypes
import hashlib
import threading
from collections import OrderedDict
from dataclasses import dataclass

import llvmlite.binding as llvm
from llvmlite import ir

from ...config import debug_print, timed
from ...errors import TensorlangError
from ...target import Target
from ...ir.expr import Var
from ...ir.stmt import Buffer, ExternCall, For, LoopKind, Stmt
from ...ir.visit import walk_stmt
from ..abi import ERROR_RECORD_LEN, record_entry_name
from ..extern import python_symbol
from .codegen import emit_function
from .pool import RUNTIME_SYMBOLS, ensure_pool
from .symbols import check_symbols, undefined_symbols
from .target import new_target_machine, target_machine

# compiled kernels kept by the structural cache: each holds an execution engine (~0.7 MiB)
_CACHE_SIZE = 128
MAX_CALL_ARGS = 1024  # ctypes' limit on a foreign function's arguments


@dataclass
class Kernel:
    """A compiled kernel: its C entry point, optimised LLVM IR and the engine that owns it."""

    name: str
    cfunc: object
    llvm_ir: str
    module: llvm.ModuleRef | None    # None: loaded from machine code (`load_kernel`)
    engine: llvm.ExecutionEngine
    target: Target

    def assembly(self) -> str:
        return target_machine(self.target).emit_assembly(self.module)

    record_func: object = None   # the entry taking the caller's error record (checks only)

    def run(self, *args) -> tuple[int, list[int] | None]:
        """Call the kernel with its arguments (pointers, then sizes): (status, the error
        record of this call after a failed check, else None). A kernel with index checks
        writes its failure to a record of the calling thread's own (`thread_record`), so
        threads calling one kernel at once never see each other's failures."""
        if self.record_func is None:
            return self.cfunc(*args), None
        rec, addr = thread_record()
        status = self.record_func(*args, addr)
        if status == 0:
            return 0, None
        out = list(rec)
        ctypes.memset(addr, 0, ctypes.sizeof(rec))
        return status, out


_RECORDS = threading.local()


def thread_record():
    """This thread's error record ([ERROR_RECORD_LEN x int64], zero between failures) and
    its address."""
    got = getattr(_RECORDS, "rec", None)
    if got is None:
        rec = (ctypes.c_int64 * ERROR_RECORD_LEN)()
        got = _RECORDS.rec = (rec, ctypes.addressof(rec))
    return got


class _KernelCache:
    """Compiled kernels by (the unoptimised IR text's hash, target), the `size` most recently
    used: building twice costs no LLVM time."""

    def __init__(self, size: int):
        self.size = size
        self.items: OrderedDict[tuple, Kernel] = OrderedDict()
        self.hits = 0
        self.lock = threading.Lock()      # builds from several threads

    def get(self, key) -> Kernel | None:
        with self.lock:
            k = self.items.get(key)
            if k is not None:
                self.items.move_to_end(key)
                self.hits += 1
            return k

    def put(self, key, kernel: Kernel) -> None:
        with self.lock:
            self.items[key] = kernel
            while len(self.items) > self.size:
                self.items.popitem(last=False)  # kernels in use stay alive through their Module


CACHE = _KernelCache(_CACHE_SIZE)


def _resolvable(sym: str) -> bool:
    return bool(llvm.address_of_symbol(sym))


def extern_symbols(body: Stmt, kernel: str, aot: bool = False) -> frozenset[str]:
    """The C symbols the kernel's extern stages call. For the JIT (`aot` False), their
    libraries are loaded and every symbol must be found: an unresolved one would stop the
    process in LLVM's loader. An object file (`aot`) refers to them by name, for the
    linker; a Python function cannot go into one."""
    out = set()
    for s in walk_stmt(body):
        if not isinstance(s, ExternCall):
            continue
        if not isinstance(s.fn, str):
            if aot:
                raise TensorlangError(
                    f"build: kernel {kernel}'s extern stage {s.stage} runs the Python "
                    f"function {s.what}, which cannot go into an object file or shared "
                    "library; give the extern a C symbol to save or cross-compile it")
            out.add(python_symbol(s))
            continue
        if s.library is not None and not aot:
            try:
                llvm.load_library_permanently(s.library)
            except RuntimeError as e:
                raise TensorlangError(f"extern stage {s.stage}: cannot load library= "
                                      f"{s.library!r}: {e}") from None
        if not aot and not _resolvable(s.fn):
            where = f"the library {s.library!r}" if s.library else "this process"
            raise TensorlangError(
                f"extern stage {s.stage}: the C symbol {s.fn!r} is not defined in {where}; "
                "pass library='path/to/lib.so' to tl.extern, or load the library first "
                "(ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL))")
        out.add(s.fn)
    return frozenset(out)


def has_parallel_loop(body: Stmt) -> bool:
    return any(isinstance(s, For) and s.kind is LoopKind.PARALLEL for s in walk_stmt(body))


def make_module(name: str, buffers: list[Buffer], params: list[Var], body: Stmt,
                target: Target, threads: int = 1, refuse=None) -> ir.Module:
    module = ir.Module(name=name)
    module.triple = target.triple
    emit_function(module, name, buffers, params, body, threads, refuse, target)
    return module


def parse_and_optimise(text: str, tm: llvm.TargetMachine, link=None) -> llvm.ModuleRef:
    """Parse and verify generated IR, link `link(mod)` in (if given), optimise at O3."""
    with timed("llvm optimise"):
        try:
            mod = llvm.parse_assembly(text)
            mod.verify()
        except RuntimeError as e:
            raise TensorlangError(f"internal: invalid LLVM IR generated: {e}") from None
        if link is not None:
            link(mod)
        mod.data_layout = str(tm.target_data)
        optimise(mod, tm)
    return mod


# LLVM's loop vectorizer takes time superlinear in a loop body's size (tens of seconds for a
# body of ten thousand operations); above this many instructions it is left out and says
# so at TL_DEBUG=1 (loops that `vectorize` names are vector IR already and stay vectorised)
AUTO_VECTORIZE_MAX_INSTRUCTIONS = 8_000


def optimise(mod: llvm.ModuleRef, tm: llvm.TargetMachine) -> None:
    pto = llvm.create_pipeline_tuning_options(speed_level=3)
    size = sum(1 for f in mod.functions for b in f.blocks for _ in b.instructions)
    if size > AUTO_VECTORIZE_MAX_INSTRUCTIONS:
        debug_print(1, f"llvm: {size} instructions; LLVM's automatic loop vectorization is "
                       "off for this module (too slow at this size)")
        pto.loop_vectorization = False
    pb = llvm.create_pass_builder(tm, pto)
    pb.getModulePassManager().run(mod, pb)


def _check_arity(name: str, buffers: list[Buffer], params: list[Var]) -> None:
    if len(buffers) + len(params) > MAX_CALL_ARGS:
        raise TensorlangError(
            f"build: kernel {name} takes {len(buffers)} tensors and {len(params)} sizes; a "
            f"kernel called from Python takes at most {MAX_CALL_ARGS} arguments (ctypes); "
            "split the computation, or build it for an object file (save) and call it from C")


@dataclass
class KernelObject:
    """A kernel compiled for the host but not loaded: its machine code (an object file, which
    another process of this machine may load: `load_kernel`), whether it has the entry that
    takes an error record, whether it calls the thread pool, and the symbols it uses but
    does not define (read from `obj` once, when it was compiled: `check_symbols`)."""

    name: str
    obj: bytes
    recorded: bool
    parallel: bool
    undefined: tuple[str, ...]
    llvm_ir: str = ""
    externs: frozenset[str] = frozenset()    # C symbols of its extern stages (`extern_symbols`)
    module: llvm.ModuleRef | None = None


def compile_host_object(name: str, buffers: list[Buffer], params: list[Var], body: Stmt,
                        target: Target) -> KernelObject:
    """LLVM IR for the loop nest, optimised at O3 for `target` (the host) and compiled to
    machine code, for `load_kernel`."""
    text, parallel, externs = _module_text(name, buffers, params, body, target)
    return _object(name, text, parallel, target, externs)


def _module_text(name: str, buffers: list[Buffer], params: list[Var], body: Stmt,
                 target: Target) -> tuple[str, bool, frozenset[str]]:
    """The kernel's unoptimised LLVM IR, whether it has a parallel loop, and the C symbols
    its extern stages call (their libraries loaded: `extern_symbols`)."""
    if not target.is_host:
        raise TensorlangError(f"internal: cannot run code for {target} in this process")
    _check_arity(name, buffers, params)
    externs = extern_symbols(body, name)
    parallel = has_parallel_loop(body)
    threads = ensure_pool(new_target_machine(target)) if parallel else 1
    with timed("llvm codegen"):
        return str(make_module(name, buffers, params, body, target, threads)), parallel, \
            externs


def _object(name: str, text: str, parallel: bool, target: Target,
            externs: frozenset[str] = frozenset()) -> KernelObject:
    """`text` optimised and compiled to machine code."""
    mod = parse_and_optimise(text, target_machine(target))
    debug_print(3, "LLVM IR", str(mod))
    with timed("llvm emit"):
        # machine code first, so that every function it calls is known before it is loaded
        obj = target_machine(target).emit_object(mod)
    recorded = record_entry_name(name) in {f.name for f in mod.functions}
    return KernelObject(name, obj, recorded, parallel, tuple(sorted(undefined_symbols(obj))),
                        str(mod), module=mod, externs=externs)


def load_kernel(code: KernelObject, n_buffers: int, n_params: int, target: Target) -> Kernel:
    """Load `code` (compiled on this machine, by this process or another) into the JIT: the
    callable kernel. Every symbol it calls is checked first (`check_symbols`)."""
    if code.parallel:
        ensure_pool(new_target_machine(target))     # the launcher the code calls
    name = code.name
    with timed("llvm jit"):
        engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), new_target_machine(target))
        check_symbols(code.obj, target, name, provided=RUNTIME_SYMBOLS | code.externs,
                      resolve=_resolvable, undefined=code.undefined)
        engine.add_object_file(llvm.ObjectFileRef.from_data(code.obj))
        engine.finalize_object()
        addr = engine.get_function_address(name)
        raddr = engine.get_function_address(record_entry_name(name)) if code.recorded else 0
    if not addr or code.recorded and not raddr:
        raise TensorlangError(f"internal: the JIT did not load kernel {name}")
    argtypes = [ctypes.c_void_p] * n_buffers + [ctypes.c_int64] * n_params
    cfunc = ctypes.CFUNCTYPE(ctypes.c_int32, *argtypes)(addr)
    rfunc = ctypes.CFUNCTYPE(ctypes.c_int32, *argtypes, ctypes.c_void_p)(raddr) \
        if code.recorded else None
    return Kernel(name, cfunc, code.llvm_ir, code.module, engine, target, rfunc)


def compile_kernel(name: str, buffers: list[Buffer], params: list[Var], body: Stmt,
                   target: Target) -> Kernel:
    """LLVM IR for the loop nest, optimised at O3 for `target` and JIT-compiled."""
    text, parallel, externs = _module_text(name, buffers, params, body, target)
    key = (hashlib.sha256(text.encode()).digest(), target)   # (not the text: 100s of KiB)
    cached = CACHE.get(key)
    if cached is not None:
        debug_print(1, "llvm: cache hit")
        return cached
    kernel = load_kernel(_object(name, text, parallel, target, externs), len(buffers),
                         len(params), target)
    CACHE.put(key, kernel)
    return kernel
