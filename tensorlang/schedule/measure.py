"""Timing schedules on the host, and the auto-scheduler's tuning log (JSON lines).

`time_in_turn` takes batches of every function in turn, so one of a shared machine's slow
spells slows all of them alike instead of one function's whole measurement; `measure_many`
builds schedules and times them that way; the log keeps one record per line (program key,
target, time, trace) and `best_record` reads the fastest for a key.
"""

from __future__ import annotations

import json
import time

import numpy as np

from ..errors import TensorlangError

TIME_MIN_S = 0.02        # a candidate is timed in batches of calls at least this long


def measure(s, target="llvm", runs: int = 3) -> float:
    """Seconds per call of the schedule's kernel on random inputs (the host only)."""
    return measure_many([s], target, runs)[0]


def measure_many(schedules, target="llvm", rounds: int = 3) -> list[float]:
    """Seconds per call of each schedule's kernel (the host only), timed in turn
    (`time_in_turn`) on random inputs. Schedules of one program share their arrays: where
    an array lies is not the schedule's doing, and a candidate timed on arrays of its own
    is ranked by them as much as by its loops (before lane-uniform conditions became
    branches, a heat stencil's explicit-vector schedules ran 0.18 ms on a fresh mmap and
    0.034 on recycled heap pages, Zen 5; alignment and 4 KiB aliasing between arrays
    still vary with the allocation)."""
    shared: dict[tuple, list[np.ndarray]] = {}
    return time_in_turn([kernel_call(s, target, shared) for s in schedules], rounds)


def kernel_call(s, target, shared: dict, lowered=None):
    """The schedule's kernel, built, as a function of no arguments that runs it once on
    random inputs: those of `shared` (a dict the caller keeps across schedules of one
    program, filled here), so that every candidate runs on the same arrays. `lowered`:
    the schedule's loop nest when the caller has lowered it already (`sample._lowered`,
    its function named "auto"), compiled without lowering it again (isl's code
    generation is a third of a matmul candidate's build)."""
    from ..driver import build

    args = [*s.placeholders, *s.outputs]
    if lowered is None:
        mod = build(s, args, target=target, name="auto")
    else:
        from ..backends.llvm import compile_kernel
        from ..config import timed
        from ..driver import Module
        from ..target import Target

        tgt = Target.parse(target)
        with timed("build"):
            kernel = compile_kernel("auto", lowered.buffers, lowered.params, lowered.body,
                                    tgt)
        mod = Module(lowered, kernel, tgt)
    key = tuple((tuple(int(x.value) for x in t.shape), str(t.dtype)) for t in args)
    if key not in shared:
        rng = np.random.default_rng(0)
        shared[key] = [rng.standard_normal(shape).astype(dtype) for shape, dtype in key]
    arrays = shared[key]
    return lambda: mod(*arrays)


def time_in_turn(fns, rounds: int = 3, min_s: float = TIME_MIN_S, once=None,
                 deadline: float | None = None) -> list[float]:
    """Seconds per call of each function: the best of `rounds` batches of at least
    `min_s` each, the batches of all functions taken in turn. A shared machine that slows
    a whole process down for a second or two (by up to 2x on the VMs this is developed
    on) then slows every function's batch of that round alike, instead of one function's
    whole measurement, so the ranking survives it.

    `once`: seconds of one call of each function, known to the caller (which has called
    each at least once, warming it up); without it each function is called twice first
    to find out. `deadline` (a `time.perf_counter()` time): a round after the first is
    started only when it is expected to end before then, so that timing keeps a budget."""
    if once is None:
        once = []
        for fn in fns:
            fn()
            t0 = time.perf_counter()
            fn()
            once.append(time.perf_counter() - t0)
    reps = [max(1, min(1000, int(min_s / max(t, 1e-7)))) for t in once]
    per_round = sum(r * max(t, 1e-7) for r, t in zip(reps, once))
    best = [float("inf")] * len(fns)
    for r in range(rounds):
        if r and deadline is not None and time.perf_counter() + per_round > deadline:
            break
        for k in (range(len(fns)) if r % 2 == 0 else reversed(range(len(fns)))):
            t0 = time.perf_counter()
            for _ in range(reps[k]):
                fns[k]()
            best[k] = min(best[k], (time.perf_counter() - t0) / reps[k])
    return best


# ------------------------------------------------------------------------------ the log
def _read_log(path) -> list[dict]:
    """The log's records. A line that is not a JSON record (a write cut short, two
    processes appending at once, a hand edit) is skipped, and TL_DEBUG=1 names it: the log
    is a cache, and one bad line must not stop a run."""
    from ..config import debug_print

    try:
        with open(path) as f:
            lines = f.readlines()
    except FileNotFoundError:
        return []
    except OSError as e:
        raise TensorlangError(f"auto_schedule: cannot read the tuning log {path}: {e}") from e
    out = []
    for k, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except ValueError:
            rec = None
        if not isinstance(rec, dict) or not isinstance(rec.get("trace"), list):
            debug_print(1, f"auto_schedule: line {k} of the tuning log {path} is not a "
                           f"record; skipped")
            continue
        out.append(rec)
    return out


def best_record(path, key: str, model: bool = False) -> dict | None:
    """The fastest measured record for a key; without one, with `model`, the model-only
    mode's latest choice (a record without a time). One read of the log."""
    recs = [r for r in _read_log(path) if r.get("key") == key]
    timed = [r for r in recs if r.get("time") is not None]
    if timed:
        return min(timed, key=lambda r: r["time"])
    untimed = [r for r in recs if r.get("time") is None] if model else []
    return untimed[-1] if untimed else None


def _append_log(path, rec: dict) -> None:
    with open(path, "a") as f:
        f.write(json.dumps(rec) + "\n")
