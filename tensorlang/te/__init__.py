"""The tensor-expression language: placeholder, compute, reduce_axis, reducers, intrinsics."""

from .intrin import (  # noqa: F401
    abs, all, any, ceil, cos, erf, exp, floor, if_then_else, indexdiv, indexmod, log, maximum,
    minimum, pow, rsqrt, sigmoid, sin, sqrt, tanh,
)
from .reduce import CommReducer, Reduce, argmax, argmin, comm_reducer, max, min, prod, sum  # noqa: F401
from .tensor import (  # noqa: F401
    ComputeOp, IterVar, Operation, PlaceholderOp, Tensor, compute, placeholder, recurrence,
    reduce_axis, var,
)
