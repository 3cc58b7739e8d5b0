"""A recurrence's last value kept in a register across a serial loop.

`y[i, j] = x[i, j] + 0.5 * y[i, j - 1]` in a serial loop over j stores y[i, j] and, one
iteration later, loads it back. LLVM forwards such a load only while it can prove the two
addresses equal, which it stops doing once it has unrolled or peeled the loop late in its
pipeline (the indices become `or disjoint` forms and offsets from different bases); the
load then waits for the store, longer than the step's arithmetic takes (an IIR filter's
rows in tiles run far slower than the same loop untiled; Zen 4's memory renaming, for one,
hides the store only when both addresses use the same registers). `carried_loads` finds
the loads that read what the previous iteration of the loop stored; the code generator
(`serial_loop`) gives them the stored value from a phi, reading memory only in the loop's
first iteration.
"""

from __future__ import annotations

from ...ir.expr import Const, Load, Sub, Var, same
from ...ir.simplify import simplify
from ...ir.stmt import Store
from ...ir.visit import substitute, walk

CARRIED_DTYPES = ("float32", "float64", "int32", "int64")


def carried_loads(body, var: str) -> tuple[Store, list[Load]] | None:
    """(store, loads) when the loop body is one scalar store whose value reads, at the
    store's own indices with `var` one less, the element the store wrote in the previous
    iteration; None otherwise. (Nothing else in the body writes the buffer: the body is
    the store alone.)"""
    if not isinstance(body, Store) or body.buffer.dtype.name not in CARRIED_DTYPES or \
            body.buffer.dtype.lanes != 1 or body.atomic:
        return None
    v = next((y for x in body.indices for y in walk(x)
              if isinstance(y, Var) and y.name == var), None)
    if v is None:
        return None                      # every iteration stores to the same element
    back = {var: Sub(v, Const(1, v.dtype), v.dtype)}
    want = [simplify(substitute(x, back)) for x in body.indices]
    loads = [x for x in walk(body.value) if isinstance(x, Load) and x.buffer is body.buffer
             and len(x.indices) == len(want) and
             all(_equal(a, b) for a, b in zip(x.indices, want))]
    return (body, loads) if loads else None


def _equal(a, b) -> bool:
    if same(a, b):
        return True
    d = simplify(Sub(a, b, a.dtype)) if a.dtype == b.dtype else None
    return isinstance(d, Const) and int(d.value) == 0
