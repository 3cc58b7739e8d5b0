"""The error hierarchy: every error tensorlang raises on purpose is a TensorlangError (and
the one warning it gives, `TuningLogWarning`, is here too)."""

from __future__ import annotations


class TensorlangError(Exception):
    """Base class of all errors raised by tensorlang for bad input or unsupported use."""


class ScheduleError(TensorlangError):
    """A schedule primitive was misused (wrong axis, bad factor, ...)."""


class NoGPUScheduleError(ScheduleError, NotImplementedError):
    """A GPU target's default schedule refused a kernel (the executor never runs a GPU
    kernel with loops left unbound: they would run on one thread)."""


class IllegalScheduleError(ScheduleError):
    """A schedule would change the result of the computation.

    ``witness`` holds one concrete pair of iterations whose order the schedule breaks, as a
    tuple of two dicts ``({var: value}, {var: value})`` (source first).
    """

    def __init__(self, message: str, witness: tuple[dict, dict] | None = None):
        super().__init__(message)
        self.witness = witness


class BoundsError(TensorlangError):
    """A stage reads a tensor outside its bounds; ``witness`` is one offending iteration."""

    def __init__(self, message: str, witness: dict | None = None):
        super().__init__(message)
        self.witness = witness


class IndexBoundsError(BoundsError):
    """A data-dependent index was outside its tensor when the kernel ran (a run-time check).

    ``tensor`` is the tensor read, ``index`` the value, ``dim`` its dimension, ``extent`` the
    tensor's extent there and ``witness`` the iteration (the reading stage's axes)."""

    def __init__(self, message: str, witness: dict | None = None, tensor: str = "",
                 index: int = 0, dim: int = 0, extent: int = 0):
        super().__init__(message, witness)
        self.tensor, self.index, self.dim, self.extent = tensor, index, dim, extent


class TuningLogWarning(UserWarning):
    """The auto-scheduler's tuning log cannot be read or written: the search runs and its
    result is returned, unrecorded (the log is a cache; `autoschedule/tuning_log.py`)."""
