"""The cost model's data movement (see `cost`): bytes each statement brings into L1, L2
and from DRAM per call — per cache level, the outermost loop whose footprint fits it, with
reuse across the loops that do not index a tensor (isl's footprints and trip counts, from
`placed`); which reads find what an earlier statement of the same loop iteration touched
(`resident_reads`); and the lines a tile loses to an L1 set's conflicts."""

from __future__ import annotations

import functools

import islpy as isl

from .placed import PlacedStatement, bounding_box, box_size, moving_dims

LINE_BYTES = 64
FILL = 0.75               # the share of a cache a footprint may take and stay resident
ARRAY_OFFSET = 16         # an array's first byte past a line's (numpy's large arrays: 16)
EXCESS_FULL = 3.0         # a set this many times over its ways loses all the lines a tile
                          # shares with the next (`tile_conflicts`)


def _merged(box: list[int], itemsize: int, strides) -> tuple[list[int], list[int]]:
    """A box of a tensor's elements and the tensor's `strides` (bytes between neighbours,
    per dimension) with each last dimension shorter than a line that the box covers whole
    merged into the one before it: a packed operand's [.., 16, 4] bytes are rows of 64
    contiguous bytes, not rows of 4 a line each."""
    box, strides = list(box), list(strides) if len(strides) == len(box) else []
    while strides and len(box) >= 2 and box[-1] * itemsize < LINE_BYTES and \
            box[-1] * strides[-1] == strides[-2]:
        box[-2:] = [box[-2] * box[-1]]
        strides[-2:] = [strides[-1]]
    return box, strides


def _bytes(box: list[int], itemsize: int, strides=()) -> int:
    """The bytes of the lines a box of a tensor's elements spans (with the tensor's
    `strides`, its short whole last dimensions merged: `_merged`)."""
    if not box or 0 in box:
        return 0
    box = _merged(box, itemsize, strides)[0]
    line = max(1, LINE_BYTES // itemsize)
    n = -(-box[-1] // line) * line
    for x in box[:-1]:
        n *= x
    return n * itemsize


def resident_reads(stmts: list[PlacedStatement], tgt) -> list[dict[str, int]]:
    """Per statement, {tensor: c}: the tensors it reads whose elements, in each iteration
    of the loops it shares with statements before it, those statements already touched
    (isl: its map from the shared loops' values to elements is a subset of theirs), with
    everything those statements touch in one such iteration fitting cache level c — the
    read finds them in level c (softmax's rows: the maximum reads a row, the exponentials
    read it again from L1). Reads of such a tensor bring nothing into level c or beyond."""
    depth = max((len(st.e.path) for st in stmts), default=0)
    order = sorted(range(len(stmts)), key=lambda k: stmts[k].e.padded(depth))
    out: list[dict[str, int]] = [{} for _ in stmts]

    def touched(st: PlacedStatement, m: isl.Map, k: int) -> isl.Map:
        return st.prefix[k - 1].reverse().apply_range(m)    # shared loop values -> elements

    for pos, b in enumerate(order):
        sb = stmts[b]
        for k in range(sb.n, 0, -1):                   # the deepest shared loops first
            key = sb.e.path[:k + 1]
            group = [a for a in order if stmts[a].e.path[:k + 1] == key and
                     stmts[a].n >= k]
            before = [a for a in order[:pos] if a in group]
            if not before:
                continue
            size = sum(_bytes(stmts[a].footprint(m, k - 1), sz)
                       for a in group for _, _, local, m, sz in stmts[a].accesses if not local)
            level = next((c for c, cap in enumerate(tgt.cache_bytes) if size <= cap * FILL),
                         None)
            if level is None:
                continue
            for name, write, local, m, _ in sb.accesses:
                if write or local or name in out[b]:
                    continue
                earlier = [touched(stmts[a], mm, k) for a in before
                           for nm, _, _, mm, _ in stmts[a].accesses if nm == name]
                if earlier and touched(sb, m, k).is_subset(
                        functools.reduce(isl.Map.union, earlier)):
                    out[b][name] = level
    return out


def set_conflict_lines(st: PlacedStatement, r: int, iters: list[int], tgt) -> float:
    """Lines that one iteration of loop r-1 (a tile: one run of loop r) shares with the next
    and loses to the conflicts of an L1 set. A tile whose rows lie a multiple of the L1's
    size / ways apart (4 KiB: 1024 floats) puts one line of each row in the same set; with
    more rows than the set has ways, the lines at the tile's edges, which the neighbouring
    tile reads or writes again (an array starts ARRAY_OFFSET bytes past a line, so a row's
    piece of the tile begins and ends inside lines), are evicted before it comes: a blur's
    tiles slow down as their rows outnumber the ways. Only where the tile fits the L1 by
    its size (else the traffic counts its lines), and only for accesses that walk across
    memory (a transposed read, each tensor on its own, a line an element); the rows read
    or written along memory are `tile_conflicts`', all tensors together."""
    ways = tgt.l1_ways
    sets = max(1, tgt.cache_bytes[0] // ways // LINE_BYTES)
    glob = [(m, size, stride) for (_, _, local, m, size), stride in
            zip(st.accesses, st.strides) if not local and stride and len(stride) >= 2]
    if r < 1 or not glob:
        return 0.0
    feet = [st.footprint(m, r - 1) for m, _, _ in glob]
    # (the accesses along memory count in `tile_conflicts`; their footprint still fills
    # the L1 here)
    fills = sum(_bytes(b, size) for b, (_, size, _) in zip(feet, glob))
    keep = [k for k, (m, size, stride) in enumerate(glob) if not _along_memory(st, m, size, stride)]
    glob, feet = [glob[k] for k in keep], [feet[k] for k in keep]
    if fills > tgt.cache_bytes[0] * FILL:
        return 0.0
    lost = 0.0
    for box, (_, size, stride) in zip(feet, glob):
        if len(box) != len(stride) or box_size(box[:-1]) <= ways or box_size(box[:-1]) > 1 << 12:
            continue
        count = [0] * sets
        edges = _row_lines(box, size, stride, count)
        for e in edges:       # a set over its ways keeps its lines in proportion
            lost += sum(max(0, count[k] - ways) / count[k] for k in e)
    return lost * iters[r]


def _row_lines(box: list[int], size: int, stride, count: list[int]) -> list[set[int]]:
    """The L1 sets of a tile's rows of one tensor (its footprint `box`, `stride` bytes
    apart per dimension, the array ARRAY_OFFSET bytes into a page): adds each row's lines
    to `count` (lines per set) and returns, per row, the sets of its edge lines — those
    the row's piece does not cover whole, which the neighbouring tile shares."""
    sets = len(count)
    width = box[-1] * size
    rows = [0]
    for extent, step in zip(box[:-1], stride[:-1]):
        rows = [o + k * step for o in rows for k in range(extent)]
    edges = []
    for o in rows:
        start, end = ARRAY_OFFSET + o, ARRAY_OFFSET + o + width
        first, last = start // LINE_BYTES, (end - 1) // LINE_BYTES
        for line in range(first, last + 1):
            count[line % sets] += 1
        edges.append({k % sets for k, cut in ((first, start), (last, end)) if cut % LINE_BYTES})
    return edges


def _along_memory(st: PlacedStatement, m: isl.Map, size: int, stride) -> bool:
    """Whether the innermost loop moves the access along memory (unit stride) or not at
    all."""
    moving = moving_dims(st, m)
    return not moving or not stride or stride[moving[-1]] == size


def tile_conflicts(st: PlacedStatement, r: int, iters: list[int], tgt) -> float:
    """The L1 set conflicts of a tile of rows, all tensors together, in lines weighted by how
    far over its ways a set is (in units of a line fetched again). The tile is one iteration
    of the innermost loop (at most the register block's, r) that moves along the rows'
    last axis with a loop inside it moving across rows: its rows a multiple of 4 KiB apart
    (1024 floats) put one line of each in the same set — of every tensor, since numpy's
    large arrays start ARRAY_OFFSET bytes into a page. The line at each end of a row's
    piece, which the next tile along the row touches again, is lost with the square of the
    set's excess over its ways: none at the ways, all at EXCESS_FULL times them. Tiles of
    whole rows or of one row run at a copy's speed; narrow tiles of more rows than the
    ways slow down steeply as the rows grow, and wide ones hardly (the copies, the IIR
    filter's and the blur's tiles behind this: benchmarks/RESULTS-decisions.md). (Linear
    in the excess ranked the IIR filter's 8- and 12-row tiles too low:
    RESULTS-autoschedule.md.) The accesses across memory (a transposed read)
    count in `set_conflict_lines`."""
    ways = tgt.l1_ways
    sets = max(1, tgt.cache_bytes[0] // ways // LINE_BYTES)
    acc = [(name, m, size, stride) for (name, _, local, m, size), stride in
           zip(st.accesses, st.strides)
           if not local and stride and len(stride) >= 2 and _along_memory(st, m, size, stride)]
    if r < 0 or not acc:
        return 0.0

    def moves_rows(m: isl.Map, q: int) -> bool:
        return st.footprint(m, q - 1)[:-1] != st.footprint(m, q)[:-1]
    tile = next((d for d in range(r, -1, -1) if any(
        st.footprint(m, d - 1)[-1] > st.footprint(m, d)[-1] and
        any(moves_rows(m, q) for q in range(d + 1, st.n)) for _, m, _, _ in acc)), None)
    if tile is None:
        return 0.0
    touched: dict[str, tuple] = {}
    for name, m, size, stride in acc:
        t = st.touched(m, tile)
        touched[name] = (touched[name][0].union(t) if name in touched else t, size, stride)
    feet = [(*_merged(bounding_box(t), size, stride), size)
            for t, size, stride in touched.values()]
    feet = [(box, size, stride) for box, stride, size in feet]
    if sum(_bytes(b, size) for b, size, _ in feet) > tgt.cache_bytes[0] * FILL:
        return 0.0                 # the traffic counts its lines
    count = [0] * sets
    edges = [e for box, size, stride in feet
             if len(box) == len(stride) and box_size(box) and box_size(box[:-1]) <= 1 << 12
             for e in _row_lines(box, size, stride, count)]
    lost = sum(min(1.0, max(0.0, (count[k] / ways - 1) / (EXCESS_FULL - 1))) ** 2
               for e in edges for k in e)
    return lost * iters[tile + 1]


def traffic_bytes(st: PlacedStatement, tgt, resident: dict[str, int]) -> list[int]:
    """Bytes loaded into L1 (from L2), into L2 (from L3) and from DRAM (see the module):
    per cache, the outermost loop whose body's footprint fits it; per tensor, moved outward
    over the loops that do not index it. Data that fits the last level stays there between
    calls, and so does data that fits one core's L2 (nothing from beyond it: a heat stencil
    whose arrays fit L2 runs as fast as L2 serves it); a written line goes to DRAM and back
    (write-allocate)."""
    n = st.n
    glob = [(write, m, size, stride) for (_, write, local, m, size), stride
            in zip(st.accesses, st.strides) if not local]
    names = [name for name, _, local, _, _ in st.accesses if not local]
    along = [_along_memory(st, m, size, stride)     # the innermost loop reads along memory
             for (_, _, local, m, size), stride in zip(st.accesses, st.strides) if not local]
    if not glob:
        return [0, 0, 0]
    iters = [1]
    for t in st.trips:
        iters.append(iters[-1] * t)
    feet = [[st.footprint(m, d) for d in range(-1, n)] for _, m, _, _ in glob]
    levels = [sum(_bytes(f[d + 1], g[2], g[3]) for f, g in zip(feet, glob))
              for d in range(-1, n)]
    whole: dict[str, int] = {}          # each tensor once (a recurrence reads what it writes)
    for f, g, name in zip(feet, glob, names):
        whole[name] = max(whole.get(name, 0), _bytes(f[0], g[2], g[3]))
    out = []
    total = sum(whole.values())
    for c, cap in enumerate(tgt.cache_bytes):
        if c >= 1 and total <= cap * FILL:
            out.extend([0] * (3 - c))      # all of it stays in this level between calls
            break
        dstar = next((d for d in range(-1, n) if levels[d + 1] <= cap * FILL), n - 1)
        moved = 0
        for f, (write, _, size, stride), name, unit in zip(feet, glob, names, along):
            if not write and resident.get(name, 3) <= c:
                continue                       # already in this level (`resident_reads`)
            d = dstar
            while d >= 0 and f[d] == f[d + 1]:
                d -= 1                         # loop d does not index the tensor: reused
            b = _bytes(f[d + 1], size, stride) * iters[d + 1]
            if d >= 0 and unit:
                # consecutive iterations of loop d that overlap (a stencil's rows, a
                # convolution's window): the lines they share stay, so a sweep of loop d
                # loads at most its whole footprint. (Not for an access across memory —
                # a transposed read walking down columns — whose lines come back one per
                # element at the latency of a miss, which the model has no term for.)
                b = min(b, _bytes(f[d], size, stride) * iters[d])
            back = write and (c >= 2 or c == 1 and not tgt.victim_llc)
            moved += 2 * b if back else b     # written lines go back
        out.append(moved)
    return out
