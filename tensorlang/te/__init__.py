"""The tensor-expression language: placeholder, compute, reduce_axis, reducers, intrinsics,
recurrences, scans and update stages."""

from .extern import (  # noqa: F401
    ExternBuffer, ExternOp, PackedCall, call_packed, contrib, extern, get_global_func,
    register_func,
)
from .intrin import (  # noqa: F401
    abs, all, any, ceil, cos, erf, exp, floor, floordiv, floormod, fmax, fmin, if_then_else,
    indexdiv, indexmod, log, max_value, maximum, min_value, minimum, pow, round, rsqrt, sigmoid,
    sin, sqrt, tanh,
)
from .reduce import (  # noqa: F401
    CommReducer, Reduce, argmax, argmin, comm_reducer, max, min, nanmax, nanmin, prod, sum,
)
from . import tir  # noqa: F401 (TVM's tvm.tir names)
from .scan import scan  # noqa: F401
from .update import UpdateOp, update  # noqa: F401
from .tensor import (  # noqa: F401
    ComputeOp, IterVar, Operation, PlaceholderOp, Tensor, compute, placeholder, recurrence,
    reduce_axis, size_var, var,
)
