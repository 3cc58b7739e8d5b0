"""Exact bounds checking of every affine read with isl.

For each read, the set of iterations (and size values) where its index leaves the tensor is
computed under the conditions that guard the read (if_then_else arms, where= clauses). When
that set covers every size binding for which the stage runs, lowering fails with a witness;
otherwise the sizes for which some read would leave its tensor are kept as a runtime
precondition, checked before the kernel runs.
"""

from __future__ import annotations

from dataclasses import dataclass

import islpy as isl

from ..errors import BoundsError
from ..ir.printer import expr_str
from .affine import PRODUCT_PREFIX
from .model import AccessRelations, Statement


@dataclass(frozen=True)
class BoundsViolation:
    """Reads of `buffer` in `stmt` leave the buffer for the iterations in `where`."""

    stmt: str
    text: str
    where: isl.Set

    def witness(self, params: isl.Set | None = None) -> dict[str, int]:
        s = self.where if params is None else self.where.intersect_params(params)
        pt = s.sample_point()
        out = {}
        for kind in (isl.dim_type.param, isl.dim_type.set):
            for d in range(s.dim(kind)):
                out[s.get_dim_name(kind, d)] = pt.get_coordinate_val(kind, d).to_python()
        return out

    def message(self, params: isl.Set | None = None) -> str:
        w = self.witness(params)
        # a product parameter (n * m's) shows as the product it stands for
        at = ", ".join(f"{_shown(k)}={v}" for k, v in w.items())
        return (f"{self.stmt} reads {self.text} outside its bounds, e.g. at {at}; guard the "
                "read with tl.if_then_else, or make the domain smaller")


def _shown(name: str) -> str:
    if name.startswith(PRODUCT_PREFIX):
        return "*".join(name[len(PRODUCT_PREFIX):].split("__"))
    return name


def check_bounds(statements: list[Statement], access: AccessRelations,
                 context: isl.Set) -> list[BoundsViolation]:
    """Violations that depend on the sizes; raises BoundsError for certain ones."""
    out = []
    for st, acc, m in access.per_read:
        if not acc.affine:
            continue
        box = access.boxes[id(acc.buffer)]
        bad = m.subtract_range(box).domain().intersect_params(context)
        if bad.is_empty():
            continue
        idx = ", ".join(expr_str(i) for i in acc.indices)
        v = BoundsViolation(st.stage, f"{acc.buffer.name}[{idx}]", bad)
        runs = st.domain.intersect_params(context).params()
        if runs.is_subset(bad.params()):
            raise BoundsError(v.message(), v.witness())
        out.append(v)
    return out
