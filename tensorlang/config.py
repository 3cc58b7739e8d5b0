"""The one module that reads the TL_* environment variables.

TL_DEBUG=1 prints timings of each pass, =2 also loop nests, =3 also LLVM IR, =4 also isl sets,
maps and dependences. TL_NUM_THREADS sets the size of the parallel thread pool.
TL_FP_CONTRACT=0 stops the LLVM backend from fusing a*b + c into one multiply-add (the
default allows it, as C compilers' -ffp-contract=on does within an expression).
TL_FASTMATH=1 builds every LLVM kernel with fast math (`tl.build(..., fastmath=True)` does it
for one kernel; see `fastmath`).
TL_TUNE_LOG and TL_TUNE_BUDGET give tl.auto_schedule its default tuning log and seconds per
operator (`tensorlang tune` sets them). TL_CACHE_DIR is where the graph executor keeps its
tuning log when TL_TUNE_LOG is unset (default ~/.cache/tensorlang; the test suite points
it at a temporary folder).
TL_STREAM_STORES=0 stops the LLVM backend from storing large outputs non-temporally
(`backends/llvm/stream.py`; default on, x86 only).
TL_STRICT=1 turns a refused default schedule (the graph executor's, which then runs the
declared loop nest, correct but up to 200x slower) into an error; the test suite sets it.
"""

from __future__ import annotations

from contextvars import ContextVar

import contextlib
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


def fp_contract() -> bool:
    """Whether a*b + c may become one fused multiply-add (TL_FP_CONTRACT, default 1)."""
    return os.environ.get("TL_FP_CONTRACT", "1").strip() not in ("0", "off", "false", "no")


def stream_stores() -> bool:
    """Whether x86 kernels may store large outputs non-temporally (TL_STREAM_STORES,
    default 1; `backends/llvm/stream.py` says when they do)."""
    return os.environ.get("TL_STREAM_STORES", "1").strip() not in ("0", "off", "false", "no")


_FASTMATH: ContextVar[bool | None] = ContextVar("tl_fastmath", default=None)


def fastmath() -> bool:
    """Whether the kernel being built uses fast math: LLVM's `fast` flags on float
    arithmetic (reassociation, reciprocals, no NaN/inf/-0 guarantees), NaN-ignoring
    min/max, and exp without its edge selects (NaN in, anything out). `tl.build(...,
    fastmath=True)` for one kernel; TL_FASTMATH=1 for every kernel (default off)."""
    v = _FASTMATH.get()
    if v is not None:
        return v
    return os.environ.get("TL_FASTMATH", "0").strip() not in ("0", "off", "false", "no", "")


def tune_log(default: str | None = None) -> str | None:
    """The auto-scheduler's tuning log (TL_TUNE_LOG, set by `tensorlang tune`), else
    `default`."""
    return os.environ.get("TL_TUNE_LOG") or default


def cache_dir() -> str:
    """The folder of the executor's default tuning log: TL_CACHE_DIR, else
    ~/.cache/tensorlang."""
    return os.environ.get("TL_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache",
                                                          "tensorlang")


def tune_budget(default: float) -> float:
    """Seconds of search per operator (TL_TUNE_BUDGET, set by `tensorlang tune`)."""
    v = os.environ.get("TL_TUNE_BUDGET", "").strip()
    try:
        return float(v) if v else default
    except ValueError:
        return default


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
    return os.environ.get("TL_STRICT", "0").strip() not in ("0", "off", "false", "no", "")


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
