"""TVM's `tvm.tir` names that TE code uses inside compute bodies and reducers, where
tensorlang has the same operation (so `tvm = tensorlang` ports such code unchanged)."""

from __future__ import annotations

from ..ir.expr import Expr, const  # noqa: F401 (const: TVM's tir.const)
from .intrin import if_then_else


def Select(cond, true_value, false_value) -> Expr:  # noqa: N802 (TVM's name)
    """TVM's `tir.Select(cond, t, f)`: `tl.if_then_else` (TVM evaluates both arms, which
    gives the same value where both are safe to evaluate; tensorlang evaluates one)."""
    return if_then_else(cond, true_value, false_value)


__all__ = ["Select", "const"]
