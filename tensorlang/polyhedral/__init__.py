"""The isl model of stages: domains, accesses, schedule maps, bounds, loop generation."""

from .astgen import generate_loops, timed_statements  # noqa: F401
from .bounds import BoundsViolation, check_bounds  # noqa: F401
from .model import (  # noqa: F401
    Loop, StageState, Statement, TimedStatement, accumulator_buffers, identity_state,
    stage_statements,
)
