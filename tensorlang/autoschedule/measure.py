"""Timing schedules on the host (the auto-scheduler's tuning log is tuning_log.py).

`time_in_turn` takes batches of every function in turn, so one of a shared machine's slow
spells slows all of them alike instead of one function's whole measurement, and takes more
rounds when a function's rounds disagree widely (a disturbed measurement); `measure_many`
builds schedules and times them that way.
"""

from __future__ import annotations

import time

import numpy as np

from ..backends.llvm import compile_kernel
from ..config import debug_print, timed
from .. import driver
from ..target import Target

TIME_MIN_S = 0.02        # a candidate is timed in batches of calls at least this long
# a function whose slowest round took this many times its fastest was disturbed in one:
# a slow spell of a shared VM can double a process's time, and a batch of TIME_MIN_S
# absorbs a scheduler tick or two; a parallel kernel whose every call waits a tick for a
# descheduled worker is slowed by far more (the figures: benchmarks/RESULTS-decisions.md)
DISTURBED_RATIO = 4.0


def measure(s, target="llvm", runs: int = 3) -> float:
    """Seconds per call of the schedule's kernel on random inputs (the host only)."""
    return measure_many([s], target, runs)[0]


def measure_many(schedules, target="llvm", rounds: int = 3) -> list[float]:
    """Seconds per call of each schedule's kernel (the host only), timed in turn
    (`time_in_turn`) on random inputs. Schedules of one program share their arrays: where
    an array lies is not the schedule's doing, and a candidate timed on arrays of its own
    is ranked by them as much as by its loops (a fresh mmap's pages and recycled heap
    pages can time one kernel differently, and alignment and 4 KiB aliasing between
    arrays vary with the allocation)."""
    shared: dict[tuple, list[np.ndarray]] = {}
    return time_in_turn([kernel_call(s, target, shared) for s in schedules], rounds)


def kernel_call(s, target, shared: dict, lowered=None):
    """The schedule's kernel, built, as a function of no arguments that runs it once on
    random inputs: those of `shared` (a dict the caller keeps across schedules of one
    program, filled here), so that every candidate runs on the same arrays. `lowered`:
    the schedule's loop nest when the caller has lowered it already (`sample.lower_candidate`,
    its function named "auto"), compiled without lowering it again (isl's code
    generation is a third of a matmul candidate's build)."""
    args = [*s.placeholders, *s.outputs]
    if lowered is None:
        mod = driver.build(s, args, target=target, name="auto")
    else:
        tgt = Target.parse(target)
        with timed("build"):
            kernel = compile_kernel("auto", lowered.buffers, lowered.params, lowered.body,
                                    tgt)
        mod = driver.Module(lowered, kernel, tgt)
    key = tuple((tuple(int(x.value) for x in t.shape), str(t.dtype)) for t in args)
    if key not in shared:
        rng = np.random.default_rng(0)
        shared[key] = [rng.standard_normal(shape).astype(dtype) for shape, dtype in key]
    arrays = shared[key]
    return lambda: mod(*arrays)


def _reps(t: float, min_s: float) -> int:
    """Calls in a batch of at least `min_s` of a function that takes `t` a call."""
    return max(1, min(1000, int(min_s / max(t, 1e-7))))


def time_in_turn(fns, rounds: int = 3, min_s: float = TIME_MIN_S, once=None,
                 deadline: float | None = None) -> list[float]:
    """Seconds per call of each function: the best of `rounds` batches of at least
    `min_s` each, the batches of all functions taken in turn. A shared machine that slows
    a whole process down for a second or two (a VM's busy neighbours) then slows every
    function's batch of that round alike, instead of one function's whole measurement, so
    the ranking survives it.

    A disturbed measurement is timed again: when a function's slowest round took over
    DISTURBED_RATIO times its fastest (and over 1 us a call more), something slowed it far
    more than a slow spell, and its fastest round may have been slowed too, so every
    function gets `rounds` more rounds, once (TL_DEBUG=1 says so); the best is kept.
    After the first round a batch is sized by the function's fastest batch, so a first
    call slowed by the machine does not leave every batch of a fast function short.

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
    n = len(fns)
    best, worst = [float("inf")] * n, [0.0] * n
    total, r, again = rounds, 0, False
    while r < total:
        call = [b if b < float("inf") else t for t, b in zip(once, best)]
        reps = [_reps(t, min_s) for t in call]
        per_round = sum(k * max(t, 1e-7) for k, t in zip(reps, call))
        if r and deadline is not None and time.perf_counter() + per_round > deadline:
            break
        for k in (range(n) if r % 2 == 0 else reversed(range(n))):
            t0 = time.perf_counter()
            for _ in range(reps[k]):
                fns[k]()
            t = (time.perf_counter() - t0) / reps[k]
            best[k], worst[k] = min(best[k], t), max(worst[k], t)
        r += 1
        if r == total and not again and rounds > 1:
            wide = [k for k in range(n) if worst[k] > DISTURBED_RATIO * best[k] and
                    worst[k] - best[k] > 1e-6]
            if wide:
                again, total = True, total + rounds
                debug_print(1, "time_in_turn: rounds far apart (" + ", ".join(
                    f"{best[k] * 1e3:.3f}-{worst[k] * 1e3:.3f} ms" for k in wide) +
                    f"), a disturbed measurement: {rounds} more rounds")
    return best
