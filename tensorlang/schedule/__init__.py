"""Schedules: create_schedule, Stage and its primitives, lower()."""

from .lower import LoweredFunc, lower, run_lowered  # noqa: F401
from .schedule import Schedule, Stage, ThreadAxis, create_schedule, thread_axis  # noqa: F401
