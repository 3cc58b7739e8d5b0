"""The one module that reads the TL_* environment variables.

TL_DEBUG=1 prints timings of each pass, =2 also loop nests, =3 also LLVM IR, =4 also isl sets,
maps and dependences. TL_NUM_THREADS sets the size of the parallel thread pool.
TL_FP_CONTRACT=0 stops the LLVM backend from fusing a*b + c into one multiply-add (the
default allows it, as C compilers' -ffp-contract=on does within an expression).
TL_FASTMATH=1 builds every LLVM kernel with fast math (`tl.build(..., fastmath=True)` does it
for one kernel; see `fastmath`).
TL_TUNE_LOG and TL_TUNE_BUDGET give tl.auto_schedule its default tuning log and seconds per
operator (`tensorlang tune`'s own settings, `tuning`, come first). TL_CACHE_DIR is where
the graph executor keeps its tuning log when TL_TUNE_LOG is unset and its compiled kernels
(`kernels/`; default $XDG_CACHE_HOME/tensorlang, else ~/.cache/tensorlang; the test suite
points it at a temporary folder). TL_KERNEL_CACHE=0 turns the kernel cache off;
TL_KERNEL_CACHE_MB caps its size (`kernel_cache_bytes`). TL_COMPILE_JOBS is how many
processes compile a graph's kernels at once (`compile_jobs`; 1: in this process).
TL_STREAM_STORES=0 stops the LLVM backend from storing large outputs non-temporally
(`backends/llvm/stream.py`; default on, x86 only).
TL_STRICT=1 turns a refused default schedule (the graph executor's, which then runs the
declared loop nest, correct but far slower) into an error; the test suite sets it.
TL_SPIN_US is how long an idle thread-pool worker (and a parallel loop waiting for its
workers) spins before it sleeps (`spin_us`; 0: sleep after one short poll, as
OMP_WAIT_POLICY=passive).
TL_ARRAY_CACHE_MB caps the memory of freed output arrays the graph executor keeps for reuse
(`array_cache_bytes`; 0: no cache).
"""

from __future__ import annotations

from contextvars import ContextVar

import contextlib
import math
import numbers
import os
import sys
import time

from .errors import TensorlangError


def debug_level() -> int:
    """The current TL_DEBUG level (0 when unset or not an integer)."""
    try:
        return int(os.environ.get("TL_DEBUG", "0"))
    except ValueError:
        return 0


def num_threads() -> int:
    """Threads for parallel loops: TL_NUM_THREADS, default the number of cores."""
    value = os.environ.get("TL_NUM_THREADS")
    if value:
        try:
            n = int(value)
            if n >= 1:
                return n
        except ValueError:
            pass
    return os.cpu_count() or 1


SPIN_US_DEFAULT = 100


def spin_us() -> int:
    """Microseconds an idle thread-pool worker polls for the next parallel loop before it
    sleeps, and a parallel loop polls for its workers before it sleeps (TL_SPIN_US, default
    SPIN_US_DEFAULT; 0 sleeps after one short poll of 64 pauses). Read when the pool
    starts. A spin that finds its thread was descheduled (another process wants the core)
    ends early whatever this says (`backends/llvm/pool.py`)."""
    v = os.environ.get("TL_SPIN_US", "").strip()
    if not v:
        return SPIN_US_DEFAULT
    try:
        us = int(v)
    except ValueError:
        us = -1
    if not 0 <= us <= 10_000_000:
        raise TensorlangError(f"TL_SPIN_US must be an integer number of microseconds from 0 "
                              f"to 10000000, got {v!r}")
    return us


def array_cache_bytes() -> int | None:
    """The cap on the bytes of freed output arrays the graph executor's array cache keeps
    for reuse: TL_ARRAY_CACHE_MB in MiB (0 turns the cache off), None when unset (the
    cache's own default, `backends.array_cache.default_limit`). Read when the cache is
    first used; `G.set_array_cache_limit` changes it later."""
    v = os.environ.get("TL_ARRAY_CACHE_MB", "").strip()
    if not v:
        return None
    try:
        mb = float(v)
    except ValueError:
        mb = -1.0
    if not 0 <= mb < float("inf"):
        raise TensorlangError(f"TL_ARRAY_CACHE_MB must be a number of MiB >= 0, got {v!r}")
    return int(mb * (1 << 20))


_ON, _OFF = ("1", "on", "true", "yes"), ("0", "off", "false", "no")


def flag(name: str, default: bool) -> bool:
    """The on/off environment variable `name`: 1/on/true/yes or 0/off/false/no (any case);
    unset or empty is `default`; anything else is a TensorlangError naming the variable (the
    one parser of every TL_* switch)."""
    v = os.environ.get(name, "").strip().lower()
    if not v:
        return default
    if v in _ON:
        return True
    if v in _OFF:
        return False
    from .errors import TensorlangError

    raise TensorlangError(f"{name} must be one of {'/'.join(_ON + _OFF)} (or unset), got "
                          f"{os.environ[name]!r}")


def fp_contract() -> bool:
    """Whether a*b + c may become one fused multiply-add (TL_FP_CONTRACT, default on)."""
    return flag("TL_FP_CONTRACT", True)


def stream_stores() -> bool:
    """Whether x86 kernels may store large outputs non-temporally (TL_STREAM_STORES,
    default on; `backends/llvm/stream.py` says when they do)."""
    return flag("TL_STREAM_STORES", True)


_FASTMATH: ContextVar[bool | None] = ContextVar("tl_fastmath", default=None)


def fastmath() -> bool:
    """Whether the kernel being built uses fast math: LLVM's `fast` flags on float
    arithmetic (reassociation, reciprocals, no NaN/inf/-0 guarantees), NaN-ignoring
    min/max, and exp without its edge selects (NaN in, anything out). `tl.build(...,
    fastmath=True)` for one kernel; TL_FASTMATH=1 for every kernel (default off)."""
    v = _FASTMATH.get()
    if v is not None:
        return v
    return flag("TL_FASTMATH", False)


# the settings of `tensorlang tune` for the script it runs (`tuning`), ahead of TL_TUNE_LOG
# and TL_TUNE_BUDGET: process-wide, as those are, until the script ends
_TUNING: dict[str, object] = {}


@contextlib.contextmanager
def tuning(log: str | os.PathLike, budget_s: float):
    """Within the block, `tune_log()` answers `log` and `tune_budget()` answers `budget_s`
    (a finite positive number of seconds), before TL_TUNE_LOG and TL_TUNE_BUDGET: how
    `tensorlang tune` gives its settings to the script it runs, without writing the
    environment. The settings before the block come back after it."""
    budget = check_budget(budget_s, "tuning: budget_s")
    old = dict(_TUNING)
    _TUNING.update(log=os.fspath(log), budget_s=budget)
    try:
        yield
    finally:
        _TUNING.clear()
        _TUNING.update(old)


def tune_log(default: str | None = None) -> str | None:
    """The auto-scheduler's tuning log: `tensorlang tune`'s (`tuning`), else TL_TUNE_LOG,
    else `default`."""
    return _TUNING.get("log") or os.environ.get("TL_TUNE_LOG") or default


def cache_dir() -> str:
    """The folder of the executor's default tuning log and its kernel cache: TL_CACHE_DIR,
    else $XDG_CACHE_HOME/tensorlang, else ~/.cache/tensorlang."""
    got = os.environ.get("TL_CACHE_DIR")
    if got:
        return got
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "tensorlang")


def kernel_cache_dir() -> str | None:
    """The folder of the graph executor's kernel cache on disk (`cache_dir()/kernels`), or
    None when TL_KERNEL_CACHE=0 turns it off (default on)."""
    if not flag("TL_KERNEL_CACHE", True):
        return None
    return os.path.join(cache_dir(), "kernels")


KERNEL_CACHE_MB_DEFAULT = 1024


def kernel_cache_bytes() -> int:
    """The cap on the kernel cache's size: TL_KERNEL_CACHE_MB in MiB (default
    KERNEL_CACHE_MB_DEFAULT); past it the least recently used entries are removed."""
    v = os.environ.get("TL_KERNEL_CACHE_MB", "").strip()
    if not v:
        return KERNEL_CACHE_MB_DEFAULT << 20
    try:
        mb = float(v)
    except ValueError:
        mb = -1.0
    if not 0 < mb < float("inf"):
        raise TensorlangError(f"TL_KERNEL_CACHE_MB must be a positive number of MiB, got "
                              f"{v!r}")
    return int(mb * (1 << 20))


def compile_jobs() -> int:
    """Processes that compile a graph's kernels at once: TL_COMPILE_JOBS, default the
    number of cores (1: every kernel in this process)."""
    v = os.environ.get("TL_COMPILE_JOBS", "").strip()
    if not v:
        return os.cpu_count() or 1
    try:
        n = int(v)
    except ValueError:
        n = 0
    if n < 1:
        raise TensorlangError(f"TL_COMPILE_JOBS must be an integer >= 1, got {v!r}")
    return n


def settings_fingerprint() -> tuple:
    """The TL_* variables that may change what a kernel compiles to, with their values:
    every one but those that only say where things go or what is printed (a key of the
    kernel cache takes them all, so that a new switch is never forgotten in it)."""
    return tuple(sorted((k, v) for k, v in os.environ.items()
                        if k.startswith("TL_") and k not in _NOT_CODE)) + \
        (("fastmath", fastmath()), ("tuning", tuple(sorted(_TUNING.items()))))


# variables that never change a kernel's code: debug output, where caches live, the cache
# switches, how many processes compile, and run-time settings of the thread pool and arrays
_NOT_CODE = frozenset({"TL_DEBUG", "TL_CACHE_DIR", "TL_KERNEL_CACHE", "TL_KERNEL_CACHE_MB",
                       "TL_COMPILE_JOBS", "TL_ARRAY_CACHE_MB", "TL_SPIN_US"})


def tune_budget(default: float) -> float:
    """Seconds of search per operator: `tensorlang tune`'s (`tuning`), else
    TL_TUNE_BUDGET, else `default`. A value of TL_TUNE_BUDGET that is not a finite positive
    number is an error naming the variable (`nan`, `inf`, `-1`, `ten`): the search would
    otherwise run forever, stop at once or take a default the user did not ask for."""
    if "budget_s" in _TUNING:
        return _TUNING["budget_s"]
    v = os.environ.get("TL_TUNE_BUDGET", "").strip()
    if not v:
        return default
    try:
        seconds = float(v)
    except ValueError:
        seconds = math.nan
    if not (math.isfinite(seconds) and seconds > 0):
        raise TensorlangError(f"TL_TUNE_BUDGET must be a finite positive number of seconds, "
                              f"got {v!r}")
    return seconds


def check_budget(value, what: str) -> float:
    """`value` as seconds of search, `what` naming it in the error: a finite positive int
    or float (numpy's too), not a bool or a string."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or \
            not (math.isfinite(value) and value > 0):
        raise TensorlangError(f"{what} must be a finite positive number of seconds (an int "
                              f"or a float), got {value!r}")
    return float(value)


def l3_bytes_per_cycle() -> float | None:
    """The cost model's rate from the last-level cache into a core's L2, bytes a cycle
    (TL_L3_BYTES_PER_CYCLE; None when unset: `Target.l3_bytes_per_cycle` says then)."""
    v = os.environ.get("TL_L3_BYTES_PER_CYCLE", "").strip()
    if not v:
        return None
    try:
        rate = float(v)
    except ValueError:
        rate = 0.0
    if not rate > 0:
        raise TensorlangError(f"TL_L3_BYTES_PER_CYCLE must be a positive number, got {v!r}")
    return rate


def strict() -> bool:
    """Whether a refused default schedule is an error instead of a fallback (TL_STRICT)."""
    return flag("TL_STRICT", False)


def debug_print(level: int, title: str, text: object = "") -> None:
    """Print `text` under `title` to stderr when TL_DEBUG >= level."""
    if debug_level() >= level:
        body = f"\n{text}" if text != "" else ""
        print(f"[tensorlang] {title}{body}", file=sys.stderr)


@contextlib.contextmanager
def timed(name: str):
    """Time a pass; printed at TL_DEBUG >= 1."""
    t0 = time.perf_counter()
    yield
    if debug_level() >= 1:
        print(f"[tensorlang] {name}: {1e3 * (time.perf_counter() - t0):.2f} ms", file=sys.stderr)


def libdevice_path() -> str | None:
    """TL_LIBDEVICE: the libdevice bitcode the NVPTX backend links (else found under the
    CUDA installation, `backends/cuda/nvptx.py`)."""
    return os.environ.get("TL_LIBDEVICE") or None
