"""Dependences with isl's flow analysis, and exact legality of a schedule with a witness.

Dependences are computed once, on the declared order: RAW (a read and the write it sees),
WAR (a read and a later write of the element) and WAW (two writes of the element). The
updates of one reduction commute, so the accumulator's writes are *may* sources (they do
not hide earlier updates) and the dependences between updates of one output element are
marked `reduction`: they need not keep their order, but no parallel or vector loop may
carry them.

A schedule is legal when every other dependence `src -> dst` still has
time(src) <lex time(dst), and no parallel or vector loop carries any dependence.
"""

from __future__ import annotations

from dataclasses import dataclass

import islpy as isl

from ..errors import IllegalScheduleError, TensorlangError
from ..ir.stmt import LoopKind
from .model import TimedStatement, union_all


@dataclass(frozen=True)
class Dependence:
    kind: str          # "RAW", "WAR" or "WAW"
    src: str           # statement names
    dst: str
    rel: isl.Map       # src instance -> dst instance
    reduction: bool = False


@dataclass(frozen=True)
class StatementInfo:
    """How a statement is shown to the user: its stage's name and its variables."""

    stage: str         # stage id
    label: str         # "C", "C.init"
    dims: tuple[str, ...]
    n_spatial: int


@dataclass(frozen=True)
class Witness:
    """A pair of iterations whose order a schedule breaks; unpacks as (source, sink)."""

    kind: str
    source: dict[str, int]
    sink: dict[str, int]
    source_statement: str
    sink_statement: str
    sizes: dict[str, int]
    source_loops: dict[str, int]
    sink_loops: dict[str, int]

    def __iter__(self):
        return iter((self.source, self.sink))

    def __getitem__(self, k: int) -> dict[str, int]:
        return (self.source, self.sink)[k]

    def __len__(self) -> int:
        return 2


def _maps(u: isl.UnionMap) -> list[isl.Map]:
    out: list[isl.Map] = []
    u.foreach_map(out.append)
    return out


def compute_dependences(times: list[TimedStatement], reads: isl.UnionMap,
                        writes: isl.UnionMap, info: dict[str, StatementInfo],
                        reduction_updates: set[str],
                        may_writes: frozenset[str] = frozenset()) -> list[Dependence]:
    """RAW, WAR and WAW dependences of the program in the order given by `times`.
    `may_writes` are the statements whose write map is every element the write may reach
    (a data-dependent index): their writes never hide earlier ones."""
    if not times:
        return []
    space = reads.get_space()
    order = union_all([t.time for t in times], space)
    maps = _maps(writes)
    may = set(reduction_updates) | set(may_writes)
    may_w = union_all([m for m in maps if m.get_tuple_name(isl.dim_type.in_) in may], space)
    must_w = union_all([m for m in maps if m.get_tuple_name(isl.dim_type.in_) not in may],
                       space)

    def flow(sink, must, may, kill=None) -> isl.UnionMap:
        ai = isl.UnionAccessInfo.from_sink(sink).set_must_source(must).set_may_source(may)
        if kill is not None:
            ai = ai.set_kill(kill)
        return ai.set_schedule_map(order).compute_flow().get_may_dependence()

    empty = isl.UnionMap.empty(space)
    if not may_writes and writes.reverse().is_single_valued():
        # every element has at most one writer: no WAW, and RAW/WAR pairs are the write and
        # the reads of one element on either side of it; no flow analysis is needed. The
        # order is compared per pair of statements that share an element, not as
        # `order.lex_lt_union_map(order)`, which relates every pair of statements (n^2 maps
        # for n statements, most of them thrown away by the intersection)
        time = {t.stmt.name: t.time for t in times}
        raw, war = [], []
        for m in _maps(writes.apply_range(reads.reverse())):    # write -> read of its element
            w = m.get_tuple_name(isl.dim_type.in_)
            r = m.get_tuple_name(isl.dim_type.out)
            raw.append(m.intersect(time[w].lex_lt_map(time[r])))
            war.append(m.reverse().intersect(time[r].lex_lt_map(time[w])))
        found = (("RAW", union_all(raw, space)), ("WAR", union_all(war, space)))
    else:
        found = (("RAW", flow(reads, must_w, may_w)),
                 ("WAR", flow(writes, empty, reads, kill=must_w)),
                 ("WAW", flow(writes, must_w, may_w)))
    out: list[Dependence] = []
    for kind, u in found:
        for m in _maps(u):
            src = m.get_tuple_name(isl.dim_type.in_)
            dst = m.get_tuple_name(isl.dim_type.out)
            if src == dst and src in reduction_updates:
                same = m
                for d in range(info[src].n_spatial):
                    same = same.equate(isl.dim_type.in_, d, isl.dim_type.out, d)
                rest = m.subtract(same)
                if not same.is_empty():
                    out.append(Dependence(kind, src, dst, same.coalesce(), True))
                if not rest.is_empty():
                    out.append(Dependence(kind, src, dst, rest.coalesce()))
            else:
                out.append(Dependence(kind, src, dst, m.coalesce()))
    return out


# ------------------------------------------------------------------------------ witness
def _point_values(s: isl.Set, p: isl.Point) -> list[int]:
    return [p.get_coordinate_val(isl.dim_type.set, d).to_python()
            for d in range(s.dim(isl.dim_type.set))]


def pick_pair(rel: isl.Map) -> tuple[dict[str, int], list[int], list[int]]:
    """One pair of `rel`, with the sizes fixed to their smallest values first."""
    w = rel.wrap()
    sizes: dict[str, int] = {}
    npar = w.dim(isl.dim_type.param)
    if npar:
        ps = w.params()
        ps = ps.move_dims(isl.dim_type.set, 0, isl.dim_type.param, 0, npar).lexmin()
        vals = _point_values(ps, ps.sample_point())
        for k, v in enumerate(vals):
            sizes[w.get_dim_name(isl.dim_type.param, k)] = v
            w = w.fix_val(isl.dim_type.param, k, isl.Val(v))
    w = w.lexmin()
    vals = _point_values(w, w.sample_point())
    n_src = rel.dim(isl.dim_type.in_)
    return sizes, vals[:n_src], vals[n_src:]


def image_of(m: isl.Map, point: list[int], sizes: dict[str, int]) -> list[int]:
    """One point of `m`'s image of the domain point `point`, with the sizes fixed."""
    for k in range(m.dim(isl.dim_type.param)):
        name = m.get_dim_name(isl.dim_type.param, k)
        if name in sizes:
            m = m.fix_val(isl.dim_type.param, k, isl.Val(sizes[name]))
    for d, v in enumerate(point):
        m = m.fix_val(isl.dim_type.in_, d, isl.Val(v))
    img = m.range()
    return _point_values(img, img.sample_point())


def _loop_values(ts: TimedStatement, point: list[int], sizes: dict[str, int]) -> dict[str, int]:
    t = image_of(ts.time, point, sizes)
    return {lp.name: t[2 + 2 * li] for li, lp in enumerate(ts.loops)}


HIDDEN = "tl__"  # internal dimensions (a compute_at prefix), not shown to users


def _shown(dims, vals) -> dict[str, int]:
    return {d: v for d, v in zip(dims, vals) if not d.startswith(HIDDEN)}


def _fmt(label: str, dims, vals) -> str:
    return f"{label}[{', '.join(f'{d}={v}' for d, v in _shown(dims, vals).items())}]"


def _fmt_loops(loops: dict[str, int]) -> str:
    return ", ".join(f"{k}={v}" for k, v in loops.items())


def _element(dep: Dependence, sizes, src, dst, reads, writes) -> str:
    """The buffer element through which `dst` depends on `src`, as text."""
    def inst(name, vals):
        text = ", ".join(f"{v}" for v in vals)
        ctx = " and ".join(f"{k} = {v}" for k, v in sizes.items())
        pre = f"[{', '.join(sizes)}] -> " if sizes else ""
        ctx = f" : {ctx}" if ctx else ""
        return isl.UnionSet(f"{pre}{{ {name}[{text}]{ctx} }}")

    a = reads if dep.kind == "WAR" else writes
    b = writes if dep.kind in ("WAR", "WAW") else reads
    ea = inst(dep.src, src).apply(a)
    eb = inst(dep.dst, dst).apply(b)
    common = ea.intersect(eb)
    if common.is_empty():
        return "an element"
    s = isl.Set.from_union_set(common) if common.n_set() == 1 else None
    if s is None:
        return "an element"
    vals = _point_values(s, s.sample_point())
    return f"{s.get_tuple_name()}[{', '.join(map(str, vals))}]"


def _describe(dep: Dependence, src_txt: str, dst_txt: str, elem: str) -> str:
    if dep.kind == "RAW":
        return f"{dst_txt} reads {elem} written by {src_txt} (RAW)"
    if dep.kind == "WAR":
        return f"{dst_txt} overwrites {elem}, which {src_txt} reads first (WAR)"
    return f"{dst_txt} overwrites {elem}, which {src_txt} wrote first (WAW)"


def _distance_hint(dep: Dependence, info, src, dst) -> str:
    si, di = info[dep.src], info[dep.dst]
    if si.stage != di.stage:
        return ""
    n = min(len(src), len(dst))
    keep = [k for k in range(n) if not di.dims[k].startswith(HIDDEN)]
    dist = [dst[k] - src[k] for k in keep]
    dims = [di.dims[k] for k in keep]
    n = len(keep)
    text = (f" The dependence distance is ({', '.join(map(str, dist))}) in "
            f"({', '.join(dims)}).")
    for a in range(n):
        if dist[a] < 0:
            for b in range(a):
                if dist[b] > 0:
                    f = (-dist[a] + dist[b] - 1) // dist[b]
                    return text + (f" skew({dims[b]}, {dims[a]}, factor={f}) before splitting "
                                   "or reordering makes it non-negative in every loop.")
    return text


def _prefix(m: isl.Map, keep: int) -> isl.Map:
    n = m.dim(isl.dim_type.out)
    return m.project_out(isl.dim_type.out, keep, n - keep)


def _raise(primitive: str, stage: str, dep: Dependence, rel: isl.Map, info, times, reads,
           writes, why: str, hint) -> None:
    """Raise with one pair of `rel`; `hint(src, dst)` gives the advice for that pair."""
    sizes, src, dst = pick_pair(rel)
    si, di = info[dep.src], info[dep.dst]
    ls = _loop_values(times[dep.src], src, sizes)
    ld = _loop_values(times[dep.dst], dst, sizes)
    src_txt, dst_txt = _fmt(si.label, si.dims, src), _fmt(di.label, di.dims, dst)
    elem = _element(dep, sizes, src, dst, reads, writes)
    msg = f"{primitive} on stage {stage}: {_describe(dep, src_txt, dst_txt, elem)}"
    msg += why.format(src=src_txt, dst=dst_txt, ls=_fmt_loops(ls), ld=_fmt_loops(ld))
    if sizes:
        msg += f" (with {', '.join(f'{k}={v}' for k, v in sizes.items())})"
    msg += "." + hint(src, dst)
    w = Witness(dep.kind, _shown(si.dims, src), _shown(di.dims, dst), dep.src, dep.dst,
                sizes, ls, ld)
    raise IllegalScheduleError(msg, w)


def refuse_self_dependence(primitive: str, stage: str, deps: list[Dependence], info,
                           times: list[TimedStatement], reads, writes, why: str) -> None:
    """Raise IllegalScheduleError with a witness of `stage`'s dependence on its own earlier
    iterations (RAW), when it has one: a change that cannot keep any such dependence (a
    copy of a recurrence's output made before the recurrence runs). `why` is appended."""
    by_name = {t.stmt.name: t for t in times}
    for dep in deps:
        if dep.kind == "RAW" and info[dep.src].stage == stage == info[dep.dst].stage and \
                not dep.reduction and not dep.rel.is_empty():
            _raise(primitive, stage, dep, dep.rel, info, by_name, reads, writes, why,
                   lambda p, q: "")


_PARALLEL_KINDS = (LoopKind.PARALLEL, LoopKind.VECTORIZED, LoopKind.GPU_BLOCK,
                   LoopKind.GPU_THREAD)


def check_legality(primitive: str, stage: str, times: list[TimedStatement],
                   deps: list[Dependence], info: dict[str, StatementInfo],
                   reads: isl.UnionMap, writes: isl.UnionMap,
                   touching: set[str] | None = None) -> None:
    """Raise IllegalScheduleError when `times` break a dependence touching one of the
    stages in `touching` (default: `stage`; any when both are None). `stage` names the
    stage in the messages."""
    by_name = {t.stmt.name: t for t in times}
    if touching is None and stage is not None:
        touching = {stage}
    mine = [d for d in deps if touching is None or info[d.src].stage in touching
            or info[d.dst].stage in touching]
    for dep in mine:
        if dep.reduction:
            continue
        ta, tb = by_name[dep.src].time, by_name[dep.dst].time
        bad = dep.rel.intersect(ta.lex_ge_map(tb))
        if not bad.is_empty():
            _raise(primitive, stage, dep, bad, info, by_name, reads, writes,
                   ", but the new order runs {dst} (loops {ld}) no later than {src} "
                   "(loops {ls})", lambda p, q, dep=dep: _distance_hint(dep, info, p, q))
    for dep in mine:
        if info[dep.src].stage != info[dep.dst].stage or (
                touching is not None and info[dep.src].stage not in touching):
            continue  # deps between stages are ordered by the stages' positions
        a, b = by_name[dep.src], by_name[dep.dst]
        for li, lp in enumerate(a.loops):
            if lp.kind not in _PARALLEL_KINDS:
                continue
            if li >= len(b.loops) or b.loops[li].name != lp.name:
                continue
            p = 2 + 2 * li
            same_before = _prefix(a.time, p).apply_range(_prefix(b.time, p).reverse())
            same_at = _prefix(a.time, p + 1).apply_range(_prefix(b.time, p + 1).reverse())
            carried = dep.rel.intersect(same_before).subtract(same_at)
            if carried.is_empty():
                continue
            if dep.reduction and lp.kind is LoopKind.GPU_THREAD:
                continue    # a reduction across the block's threads (ir/gpu_block.py)
            if lp.atomic and dep.src == dep.dst and b.loops[li].atomic:
                # an update stage's atomic loop: its one statement is an associative and
                # commutative read-modify-write, done indivisibly (schedule/update.py)
                continue
            what = {LoopKind.PARALLEL: "parallel", LoopKind.VECTORIZED: "vectorized"}.get(
                lp.kind, "bound to a GPU index")
            if dep.reduction:
                red = info[dep.src].dims[info[dep.src].n_spatial:]
                text = (f" {lp.name} runs updates of one reduction (over {', '.join(red)}); "
                        f"use s.rfactor({info[dep.src].label}, {red[0]}) to reduce in "
                        "parallel, or make a spatial loop parallel instead.")

                def hint(p, q, text=text):
                    return text
            else:
                wave = "" if len(info[dep.dst].dims) < 2 else (
                    " Only a loop that carries no dependence can be parallel: skew the loops "
                    "and reorder them so an outer loop carries every dependence (a "
                    "wavefront); then the inner loop is parallel.")

                def hint(p, q, dep=dep, wave=wave):
                    return _distance_hint(dep, info, p, q) + wave
            _raise(primitive, stage, dep, carried, info, by_name, reads, writes,
                   f", but {lp.name} is {what}, so {{dst}} (loops {{ld}}) may run at the "
                   "same time as {src} (loops {ls})", hint)


def check_self_read(label: str, read: isl.Map, writer: isl.Map, project: isl.Map) -> None:
    """A recurrence may read only elements that the declared order has already computed.

    `read` maps instances to elements of the stage's own output, `writer` maps the
    instance that finishes an element (pure statement or init) to it, `project` maps a read
    instance to the spatial point it computes.
    """
    writer_of = writer.reverse()
    dom = writer.domain()
    later = dom.lex_le_set(dom)  # { a -> b : a <=lex b }
    bad = read.apply_range(writer_of).intersect(project.apply_range(later))
    if bad.is_empty():
        return
    sizes, p, q = pick_pair(bad)
    dims = [read.get_dim_name(isl.dim_type.in_, d) for d in range(len(p))]
    at = ", ".join(f"{d}={v}" for d, v in zip(dims, p))
    with_sizes = f" (with {', '.join(f'{k}={v}' for k, v in sizes.items())})" if sizes else ""
    raise TensorlangError(
        f"recurrence {label}: {label}[{at}] reads {label}[{', '.join(map(str, q))}]"
        f"{with_sizes}, which the declared order (lexicographic in the stage's axes) has "
        "not computed yet; a recurrence may read only earlier elements"
    )
