"""A persistent pool of native threads for parallel loops, written in LLVM IR.

`tl_parallel_launch(fn, closure, ntasks)` runs `fn(task, closure)` for every task in
[0, ntasks) on the pool's workers and the calling thread, and returns once all are done
(fork-join). Workers take tasks with an atomic counter; between regions they spin for a
while on a generation counter and then sleep on it with a futex, so back-to-back regions
cost a few microseconds and an idle pool costs no CPU. A region started while another is
running (a second Python thread, or a parallel loop inside a parallel body) runs its tasks
inline on the calling thread instead of waiting. The pool starts on the first build of a
kernel with a parallel loop, with TL_NUM_THREADS - 1 workers (default: cores - 1).

Linux only (the futex system call); elsewhere parallel loops run on the calling thread.
"""

from __future__ import annotations

import ctypes
import platform
import sys

import llvmlite.binding as llvm

from ...config import num_threads

RUNTIME_SYMBOLS = frozenset({"tl_parallel_launch"})  # what JIT kernels may call of the pool
SPIN = 200_000  # polls of the generation counter before a worker sleeps

_RUNTIME = r"""
@pool_fn = internal global ptr null
@pool_closure = internal global ptr null
@pool_ntasks = internal global i64 0
@pool_next = internal global i64 0
@pool_status = internal global i32 0
@pool_gen = internal global i32 0
@pool_active = internal global i32 0
@pool_sleepers = internal global i32 0
@pool_lock = internal global i32 0
@pool_nworkers = internal global i32 0
@pool_spin = internal global i32 0

declare i32 @pthread_create(ptr, ptr, ptr, ptr)
declare i64 @syscall(i64, ...)
declare i32 @sched_yield()
PAUSE_DECL

define internal void @pause() {
  PAUSE_CALL
  ret void
}

define internal void @run_tasks() {
entry:
  %fn = load ptr, ptr @pool_fn
  %cl = load ptr, ptr @pool_closure
  %n = load i64, ptr @pool_ntasks
  br label %loop
loop:
  %t = atomicrmw add ptr @pool_next, i64 1 monotonic
  %more = icmp slt i64 %t, %n
  br i1 %more, label %body, label %done
body:
  %r = call i32 %fn(i64 %t, ptr %cl)
  %bad = icmp ne i32 %r, 0
  br i1 %bad, label %err, label %loop
err:
  store atomic i32 %r, ptr @pool_status monotonic, align 4
  br label %loop
done:
  ret void
}

define internal ptr @worker(ptr %arg) {
entry:
  br label %wait
wait:
  %seen = phi i32 [ 0, %entry ], [ %g, %work ]
  br label %spin
spin:
  %k = phi i32 [ 0, %wait ], [ %k1, %pause ], [ 0, %woke ]
  %g = load atomic i32, ptr @pool_gen acquire, align 4
  %new = icmp ne i32 %g, %seen
  br i1 %new, label %work, label %count
count:
  %k1 = add i32 %k, 1
  %limit = load i32, ptr @pool_spin
  %long = icmp sgt i32 %k1, %limit
  br i1 %long, label %sleep, label %pause
pause:
  call void @pause()
  br label %spin
sleep:
  %s0 = atomicrmw add ptr @pool_sleepers, i32 1 seq_cst
  %seen64 = zext i32 %seen to i64
  %w = call i64 (i64, ...) @syscall(i64 202, ptr @pool_gen, i64 128, i64 %seen64, i64 0)
  %s1 = atomicrmw sub ptr @pool_sleepers, i32 1 seq_cst
  br label %woke
woke:
  br label %spin
work:
  call void @run_tasks()
  %a = atomicrmw sub ptr @pool_active, i32 1 release
  br label %wait
}

define i32 @tl_pool_start(i32 %nworkers, i32 %spin) {
entry:
  store i32 %spin, ptr @pool_spin
  %tid = alloca i64
  br label %loop
loop:
  %i = phi i32 [ 0, %entry ], [ %i1, %ok ]
  %more = icmp slt i32 %i, %nworkers
  br i1 %more, label %create, label %done
create:
  %r = call i32 @pthread_create(ptr %tid, ptr null, ptr @worker, ptr null)
  %fail = icmp ne i32 %r, 0
  br i1 %fail, label %done, label %ok
ok:
  %i1 = add i32 %i, 1
  br label %loop
done:
  store atomic i32 %i, ptr @pool_nworkers release, align 4
  ret i32 %i
}

define i32 @tl_parallel_launch(ptr %fn, ptr %cl, i64 %n) {
entry:
  %pair = cmpxchg ptr @pool_lock, i32 0, i32 1 acquire monotonic
  %locked = extractvalue { i32, i1 } %pair, 1
  %nw = load atomic i32, ptr @pool_nworkers acquire, align 4
  %has = icmp sgt i32 %nw, 0
  %big = icmp sgt i64 %n, 1
  %c0 = and i1 %locked, %has
  %use = and i1 %c0, %big
  br i1 %use, label %pool, label %inline
inline:
  br label %iloop
iloop:
  %t = phi i64 [ 0, %inline ], [ %t1, %icont ]
  %st = phi i32 [ 0, %inline ], [ %st1, %icont ]
  %imore = icmp slt i64 %t, %n
  br i1 %imore, label %ibody, label %iend
ibody:
  %r = call i32 %fn(i64 %t, ptr %cl)
  %rz = icmp ne i32 %r, 0
  %st1 = select i1 %rz, i32 %r, i32 %st
  %t1 = add i64 %t, 1
  br label %icont
icont:
  br label %iloop
iend:
  br i1 %locked, label %unlock_inline, label %ret_inline
unlock_inline:
  store atomic i32 0, ptr @pool_lock release, align 4
  br label %ret_inline
ret_inline:
  ret i32 %st
pool:
  store ptr %fn, ptr @pool_fn
  store ptr %cl, ptr @pool_closure
  store i64 %n, ptr @pool_ntasks
  store atomic i64 0, ptr @pool_next monotonic, align 8
  store atomic i32 0, ptr @pool_status monotonic, align 4
  store atomic i32 %nw, ptr @pool_active monotonic, align 4
  %g = atomicrmw add ptr @pool_gen, i32 1 seq_cst
  %sl = load atomic i32, ptr @pool_sleepers seq_cst, align 4
  %any = icmp sgt i32 %sl, 0
  br i1 %any, label %wake, label %run
wake:
  %w = call i64 (i64, ...) @syscall(i64 202, ptr @pool_gen, i64 129, i64 2147483647, i64 0)
  br label %run
run:
  call void @run_tasks()
  br label %join
join:
  %k = phi i32 [ 0, %run ], [ %k1, %yield ], [ %k1, %jpause ]
  %left = load atomic i32, ptr @pool_active acquire, align 4
  %busy = icmp ne i32 %left, 0
  br i1 %busy, label %jwait, label %finish
jwait:
  %k1 = add i32 %k, 1
  %often = and i32 %k1, 1023
  %y = icmp eq i32 %often, 0
  br i1 %y, label %yield, label %jpause
yield:
  %yy = call i32 @sched_yield()
  br label %join
jpause:
  call void @pause()
  br label %join
finish:
  %status = load atomic i32, ptr @pool_status monotonic, align 4
  store atomic i32 0, ptr @pool_lock release, align 4
  ret i32 %status
}
"""


class _Pool:
    engine = None
    threads = 0


def _runtime_text() -> str:
    x86 = platform.machine().lower() in ("x86_64", "amd64", "i686", "i386")
    decl = "declare void @llvm.x86.sse2.pause()" if x86 else ""
    call = "call void @llvm.x86.sse2.pause()" if x86 else ""
    return _RUNTIME.replace("PAUSE_DECL", decl).replace("PAUSE_CALL", call)


def ensure_pool(tm: llvm.TargetMachine) -> int:
    """Compile the runtime and start the workers once per process; the number of threads."""
    if _Pool.engine is not None:
        return _Pool.threads
    mod = llvm.parse_assembly(_runtime_text())
    mod.verify()
    engine = llvm.create_mcjit_compiler(mod, tm)
    engine.finalize_object()
    launch = engine.get_function_address("tl_parallel_launch")
    llvm.add_symbol("tl_parallel_launch", launch)
    workers = num_threads() - 1 if sys.platform.startswith("linux") else 0
    start = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_int32, ctypes.c_int32)(
        engine.get_function_address("tl_pool_start"))
    started = start(max(workers, 0), SPIN) if workers > 0 else 0
    _Pool.engine, _Pool.threads = engine, started + 1
    return _Pool.threads


def pool_threads() -> int:
    """Threads that run parallel loops (the workers and the calling thread); 0 if not started."""
    return _Pool.threads
