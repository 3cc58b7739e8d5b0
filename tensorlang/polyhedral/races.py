"""Data races between the threads of a GPU kernel, found exactly with isl.

A CUDA kernel runs its bound loops (`blockIdx`, `threadIdx`) concurrently. Two instances
that touch the same memory location, at least one of them writing, are ordered only when:

- they run in the same thread (program order: the time map without the bound loops), or
- they run in the same block and a barrier instance lies between them in the block's time
  (the time map without the thread loops; every thread of the block meets every barrier
  instance, which `placement._barriers` guarantees by construction).

Instances of different blocks are never ordered within one launch. A location is an element
of a tensor in global memory, or a position in a block's shared tile (block indices and the
element minus the tile's corner: the same position holds different elements in successive
iterations of the loop the tile is computed in, which is what makes a barrier before the next
copy necessary). Registers ("local" buffers) belong to one thread and never race.

A pair that is ordered by neither rule is refused with an `IllegalScheduleError` naming the
two threads, their blocks and the element.
"""

from __future__ import annotations

import islpy as isl

from ..errors import IllegalScheduleError
from ..ir.stmt import LoopKind
from .deps import Witness, _loop_values, image_of, pick_pair
from .placement import PREFIX, Entry, Placement, loop_prefix, tile_positions


def _project_time(time: isl.Map, dims: list[int]) -> isl.Map:
    for d in sorted(dims, reverse=True):
        time = time.project_out(isl.dim_type.out, d, 1)
    return time


def _keep_time(time: isl.Map, keep: list[int]) -> isl.Map:
    n = time.dim(isl.dim_type.out)
    return _project_time(time, [d for d in range(n) if d not in keep])


def _bound(e: Entry, kind: LoopKind) -> list[tuple[int, str]]:
    return [(2 + 2 * d, lp.thread_tag) for d, lp in enumerate(e.loops) if lp.kind is kind]


def _shared_location(L, e: Entry, acc: isl.Map, blocks: list[int]) -> isl.Map:
    """instance -> [block loop values..., position in the tile]."""
    k = L.n_prefix
    pre = loop_prefix(e.lmap, k)
    both = pre.flat_range_product(acc.reset_tuple_id(isl.dim_type.out))   # inst -> [p, x]
    sp = both.range().get_space()
    ls = isl.LocalSpace.from_space(sp)
    cols = [isl.PwAff.from_aff(isl.Aff.var_on_domain(ls, isl.dim_type.set, (t - 2) // 2))
            for t in blocks] + tile_positions(sp, k, L.offsets)
    outs = None
    for c in cols:
        m = isl.Map.from_pw_aff(c)
        outs = m if outs is None else outs.flat_range_product(m)
    return both.apply_range(outs)


def check_races(prog, pl: Placement, times) -> None:
    """Refuse a kernel in which two threads touch one location, one of them writing, with
    no barrier between them (or from two blocks). `times`: the timed statements of
    `pl.entries + pl.barriers`, in that order."""
    shared = [L for L in pl.locals if L.threads]
    if not shared:
        return
    items = pl.entries + pl.barriers
    tmap = {e.stmt.name: t.time for e, t in zip(items, times)}
    tinfo = {e.stmt.name: t for e, t in zip(items, times)}
    for kernel in sorted({L.scope[0] for L in shared}):
        ents = [e for e in pl.entries if e.path[0] == kernel]
        bars = [e for e in pl.barriers if e.path[0] == kernel]
        _check_kernel(prog, pl, shared, ents, bars, tmap, tinfo)


def _check_kernel(prog, pl, shared, ents, bars, tmap, tinfo) -> None:
    threads = sorted({x for e in ents for x in _bound(e, LoopKind.GPU_THREAD)})
    blocks = sorted({x for e in ents for x in _bound(e, LoopKind.GPU_BLOCK)})
    if not threads:
        return
    tdims = [t for t, _ in threads]
    bdims = [t for t, _ in blocks]
    # statements outside the bound loops are refused by the code generator
    ents = [e for e in ents if sorted(_bound(e, LoopKind.GPU_THREAD)) == threads
            and sorted(_bound(e, LoopKind.GPU_BLOCK)) == blocks]
    local_ids = {id(L.tensor): L for L in pl.locals}
    # locations: ("g", tensor id) for global memory, ("s", L) for a shared tile
    access: dict[object, list[tuple[Entry, isl.Map, bool]]] = {}
    for e in ents:
        for writes, rel in ((False, e.reads), (True, e.writes)):
            for tid, acc in rel.items():
                L = local_ids.get(tid)
                if L is not None and not L.threads:
                    continue                      # registers of one thread
                if L is not None:
                    key = ("s", id(L))
                    loc = _shared_location(L, e, acc, bdims)
                else:
                    key = ("g", tid)
                    loc = acc.reset_tuple_id(isl.dim_type.out)
                access.setdefault(key, []).append((e, loc, writes, acc))
    bt = None
    for b in bars:
        r = _project_time(tmap[b.stmt.name], tdims).range()
        bt = r if bt is None else bt.union(r)
    sep = None
    if bt is not None:
        lt = isl.Map.lex_lt(bt.get_space())
        sep = lt.intersect_range(bt).apply_range(lt.intersect_domain(bt))
        sep = sep.union(sep.reverse())
    for accs in access.values():
        for a, loc_a, wa, acc_a in accs:
            if not wa:
                continue
            for b, loc_b, wb, acc_b in accs:
                ta, tb = tmap[a.stmt.name], tmap[b.stmt.name]
                pairs = loc_a.apply_range(loc_b.reverse())
                if pairs.is_empty():
                    continue
                who = _keep_time(ta, bdims + tdims)
                who_b = _keep_time(tb, bdims + tdims)
                pairs = pairs.subtract(who.apply_range(who_b.reverse()))
                if pairs.is_empty():
                    continue
                blk = _keep_time(ta, bdims).apply_range(_keep_time(tb, bdims).reverse())
                other_block = pairs.subtract(blk)
                if not other_block.is_empty():
                    _raise(prog, a, b, acc_a, acc_b, wb, other_block, tinfo, False)
                if sep is not None:
                    safe = _project_time(ta, tdims).apply_range(sep).apply_range(
                        _project_time(tb, tdims).reverse())
                    pairs = pairs.subtract(safe)
                if not pairs.is_empty():
                    _raise(prog, a, b, acc_a, acc_b, wb, pairs, tinfo, True)


def _bound_values(ts, point, sizes, kind) -> dict[str, int]:
    vals = _loop_values(ts, point, sizes)
    return {lp.thread_tag: vals[lp.name] for lp in ts.loops if lp.kind is kind}


def _raise(prog, a: Entry, b: Entry, acc_a, acc_b, b_writes, rel, tinfo, same_block):
    sizes, pa, pb = pick_pair(rel)
    ta, tb = tinfo[a.stmt.name], tinfo[b.stmt.name]

    def fmt(d):
        return ", ".join(f"{k}={v}" for k, v in sorted(d.items()))

    def inst(e, pt):
        shown = {d: v for d, v in zip(e.stmt.dims, pt) if not d.startswith(PREFIX)}
        return prog.info[e.orig].label, shown

    la, ia = inst(a, pa)
    lb, ib = inst(b, pb)
    tensor = acc_a.get_tuple_name(isl.dim_type.out)
    ea, eb = image_of(acc_a, pa, sizes), image_of(acc_b, pb, sizes)
    thr_a = _bound_values(ta, pa, sizes, LoopKind.GPU_THREAD)
    thr_b = _bound_values(tb, pb, sizes, LoopKind.GPU_THREAD)
    blk_a = _bound_values(ta, pa, sizes, LoopKind.GPU_BLOCK)
    blk_b = _bound_values(tb, pb, sizes, LoopKind.GPU_BLOCK)
    where = f" (with {fmt(sizes)})" if sizes else ""
    verb = "writes" if b_writes else "reads"
    elem_a = f"{tensor}[{', '.join(map(str, ea))}]"
    elem_b = f"{tensor}[{', '.join(map(str, eb))}]"
    first = _block_time(ta, pa, sizes) <= _block_time(tb, pb, sizes)
    if same_block:
        if ea == eb:
            what = f"{verb} it"
        else:
            what = (f"{verb} the same place of the shared tile "
                    f"{'later, holding' if first else 'earlier, when it held'} {elem_b}")
        msg = (f"missing barrier: thread ({fmt(thr_a)}) of block ({fmt(blk_a)}) writes "
               f"{elem_a} in {la}[{fmt(ia)}] and thread ({fmt(thr_b)}) of the same block "
               f"{what} in {lb}[{fmt(ib)}], with no barrier between them{where}; keep the "
               "barriers of the shared stage (no_sync() removes them) or give each thread "
               "only elements it wrote itself")
    else:
        msg = (f"race between blocks: block ({fmt(blk_a)}) writes "
               f"{tensor}[{', '.join(map(str, ea))}] in {la}[{fmt(ia)}] and block "
               f"({fmt(blk_b)}) {verb} {'it' if ea == eb else elem_b} in {lb}[{fmt(ib)}]"
               f"{where}; blocks of one "
               "launch cannot wait for each other, so no barrier can order them. Bind "
               "loops so that each element is touched by one block")
    if b_writes:
        kind = "WAW"
    else:
        kind = "RAW" if first else "WAR"
    if first:
        w = Witness(kind, ia, ib, la, lb, sizes, thr_a, thr_b)
    else:
        w = Witness(kind, ib, ia, lb, la, sizes, thr_b, thr_a)
    raise IllegalScheduleError(msg, w)


def _block_time(ts, point, sizes) -> list[int]:
    """The instance's time vector without its thread loops (the block's order)."""
    t = image_of(ts.time, point, sizes)
    thread = {2 + 2 * d for d, lp in enumerate(ts.loops) if lp.kind is LoopKind.GPU_THREAD}
    return [v for d, v in enumerate(t) if d not in thread]
