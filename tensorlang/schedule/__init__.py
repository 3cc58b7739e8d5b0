"""Schedules: create_schedule, Stage and its primitives, lower()."""

from .lower import LoweredFunc, lower  # noqa: F401
from .schedule import Schedule, Stage, create_schedule  # noqa: F401
