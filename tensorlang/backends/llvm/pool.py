"""A persistent pool of native threads for parallel loops, written in LLVM IR.

`tl_parallel_launch(fn, closure, ntasks)` runs `fn(task, closure)` for every task in
[0, ntasks) on the pool's workers and the calling thread, and returns once all are done
(fork-join). A region started while another is running (a second Python thread, or a
parallel loop inside a parallel body) runs its tasks inline on the calling thread instead
of waiting. The pool starts on the first build of a kernel with a parallel loop, with
TL_NUM_THREADS - 1 workers (default: cores - 1).

Waiting. A worker between regions polls a generation counter for `spin_us()` (TL_SPIN_US,
default 100 us), then sleeps on it with a futex; the launch wakes sleepers only when there
are any. A launch's join polls the same way, then sleeps on the region's state word until
the last worker inside wakes it. Both spins yield the CPU every few microseconds and end at
once when they find their thread was descheduled (a gap in the clock between two polls:
another process wants the core); for the next CALM_NS every wait then sleeps after one
short poll, as OpenMP runtimes throttle their spinning when oversubscribed (a spinning
thread is one the scheduler must take turns with; a sleeping one it runs as soon as it is
woken). So back-to-back regions cost a few microseconds, an idle pool costs no CPU, and a
busy neighbour is not fought for the core.

Joining. A region is open from the launch until the launching thread has run out of tasks.
A worker takes part only if it enters while the region is open (a compare-and-swap on the
state word: an open bit and the count of workers inside), reads the region's function,
closure and task count only once inside, and takes tasks from an atomic counter. The join
closes the region and waits only for the workers inside, each finishing the one task it
holds (a kernel splits a loop into TASKS_PER_THREAD tasks per thread, `outline.py`, so a
task is a fraction of a thread's share). A worker that was descheduled, or woke late,
finds the region closed and never touches it: the calling thread runs the tasks nobody
took, instead of waiting for a thread the scheduler does not run (a join that waits for
every worker costs a scheduler time slice whenever one is descheduled, as workers on the
caller's core are). A region is
not reused until every worker inside has left, so a late worker cannot run a task of a
finished region.

fork() copies only the calling thread, so a child would wait forever for workers it does not
have. A `pthread_atfork` child handler (as OpenMP runtimes have) forgets the workers and any
region in flight; the child's first parallel loop starts a new pool. Workers start at the
generation current when they are made, so a new worker never runs an old region.

Linux on x86-64 and AArch64 only (the futex system call, whose number differs by
architecture); elsewhere parallel loops run on the calling thread.
"""

from __future__ import annotations

import ctypes
import os
import platform
import sys
import threading

import llvmlite.binding as llvm

from ...config import num_threads, spin_us
from ..abi import PARALLEL_LAUNCH

RUNTIME_SYMBOLS = frozenset({PARALLEL_LAUNCH})  # what JIT kernels may call of the pool
PREEMPTED_NS = 50_000   # a gap this long between two polls: the spinning thread was
                        # descheduled (a timer tick is a few us), so its core is wanted
CALM_NS = 100_000_000   # then, for this long, every wait sleeps after one short poll
# @pool_state's bits: the region is open (workers may enter), the join sleeps on the word,
# and the count of workers inside
OPEN, WAITER, INSIDE = 1 << 30, 1 << 29, (1 << 29) - 1
_FUTEX = {"x86_64": 202, "amd64": 202, "aarch64": 98, "arm64": 98}   # SYS_futex

_RUNTIME = r"""
%timespec = type { i64, i64 }

@pool_fn = internal global ptr null
@pool_closure = internal global ptr null
@pool_ntasks = internal global i64 0
@pool_next = internal global i64 0
@pool_status = internal global i32 0
@pool_gen = internal global i32 0
@pool_state = internal global i32 0
@pool_sleepers = internal global i32 0
@pool_lock = internal global i32 0
@pool_nworkers = internal global i32 0
@pool_spin_ns = internal global i64 0
@pool_want = internal global i32 0
@pool_forked = internal global i32 0
@pool_regions = internal global i64 0
@pool_entries = internal global i64 0
@pool_calm_until = internal global i64 0
@pool_wait_ns = internal global i64 0

declare i32 @pthread_create(ptr, ptr, ptr, ptr)
declare i32 @clock_gettime(i32, ptr)
ATFORK_DECL
declare i64 @syscall(i64, ...)
declare i32 @sched_yield()
PAUSE_DECL

define internal void @pause() {
  PAUSE_CALL
  ret void
}

define internal i64 @now() {
  %ts = alloca %timespec
  %r = call i32 @clock_gettime(i32 1, ptr %ts)
  %sp = getelementptr %timespec, ptr %ts, i32 0, i32 0
  %np = getelementptr %timespec, ptr %ts, i32 0, i32 1
  %s = load i64, ptr %sp
  %n = load i64, ptr %np
  %s9 = mul i64 %s, 1000000000
  %t = add i64 %s9, %n
  ret i64 %t
}

; futex(word, FUTEX_WAIT_PRIVATE, expected): sleeps while *word == expected
define internal void @futex_wait(ptr %word, i32 %expected) {
  %e = zext i32 %expected to i64
  %r = call i64 (i64, ...) @syscall(i64 FUTEX_NR, ptr %word, i64 128, i64 %e, ptr null)
  ret void
}

; futex(word, FUTEX_WAKE_PRIVATE, n): wakes up to n sleepers
define internal void @futex_wake(ptr %word, i32 %n) {
  %c = zext i32 %n to i64
  %r = call i64 (i64, ...) @syscall(i64 FUTEX_NR, ptr %word, i64 129, i64 %c)
  ret void
}

; Poll `(*word & mask) == value` until it equals `want`: true when it does, false when
; the spin budget is spent or the thread was descheduled between two polls. The clock is
; read every 64 pauses; every 4th reading also yields the CPU to any thread waiting for it.
; A thread found descheduled makes every spin of the next CALM_NS a single short poll
; (the machine is oversubscribed: a spinning thread is one the scheduler must take turns
; with, while a sleeping one it wakes at once).
define internal i1 @spin_wait(ptr %word, i32 %mask, i32 %value, i1 %want) {
entry:
  %full = load atomic i64, ptr @pool_spin_ns monotonic, align 8
  %t0 = call i64 @now()
  %calm = load atomic i64, ptr @pool_calm_until monotonic, align 8
  %quiet = icmp slt i64 %t0, %calm
  %budget = select i1 %quiet, i64 0, i64 %full
  br label %poll
poll:
  %k = phi i32 [ 0, %entry ], [ %k1, %pause ], [ 0, %clock_ok ]
  %reads = phi i32 [ 0, %entry ], [ %reads, %pause ], [ %reads1, %clock_ok ]
  %last = phi i64 [ %t0, %entry ], [ %last, %pause ], [ %t, %clock_ok ]
  %w = load atomic i32, ptr %word acquire, align 4
  %m = and i32 %w, %mask
  %eq = icmp eq i32 %m, %value
  %done = icmp eq i1 %eq, %want
  br i1 %done, label %yes, label %count
count:
  %k1 = add i32 %k, 1
  %every = icmp uge i32 %k1, 64
  br i1 %every, label %clock, label %pause
pause:
  call void @pause()
  br label %poll
clock:
  %reads1 = add i32 %reads, 1
  %r4 = and i32 %reads1, 3
  %ytime = icmp eq i32 %r4, 0
  br i1 %ytime, label %yield, label %read
yield:
  %y = call i32 @sched_yield()
  br label %read
read:
  %t = call i64 @now()
  %gap = sub i64 %t, %last
  %away = icmp sgt i64 %gap, PREEMPTED_NS
  br i1 %away, label %descheduled, label %budget_left
budget_left:
  %spent = sub i64 %t, %t0
  %over = icmp sge i64 %spent, %budget
  br i1 %over, label %no, label %clock_ok
clock_ok:
  br label %poll
descheduled:
  %until = add i64 %t, CALM_NS
  store atomic i64 %until, ptr @pool_calm_until monotonic, align 8
  br label %no
yes:
  ret i1 true
no:
  ret i1 false
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

; @pool_state: OPEN while the launching thread still runs tasks, WAITER while the join
; sleeps on the word, and the number of workers inside in the low bits (INSIDE).
define internal ptr @worker(ptr %arg) {
entry:
  ; the generation current when the worker was made: it waits for the next one
  %start64 = ptrtoint ptr %arg to i64
  %start = trunc i64 %start64 to i32
  br label %wait
wait:
  %seen = phi i32 [ %start, %entry ], [ %g, %missed ], [ %gin, %left ], [ %gin, %wake_join ]
  %hot = call i1 @spin_wait(ptr @pool_gen, i32 -1, i32 %seen, i1 false)
  br i1 %hot, label %enter, label %sleep
sleep:
  %s0 = atomicrmw add ptr @pool_sleepers, i32 1 seq_cst
  call void @futex_wait(ptr @pool_gen, i32 %seen)
  %s1 = atomicrmw sub ptr @pool_sleepers, i32 1 seq_cst
  %gs = load atomic i32, ptr @pool_gen acquire, align 4
  %woke = icmp ne i32 %gs, %seen
  br i1 %woke, label %enter, label %sleep
enter:
  %g = load atomic i32, ptr @pool_gen acquire, align 4
  %st0 = load atomic i32, ptr @pool_state acquire, align 4
  br label %try
try:
  %st = phi i32 [ %st0, %enter ], [ %cur, %retry ]
  %open = and i32 %st, OPEN
  %isopen = icmp ne i32 %open, 0
  br i1 %isopen, label %cas, label %missed
cas:
  %st1 = add i32 %st, 1
  %pair = cmpxchg ptr @pool_state, i32 %st, i32 %st1 acq_rel acquire
  %ok = extractvalue { i32, i1 } %pair, 1
  br i1 %ok, label %inside, label %retry
retry:
  %cur = extractvalue { i32, i1 } %pair, 0
  br label %try
missed:
  ; the region closed before this worker came: it is the launching thread's to finish
  br label %wait
inside:
  ; no new region starts while a worker is inside, so this is the open region's generation,
  ; or the one before when the launch has opened the region but not yet counted it up: the
  ; worker then comes back to this region, and finds its tasks taken or takes what is left
  %gin = load atomic i32, ptr @pool_gen acquire, align 4
  %e = atomicrmw add ptr @pool_entries, i64 1 monotonic
  call void @run_tasks()
  %prev = atomicrmw sub ptr @pool_state, i32 1 acq_rel
  %wc = and i32 %prev, WAITER_OR_INSIDE
  %last = icmp eq i32 %wc, WAITER_AND_ONE
  br i1 %last, label %wake_join, label %left
wake_join:
  call void @futex_wake(ptr @pool_state, i32 1)
  br label %wait
left:
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
  store atomic i32 0, ptr @pool_state monotonic, align 4
  store atomic i32 1, ptr @pool_forked monotonic, align 4
  store atomic i32 0, ptr @pool_lock release, align 4
  ret void
}

define i32 @tl_pool_start(i32 %nworkers, i64 %spin_ns) {
entry:
  store atomic i64 %spin_ns, ptr @pool_spin_ns monotonic, align 8
  store i32 %nworkers, ptr @pool_want
  ATFORK_CALL
  %n = call i32 @spawn(i32 %nworkers)
  ret i32 %n
}

; workers, workers asleep now, regions run on the pool, worker entries into them, and the
; nanoseconds launching threads waited for workers after running out of tasks
define void @tl_pool_stats(ptr %out) {
entry:
  %nw = load atomic i32, ptr @pool_nworkers acquire, align 4
  %sl = load atomic i32, ptr @pool_sleepers acquire, align 4
  %rg = load atomic i64, ptr @pool_regions acquire, align 8
  %en = load atomic i64, ptr @pool_entries acquire, align 8
  %wn = load atomic i64, ptr @pool_wait_ns acquire, align 8
  %nw64 = sext i32 %nw to i64
  %sl64 = sext i32 %sl to i64
  store i64 %nw64, ptr %out
  %p1 = getelementptr i64, ptr %out, i64 1
  store i64 %sl64, ptr %p1
  %p2 = getelementptr i64, ptr %out, i64 2
  store i64 %rg, ptr %p2
  %p3 = getelementptr i64, ptr %out, i64 3
  store i64 %en, ptr %p3
  %p4 = getelementptr i64, ptr %out, i64 4
  store i64 %wn, ptr %p4
  ret void
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
  ; the region's fields, then OPEN (release: a worker that enters sees them), then the
  ; generation that spinning and sleeping workers watch
  store ptr %fn, ptr @pool_fn
  store ptr %cl, ptr @pool_closure
  store i64 %n, ptr @pool_ntasks
  store atomic i64 0, ptr @pool_next monotonic, align 8
  store atomic i32 0, ptr @pool_status monotonic, align 4
  store atomic i32 OPEN, ptr @pool_state release, align 4
  %rg = atomicrmw add ptr @pool_regions, i64 1 monotonic
  %g = atomicrmw add ptr @pool_gen, i32 1 seq_cst
  %sl = load atomic i32, ptr @pool_sleepers seq_cst, align 4
  %any = icmp sgt i32 %sl, 0
  br i1 %any, label %wake, label %run
wake:
  ; as many as can have a task (the launching thread takes one)
  %n1 = sub i64 %n, 1
  %nw64 = zext i32 %nw to i64
  %fewer = icmp slt i64 %n1, %nw64
  %nwake64 = select i1 %fewer, i64 %n1, i64 %nw64
  %nwake = trunc i64 %nwake64 to i32
  call void @futex_wake(ptr @pool_gen, i32 %nwake)
  br label %run
run:
  call void @run_tasks()
  ; close: no worker enters from now on; wait only for those inside
  %prev = atomicrmw and ptr @pool_state, i32 NOT_OPEN acq_rel
  %inside = and i32 %prev, INSIDE
  %none = icmp eq i32 %inside, 0
  br i1 %none, label %finish, label %join_spin
join_spin:
  %jt0 = call i64 @now()
  %hot = call i1 @spin_wait(ptr @pool_state, i32 INSIDE, i32 0, i1 true)
  br i1 %hot, label %joined, label %join_sleep
join_sleep:
  %js = load atomic i32, ptr @pool_state acquire, align 4
  %jin = and i32 %js, INSIDE
  %jdone = icmp eq i32 %jin, 0
  br i1 %jdone, label %joined, label %mark
mark:
  %jw = or i32 %js, WAITER
  %jpair = cmpxchg ptr @pool_state, i32 %js, i32 %jw acquire acquire
  %jok = extractvalue { i32, i1 } %jpair, 1
  br i1 %jok, label %jwait, label %join_sleep
jwait:
  call void @futex_wait(ptr @pool_state, i32 %jw)
  br label %join_sleep
joined:
  ; the time the launching thread waited for workers, past its own tasks
  %jt1 = call i64 @now()
  %jdt = sub i64 %jt1, %jt0
  %wt = atomicrmw add ptr @pool_wait_ns, i64 %jdt monotonic
  br label %finish
finish:
  store atomic i32 0, ptr @pool_state monotonic, align 4
  %status = load atomic i32, ptr @pool_status monotonic, align 4
  store atomic i32 0, ptr @pool_lock release, align 4
  ret i32 %status
}
"""


class _Pool:
    engine = None
    threads = 0
    stats = None        # tl_pool_stats
    lock = threading.Lock()     # one thread compiles and starts the pool


def _new_lock_in_child() -> None:
    # a fork while another thread held the lock would leave the child's copy held forever
    _Pool.lock = threading.Lock()


if hasattr(os, "register_at_fork"):        # POSIX
    os.register_at_fork(after_in_child=_new_lock_in_child)

# what the pool itself calls, beyond the C library
_POOL_NEEDS = frozenset({"syscall", "sched_yield", "clock_gettime", "pthread_atfork",
                         "__register_atfork"})


def _futex_number() -> int | None:
    """The futex system call's number on this machine (None: no workers here)."""
    if not sys.platform.startswith("linux"):
        return None
    return _FUTEX.get(platform.machine().lower())


def _runtime_text(futex: int) -> str:
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
            .replace("ATFORK_DECL", fdecl).replace("ATFORK_CALL", fcall)
            .replace("FUTEX_NR", str(futex)).replace("PREEMPTED_NS", str(PREEMPTED_NS))
            .replace("CALM_NS", str(CALM_NS))
            .replace("WAITER_OR_INSIDE", str(WAITER | INSIDE))
            .replace("WAITER_AND_ONE", str(WAITER | 1)).replace("NOT_OPEN", str(~OPEN))
            .replace("OPEN", str(OPEN)).replace("WAITER", str(WAITER))
            .replace("INSIDE", str(INSIDE)))


def ensure_pool(tm: llvm.TargetMachine) -> int:
    """Compile the runtime and start the workers once per process; the number of threads.
    Thread-safe: the first caller builds the pool while others wait for it (two engines
    would each start workers, and the one dropped would free code its workers run)."""
    if _Pool.engine is not None:
        return _Pool.threads
    with _Pool.lock:
        if _Pool.engine is None:
            _start(tm)
    return _Pool.threads


def _start(tm: llvm.TargetMachine) -> None:
    from .symbols import check_symbols
    from .target import host_target

    futex = _futex_number()
    spin_ns = spin_us() * 1000      # (a bad TL_SPIN_US is an error before anything starts)
    engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), tm)  # loads the C library
    mod = llvm.parse_assembly(_runtime_text(futex or 0))
    mod.verify()
    obj = tm.emit_object(mod)
    check_symbols(obj, host_target(), "the thread pool", provided=_POOL_NEEDS,
                  resolve=llvm.address_of_symbol)
    engine.add_object_file(llvm.ObjectFileRef.from_data(obj))
    engine.finalize_object()
    launch = engine.get_function_address(PARALLEL_LAUNCH)
    llvm.add_symbol(PARALLEL_LAUNCH, launch)
    workers = num_threads() - 1 if futex is not None else 0
    start = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_int32, ctypes.c_int64)(
        engine.get_function_address("tl_pool_start"))
    started = start(workers, spin_ns) if workers > 0 else 0
    _Pool.stats = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(
        engine.get_function_address("tl_pool_stats"))
    _Pool.threads = started + 1
    _Pool.engine = engine       # last: another thread that sees it sees a started pool


def pool_threads() -> int:
    """Threads that run parallel loops (the workers and the calling thread); 0 if not started."""
    return _Pool.threads


def pool_stats() -> dict[str, int]:
    """The pool's counters: `workers`, `sleeping` (asleep on the futex now), `regions`
    (parallel loops run on the pool), `entries` (times a worker took part in one) and
    `wait_ns` (time launching threads spent waiting for workers after their own share of
    the tasks). All 0 before the pool starts."""
    names = ("workers", "sleeping", "regions", "entries", "wait_ns")
    if _Pool.stats is None:
        return dict.fromkeys(names, 0)
    out = (ctypes.c_int64 * len(names))()
    _Pool.stats(ctypes.addressof(out))
    return dict(zip(names, out))
