"""What a kernel tells its caller, shared by the LLVM and CUDA backends, the driver, the
executor and the C header of a saved object: the status a CPU kernel returns, the error
record a failed index check writes, and the thread ABI of parallel loops."""

from __future__ import annotations

import enum


class Status(enum.IntEnum):
    """A CPU kernel's return value (`int32_t` in the C ABI)."""

    OK = 0
    NO_MEMORY = 1       # a temporary buffer could not be allocated
    BAD_SIZES = 2       # sizes whose reads would leave their tensors (the header lists them)
    INDEX = 3           # a run-time index check failed; the error record says which
    EXTERN = 4          # an extern stage's function failed (returned nonzero)


# the error record: [check site + 1, the index, the extent, the iteration's first values...]
ERROR_RECORD_LEN = 16

# A kernel with index checks has two entries: `kernel` (the C entry point) writes a failure
# to the module's global record `error_record_name(kernel)`; `record_entry_name(kernel)`
# takes the record as its last argument ([ERROR_RECORD_LEN x int64]), one per call, so that
# threads calling one kernel at once each get their own failure.
RECORD_ENTRY = ".record"   # suffix of the entry that takes the record as its last argument


def error_record_name(kernel: str) -> str:
    """The global error record of `kernel`, the one its C entry point writes."""
    return f"{kernel}_tl_error"


def record_entry_name(kernel: str) -> str:
    """The entry of `kernel` that writes a failed check to the record its caller passes."""
    return kernel + RECORD_ENTRY


# The thread ABI. A parallel loop's body is outlined into `int32 body(int64 task, void *
# closure)`, returning a Status; the kernel runs tasks [0, ntasks) of it with
# `int32 launch(body, closure, int64 ntasks)`, which returns once all are done: 0, or the
# nonzero status of a task. The JIT's launcher is the thread pool's (llvm/pool.py);
# an object file's is its own runtime's (llvm/aot.py), which also says how many threads it
# runs (`int64 tl_aot_threads()`).
PARALLEL_LAUNCH = "tl_parallel_launch"   # the JIT's thread pool
AOT_LAUNCH = "tl_aot_launch"             # an object file's runtime
AOT_THREAD_COUNT = "tl_aot_threads"      # its threads (TL_NUM_THREADS, else the cores)
AOT_THREADS = -1  # `threads` of an object file's kernel: asks the runtime at each launch
