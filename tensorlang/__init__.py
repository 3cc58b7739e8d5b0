"""tensorlang: a tensor compiler whose loop schedules are checked exactly with isl."""

from .errors import (  # noqa: F401
    BoundsError, IllegalScheduleError, IndexBoundsError, NoGPUScheduleError, ScheduleError,
    TensorlangError, TuningLogWarning,
)
from .ir.dtype import DType  # noqa: F401
from .ir.expr import Expr, Var, const  # noqa: F401
from .driver import Module, build  # noqa: F401
from .shared_lib import LoadedModule, load_module  # noqa: F401
from . import testing  # noqa: F401
from .schedule import (  # noqa: F401
    LoweredFunc, Schedule, Stage, ThreadAxis, create_schedule, lower, run_lowered, thread_axis,
)
from .schedule.analyze import Report, analyze  # noqa: F401
from .autoschedule import auto_schedule  # noqa: F401
from .cpus import CPUModel, UnknownCPUError, cpu_model, cpu_models  # noqa: F401
from .target import Target  # noqa: F401
from . import aot  # noqa: F401,E402
from .te import *  # noqa: F401,F403
del intrin  # noqa: F821 (te's math module, which the star brought in under this name)
from . import intrin  # noqa: F401,E402 (tl.intrin: the declared instructions)
from .te.tensorize import TensorIntrin  # noqa: F401,E402

__version__ = "0.1.0"
