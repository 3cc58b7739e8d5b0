"""Timing helpers shared by tutorials, benchmarks and `Module.time_evaluator`:
`benchmark(fn, *args)` calls `fn` after a warm-up in `repeat` rounds of `number` calls and
gives every round's mean seconds a call with their statistics, so that a figure comes with
its spread."""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

from .errors import TensorlangError


@dataclass(frozen=True)
class BenchmarkResult:
    """The seconds a call, one mean per round (`results`), and their statistics (TVM's
    `time_evaluator` result has the same fields); `number`: the calls a round took at most
    (more than asked where `min_repeat_ms` lengthened a round)."""

    results: tuple[float, ...]
    number: int

    @property
    def mean(self) -> float:
        return statistics.fmean(self.results)

    @property
    def median(self) -> float:
        return statistics.median(self.results)

    @property
    def min(self) -> float:
        return min(self.results)

    @property
    def max(self) -> float:
        return max(self.results)

    @property
    def std(self) -> float:
        return statistics.pstdev(self.results) if len(self.results) > 1 else 0.0

    def rate(self, amount: float, unit: str = "GFLOPS", scale: float = 1e9) -> str:
        """`amount` of work a call (flops, bytes) as a rate, the median round's with the
        slowest and fastest rounds': ``"41.2 GFLOPS (38.0-43.1 over 5 rounds)"``."""
        if not isinstance(amount, (int, float)) or amount <= 0:
            raise TensorlangError(f"rate: amount must be a positive number (the work of one "
                                  f"call), got {amount!r}")
        if not isinstance(scale, (int, float)) or scale <= 0:
            raise TensorlangError(f"rate: scale must be a positive number, got {scale!r}")
        r = [amount / max(t, 1e-12) / scale for t in (self.median, self.max, self.min)]
        return f"{r[0]:.1f} {unit} ({r[1]:.1f}-{r[2]:.1f} over {len(self.results)} rounds)"

    def __str__(self) -> str:
        ms = [1e3 * r for r in self.results]
        return (f"median {statistics.median(ms):.4f} ms (min {min(ms):.4f}, max "
                f"{max(ms):.4f}; {len(ms)} rounds of {self.number} calls)")


def _positive_int(v, name: str, allow_none: bool = False) -> None:
    if allow_none and v is None:
        return
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise TensorlangError(f"benchmark: {name} must be a positive int, got {v!r}")


def benchmark(fn, *args, number: int | None = None, repeat: int = 5,
              min_repeat_ms: float = 0.0, warmup: int = 1) -> BenchmarkResult:
    """Time `fn(*args)`: `warmup` calls, then `repeat` rounds of `number` calls each (None:
    as many as make a round last about 10 ms, at least one); a round shorter than
    `min_repeat_ms` is run again with more calls, as TVM's time_evaluator does."""
    if not callable(fn):
        raise TensorlangError(f"benchmark: fn must be callable, got {fn!r}")
    _positive_int(number, "number", allow_none=True)
    _positive_int(repeat, "repeat")
    if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 0:
        raise TensorlangError(f"benchmark: warmup must be an int >= 0, got {warmup!r}")
    if not isinstance(min_repeat_ms, (int, float)) or min_repeat_ms < 0:
        raise TensorlangError(f"benchmark: min_repeat_ms must be >= 0, got {min_repeat_ms!r}")
    for _ in range(warmup):
        fn(*args)
    if number is None:
        t0 = time.perf_counter()
        fn(*args)
        one = max(time.perf_counter() - t0, 1e-7)
        number = max(1, int(0.01 / one))
    results, counts = [], []
    for _ in range(repeat):
        n = number
        while True:
            t0 = time.perf_counter()
            for _ in range(n):
                fn(*args)
            dt = time.perf_counter() - t0
            if dt * 1e3 >= min_repeat_ms or n >= 1 << 24:
                break
            n = max(n + 1, int(n * min_repeat_ms / max(dt * 1e3, 1e-3) * 1.1))
        results.append(dt / n)
        counts.append(n)
    return BenchmarkResult(tuple(results), max(counts))
