"""Run-time index checks for the reads isl cannot prove in range.

An affine read is checked exactly at build time (`bounds.py`). A read whose index depends on
data (`A[I[i]]`) or is not affine (`A[i*i]`) cannot be: each of its indices is wrapped in an
`IndexCheck` that the kernel evaluates, unless isl proves that dimension in range (an affine
index beside a data-dependent one, e.g. the `d` of an embedding lookup `E[I[b], d]`, under
the read's guards). A failed check stops the kernel with status 3 and records which check
(`CheckSite`), the index and the iteration, so the call raises an error naming all three.
"""

from __future__ import annotations

from dataclasses import dataclass

import islpy as isl

from ..ir.dtype import int64
from ..ir.expr import Expr, IndexCheck, Load, ReduceVar, Var
from ..ir.printer import expr_str
from ..ir.stmt import If, Let, Seq, Stmt, Store
from ..ir.visit import map_expr, map_stmt
from .affine import affine_str, size_str
from .model import Statement, access_map, statement_reads, statement_writes


@dataclass(frozen=True)
class CheckSite:
    """One checked index: `stage` reads `tensor` at `access`; dimension `dim` is checked.
    `axes` name the values of the iteration that a failure records."""

    stage: str
    tensor: str
    access: str
    dim: int
    axes: tuple[str, ...]
    writes: bool = False     # the index of a store (an update stage's data-dependent write)

    def message(self, value: int, extent: int, point: tuple[int, ...]) -> str:
        at = ", ".join(f"{a}={v}" for a, v in zip(self.axes, point))
        where = f"dimension {self.dim}" if self.dim else "the first dimension"
        verb = "writes" if self.writes else "reads"
        return (f"index out of bounds: {self.stage}[{at}] {verb} {self.access}, whose index "
                f"in {where} is {value}, outside {self.tensor}'s extent {extent} (valid "
                f"0..{extent - 1}); indices that read data are checked at run time "
                "(tl.build(..., checks=False) removes the checks when the indices are "
                "known to be in range)")


def _proven(st: Statement, index: Expr, guard, extent: Expr, params: str,
            context: isl.Set) -> bool:
    """Whether isl shows the affine `index` in [0, extent) wherever the read happens."""
    ext = size_str(extent)
    if ext is None:
        return False
    box = isl.Set(f"[{params}] -> {{ X[a] : 0 <= a < {ext} }}")
    m = access_map(st, None, (index,), guard, params, "X", box)
    outside = m.intersect_params(context).subtract_range(box)
    return outside.is_empty()


def insert_index_checks(statements: list[Statement], names: dict[int, str],
                        labels: dict[str, str], params: str, context: isl.Set,
                        first: int = 0) -> tuple[list[Statement], list[CheckSite]]:
    """The statements with every unproven index of a non-affine read wrapped in an
    IndexCheck, and the sites the checks refer to (site `first + k` is `sites[k]`: a
    program numbers the sites of its stages one after another)."""
    sites: list[CheckSite] = []
    out = []
    for st in statements:
        # (buffer, indices) of non-affine reads -> dims to check; one decision for every
        # occurrence of the same read (an unproven occurrence makes all of them checked)
        todo: dict[tuple, set[int]] = {}
        for acc in statement_reads(st):
            if acc.affine or id(acc.buffer) not in names:
                continue
            key = (id(acc.buffer), tuple(expr_str(i) for i in acc.indices))
            dims = todo.setdefault(key, set())
            for d, (ix, ext) in enumerate(zip(acc.indices, acc.buffer.shape)):
                if affine_str(ix) is None or not _proven(st, ix, acc.guard, ext, params,
                                                         context):
                    dims.add(d)
        # stores at another index than the statement's own point (an update stage's write):
        # each dimension that isl does not prove in range is checked, so that a wild index
        # stops the kernel before the write
        stores: dict[tuple, set[int]] = {}
        for buf, indices in statement_writes(st):
            if id(buf) in names:
                key = (id(buf), tuple(expr_str(i) for i in indices))
                if all(isinstance(ix, Var) and not isinstance(ix, ReduceVar) and
                       ix.name in st.dims for ix in indices):
                    continue      # a compute's store at its own point: in range
                stores.setdefault(key, set()).update(
                    d for d, (ix, ext) in enumerate(zip(indices, buf.shape))
                    if affine_str(ix) is None or not _proven(st, ix, (), ext, params,
                                                             context))
        if not any(todo.values()) and not any(stores.values()):
            out.append(st)
            continue
        point = tuple(Var(d, int64) for d in st.dims)
        site_of: dict[tuple, int] = {}

        def wrap(e: Expr, todo=todo, point=point, site_of=site_of, st=st) -> Expr | None:
            if not isinstance(e, Load):
                return None
            # inner reads are wrapped first: compare the indices without their checks
            key = (id(e.buffer), tuple(expr_str(strip_index_checks(i)) for i in e.indices))
            dims = todo.get(key)
            if not dims:
                return None
            idx = list(e.indices)
            for d in sorted(dims):
                if (key, d) not in site_of:
                    site_of[(key, d)] = first + len(sites)
                    sites.append(CheckSite(labels.get(st.stage, st.stage), e.buffer.name,
                                           f"{e.buffer.name}[{', '.join(key[1])}]", d,
                                           st.dims))
                idx[d] = IndexCheck(idx[d], e.buffer.shape[d], site_of[(key, d)], point)
            return Load(e.buffer, tuple(idx))

        body = map_stmt(st.body, lambda e, wrap=wrap: map_expr(e, wrap))

        def check_store(x: Store, stores=stores, point=point, st=st) -> Store:
            key = (id(x.buffer), tuple(expr_str(strip_index_checks(i)) for i in x.indices))
            dims = stores.get(key)
            if not dims:
                return x
            idx = list(x.indices)
            for d in sorted(dims):
                site = first + len(sites)
                sites.append(CheckSite(labels.get(st.stage, st.stage), x.buffer.name,
                                       f"{x.buffer.name}[{', '.join(key[1])}]", d, st.dims,
                                       writes=True))
                idx[d] = IndexCheck(idx[d], x.buffer.shape[d], site, point)
            return Store(x.buffer, tuple(idx), x.value, x.atomic)

        body = _map_stores(body, check_store)
        out.append(Statement(st.name, st.stage, st.dims, st.domain, body, st.is_init))
    return out, sites


def _map_stores(s: Stmt, fn) -> Stmt:
    """`s` (a statement's body: stores under Seq, Let and If) with `fn` applied to each
    store."""
    if isinstance(s, Store):
        return fn(s)
    if isinstance(s, Seq):
        return Seq(tuple(_map_stores(x, fn) for x in s.stmts))
    if isinstance(s, Let):
        return Let(s.var, s.value, _map_stores(s.body, fn))
    if isinstance(s, If):
        return If(s.cond, _map_stores(s.then_body, fn),
                  None if s.else_body is None else _map_stores(s.else_body, fn))
    return s


def strip_index_checks(e: Expr) -> Expr:
    """`e` without its checks (for `tl.build(..., checks=False)`)."""
    return map_expr(e, lambda x: x.index if isinstance(x, IndexCheck) else None)
