"""Where the buffer of a stage computed at a loop lives, and how small it may be: store_at,
the sliding window and storage folding (Halide's lesson 08).

A stage P computed at loop `li` of a consumer runs, at each value p of the consumer's loops
0..li (the compute prefix), over its footprint F(p) (see placement). Stored at an outer loop
(`store_at`, or at root with `store_root`), its buffer lives at each value q of the shorter
store prefix and holds the union of F(q, r) over the loops r between the two levels. Values
computed in an earlier iteration of r are still there, so iteration p computes only

    C(p) = F(p) - union of F(p') over p' earlier than p with the same store prefix

(isl's exact difference), each value once per store iteration: the sliding window. As in
Halide, the window slides only while the footprint advances monotonically in the order of
the loops between the two levels (its least and greatest index along every dimension never
go back); otherwise each iteration computes its whole footprint, as compute_at does, and
TL_DEBUG=1 says so.

Folding dimension d by f stores element x at x_d mod f: a circular buffer of the rows in
flight. It is correct when no element is overwritten while it is still to be read. With
isl: for every read of x1 at time tr, its reaching write at tw1 (the last write of x1
before tr); x1 is live in (tw1, tr). A write of another element x2 at a time in that
interval collides when x2 and x1 share the folded slot. The smallest fold is the least f
that divides no difference x2_d - x1_d of a colliding pair (other dimensions equal).
"""

from __future__ import annotations

from dataclasses import dataclass

import islpy as isl

from ..config import debug_print
from ..errors import IllegalScheduleError, ScheduleError
from ..ir.stmt import LoopKind
from .deps import Witness, pick_pair

ROOT = "root"


# ------------------------------------------------------------------------ store level
def store_depth(st, A, li: int, label: str, clabel: str, loopname: str) -> int:
    """How many of the consumer statement A's loops the buffer lives in (0: at root);
    li + 1 when the stage is stored where it is computed."""
    if st.store is None:
        return li + 1
    if st.store == ROOT:
        return 0
    sid, sloop = st.store
    if sid != st.attach[0]:
        raise NotImplementedError(
            f"store_at({label}, {sid}.{sloop}): {label} is computed at {clabel}.{loopname}; "
            "storing it at a loop of another stage is not supported yet: store it at a loop "
            f"of {clabel} or at root")
    own = [lp.name for lp in A.loops[A.own_start:li + 1]]
    if sloop not in own:
        raise ScheduleError(
            f"store_at({label}, {clabel}.{sloop}): {sloop} is not a loop of {clabel} that "
            f"encloses {loopname}, where {label} is computed (those are {own}); a buffer is "
            "stored at the compute loop or outside it")
    return A.own_start + own.index(sloop) + 1


def store_footprint(foot: isl.Map, s: int) -> isl.Map:
    """Store prefix -> every element computed in one store iteration (the union over the
    loops between the store and compute levels)."""
    k = foot.dim(isl.dim_type.in_)
    return foot.project_out(isl.dim_type.in_, s, k - s).coalesce()


def earlier(prefixes: isl.Set, s: int) -> isl.Map:
    """p -> p': the compute prefixes run before p in the same store iteration."""
    before = prefixes.lex_gt_set(prefixes)
    for j in range(s):
        before = before.equate(isl.dim_type.in_, j, isl.dim_type.out, j)
    return before


def _advances(foot: isl.Map, before: isl.Map) -> bool:
    """Whether the footprint's bounds along every dimension move one way only (never back)
    from each compute prefix to the next."""
    space = isl.Map("{ [v] -> [w] }").align_params(foot.get_space()).get_space()
    up = isl.Map("{ [v] -> [w] : w > v }").align_params(space)      # earlier bound higher
    down = isl.Map("{ [v] -> [w] : w < v }").align_params(space)
    for d in range(foot.dim(isl.dim_type.out)):
        pairs = []
        for bound in (foot.dim_min(d), foot.dim_max(d)):
            m = isl.Map.from_pw_aff(bound)
            pairs.append(m.reverse().apply_range(before.apply_range(m)))
        if not all(p.intersect(up).is_empty() for p in pairs) and \
                not all(p.intersect(down).is_empty() for p in pairs):
            return False
    return True


def sliding_region(foot: isl.Map, s: int, label: str) -> tuple[isl.Map, bool]:
    """The elements each compute prefix computes when the buffer lives at store depth s:
    its footprint less what earlier iterations of the same store iteration computed, or
    the whole footprint where the window does not advance monotonically; and whether the
    window slides (each element computed once per store iteration)."""
    k = foot.dim(isl.dim_type.in_)
    if s >= k:
        return foot, False
    before = earlier(foot.domain(), s)
    if before.is_empty():
        return foot, True
    if not _advances(foot, before):
        debug_print(1, "store_at", f"{label}: the footprint does not advance monotonically "
                    "over the loops between the store and compute levels; each iteration "
                    "recomputes its whole footprint (no sliding window)")
        return foot, False
    out = foot.subtract(before.apply_range(foot)).coalesce()
    debug_print(1, "store_at", f"{label}: sliding window over {k - s} loop(s); computed per "
                f"iteration: {out}")
    return out, True


def shared_between(foot: isl.Map, s: int, loops, label: str, clabel: str) -> None:
    """Iterations of the loops between the store and compute levels share the buffer:
    under a sliding window one computes what a later one reads, else both write the
    elements their footprints share. Refused when one of those loops runs its iterations
    at once (parallel, vector, GPU) and two of its iterations use a common element, with
    those two iterations."""
    k = foot.dim(isl.dim_type.in_)
    for d in range(s, k):
        lp = loops[d]
        if lp.kind in (LoopKind.SERIAL, LoopKind.UNROLLED):
            continue
        pairs = earlier(foot.domain(), s).intersect(foot.apply_range(foot.reverse()))
        pairs = pairs.subtract(pairs.equate(isl.dim_type.in_, d, isl.dim_type.out, d))
        if pairs.is_empty():
            continue
        sizes, a, b = pick_pair(pairs)
        names = [x.name for x in loops[:k]]
        fa = ", ".join(f"{n}={v}" for n, v in zip(names, a))
        fb = ", ".join(f"{n}={v}" for n, v in zip(names, b))
        where = f" (with {', '.join(f'{x}={v}' for x, v in sizes.items())})" if sizes else ""
        raise IllegalScheduleError(
            f"store_at({label}): loop {lp.name} of {clabel} runs its iterations at once "
            f"({lp.kind.name.lower()}), but it lies between {label}'s store and compute "
            f"levels: the iterations {clabel}[{fb}] and {clabel}[{fa}] use the same elements "
            f"of {label} in the one buffer, computed once for both (or by both){where}; keep "
            f"that loop serial, or store {label} inside it",
            Witness("RAW", dict(zip(names, b)), dict(zip(names, a)), clabel, clabel, sizes,
                    {}, {}))


# ------------------------------------------------------------------------------ folds
@dataclass(frozen=True)
class Liveness:
    """The values of one buffer in flight: `collisions` maps x2 -> x1 when x2 is written
    while x1 is still to be read (x1 != x2, both elements of the producer)."""

    collisions: isl.Map
    n_dims: int


def liveness(entries, times, tid: int, context: isl.Set) -> Liveness | None:
    """The live values of the tensor with id `tid` under the placed `entries`, whose time
    maps are `times` (same order); None when nothing writes it."""
    W = R = None
    for e, ts in zip(entries, times):
        t = ts.time.intersect_domain(ts.stmt.domain)
        if tid in e.writes:
            w = e.writes[tid].reverse().apply_range(t)        # element -> write time
            W = w if W is None else W.union(w)
        if tid in e.reads:
            r = e.reads[tid].reverse().apply_range(t)         # element -> read time
            R = r if R is None else R.union(r)
    if W is None:
        return None
    n = W.dim(isl.dim_type.in_)
    if R is None:
        return Liveness(isl.Map.empty(isl.Space.map_from_set(W.domain().get_space())), n)
    W = W.intersect_params(context)
    R = R.intersect_params(context)
    tspace = isl.Set.universe(W.range().get_space())
    later = tspace.lex_lt_set(tspace)                     # t -> t' : t < t'
    reads = R.wrap().unwrap()                             # (element, read time) pairs
    before_read = reads.range_map().apply_range(later.reverse())   # [x -> tr] -> t < tr
    reach = reads.domain_map().apply_range(W).intersect(before_read).lexmax()
    live = before_read.intersect(reach.apply_range(later))          # [x1 -> tr] -> t
    live_at = live.reverse().apply_range(reads.domain_map())        # t -> x1 live at t
    coll = W.apply_range(live_at)                                   # x2 -> x1
    coll = coll.subtract(isl.Map.identity(coll.get_space()))
    return Liveness(coll.coalesce(), n)


def _deltas(live: Liveness, folds: dict[int, int]) -> isl.Set:
    """x1 - x2 over the colliding pairs that share a slot under `folds` (dimension ->
    factor; every other dimension equal)."""
    d = live.collisions.deltas()
    names = [f"d{j}" for j in range(live.n_dims)]
    conds = []
    for j, nm in enumerate(names):
        if j in folds:
            conds.append(f"exists (m{j} : {nm} = {folds[j]} m{j})")
        else:
            conds.append(f"{nm} = 0")
    same = _like(d, f"[{', '.join(names)}] : {' and '.join(conds) or '1 = 1'}")
    return d.intersect(same).subtract(_like(d, f"[{', '.join('0' for _ in names)}]"))


def _like(d: isl.Set, text: str) -> isl.Set:
    """The set `{ text }` in the space of the set of differences `d` (its tuple name, its
    parameters)."""
    name = d.get_tuple_name() if d.has_tuple_name() else ""
    return isl.Set(f"{{ {name}{text} }}").align_params(d.get_space())


def smallest_fold(live: Liveness, dim: int) -> int | None:
    """The least factor that folds dimension `dim` (the others unfolded) without a
    collision; None when the distance between colliding elements grows with the sizes."""
    d = live.collisions.deltas()
    n = live.n_dims
    names = [f"d{j}" for j in range(n)]
    others = " and ".join(f"{nm} = 0" for j, nm in enumerate(names) if j != dim) or "1 = 1"
    d = d.intersect(_like(d, f"[{', '.join(names)}] : {others}"))
    d = d.subtract(_like(d, f"[{', '.join('0' for _ in names)}]"))
    if d.is_empty():
        return 1
    aff = isl.Aff.var_on_domain(isl.LocalSpace.from_space(d.get_space()), isl.dim_type.set,
                                dim)
    hi, lo = d.max_val(aff), d.min_val(aff)
    if not (hi.is_int() and lo.is_int()):
        return None
    bound = max(abs(hi.to_python()), abs(lo.to_python()))
    for f in range(1, bound + 2):
        if _deltas(live, {dim: f}).is_empty():
            return f
    return bound + 1


def check_folds(prog, pl, times, states) -> None:
    """Raise IllegalScheduleError when a folded buffer would overwrite a value still to be
    read, with the two elements that collide."""
    for L in pl.locals:
        st = states[L.stage]
        if not st.folds:
            continue
        label = prog.stage_label(L.stage)
        live = liveness(pl.entries, times, id(L.tensor), prog.context)
        if live is None:
            continue
        folds = dict(st.folds)
        bad = _deltas(live, folds)
        if bad.is_empty():
            continue
        names = list(st.axes[:st.n_spatial])
        elem = live.collisions.get_tuple_name(isl.dim_type.in_)
        xs = [f"a{j}" for j in range(live.n_dims)]
        ys = [f"b{j}" for j in range(live.n_dims)]
        conds = [f"exists (m{j} : b{j} - a{j} = {folds[j]} m{j})" if j in folds
                 else f"b{j} = a{j}" for j in range(live.n_dims)]
        pair = isl.Map(f"{{ {elem}[{', '.join(xs)}] -> {elem}[{', '.join(ys)}] : "
                       f"{' and '.join(conds)} }}").align_params(live.collisions.get_space())
        sizes, x2, x1 = pick_pair(live.collisions.intersect(pair))
        d0 = next(iter(folds))
        fold_call = f"fold_storage({label}, {names[d0]}, {folds[d0]})"
        best = {names[d]: smallest_fold(live, d) for d in folds}
        where = ", ".join(f"{k}={v}" for k, v in sizes.items())
        p1 = ", ".join(f"{n}={v}" for n, v in zip(names, x1))
        p2 = ", ".join(f"{n}={v}" for n, v in zip(names, x2))
        slot = ", ".join(f"{names[d]} mod {f} = {x1[d] % f}" for d, f in folds.items())
        hint = "; ".join(f"the smallest fold of {k} is {v}" if v is not None else
                         f"no constant fold of {k} is correct (the values in flight grow "
                         "with the sizes)" for k, v in best.items())
        raise IllegalScheduleError(
            f"{fold_call}: {label}[{p1}] is still to be read when {label}[{p2}] is written "
            f"to the same slot ({slot}){f' (with {where})' if where else ''}: both values "
            f"are live at once; {hint}",
            Witness("fold", dict(zip(names, x1)), dict(zip(names, x2)), label, label, sizes,
                    {}, {}))
