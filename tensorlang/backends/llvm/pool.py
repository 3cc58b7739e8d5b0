"""A persistent pool of native threads for parallel loops, written in LLVM IR.

`tl_parallel_launch(fn, closure, ntasks)` runs `fn(task, closure)` for every task in
[0, ntasks) on the pool's workers and the calling thread, and returns once all are done
(fork-join). Workers take tasks with an atomic counter; between regions they spin for a
while on a generation counter and then sleep on it with a futex, so back-to-back regions
cost a few microseconds and an idle pool costs no CPU. A region started while another is
running (a second Python thread, or a parallel loop inside a parallel body) runs its tasks
inline on the calling thread instead of waiting. The pool starts on the first build of a
kernel with a parallel loop, with TL_NUM_THREADS - 1 workers (default: cores - 1).

fork() copies only the calling thread, so a child would wait forever for workers it does not
have. A `pthread_atfork` child handler (as OpenMP runtimes have) forgets the workers and any
region in flight; the child's first parallel loop starts a new pool. Workers start at the
generation current when they are made, so a new worker never runs an old region.

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
@pool_want = internal global i32 0
@pool_forked = internal global i32 0

declare i32 @pthread_create(ptr, ptr, ptr, ptr)
ATFORK_DECL
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
  ; the generation current when the worker was made: it waits for the next one
  %start64 = ptrtoint ptr %arg to i64
  %start = trunc i64 %start64 to i32
  br label %wait
wait:
  %seen = phi i32 [ %start, %entry ], [ %g, %work ]
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

define internal i32 @spawn(i32 %nworkers) {
entry:
  %tid = alloca i64
  %g0 = load atomic i32, ptr @pool_gen acquire, align 4
  %g64 = zext i32 %g0 to i64
  %garg = inttoptr i64 %g64 to ptr
  br label %loop
loop:
  %i = phi i32 [ 0, %entry ], [ %i1, %ok ]
  %more = icmp slt i32 %i, %nworkers
  br i1 %more, label %create, label %done
create:
  %r = call i32 @pthread_create(ptr %tid, ptr null, ptr @worker, ptr %garg)
  %fail = icmp ne i32 %r, 0
  br i1 %fail, label %done, label %ok
ok:
  %i1 = add i32 %i, 1
  br label %loop
done:
  store atomic i32 %i, ptr @pool_nworkers release, align 4
  ret i32 %i
}

; after fork() the child has only the thread that forked: forget the workers and any region
; in flight; the child's first parallel loop starts new workers
define internal void @after_fork_in_child() {
entry:
  store atomic i32 0, ptr @pool_nworkers monotonic, align 4
  store atomic i32 0, ptr @pool_sleepers monotonic, align 4
  store atomic i32 0, ptr @pool_active monotonic, align 4
  store atomic i32 1, ptr @pool_forked monotonic, align 4
  store atomic i32 0, ptr @pool_lock release, align 4
  ret void
}

define i32 @tl_pool_start(i32 %nworkers, i32 %spin) {
entry:
  store i32 %spin, ptr @pool_spin
  store i32 %nworkers, ptr @pool_want
  ATFORK_CALL
  %n = call i32 @spawn(i32 %nworkers)
  ret i32 %n
}

define i32 @tl_parallel_launch(ptr %fn, ptr %cl, i64 %n) {
entry:
  %pair = cmpxchg ptr @pool_lock, i32 0, i32 1 acquire monotonic
  %locked = extractvalue { i32, i1 } %pair, 1
  br i1 %locked, label %check_fork, label %ready
check_fork:
  %forked = load atomic i32, ptr @pool_forked monotonic, align 4
  %isforked = icmp ne i32 %forked, 0
  br i1 %isforked, label %respawn, label %ready
respawn:
  store atomic i32 0, ptr @pool_forked monotonic, align 4
  %want = load i32, ptr @pool_want
  %made = call i32 @spawn(i32 %want)
  br label %ready
ready:
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


# what the pool itself calls, beyond the C library
_POOL_NEEDS = frozenset({"syscall", "sched_yield", "pthread_atfork", "__register_atfork"})


def _runtime_text() -> str:
    x86 = platform.machine().lower() in ("x86_64", "amd64", "i686", "i386")
    decl = "declare void @llvm.x86.sse2.pause()" if x86 else ""
    call = "call void @llvm.x86.sse2.pause()" if x86 else ""
    # glibc exports pthread_atfork only from its static part (libc_nonshared.a): a JIT finds
    # __register_atfork, with the same first three arguments and a DSO handle (none here)
    if llvm.address_of_symbol("pthread_atfork"):
        fdecl = "declare i32 @pthread_atfork(ptr, ptr, ptr)"
        fcall = "%a = call i32 @pthread_atfork(ptr null, ptr null, ptr @after_fork_in_child)"
    else:
        fdecl = "declare i32 @__register_atfork(ptr, ptr, ptr, ptr)"
        fcall = ("%a = call i32 @__register_atfork(ptr null, ptr null, "
                 "ptr @after_fork_in_child, ptr null)")
    return (_RUNTIME.replace("PAUSE_DECL", decl).replace("PAUSE_CALL", call)
            .replace("ATFORK_DECL", fdecl).replace("ATFORK_CALL", fcall))


def ensure_pool(tm: llvm.TargetMachine) -> int:
    """Compile the runtime and start the workers once per process; the number of threads."""
    from .symbols import check_symbols
    from .target import host_target

    if _Pool.engine is not None:
        return _Pool.threads
    engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), tm)  # loads the C library
    mod = llvm.parse_assembly(_runtime_text())
    mod.verify()
    obj = tm.emit_object(mod)
    check_symbols(obj, host_target(), "the thread pool", provided=_POOL_NEEDS,
                  resolve=llvm.address_of_symbol)
    engine.add_object_file(llvm.ObjectFileRef.from_data(obj))
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
