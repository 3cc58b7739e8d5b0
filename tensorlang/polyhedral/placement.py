"""Where each stage runs: at root, or inside a consumer's loop (compute_at) over its footprint.

Every statement gets a *path* and a *loop map*. Its time is `[path0, path1, l0, path2, l1,
...]`: the loop map gives the loop values `l*` of an instance, and the path gives the
constants that order statements sharing a loop prefix (path0 orders stages at root).

A stage P computed at loop `li` of a consumer statement A runs, for each value `p` of A's
loops `0..li` (the *prefix*), over its *footprint* F(p): the exact set of P's elements that
the statements inside that prefix read (an isl map prefix -> element, the union of their
read relations). P's statements are *expanded*: their instances become `P'[p, x]` with x in
F(p), so an element read at two prefixes is computed twice (the schedule's choice). P's
values live in a local buffer whose shape is the footprint's bounding box (a constant when the
footprint is bounded, else a size expression) and whose index is shifted by the box's lower
corner at p, a piecewise quasi-affine function of the prefix computed by isl.

Readers of P outside the prefix, a recurrence P whose reads leave F(p), and placements into a
loop of a stage that does not read P are refused with a concrete instance.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import islpy as isl

from ..errors import IllegalScheduleError, ScheduleError
from ..ir.dtype import int64
from ..ir.expr import Const, Expr, Load, Var
from ..ir.simplify import simplify
from ..ir.stmt import Allocate, Barrier, Buffer, For, If, Let, LoopKind, Seq, Stmt, Store
from ..ir.visit import map_expr, map_stmt, walk_stmt
from .deps import Witness, pick_pair
from .isl_expr import pw_aff_expr, set_expr  # noqa: F401 (set_expr: placement's API)
from .model import Loop, StageState, Statement
from .storage import shared_between, sliding_region, store_depth, store_footprint
from .transform import pw_extremes
from ..te.tensor import Tensor

PREFIX = "tl__p"  # names of the prefix dimensions of expanded statements


@dataclass
class Entry:
    """One statement while placing: its (possibly expanded) statement, path and loops."""

    stmt: Statement
    orig: str                 # the statement's name in the program
    path: list[int]           # [stage position, b0, b1, ...]; b_k comes before loop k
    lmap: isl.Map             # stmt instance -> loop values (anonymous range)
    loops: tuple[Loop, ...]
    own_start: int = 0        # loops[own_start:] are the stage's own loops
    expand: isl.Map | None = None  # program instance -> expanded instance
    reads: dict[int, isl.Map] = field(default_factory=dict)   # tensor id -> access map
    writes: dict[int, isl.Map] = field(default_factory=dict)

    def padded(self, n: int) -> list[int]:
        return self.path + [0] * max(0, n - len(self.path))


@dataclass(frozen=True)
class LocalBuffer:
    """A producer's storage inside its consumer's loop."""

    stage: str
    tensor: object            # the program's tensor (or accumulator) this buffer stands for
    buffer: Buffer
    n_prefix: int             # loops in the prefix
    scope: tuple[int, ...]    # path constants shared by the statements inside the prefix
    offsets: tuple[isl.PwAff, ...]   # prefix -> lower corner of the footprint, per dim
    footprint: isl.Map        # prefix -> element
    threads: tuple[int, ...] = ()    # prefix loops bound to threadIdx (a GPU block's
    copies: tuple[str, ...] = ()     # shared tile, loaded by all its threads: `copies`)
    extents: tuple[tuple[int, int], ...] = ()   # (thread loop, launch extent)
    folds: tuple[tuple[int, int], ...] = ()      # (dimension, factor): index x_d mod factor
    stored_outside: bool = False     # store_at a loop outside the compute loop (store_root)
    link: int | None = None          # loops shared by a writer and its readers (n_prefix)

    @property
    def time_dim(self) -> int:
        """The time dimension of the loop the buffer lives in."""
        return 2 * self.n_prefix


@dataclass
class Placement:
    entries: list[Entry]
    locals: list[LocalBuffer]
    barriers: list[Entry] = field(default_factory=list)   # GPU block barriers (codegen)

    def by_orig(self) -> dict[str, Entry]:
        return {e.orig: e for e in self.entries}


# ---------------------------------------------------------------------------- helpers
def loop_prefix(lmap: isl.Map, k: int) -> isl.Map:
    """The first k loop values of an instance."""
    n = lmap.dim(isl.dim_type.out)
    return lmap.project_out(isl.dim_type.out, k, n - k)


# --------------------------------------------------------------------------- placing
def place(prog, states: dict[str, StageState], base: list) -> Placement:
    """Place every stage (root or compute_at), expanding the statements of attached ones.

    `base` holds the root-level entries (path, loop map) of the program's statements.
    """
    entries: list[Entry] = list(base)
    for e in entries:
        e.reads = dict(prog.stmt_reads.get(e.orig, {}))
        e.writes = dict(prog.stmt_writes.get(e.orig, {}))
    locals_: list[LocalBuffer] = []
    for sid in reversed(prog.order):
        st = states[sid]
        if st.attach is not None:
            locals_.extend(_attach(prog, states, entries, sid, st))
    width = max((len(e.path) for e in entries), default=1)
    for e in entries:
        e.path = e.padded(width)
    for L in locals_:
        _rewrite_local(prog, entries, L)
    barriers: list[Entry] = []
    for L in locals_:
        if L.threads and states[L.stage].sync:
            barriers.extend(_barriers(prog, entries + barriers, L))
    return Placement(entries, locals_, barriers)


def _attach(prog, states, entries: list[Entry], sid: str, st: StageState) -> list[LocalBuffer]:
    cid, loopname = st.attach
    label = prog.stage_label(sid)
    clabel = prog.stage_label(cid)
    # the reference statement: one of the consumer's statements that runs inside the loop
    ref = None
    for e in entries:
        if prog.info[e.orig].stage != cid:
            continue
        own = [lp.name for lp in e.loops[e.own_start:]]
        if loopname in own:
            li = e.own_start + own.index(loopname)
            if ref is None or len(e.path) > len(ref[0].path):
                ref = (e, li)
    if ref is None:
        raise ScheduleError(f"compute_at({label}, {clabel}.{loopname}): {clabel} has no loop "
                            f"{loopname}")
    A, li = ref
    if A.loops[li].kind is LoopKind.VECTORIZED:
        raise ScheduleError(f"compute_at({label}, {clabel}.{loopname}): {loopname} is "
                            "vectorized; a stage cannot be computed inside a vector loop")
    k = li + 1
    scope = tuple(A.padded(li + 2)[:li + 2])
    out_id = id(prog.stage_output(sid))
    # every output of the stage (a tuple compute has several) is computed over one
    # footprint: the elements of any of them read inside the loop
    out_ids = [id(t) for t in prog.stage_tensors(sid) if isinstance(t, Tensor)]
    elem0 = prog.bufs[out_id].name
    mine = [e for e in entries if prog.info[e.orig].stage == sid]

    def in_scope(e: Entry) -> bool:
        return len(e.loops) >= k and tuple(e.padded(li + 2)[:li + 2]) == scope

    foot = None
    outside = []
    for e in entries:
        if prog.info[e.orig].stage == sid:
            continue
        rds = [e.reads[t] for t in out_ids if t in e.reads]
        if not rds:
            continue
        rd = rds[0].set_tuple_name(isl.dim_type.out, elem0)
        for r in rds[1:]:
            rd = rd.union(r.set_tuple_name(isl.dim_type.out, elem0))
        if rd.is_empty():
            continue
        if not in_scope(e):
            outside.append((e, rd))
            continue
        f = loop_prefix(e.lmap, k).reverse().apply_range(rd)
        foot = f if foot is None else foot.union(f)
    if foot is None:
        readers = list(dict.fromkeys(prog.info[e.orig].stage for e, _ in outside))
        if readers:
            # the stages between: attaching them first makes this one legal (TVM resolves
            # the attachments together; here they apply in order, so the message says which)
            first = readers[0]
            raise ScheduleError(
                f"compute_at({label}, {clabel}.{loopname}): {clabel} does not read {label} "
                f"directly; {', '.join(readers)} read{'s' if len(readers) == 1 else ''} it "
                f"and {'is' if len(readers) == 1 else 'are'} computed outside that loop. "
                f"Attach {'it' if len(readers) == 1 else 'them'} first — "
                f"s[{first!r}].compute_at(s[{clabel!r}], {loopname!r}) — then this stage")
        raise ScheduleError(f"compute_at({label}, {clabel}.{loopname}): {clabel} does not read "
                            f"{label} (nor does any stage computed inside that loop); compute a "
                            "stage at a loop of one of its consumers")
    for e, rd in outside:
        sizes, a, b = _sample(rd)
        inf = prog.info[e.orig]
        who = f"{inf.label}[{_fmt(e.stmt.dims, a)}]"
        raise IllegalScheduleError(
            f"compute_at({label}, {clabel}.{loopname}): {who} reads "
            f"{label}[{', '.join(map(str, b))}]{_sizes(sizes)} outside {clabel}'s loop "
            f"{loopname}, where {label} would be computed; every reader of {label} must run "
            "inside that loop (a reader computed inside the same loop counts); compute "
            f"{label} at a loop that encloses all its readers, or at root"
            + (f"; or, to compute {inf.stage} in that loop too, attach it first — "
               f"s[{inf.stage!r}].compute_at(s[{clabel!r}], {loopname!r}) — then this stage"
               if inf.stage != cid else ""),
            _witness(inf, e.stmt.dims, a, sizes))
    foot = foot.coalesce()
    threads = _shared_threads(prog, st, A, k, label, clabel, loopname)
    coop = None
    if threads:
        coop = _Coop(threads, A, k, label)
        foot = coop.relax(foot)
    depth = store_depth(st, A, li, label, clabel, loopname)
    if threads and (depth != k or st.folds):
        raise NotImplementedError(
            f"compute_at({label}, {clabel}.{loopname}): a shared tile of a GPU block is "
            "stored where it is computed; store_at and fold_storage are not supported for it")
    # store_at an outer loop: each iteration computes what earlier ones did not (storage)
    computed, slides = sliding_region(foot, depth, label)
    if depth < k:
        shared_between(foot, depth, A.loops, label, clabel)
    # expand the producer's statements over the footprint
    names = {e.stmt.name for e in entries}
    span = max(e.path[1] for e in mine) + 1 if mine else 1
    for e in entries:
        if in_scope(e):
            e.path = e.padded(li + 3)
            e.path[li + 2] += span
    pdims = tuple(f"{PREFIX}{d}" for d in range(k))
    ptext = prog.ptext
    new_entries = []
    for e in mine:
        s = e.stmt
        n_sp = prog.info[e.orig].n_spatial
        new = f"{s.name}__at"
        while new in names:
            new += "_"
        names.add(new)
        dims = ", ".join(s.dims)
        pd = ", ".join(pdims)
        elem = foot.get_tuple_name(isl.dim_type.out)
        proj = isl.Map(f"[{ptext}] -> {{ {s.name}[{dims}] -> {elem}[{', '.join(s.dims[:n_sp])}] }}")
        proj = proj.intersect_domain(s.domain)
        expanded = computed.apply_range(proj.reverse()).wrap().flatten()
        expanded = expanded.set_tuple_name(new)
        for d, nm in enumerate(pdims + s.dims):
            expanded = expanded.set_dim_name(isl.dim_type.set, d, nm)
        E = isl.Map(f"[{ptext}] -> {{ {s.name}[{dims}] -> {new}[{pd}, {dims}] }}")
        E = E.intersect_range(expanded)
        back = isl.Map(f"[{ptext}] -> {{ {new}[{pd}, {dims}] -> {s.name}[{dims}] }}")
        pfx = isl.Map(f"[{ptext}] -> {{ {new}[{pd}, {dims}] -> [{pd}] }}")
        own_loops = e.loops[e.own_start:]
        path = list(scope) + [e.path[1]] + e.path[2:]
        if coop is None:
            lmap = pfx.flat_range_product(back.apply_range(e.lmap))
        else:   # each thread of the block copies every T-th element of the tile
            # with no_sync() the user relies on thread t copying elements t, t + T, ...
            width = _copy_width(s, n_sp, coop.shape) if st.sync else 1
            expanded, rounds = coop.distribute(expanded, width)
            lmap = pfx.flat_range_product(rounds.align_params(pfx.get_space()))
            own_loops = (Loop(f"{label}.fetch"),)
            path = list(scope) + [e.path[1], 0]
            if width > 1:   # each thread copies `width` neighbours at a time: one vector
                own_loops += (Loop(f"{label}.fetch.v", LoopKind.VECTORIZED,
                                   max_extent=width),)
                path.append(0)
        lmap = lmap.intersect_domain(expanded)
        E = E.intersect_range(expanded)
        stmt = Statement(new, s.stage, pdims + s.dims, expanded, s.body, s.is_init)
        ne = Entry(stmt, e.orig, path, lmap, A.loops[:k] + own_loops, k, E)
        ne.reads = {t: back.apply_range(m).intersect_domain(expanded)
                    for t, m in e.reads.items()}
        ne.writes = {t: back.apply_range(m).intersect_domain(expanded)
                     for t, m in e.writes.items()}
        new_entries.append(ne)
    for e in mine:
        entries.remove(e)
    entries.extend(new_entries)
    # a recurrence must find every element it reads among those computed at this prefix
    for e in new_entries:
        rd = e.reads.get(out_id)
        if rd is None or rd.is_empty():
            continue
        bad = rd.subtract(loop_prefix(e.lmap, k).apply_range(foot))
        if not bad.is_empty():
            sizes, a, b = _sample(bad)
            inf = prog.info[e.orig]
            dims = e.stmt.dims
            raise IllegalScheduleError(
                f"compute_at({label}, {clabel}.{loopname}): {inf.label}[{_fmt(dims, a)}] reads "
                f"{label}[{', '.join(map(str, b))}]{_sizes(sizes)}, which is not computed in "
                f"the same iteration of {loopname} (only the elements {clabel} reads there "
                f"are); a recurrence reads values before they are produced there. Compute "
                f"{label} at root or at an outer loop", _witness(inf, dims, a, sizes))
    if depth < k:
        out = _local_buffers(prog, states, sid, store_footprint(foot, depth), depth,
                             tuple(A.padded(depth + 1)[:depth + 1]))
        # a dependence through the buffer links the copy that computed the element: the
        # one of an earlier iteration of the same store iteration (sliding), or the one of
        # the same compute iteration (each computes its whole footprint)
        out = [replace(L, stored_outside=True, link=depth if slides else k) for L in out]
    else:
        out = _local_buffers(prog, states, sid, foot, k, scope)
    if threads:
        out = [replace(L, threads=tuple(threads), extents=tuple(coop.extents.items()),
                       copies=tuple(e.stmt.name for e in new_entries)) for L in out]
    return out


# --------------------------------------------------------------------- GPU shared tiles
def _shared_threads(prog, st: StageState, A: Entry, k: int, label, clabel, loopname):
    """The prefix loops bound to threadIdx when a "shared" stage is computed inside them: its
    tile is then the block's (the footprint of all its threads), loaded by all of them."""
    threads = [d for d in range(k) if A.loops[d].kind is LoopKind.GPU_THREAD]
    if st.scope != "shared" or not threads:
        return []
    where = f"compute_at({label}, {clabel}.{loopname})"
    if st.is_reduction:
        raise NotImplementedError(f"{where}: a shared-memory stage that reduces is not "
                                  "supported yet; compute the reduction into registers")
    if any(lp.kind is not LoopKind.SERIAL for lp in st.loops) or \
            len(st.loops) != len(st.axes):
        raise NotImplementedError(
            f"{where}: the loops of a shared tile are distributed over the block's threads by "
            f"tensorlang (thread t copies elements t, t + T, ...); {label}'s own loops cannot "
            "be scheduled yet (split/fuse/bind on them)")
    return threads


VECTOR_BYTES = 16      # the widest global access a GPU thread makes (float4)


def _copy_width(stmt: Statement, n_spatial: int, shape: list[int]) -> int:
    """How many neighbouring elements of a shared tile one thread copies at a time: a
    16-byte vector when the copy reads a tensor along its last axis (a cache_read) and the
    tile's rows are whole vectors; 1 otherwise. The backends test each vector's alignment
    (a row of the source whose length is not a multiple of the vector is copied lane by
    lane)."""
    body = stmt.body
    if not isinstance(body, Store) or not isinstance(body.value, Load) or not shape or \
            n_spatial == 0:
        return 1
    src = body.value
    last = stmt.dims[n_spatial - 1]
    if not src.indices or not isinstance(src.indices[-1], Var) or \
            src.indices[-1].name != last or src.dtype != body.buffer.dtype:
        return 1
    size = body.buffer.dtype.itemsize
    if body.buffer.dtype.is_bool or size >= VECTOR_BYTES:
        return 1
    width = VECTOR_BYTES // size
    return width if shape[-1] % width == 0 else 1


def _relaxed(k: int, threads, extents: dict[int, int], space) -> isl.Map:
    """prefix -> prefix with the same loop values except the thread loops' (any value in
    their launch extents on both sides)."""
    ps = [f"p{d}" for d in range(k)]
    qs = [f"q{d}" if d in threads else f"p{d}" for d in range(k)]
    box = " and ".join(f"0 <= p{d} < {extents[d]} and 0 <= q{d} < {extents[d]}"
                       for d in threads)
    return isl.Map(f"{{ [{', '.join(ps)}] -> [{', '.join(qs)}] : {box} }}").align_params(space)


def tile_positions(space: isl.Space, k: int, offsets) -> list[isl.PwAff]:
    """On a set space [p_0..p_k-1, x_0..x_n-1] (a prefix, then an element), the element's
    position in the tile: x_d minus the tile's corner at p, per dimension."""
    sp = space
    ls = isl.LocalSpace.from_space(sp)
    n = sp.dim(isl.dim_type.set) - k
    to_prefix = isl.MultiAff(
        f"{{ [{', '.join(f'p{j}' for j in range(k + n))}] -> "
        f"[{', '.join(f'p{j}' for j in range(k))}] }}").align_params(sp)
    if sp.get_tuple_name(isl.dim_type.set):
        to_prefix = to_prefix.set_tuple_name(isl.dim_type.in_,
                                             sp.get_tuple_name(isl.dim_type.set))
    out = []
    for d, off in enumerate(offsets):
        x = isl.PwAff.from_aff(isl.Aff.var_on_domain(ls, isl.dim_type.set, k + d))
        out.append(x.sub(off.align_params(sp).pullback_multi_aff(to_prefix)))
    return out


class _Coop:
    """The cooperative load of a block's shared tile: the T threads of the block take the
    tile's elements in row-major order, thread t the elements t, t + T, t + 2T, ... (one
    round per T elements), so that neighbouring threads read neighbouring addresses."""

    def __init__(self, threads: list[int], A: Entry, k: int, label):
        rng = loop_prefix(A.lmap, k).range()
        self.k = k
        self.label = label
        self.threads = threads
        self.strides: dict[int, int] = {}
        self.extents: dict[int, int] = {}
        T = 1
        order = sorted(threads, key=lambda d: A.loops[d].thread_tag)   # x, then y, then z
        for d in order:
            sp = rng.get_space()
            v = isl.Aff.var_on_domain(isl.LocalSpace.from_space(sp), isl.dim_type.set, d)
            lo, hi = rng.min_val(v), rng.max_val(v)
            if not (lo.is_int() and hi.is_int()) or lo.to_python() != 0:
                raise NotImplementedError(
                    f"compute_at({label}): the thread loop {A.loops[d].name} must start at 0 "
                    "and have a constant extent for a shared tile")
            self.strides[d] = T
            self.extents[d] = hi.to_python() + 1
            T *= self.extents[d]
        self.T = T

    def relax(self, foot: isl.Map) -> isl.Map:
        """The footprint of every thread of the block: prefix -> elements read at any
        values of the prefix's thread loops (the other prefix loops equal); also sets the
        tile's corner and shape."""
        label = self.label
        foot = _relaxed(self.k, self.threads, self.extents, foot.get_space()).apply_range(
            foot).coalesce()
        n = foot.dim(isl.dim_type.out)
        self.offsets, self.shape = [], []
        for d in range(n):
            lo, hi = foot.dim_min(d), foot.dim_max(d)
            ext = pw_extremes(hi.sub(lo))[1]
            if not ext.is_int():
                raise NotImplementedError(
                    f"compute_at({label}): a shared tile needs a constant shape; dimension "
                    f"{d} of {label}'s tile grows with the sizes")
            self.offsets.append(lo)
            self.shape.append(ext.to_python() + 1)
        return foot

    def distribute(self, expanded: isl.Set, width: int = 1):
        """The expanded instances each thread copies, and instance -> its round (and, with
        `width` > 1, the lane: thread t then copies the groups of `width` neighbours t,
        t + T, ..., each group one vector access)."""
        k = self.k
        sp = expanded.get_space()
        ls = isl.LocalSpace.from_space(sp)

        def var(i):
            return isl.PwAff.from_aff(isl.Aff.var_on_domain(ls, isl.dim_type.set, i))

        lin = None
        for rel, ext in zip(tile_positions(sp, k, self.offsets), self.shape):
            lin = rel if lin is None else lin.scale_val(isl.Val(ext)).add(rel)
        tid = None
        for d, stride in self.strides.items():
            t = var(d).scale_val(isl.Val(stride))
            tid = t if tid is None else tid.add(t)
        group = lin.scale_down_val(isl.Val(width)).floor() if width > 1 else lin
        mine = group.sub(tid).mod_val(isl.Val(self.T)).zero_set()
        expanded = expanded.intersect(mine)
        rounds = isl.Map.from_pw_aff(group.scale_down_val(isl.Val(self.T)).floor())
        if width > 1:
            rounds = rounds.flat_range_product(
                isl.Map.from_pw_aff(lin.mod_val(isl.Val(width))))
        return expanded, rounds


def _barriers(prog, entries: list[Entry], L: LocalBuffer) -> list[Entry]:
    """Two barriers around the copy of a shared tile, in the loop it is computed in: before
    it (the previous iteration's readers are done) and after it (the tile is complete).
    Their instances are every thread of the block at every prefix where the block runs
    anything inside the loop, so that all threads meet each one."""
    k = L.n_prefix
    width = len(L.scope) + 1
    inside = [e for e in entries
              if len(e.loops) >= k and tuple(e.padded(width)[:len(L.scope)]) == L.scope]
    for e in inside:
        e.path = e.padded(width)
        e.path[k + 1] = 3 * e.path[k + 1] + 1
    pos = [e.path[k + 1] for e in inside if e.stmt.name in L.copies]
    where = None
    for e in inside:
        r = loop_prefix(e.lmap, k).range()
        where = r if where is None else where.union(r)
    where = where.apply(_relaxed(k, L.threads, dict(L.extents), where.get_space())).coalesce()
    A = inside[0]
    out = []
    names = {e.stmt.name for e in entries}
    for j, p in enumerate((min(pos) - 1, max(pos) + 1)):
        name = f"{prog.stage_label(L.stage)}_sync{j}"
        while name in names:
            name += "_"
        names.add(name)
        pdims = tuple(f"{PREFIX}{d}" for d in range(k))
        dom = where.set_tuple_name(name)
        for d, nm in enumerate(pdims):
            dom = dom.set_dim_name(isl.dim_type.set, d, nm)
        lmap = isl.Map(f"{{ {name}[{', '.join(pdims)}] -> [{', '.join(pdims)}] }}")
        lmap = lmap.align_params(dom.get_space()).intersect_domain(dom)
        stmt = Statement(name, L.stage, pdims, dom, Barrier(), False)
        out.append(Entry(stmt, name, list(L.scope) + [p], lmap, A.loops[:k], k))
    return out


def _local_buffers(prog, states, sid, foot: isl.Map, k: int, scope) -> list[LocalBuffer]:
    """One local buffer per tensor the stage writes, shaped like the footprint's box."""
    n = foot.dim(isl.dim_type.out)
    offs, shape = [], []
    for d in range(n):
        lo, hi = foot.dim_min(d), foot.dim_max(d)
        ext = hi.sub(lo).add(isl.PwAff.val_on_domain(lo.domain(), isl.Val(1)))
        lo = _one_piece_corner(foot, d, offs, lo)
        mx = pw_extremes(ext)[1]
        if mx.is_int():
            shape.append(Const(max(mx.to_python(), 0), int64))
        else:
            shape.append(_symbolic_bound(ext, prog))
        offs.append(lo)
    scope_name = states[sid].scope
    folds = states[sid].folds
    for d, f in folds:      # a circular buffer of f positions along d (x_d mod f)
        shape[d] = Const(f, int64)
    out = []
    for t in prog.stage_tensors(sid):
        g = prog.bufs[id(t)]
        buf = Buffer(g.name, tuple(shape), g.dtype, scope_name)
        out.append(LocalBuffer(sid, t, buf, k, tuple(scope), tuple(offs), foot,
                               folds=tuple(folds)))
    return out


def _one_piece_corner(foot: isl.Map, d: int, outer: list, lo: isl.PwAff) -> isl.PwAff:
    """The footprint's least index along d as one quasi-affine piece where isl gave
    several: the least index given the corner's earlier dimensions (`outer`), composed
    with them, when that equals `lo`. Under a fused loop f = 16 i + i1.outer, islpy
    2026.2.1 gives the rows' corner 8 (f mod 16) as three pieces (0 where f mod 16 = 0,
    8 f - 896 past 112, ...): a local buffer indexed by `i1 - select(...)` is not a
    register tile for LLVM (the batched matmul's 8 x 48 tiles then live in memory); composed
    from the batch's corner floor(f / 16) it is 8 f - 128 floor(f / 16), one piece."""
    if d == 0 or lo.n_piece() <= 1:
        return lo
    n, np_ = foot.dim(isl.dim_type.out), foot.dim(isl.dim_type.in_)
    rest = foot.project_out(isl.dim_type.out, d + 1, n - d - 1).move_dims(
        isl.dim_type.in_, np_, isl.dim_type.out, 0, d)
    alt = rest.dim_min(0)
    dom = foot.get_space().domain()
    ls = isl.LocalSpace.from_space(dom)
    parts = [isl.PwAff.var_on_domain(ls, isl.dim_type.set, j) for j in range(np_)]
    parts += [o.align_params(dom) for o in outer[:d]]
    lst = isl.PwAffList.alloc(foot.get_ctx(), len(parts))
    for x in parts:
        lst = lst.add(x)
    space = isl.Space.map_from_domain_and_range(dom, rest.get_space().domain())
    try:
        alt = alt.pullback_multi_pw_aff(isl.MultiPwAff.from_pw_aff_list(space, lst))
    except isl.Error:
        return lo
    alt = alt.intersect_domain(lo.domain()).coalesce()
    return alt if alt.n_piece() < lo.n_piece() and alt.is_equal(lo) else lo


def _symbolic_bound(ext: isl.PwAff, prog) -> Expr:
    """The largest value of ext over its domain's (prefix) dimensions, in the sizes."""
    m = isl.Map.from_pw_aff(ext)
    dom_n = m.dim(isl.dim_type.in_)
    rel = m.wrap().flatten()                          # [p..., e]
    rel = rel.project_out(isl.dim_type.set, 0, dom_n)
    hi = rel.dim_max(0)
    hi = hi.gist(prog.context)
    return pw_aff_expr(hi, {}, prog.params)


def _rewrite_local(prog, entries: list[Entry], L: LocalBuffer) -> None:
    """Loads and stores of L's tensor -> L's buffer, shifted by the footprint's corner."""
    tid = id(L.tensor)
    # the corner as a function of the statement's prefix loops tl__p<j> (its own first dims
    # when expanded; bound to the enclosing loop variables at translation)
    pvars = {f"{PREFIX}{j}": Var(f"{PREFIX}{j}", int64) for j in range(L.n_prefix)}
    offs = [pw_aff_expr(o, pvars, prog.params, names=list(pvars)) for o in L.offsets]

    # a dimension of extent 1 is index 0 (every access lies in the footprint): said
    # outright, not as a difference of two quasi-affine forms of fused loops that LLVM
    # cannot prove equal (a variable index keeps the tile out of registers)
    unit = [isinstance(e, Const) and e.value == 1 for e in L.buffer.shape]
    folds = dict(L.folds)

    def shift(idx):
        return tuple(Const(0, x.dtype) if u else
                     simplify(x % Const(folds[d], x.dtype)) if d in folds else
                     simplify(x - o) for d, (x, o, u) in enumerate(zip(idx, offs, unit)))

    def load(y):
        if isinstance(y, Load) and y.buffer is L.tensor:
            return Load(L.buffer, shift(y.indices))
        return None

    for e in entries:
        touches = tid in e.reads or tid in e.writes or any(
            isinstance(x, Store) and x.buffer is L.tensor for x in walk_stmt(e.stmt.body))
        if touches:
            body = map_stmt(e.stmt.body, lambda x: map_expr(x, load))
            e.stmt = replace(e.stmt, body=_restore_stores(body, L, shift))


def _restore_stores(s: Stmt, L: LocalBuffer, shift) -> Stmt:
    if isinstance(s, Store):
        if s.buffer is L.tensor:
            return Store(L.buffer, shift(s.indices), s.value, s.atomic)
        return s
    if isinstance(s, Seq):
        return Seq(tuple(_restore_stores(x, L, shift) for x in s.stmts))
    if isinstance(s, If):
        return If(s.cond, _restore_stores(s.then_body, L, shift),
                  None if s.else_body is None else _restore_stores(s.else_body, L, shift))
    if isinstance(s, Let):
        return Let(s.var, s.value, _restore_stores(s.body, L, shift))
    if isinstance(s, For):
        return For(s.var, s.min, s.extent, _restore_stores(s.body, L, shift), s.kind,
                   s.thread_tag, s.max_extent)
    if isinstance(s, Allocate):
        return Allocate(s.buffer, _restore_stores(s.body, L, shift))
    return s


# -------------------------------------------------------------------------- messages
def _sample(rel: isl.Map):
    return pick_pair(rel)


def _fmt(dims, vals) -> str:
    return ", ".join(f"{d}={v}" for d, v in zip(dims, vals) if not d.startswith(PREFIX))


def _sizes(sizes: dict[str, int]) -> str:
    return f" (with {', '.join(f'{k}={v}' for k, v in sizes.items())})" if sizes else ""


def _witness(inf, dims, vals, sizes):
    inst = {d: v for d, v in zip(dims, vals) if not d.startswith(PREFIX)}
    return Witness("RAW", {}, inst, "", inf.label, sizes, {}, {})
