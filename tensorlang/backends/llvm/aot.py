"""Ahead-of-time kernels: object files, assembly, LLVM IR and a C header, for any target.

The C ABI of a saved kernel is the JIT's: ``int32_t name(T *tensor0, ..., int64_t size0, ...)``,
a pointer per tensor argument (row-major, C-contiguous) then an int64 per symbolic size,
returning 0 on success, 1 when a temporary buffer could not be allocated and 2 when the sizes
make the kernel read outside an input (the check `tl.build`'s Python module makes before a
call; here the kernel makes it itself).

Parallel loops run on threads made by a small runtime that the object carries (`RUNTIME`,
LLVM IR using POSIX threads: internal symbols, so several kernels link together): each
parallel loop starts min(extent, TL_NUM_THREADS or the number of online CPUs) threads and
joins them. 64-bit Linux targets only; other targets refuse parallel loops at build time.
"""

from __future__ import annotations

from dataclasses import dataclass

import llvmlite.binding as llvm

from ...config import timed
from ...errors import TensorlangError
from ...ir.expr import Expr, Var
from ...ir.printer import expr_str
from ...ir.stmt import Buffer, Stmt
from ...target import Target
from ..abi import AOT_LAUNCH, AOT_THREAD_COUNT, AOT_THREADS, ERROR_RECORD_LEN, error_record_name
from .jit import extern_symbols, has_parallel_loop, make_module, parse_and_optimise
from .symbols import check_symbols
from .target import target_machine

_RUNTIME = r"""
%tl.job = type { ptr, ptr, i64, i32, i32 }

declare i32 @pthread_create(ptr, ptr, ptr, ptr)
declare i32 @pthread_join(i64, ptr)
declare ptr @getenv(ptr)
declare i64 @strtol(ptr, ptr, i32)
declare i64 @sysconf(i32)
declare ptr @malloc(i64)
declare void @free(ptr)

@.tl_env = private unnamed_addr constant [15 x i8] c"TL_NUM_THREADS\00"

define i64 @tl_aot_threads() {
entry:
  %e = call ptr @getenv(ptr @.tl_env)
  %has = icmp ne ptr %e, null
  br i1 %has, label %parse, label %cores
parse:
  %v = call i64 @strtol(ptr %e, ptr null, i32 10)
  %ok = icmp sgt i64 %v, 0
  br i1 %ok, label %given, label %cores
given:
  ret i64 %v
cores:
  %c = call i64 @sysconf(i32 84)
  %okc = icmp sgt i64 %c, 0
  %r = select i1 %okc, i64 %c, i64 1
  ret i64 %r
}

define ptr @tl_aot_worker(ptr %job) {
entry:
  %fnp = getelementptr %tl.job, ptr %job, i32 0, i32 0
  %fn = load ptr, ptr %fnp
  %clp = getelementptr %tl.job, ptr %job, i32 0, i32 1
  %cl = load ptr, ptr %clp
  %tp = getelementptr %tl.job, ptr %job, i32 0, i32 2
  %t = load i64, ptr %tp
  %r = call i32 %fn(i64 %t, ptr %cl)
  %sp = getelementptr %tl.job, ptr %job, i32 0, i32 3
  store i32 %r, ptr %sp
  ret ptr null
}

define i32 @tl_aot_launch(ptr %fn, ptr %cl, i64 %n) {
entry:
  %jbytes = mul i64 %n, 32
  %jobs = call ptr @malloc(i64 %jbytes)
  %tbytes = mul i64 %n, 8
  %tids = call ptr @malloc(i64 %tbytes)
  %j0 = icmp eq ptr %jobs, null
  %t0 = icmp eq ptr %tids, null
  %nomem = or i1 %j0, %t0
  br i1 %nomem, label %serial, label %fill
serial:
  call void @free(ptr %jobs)
  call void @free(ptr %tids)
  br label %shead
shead:
  %si = phi i64 [ 0, %serial ], [ %si1, %sbody ]
  %sst = phi i32 [ 0, %serial ], [ %sst1, %sbody ]
  %smore = icmp slt i64 %si, %n
  br i1 %smore, label %sbody, label %sdone
sbody:
  %sr = call i32 %fn(i64 %si, ptr %cl)
  %sbad = icmp ne i32 %sr, 0
  %sst1 = select i1 %sbad, i32 %sr, i32 %sst
  %si1 = add i64 %si, 1
  br label %shead
sdone:
  ret i32 %sst
fill:
  br label %fhead
fhead:
  %i = phi i64 [ 0, %fill ], [ %i1, %fnext ]
  %more = icmp slt i64 %i, %n
  br i1 %more, label %fbody, label %own
fbody:
  %job = getelementptr %tl.job, ptr %jobs, i64 %i
  %f0 = getelementptr %tl.job, ptr %job, i32 0, i32 0
  store ptr %fn, ptr %f0
  %f1 = getelementptr %tl.job, ptr %job, i32 0, i32 1
  store ptr %cl, ptr %f1
  %f2 = getelementptr %tl.job, ptr %job, i32 0, i32 2
  store i64 %i, ptr %f2
  %f3 = getelementptr %tl.job, ptr %job, i32 0, i32 3
  store i32 0, ptr %f3
  %f4 = getelementptr %tl.job, ptr %job, i32 0, i32 4
  store i32 0, ptr %f4
  %first = icmp eq i64 %i, 0
  br i1 %first, label %fnext, label %spawn
spawn:
  %tid = getelementptr i64, ptr %tids, i64 %i
  %rc = call i32 @pthread_create(ptr %tid, ptr null, ptr @tl_aot_worker, ptr %job)
  %made = icmp eq i32 %rc, 0
  br i1 %made, label %mark, label %inline
mark:
  store i32 1, ptr %f4
  br label %fnext
inline:
  %w = call ptr @tl_aot_worker(ptr %job)
  br label %fnext
fnext:
  %i1 = add i64 %i, 1
  br label %fhead
own:
  %w0 = call ptr @tl_aot_worker(ptr %jobs)
  br label %jhead
jhead:
  %k = phi i64 [ 0, %own ], [ %k1, %jnext ]
  %st = phi i32 [ 0, %own ], [ %st1, %jnext ]
  %jmore = icmp slt i64 %k, %n
  br i1 %jmore, label %jbody, label %jdone
jbody:
  %jk = getelementptr %tl.job, ptr %jobs, i64 %k
  %g4 = getelementptr %tl.job, ptr %jk, i32 0, i32 4
  %started = load i32, ptr %g4
  %isthr = icmp ne i32 %started, 0
  br i1 %isthr, label %join, label %jstatus
join:
  %tk = getelementptr i64, ptr %tids, i64 %k
  %tv = load i64, ptr %tk
  %jr = call i32 @pthread_join(i64 %tv, ptr null)
  br label %jstatus
jstatus:
  %g3 = getelementptr %tl.job, ptr %jk, i32 0, i32 3
  %s = load i32, ptr %g3
  %bad = icmp ne i32 %s, 0
  %st1 = select i1 %bad, i32 %s, i32 %st
  br label %jnext
jnext:
  %k1 = add i64 %k, 1
  br label %jhead
jdone:
  call void @free(ptr %jobs)
  call void @free(ptr %tids)
  ret i32 %st
}
"""

_RUNTIME_FUNCTIONS = (AOT_THREAD_COUNT, "tl_aot_worker", AOT_LAUNCH)

# a tensor element's C type, in headers and harnesses
C_TYPES = {"bool": "uint8_t", "int8": "int8_t", "int16": "int16_t", "int32": "int32_t",
            "int64": "int64_t", "uint8": "uint8_t", "float16": "uint16_t /* float16 */",
            "float32": "float", "float64": "double", "bfloat16": "uint16_t /* bfloat16 */",
            "float8_e4m3fn": "uint8_t /* float8_e4m3fn */",
            "float8_e5m2": "uint8_t /* float8_e5m2 */"}

_THREADED_ARCHES = ("x86_64", "aarch64", "riscv64", "powerpc64le", "powerpc64")


def has_threads(t: Target) -> bool:
    """Whether the AOT runtime can run parallel loops for `t` (64-bit Linux)."""
    return t.arch in _THREADED_ARCHES and "linux" in t.triple


@dataclass
class ObjectCode:
    """A kernel compiled for a target, not loaded: what `Module.save` writes."""

    name: str
    target: Target
    module: llvm.ModuleRef
    llvm_ir: str
    threaded: bool
    obj: bytes | None = None  # the object file, made (and its symbols checked) at build

    def assembly(self) -> str:
        return target_machine(self.target, jit=False).emit_assembly(self.module)

    def object(self) -> bytes:
        if self.target.assembly_only:
            raise TensorlangError(
                f"save: the {self.target.arch} target gives assembly and LLVM IR only (.s, .ll); "
                "its kernels are not linked into programs here")
        return self.obj

    def bitcode(self) -> bytes:
        return self.module.as_bitcode()


def compile_object(name: str, buffers: list[Buffer], params: list[Var], body: Stmt,
                   target: Target, refuse: Expr | None = None) -> ObjectCode:
    """LLVM IR for the loop nest with the AOT runtime, optimised at O3 for `target`. The
    kernel returns 2 where `refuse` holds (sizes that read out of bounds) before any loop."""
    symbols = extern_symbols(body, name, aot=True)
    threaded = has_parallel_loop(body)
    if threaded and not has_threads(target):
        raise TensorlangError(
            f"build: the kernel has a parallel loop, but target {target.name} "
            f"({target.triple}) has no thread runtime in tensorlang (64-bit Linux targets "
            "only); build it without .parallel() for this target")
    with timed("llvm codegen"):
        module = make_module(name, buffers, params, body, target,
                             threads=AOT_THREADS if threaded else 1,
                             refuse=refuse)
        text = str(module)

    def link_runtime(mod: llvm.ModuleRef) -> None:
        runtime = llvm.parse_assembly(_RUNTIME)
        runtime.triple = target.triple
        mod.link_in(runtime)
        for fn in _RUNTIME_FUNCTIONS:
            mod.get_function(fn).linkage = "internal"  # each object has its own copy

    tm = target_machine(target, jit=False)
    mod = parse_and_optimise(text, tm, link_runtime if threaded else None)
    obj = None
    if not target.assembly_only:
        with timed("llvm object"):
            obj = tm.emit_object(mod)
        check_symbols(obj, target, name, provided=symbols)
    return ObjectCode(name, target, mod, str(mod), threaded, obj)


def header(name: str, args, buffers: list[Buffer], params: list[Var], target: Target,
           threaded: bool, bad_sizes: list[str], checks: list[str]) -> str:
    """A C header declaring the kernel, with each tensor's dtype and shape in a comment;
    `bad_sizes` describe the sizes refused with status 2, `checks` the run-time index checks
    (status 3)."""
    guard = f"TENSORLANG_{''.join(c if c.isalnum() else '_' for c in name).upper()}_H"
    lines = [
        f"/* {name}: generated by tensorlang for {target} */",
        f"#ifndef {guard}",
        f"#define {guard}",
        "",
        "#include <stdint.h>",
        "",
        "#ifdef __cplusplus",
        'extern "C" {',
        "#endif",
        "",
        "/* Arrays are row-major and contiguous. Returns 0 on success, 1 when a temporary",
        " * buffer could not be allocated, 2 when the sizes make the kernel read outside an",
        " * input. Outputs must not overlap other arguments.",
    ]
    if threaded:
        lines += [" * Parallel loops run on POSIX threads (TL_NUM_THREADS, default: the CPUs",
                  " * online); link with -pthread."]
    if bad_sizes:
        lines.append(" * Sizes that read out of bounds (status 2):")
        lines += [f" *   {t}" for t in bad_sizes]
    record = error_record_name(name)
    if checks:
        lines += [" * Indices that read data are checked as the kernel runs: an index outside",
                  " * its tensor stops it with status 3, after it writes the first failure to",
                  f" * {record}: [check + 1, index, extent, the iteration's axes...].",
                  " * Checks:"]
        lines += [f" *   {k + 1}: {t}" for k, t in enumerate(checks)]
    lines.append(" */")
    decl = []
    for b in buffers:
        shape = ", ".join(expr_str(s) for s in b.shape)
        decl.append(f"    {C_TYPES[b.dtype.name]} *{b.name}  /* {b.dtype}[{shape}] */")
    for p in params:
        decl.append(f"    int64_t {p.name}")
    if not decl:
        decl = ["    void"]
    body = ",\n".join(decl)
    lines += [f"int32_t {name}(\n{body});", ""]
    if checks:
        lines += [f"extern int64_t {record}[{ERROR_RECORD_LEN}];", ""]
    lines += ["#ifdef __cplusplus", "}", "#endif", "", f"#endif  /* {guard} */", ""]
    return "\n".join(lines)
