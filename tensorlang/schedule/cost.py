"""An analytic cost model of a schedule: the auto-scheduler's ranking of candidates.

Every count comes from isl, on the statements as placed (compute_at expanded, inlining
done, the loops of the schedule; `placed.py` gathers those facts, this module turns them
into time):

- *trip counts*: the values each loop takes inside one iteration of the loops around it
  (at the first iteration, a full tile);
- *footprints*: for each loop level d and tensor, the bounding box of the elements that one
  iteration of loop d touches (its first iteration), in cache lines;
- *traffic* into each cache level: with the outermost loop whose body's footprint fits
  the cache, every iteration of it loads its footprint once, and a tensor that a loop does
  not index keeps its data across that loop's iterations (the reuse a tile exploits) —
  iterations times footprint, as `tl.analyze`'s data movement per level counts it exactly;
  consecutive iterations that overlap along memory (a stencil's rows) load a sweep's
  footprint at most, and a read of what an earlier statement in the same iteration of
  their common loops touched (softmax per row) finds it in the cache that holds them
  all (`traffic.py`);
- *instructions*: the body's arithmetic (a multiply feeding an add is one fused
  instruction; exp, log, division cost more), over the vector lanes of the innermost
  vectorised loop, per *register block* (the body of the innermost loop that is neither
  unrolled nor vectorised: its loads are the block's distinct vectors — a register tile
  loads each row value once for all its columns — or one per read for reads at shifted
  columns (a stencil's), and two for a line-wide vector that starts mid-line; an
  accumulator the block keeps across that loop's iterations stays in a register, bounded
  by the FMA latency over its independent accumulators).

A statement's time is a smooth maximum (`_overlap`: they overlap imperfectly) of its
instruction time on the cores its parallel loop occupies (with the load imbalance of the
last round; a skewed wavefront's anti-diagonals, which hold different numbers of tiles, are
enumerated with isl for the true count, launches and rounds) and its traffic at each level
over that level's bandwidth, plus a fork per launch of a parallel loop; a program's time is the
sum over its statements. The machine comes from `tl.Target` (vector lanes, registers,
caches, cores), so a cross target is modelled without running anything.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import islpy as isl

from ..ir.expr import (Add, And, Call, CmpOp, Div, Expr, Load, Max, Min, Mul, Not, Or,
                       Select, Sub, Var)
from ..ir.stmt import LoopKind, Store
from ..ir.visit import walk, walk_stmt
from ..polyhedral.affine import interval_condition
from .placed import (_box, _carried, _carry_distance, _moving, _moving_vars, _Stmt, _val,
                     placed_statements)
from .traffic import (LINE_BYTES, _count, _resident, _set_conflict_lines, _tile_conflicts,
                      _traffic)

# The machine's facts (clock, pipes, ports, latencies, bandwidths, caches) come from the
# target's CPU model (`Target.cpu_model`, tensorlang/cpus.py); what follows are LLVM's habits
# and the model's own fitted weights.
LOOP_OPS = 2              # a loop's own instructions an iteration: increment, compare-branch
MINMAX_LATENCY = 7        # a NaN-propagating max: compare, blend, max, dependent
INTERLEAVE = 4            # accumulators LLVM's loop vectoriser keeps for a reduction
FORK_S = 0.5e-6           # one launch of a parallel loop, its workers spinning (in a loop)
CALL_COST = {"exp": 16, "log": 20, "tanh": 30, "erf": 30, "sigmoid": 20, "sqrt": 6,
             "rsqrt": 6, "pow": 40, "sin": 30, "cos": 30, "fmax": 1, "fmin": 1}
MASKED_CYCLES = 10        # a masked vector load or store (a row's partial last vector)
CONFLICT_CYCLES = 20      # a lane of a vector store whose lanes are 4 KiB apart (L1 sets)
EXACT_POINTS = 1 << 16    # loop values a wavefront's exact launch count may enumerate
SMALL_LOOP = 4            # LLVM unrolls innermost loops this short completely
OVERLAP_NORM = 4          # compute and traffic overlap as the 4-norm of their times
SET_CONFLICT_CYCLES = 10  # a line lost to a set's conflicts and fetched again from L2
TILE_CONFLICT_CYCLES = 5  # ... a tile's line (`_tile_conflicts`): the core waits for it
FULL_UNROLL = 16          # LLVM unrolls a loop of up to this many iterations whole (`_promoted`)
PREDICTED_TRIPS = 32      # a loop of a constant trip count up to this: its exit predicted


@dataclass
class StatementCost:
    name: str
    instances: int
    compute_s: float
    memory_s: tuple[float, ...]          # L1, L2, DRAM
    traffic: tuple[int, ...]             # bytes into L1, into L2, from DRAM
    cores: int
    forks: int
    block: str = ""                      # the register block's cycles, as a formula
    fork_outer: bool = False             # its parallel loop is its outermost loop
    # the register block, for `_shared_blocks`: the loop it is (the statement's path to
    # it; None when LLVM's vectoriser makes the block), its cycles' parts (arithmetic,
    # loads, stores, chain: cycles each; the additive cycles; the issue cycles of the
    # loop's own instructions and of the block's operations) and the seconds one cycle a
    # block costs
    block_key: tuple | None = None
    block_parts: tuple = ()
    cycle_s: float = 0.0

    @property
    def seconds(self) -> float:
        return _overlap(self.compute_s, *self.memory_s) + self.forks * FORK_S

    @property
    def bound(self) -> str:
        names = ("compute", "L1", "L2", "DRAM")
        times = (self.compute_s, *self.memory_s)
        return names[max(range(len(times)), key=times.__getitem__)]


@dataclass
class CostReport:
    statements: list[StatementCost] = field(default_factory=list)
    groups: list[list[int]] | None = None   # statements that share their outermost loop

    @property
    def seconds(self) -> float:
        """Statements that share their outermost loop (placed at a loop of a common
        reader) run interleaved, one iteration of it after another: their arithmetic
        overlaps their memory traffic, so such a group takes the smooth maximum of its summed
        compute time and summed time at each memory level, not the sum of its statements'
        own maxima (softmax per row: the exponentials' arithmetic runs under the output's
        stores). Forks: once for a group whose shared loop is the parallel one."""
        groups = self.groups or [[k] for k in range(len(self.statements))]
        total = 0.0
        for g in groups:
            cs = [self.statements[k] for k in g]
            if len(cs) == 1:
                total += cs[0].seconds
                continue
            busy = _overlap(sum(c.compute_s for c in cs),
                            *(sum(c.memory_s[k] for c in cs) for k in range(len(cs[0].memory_s))))
            forks = max(c.forks for c in cs) if all(c.fork_outer for c in cs) else \
                sum(c.forks for c in cs)
            total += busy + forks * FORK_S
        return total

    def __str__(self) -> str:
        rows = [f"{c.name:28s} {c.seconds * 1e3:9.4f} ms  {c.bound:7s} cores {c.cores} "
                f"traffic L1/L2/DRAM {'/'.join(_mb(x) for x in c.traffic)}\n    {c.block}"
                for c in self.statements]
        return "\n".join(rows + [f"total {self.seconds * 1e3:.4f} ms"])


def _overlap(*times: float) -> float:
    """The time of work whose parts (arithmetic, traffic at each level) run at once: near
    the largest, but not quite — they overlap imperfectly, so a part close to the largest
    adds to it (the OVERLAP_NORM-norm, a smooth maximum): schedules at the same memory
    floor do not tie (its ranking against the plain maximum: RESULTS-autoschedule.md,
    "Where the cost model's choices were measured")."""
    return sum(t ** OVERLAP_NORM for t in times) ** (1.0 / OVERLAP_NORM)


def _mb(x: int) -> str:
    return f"{x / 1e6:.2f}MB"


def _arith(body, moving=None) -> tuple[float, Counter]:
    """(instructions of one instance's arithmetic, its loads per tensor name) of a
    statement body: a multiply feeding an add fuses; calls cost CALL_COST, a division 4; a
    select and each compare or mask operation of its condition 1 — the condition's
    compares nothing when `moving` (variable names -> those of them that change along the
    register block's loop, and along its vector loop) says that none of its variables
    changes along the block's loop and some along the vector lanes: LLVM computes such a
    mask once, outside that loop (a convolution's padding test on rows and columns of
    vectors along the columns, inside a loop over channels: 0.37 ms measured, 1.6
    predicted before). A scalar test whose select reads memory is a branch, not hoisted."""
    ops, loads = 0.0, Counter()
    for x in walk_stmt(body):
        if not isinstance(x, Store):
            continue
        fused = set()
        hoisted: set[int] = set()
        skipped: set[int] = set()
        if moving is not None:
            for e in walk(x.value):
                if isinstance(e, Select) and id(e) not in hoisted and id(e) not in skipped:
                    along_r, lanes = moving({v.name for v in walk(e.cond)
                                             if isinstance(v, Var)})
                    if lanes and not along_r:
                        # the select itself: a zero-masking load or a masked move with
                        # the mask made outside the loop (AVX-512), no extra instruction
                        hoisted.update(id(c) for c in walk(e.cond))
                        hoisted.add(id(e))
                    elif lanes and interval_condition(e.cond, lanes):
                        # lanes that are an interval (a stencil's interior): a branch on
                        # the vector's first and last lanes, and the interior's vectors
                        # run the true arm alone, unmasked (the heat stencil's explicit
                        # vectors: 0.030 -> 0.020 ms, Zen 5)
                        hoisted.update(id(c) for c in walk(e.cond))
                        hoisted.add(id(e))
                        keep = {id(y) for y in walk(e.true_value)}
                        skipped.update(id(y) for y in walk(e.false_value)
                                       if id(y) not in keep)
        # an index's arithmetic is the address's (a local buffer's offset in a fused
        # loop is a select on the loop's value: hoisted, or folded into the addressing)
        addressing = {id(a) for e in walk(x.value) if isinstance(e, Load)
                      for i in e.indices for a in walk(i)}
        for e in walk(x.value):
            if id(e) in skipped:
                continue
            if isinstance(e, Load):
                loads[e.buffer.name] += 1
            if id(e) in addressing:
                continue
            if isinstance(e, (Select, CmpOp, And, Or, Not)):
                ops += 0 if id(e) in hoisted else 1   # a bounds test: compares, mask logic
                continue
            if not isinstance(e, Expr) or not e.dtype.is_float:
                continue
            if isinstance(e, (Add, Sub)):
                for o in (e.a, e.b):
                    if isinstance(o, Mul) and id(o) not in fused:
                        fused.add(id(o))
                        break
                ops += 1
            elif isinstance(e, Mul):
                ops += 0 if id(e) in fused else 1
            elif isinstance(e, Div):
                ops += 4
            elif isinstance(e, (Min, Max)):
                ops += 1
            elif isinstance(e, Call):
                ops += CALL_COST.get(e.name, 10)
    return max(ops, 1.0), loads


def estimate(s, target) -> CostReport:
    """The model's time of schedule `s` on `target` (see the module)."""
    from ..target import Target

    tgt = target if isinstance(target, Target) else Target.parse(target)
    stmts = placed_statements(s)
    resident = _resident(stmts, tgt)
    promoted = _promoted(stmts, tgt)
    groups: dict[tuple, list[int]] = {}
    for k, st in enumerate(stmts):
        key = tuple(st.e.path[:2]) if st.n else ("alone", k)
        groups.setdefault(key, []).append(k)
    costs = [_statement(st, tgt, resident[k], promoted) for k, st in enumerate(stmts)]
    _shared_blocks(costs)
    return CostReport(costs, list(groups.values()))


def _shared_blocks(costs: list[StatementCost]) -> None:
    """Statements whose register blocks are one and the same loop (a first stage
    computed at a tile of the second, both unrolled under the tile's loop: one straight
    run of code a tile) share its issue slots: the block takes the largest of the summed
    arithmetic, loads and stores, the longest chain, and the summed operations' issue
    with the loop's own instructions once — not the sum of each statement's maximum. The
    blur's first stage at each 4 x 16 tile, kept in registers: 26 -> 19 cycles a tile
    (the second's loads are free, the first's arithmetic fills their slots), 0.057 ms
    measured against 0.072 for the 16 x 64 tiles the model had ranked first. Each
    statement's compute time falls by its share."""
    by_key: dict[tuple, list[StatementCost]] = {}
    for c in costs:
        if c.block_key is not None:
            by_key.setdefault(c.block_key, []).append(c)
    for cs in by_key.values():
        if len(cs) < 2 or any(abs(c.cycle_s - cs[0].cycle_s) > 1e-3 * cs[0].cycle_s
                              for c in cs):
            continue                # (a count that differs: not one loop after all)
        alone = [max(*p[:4], p[5] + p[6]) + p[4] for p in (c.block_parts for c in cs)]
        joint = max(max(sum(c.block_parts[k] for c in cs) for k in range(3)),
                    max(c.block_parts[3] for c in cs),
                    max(c.block_parts[5] for c in cs) + sum(c.block_parts[6] for c in cs)) + \
            sum(c.block_parts[4] for c in cs)
        if joint >= sum(alone):
            continue
        for c, a in zip(cs, alone):
            c.compute_s -= (a - joint * a / sum(alone)) * c.cycle_s


def _promoted(stmts: list[_Stmt], tgt) -> set[str]:
    """Local buffers that LLVM keeps in registers: at most the vector registers, and
    every loop that moves an access to them unrolled (by the schedule, or by LLVM: up to
    FULL_UNROLL iterations, a count that varies included, with an exit test after each
    copy) in every statement, so that each access has a constant index and SROA turns
    the buffer into values. The blur's first stage computed at each 4 x 16 tile of the
    second (a 6 x 16 buffer): no stack access in its assembly, 0.057 ms measured against
    0.072 for 16 x 64 tiles (a 72-vector buffer in memory), which the model had ranked
    the other way; at 6-row tiles, the last one clipped to 4, its 8 x 16 buffer is in
    registers too (0.055 ms, where the model had predicted 0.134)."""
    lanes = max(1, tgt.vector_lanes("float32"))
    ok: dict[str, bool] = {}
    for st in stmts:
        kinds = _as_compiled(st, [lp.kind for lp in st.e.loops])
        for name, _, local, m, size in st.accesses:
            if not local:
                continue
            elems, prefix = st.local_elems.get(name, (1 << 30, 0))
            vectors = -(-elems * size // (lanes * 4))
            fits = vectors <= tgt.vector_registers and all(
                kinds[d] in (LoopKind.UNROLLED, LoopKind.VECTORIZED) or
                st.trips[d] <= FULL_UNROLL and (st.constant[d] or not st.divided_bounds(d))
                for d in range(prefix, st.n) if st.footprint(m, d) != st.footprint(m, d - 1))
            ok[name] = ok.get(name, True) and fits
    return {name for name, fits in ok.items() if fits}


def _statement(st: _Stmt, tgt, resident: dict[str, int] | None = None,
               promoted: set[str] = frozenset()) -> StatementCost:
    e, n, trips = st.e, st.n, st.trips
    lanes = max(1, tgt.vector_lanes("float32"))
    cores = tgt.cores
    cpu = tgt.cpu_model
    kinds = _as_compiled(st, [lp.kind for lp in e.loops])
    for name, _, local, m, _ in st.accesses:
        if local and name in promoted:
            # the loops that move a buffer kept in registers are unrolled (that is how
            # its indices became constants)
            for d in range(st.local_elems[name][1], n):
                if kinds[d] is LoopKind.SERIAL and st.footprint(m, d) != st.footprint(m, d - 1):
                    kinds[d] = LoopKind.UNROLLED
    iters = [1]
    for t in trips:
        iters.append(iters[-1] * t)            # iters[d + 1]: iterations of loops 0..d
    instances = iters[-1]
    # the register block: inside the innermost loop that is not unrolled / vectorised
    r = max((d for d in range(n) if kinds[d] not in (LoopKind.UNROLLED, LoopKind.VECTORIZED)),
            default=-1)
    v = 1
    if n and kinds[-1] is LoopKind.VECTORIZED:
        v = min(lanes, trips[-1])
    autovec = 1
    distance = _carry_distance(st, r)         # None: loop r carries no recurrence
    carried = distance is not None
    minmax = v == 1 and r >= 0 and trips[r] >= lanes and _minmax_along(st, r)
    if v == 1 and r >= 0 and trips[r] >= lanes and not carried and \
            (minmax or _llvm_vectorises(st, r)):
        autovec = lanes          # LLVM's vectoriser: one block does `lanes` iterations of r
    block = iters[-1] // iters[r + 1]
    p0 = next((d for d in range(n) if kinds[d] is LoopKind.PARALLEL), None)
    ops, reads = _arith(e.stmt.body, lambda names: (
        _moving_vars(st, r, names), _moving_vars(st, n - 1, names) if v > 1 else set()))
    arith = block * ops / v
    loads = stores = rows = 0.0      # rows: the vectors along a tensor's last axis
    chain = 0.0
    strided = 0.0
    # vector runs that straddle their vectors (isl: the runs whose first value is not a
    # multiple of the vector width — a tile whose columns the vector split, made from
    # column 0, does not divide): their accesses are masked, and a local accumulator
    # indexed by them is no register tile (a 28-column tile of a batched matmul split by
    # 16: 2.0 ms measured where 32 columns ran 0.07 and the model had said 0.10). A
    # row's last vector that stops short (28 columns of a 28-column image) starts on a
    # multiple: a register tile still (the code generator masks that vector whole),
    # counted below as a row end.
    straddle = 0.0
    if n >= 2 and kinds[-1] is LoopKind.VECTORIZED and v > 1 and e.own_start > 0:
        # (a stage at root splits its own axes from 0: its vectors cannot straddle)
        width = min(lanes, e.loops[-1].max_extent or lanes)
        if width > 1:
            first = isl.Map.from_range(st.prefix[-1].range()).move_dims(
                isl.dim_type.in_, 0, isl.dim_type.out, 0, n - 1).lexmin()
            off = isl.Set(f"{{ [x] : x mod {width} > 0 }}").align_params(first.get_space())
            off = first.intersect_range(off)
            if not off.is_empty() and st.runs(n - 2):
                straddle = min(1.0, _val(off.domain().count_val()) / st.runs(n - 2))
    # a local accumulator tile larger than the registers (a tile factor a mutation moved
    # to 128 x 8 vectors: predicted 0.14 ms, measured 1.06, its build 4.7 s) spills: each
    # update a load and a store, chained through memory
    spilled = {name for name, write, local, m, _ in st.accesses
               if write and local and r >= 0 and st.footprint(m, r) == st.footprint(m, r - 1)
               and (_count(st.footprint(m, r)) / v > tgt.vector_registers - 2 or
                    straddle > 0.05)}
    for (name, write, local, m, size), stride in zip(st.accesses, st.strides):
        in_regs = local and name not in spilled
        box = st.footprint(m, r)
        if (v > 1 or autovec > 1) and n and not local:     # (a local buffer is compact)
            # the vector lanes along a dimension other than the last: one access per lane,
            # each in its own line; a store whose lanes are a multiple of 4 KiB apart puts
            # them in one L1 set, which they thrash (m_rf[lane, row] of a rfactor with the
            # lanes outermost: ~350 cycles a vector measured)
            moving = _moving(st, m)
            step = stride[moving[-1]] if moving and stride else size
            if step != size:
                lanes_ = v if v > 1 else autovec
                per = CONFLICT_CYCLES if write and step % 4096 == 0 else 1
                strided += lanes_ * per * (block / lanes_ if v > 1 else 1)
        kept = r >= 0 and box == st.footprint(m, r - 1)     # the same elements across loop r
        if kept and write:
            # an accumulator updated across loop r: a dependent chain, in registers when it
            # is a local buffer (cache_write), else through memory (LLVM does not keep a
            # tensor's elements in registers across a loop: a store, then a load forwarded)
            # — except a max or min along loop r, which LLVM vectorises into a register
            acc_vectors = max(1.0, _count(box) / v)
            latency = cpu.fma_latency if in_regs or minmax else cpu.forward_latency
            if _is_minmax(st):
                # max/min propagate NaN as numpy does: a compare, a blend and the max
                # depend on each other (three steps a vector; fmax/fmin, NaN ignored, are
                # one vmaxps); LLVM's own vectorisation of the loop (`minmax`) keeps
                # INTERLEAVE accumulators, a rfactor one
                latency = (MINMAX_LATENCY if _nan_propagating(st) else cpu.fma_latency) / \
                    (INTERLEAVE if minmax else 1)
            chain = max(chain, latency * (block / v) / acc_vectors)
            if in_regs or minmax:
                continue
        if kept and (in_regs or minmax) and not write and \
                any(w and mm is not m and nm == name for nm, w, _, mm, _ in st.accesses):
            continue                           # the accumulator's read
        if local and name in promoted and name not in spilled:
            continue                           # a value in a register (`_promoted`)
        vec = _count(box)
        # vectors along the last axis: the vector loop moves the access along it (not a
        # value broadcast to the lanes, as a convolution's input to a tile of output
        # channels: counted as vectors of its 16-column window, that read came to 252
        # loads a block for 14 columns where LLVM makes 126 broadcasts, and ranked the
        # 14-column tile (0.134 ms measured) behind the 7-column one (0.161), Zen 5)
        along = v > 1 and box and box[-1] >= v and len(box) - 1 in _moving(st, m)
        if along:
            vec = _count(box[:-1]) * -(-box[-1] // v)
            rows += vec
            if not write and reads[name] > 1:
                # several reads of one tensor at shifted columns (a stencil's X[i, j + 1]):
                # a load a read a vector, not the distinct vectors of their footprint. A
                # single read is loaded once a vector of its footprint (a matmul tile's
                # row of B serves its every row; a convolution's weights every column)
                vec = max(vec, reads[name] * block / v)
        elif v == 1 and autovec > 1 and box:            # LLVM's vectors of loop r
            along = len(box) - 1 in _moving(st, m)
        width = (v if v > 1 else autovec) * size
        if along and not write and not local and width >= LINE_BYTES and \
                _split(st, m, r, size, stride):
            vec *= 2                     # each vector spans two cache lines: two loads
        if write:
            stores += vec
        else:
            loads += vec
    if carried:
        # a recurrence (y[j] from y[j - 1]) carried by loop r: each block waits for the
        # last, unless loop r is short enough for the out-of-order window to overlap the
        # chains of several of its executions (a tile of rows, each a short recurrence).
        # When loop r - 1 carries one too (u[i, j] from u[i - 1, j] and u[i, j - 1]), row
        # i + 1 can run one element behind row i: the rows that fit the window at once
        # overlap (a wavefront's tiles of 16 columns: 1.0 ms against 1.5-1.8 for 64-128,
        # 2-core Xeon)
        per = ops + loads + stores + 1
        if r > 0 and _carried(st, r - 1):
            window = 1.0 / max(1.0, min(trips[r - 1], cpu.ooo_window / (trips[r] * per)))
        else:
            window = min(1.0, trips[r] * per / cpu.ooo_window)
        # under a fused loop the indices are divisions of its counter, so LLVM does not see
        # that the element read is the one the last iteration stored: through memory (not
        # when a parallel loop lies between: its tasks see the fused counter as a constant)
        inner = e.loops[(p0 + 1 if p0 is not None and p0 < r else 0):r + 1]
        latency = cpu.fma_latency * _chain_ops(st) + (cpu.forward_latency if any(
            lp.name.endswith(".fused") for lp in inner) else 0)
        # a dependence d iterations of loop r apart (a time step under a loop fused with
        # the row's vectors: 255 apart) leaves d - 1 independent blocks between: each
        # waits for 1/d of the chain (the heat stencil fused so: 0.028 ms measured, as
        # fast as unfused, where the chain at distance 1 predicted 0.088)
        chain = max(chain, latency * window / distance)
    # the loop's own instructions, once a block (LLVM's vector loop, autovec, runs
    # INTERLEAVE vectors an iteration), issue with the block's arithmetic, loads and stores,
    # the core's issue width a cycle: they cost where the block is short (the heat stencil's rows of
    # one vector) and hide under a block bound by its loads (the blur's nine a vector: its
    # row-wise variants, loops of 1, 2, 4 or 8 vectors, measured within 4 %; an added cycle
    # a block had spread them 7 % and ranked the fastest last)
    overhead = (1 / INTERLEAVE if autovec > 1 else 1) if r >= 0 else 0
    # the pipes and ports at the block's vector width (Zen 4 runs 512-bit ones as halves)
    bits = min(tgt.vector_bits, 32 * max(v, autovec)) if tgt.vector_bits else 32
    throughput = (arith / cpu.per_cycle(cpu.fma_pipes, bits),
                  loads / cpu.per_cycle(cpu.load_ports, bits),
                  stores / cpu.per_cycle(cpu.store_ports, bits))
    ops = (arith + loads + stores) / cpu.issue_width
    loop_ops = LOOP_OPS * overhead / cpu.issue_width
    base = max(*throughput, chain, ops + loop_ops)
    cycles = base + strided
    if n and kinds[-1] is LoopKind.VECTORIZED and v > 1:
        # a row whose length the vector loop does not divide ends in a masked vector
        # (and a store that the next row's loads cannot forward from)
        row = next((st.footprint(m, -1)[-1] for _, w, _, m, _ in st.accesses if w and
                    _moving(st, m) == [len(st.footprint(m, -1)) - 1]), 0)
        if straddle:
            # straddling runs of the vector loop: their vectors are masked (a stage
            # computed at a 56-column tile, split by 16 from column 0 of its own: 0.28 ms
            # measured on the blur where whole vectors predicted 0.07 and ran 0.06)
            cycles += straddle * rows * MASKED_CYCLES
        elif row % v:
            cycles += rows / -(-row // v) * MASKED_CYCLES
    if autovec > 1:              # vector iterations, then the remainder one by one
        blocks = iters[r] * (trips[r] // autovec + trips[r] % autovec)
    else:
        blocks = iters[r + 1]
    compute_cycles = cycles * blocks
    if r >= 0 and autovec == 1 and not all(st.constant[r + 1:]):
        # the block's own loops vary in count (a stage computed at a tile whose column
        # window its vectors straddle): the representative block is the middle one, not
        # the average; the average block holds isl's instances over its count of blocks.
        # The blur's first stage at 96-column tiles, its own columns split by 128: 4
        # vectors the middle block, 5.8 on average, and its time 30 % low, ranked above
        # tiles that ran 0.055 ms against its 0.075
        runs = st.runs(r)
        if runs:
            compute_cycles *= st.runs(n - 1) / runs / (iters[-1] / iters[r + 1])
    # each run of a loop outside the block ends in its exit branch: mispredicted when the
    # loop is long or its trip count varies (a stage computed at a tile, clipped to its
    # window), predicted for a short loop of a constant count. A first stage computed at
    # the second's tile of 16 or 32 columns runs such loops a tile: measured 0.10-0.20 ms
    # on the blur where the blocks alone predicted 0.10-0.16 in another order
    compute_cycles += sum(iters[d] * (cpu.mispredict_cycles if not st.constant[d] or
                                      trips[d] > PREDICTED_TRIPS else 1)
                          for d in range(1, r + 1))
    # parallelism: the outermost parallel loop
    p = next((d for d in range(n) if kinds[d] is LoopKind.PARALLEL), None)
    used, imbalance, forks = 1, 1.0, 0
    if p is not None:
        used = min(cores, trips[p])
        rounds = -(-trips[p] // used)
        imbalance = rounds * used / trips[p]
        forks = iters[p]
    traffic = _traffic(st, tgt, resident or {})
    lost = _set_conflict_lines(st, r, iters, tgt)
    stalls = _tile_conflicts(st, r, iters, tgt) * TILE_CONFLICT_CYCLES
    exact = _exact_rounds(st, p, iters[p + 1], cores) if p is not None else None
    if exact is not None:
        scale, imbalance, forks, used = exact
        compute_cycles *= scale
        traffic = [int(t * scale) for t in traffic]
        lost *= scale
        stalls *= scale
    elif r >= 0 and not all(st.constant[:r + 1]):
        # loops whose trip count varies (a stage computed at a tile, its rows clipped to
        # the tile's window): the representative iteration's trips are the middle ones,
        # not the average; the blocks the nest really runs are isl's count of loops 0..r
        scale = st.runs(r) / iters[r + 1]
        compute_cycles *= scale
        traffic = [int(t * scale) for t in traffic]
        lost *= scale
        stalls *= scale
    # a tile's lost lines come back from L2 while the core waits, unless the block waits on
    # its own chain anyway (a wavefront's recurrence: its tiles of 64 x 16 elements, 64
    # rows a set, ran fastest of its sample), where they overlap like any traffic
    chained = chain > max(*throughput, ops + loop_ops)
    if not chained:
        compute_cycles += stalls
    compute_s = compute_cycles / cpu.clock_hz / used * imbalance
    cycle_s = blocks * (compute_s / compute_cycles if compute_cycles else 0.0)
    rates = (cpu.l2_bytes_per_cycle, tgt.l3_bytes_per_cycle)
    # DRAM's bandwidth is the machine's, and one core draws a share of it only (the misses
    # it keeps in flight): a transposed copy from DRAM ran 25.6 ms on one core, 12.3 on two
    # (Zen 5), where the model had them level and the declared loop nest among the fast
    memory = tuple(traffic[k] / (rates[k] * cpu.clock_hz * used) * imbalance
                   for k in range(2)) + \
        (traffic[2] / min(cpu.dram_bytes_per_s, cpu.dram_core_bytes_per_s * used),)
    overlapped = lost * SET_CONFLICT_CYCLES + (stalls if chained else 0.0)
    if overlapped:
        memory = (memory[0] + overlapped / cpu.clock_hz / used * imbalance,) + memory[1:]
    block_text = (f"{iters[r + 1] // max(autovec, 1)} blocks x {cycles:.1f} cycles (arith "
                  f"{arith:.0f}, loads {loads:.0f}, stores {stores:.0f}, chain {chain:.1f}, "
                  f"strided {strided:.0f}, v {v}/{autovec})")
    key = tuple(e.path[:r + 2]) if r >= 0 and autovec == 1 else None
    return StatementCost(e.orig, instances, compute_s, memory, tuple(traffic), used, forks,
                         block_text, p == 0, key,
                         (*throughput, chain, cycles - base, loop_ops, ops), cycle_s)


def _exact_rounds(st: _Stmt, p: int, rep: int, cores: int):
    """A parallel loop p whose number of iterations varies with the loops around it (a
    skewed wavefront: one tile on the first anti-diagonal, the most in the middle one, which
    is the representative iteration): enumerate the values of loops 0..p (isl, when at most
    EXACT_POINTS) for (true / representative instances, the imbalance of the rounds the
    cores run, the launches, the cores used). None when the nest is rectangular."""
    rng = st.prefix[p].range()
    box = _box(rng)
    if not box or _count(box) > EXACT_POINTS:
        return None
    total = _val(rng.count_val())
    if total == rep or total == 0:
        return None
    counts: dict[tuple, int] = {}

    def visit(pt):
        key = tuple(_val(pt.get_coordinate_val(isl.dim_type.set, k)) for k in range(p))
        counts[key] = counts.get(key, 0) + 1
    rng.foreach_point(visit)
    used = min(cores, max(counts.values()))
    rounds = sum(-(-c // used) for c in counts.values())
    return total / rep, rounds * used / total, len(counts), used


def _as_compiled(st: _Stmt, kinds: list) -> list:
    """The loop kinds as the code generator and LLVM leave them: a parallel loop inside
    another runs serially in each task (`codegen`: one level of threads); innermost serial
    loops of a few constant iterations (a 3 x 3 window) are unrolled completely."""
    kinds = list(kinds)
    outer = next((d for d in range(len(kinds)) if kinds[d] is LoopKind.PARALLEL), len(kinds))
    kinds[outer + 1:] = [LoopKind.SERIAL if k is LoopKind.PARALLEL else k
                         for k in kinds[outer + 1:]]
    body = 1
    for d in range(st.n - 1, -1, -1):
        if kinds[d] in (LoopKind.UNROLLED, LoopKind.VECTORIZED):
            continue
        if kinds[d] is LoopKind.SERIAL and st.trips[d] <= SMALL_LOOP and st.constant[d] and \
                body * st.trips[d] <= SMALL_LOOP * SMALL_LOOP:
            body *= st.trips[d]
            kinds[d] = LoopKind.UNROLLED
            continue
        break
    return kinds


def _chain_ops(st: _Stmt) -> int:
    """Dependent arithmetic instructions from a recurrence's read of its own tensor to the
    value stored: additions, subtractions, divisions and calls on the path (a multiply
    fuses into the add after it; a select on the loop counter, `j >= 1`, LLVM peels off).
    u[i-1, j] and u[i, j-1] summed, halved and added to x: two."""
    mine = {id(x.buffer) for x in walk_stmt(st.e.stmt.body) if isinstance(x, Store)}

    def depth(e) -> int | None:
        if isinstance(e, Load):
            return 0 if id(e.buffer) in mine else None
        kids = [d for d in [depth(c) for c in e.children] if d is not None]
        if not kids:
            return None
        own = 1 if isinstance(e, (Add, Sub, Div, Call)) and e.dtype.is_float else 0
        return max(kids) + own

    best = [depth(x.value) for x in walk_stmt(st.e.stmt.body) if isinstance(x, Store)]
    return max([d for d in best if d is not None] + [1])


def _minmax_value(st: _Stmt):
    stores = [x for x in walk_stmt(st.e.stmt.body) if isinstance(x, Store)]
    return stores[0].value if len(stores) == 1 else None


def _is_minmax(st: _Stmt) -> bool:
    """A max or min update: NaN-propagating (Max, Min) or NaN-ignoring (fmax, fmin)."""
    v = _minmax_value(st)
    return isinstance(v, (Max, Min)) or \
        (isinstance(v, Call) and v.name in ("fmax", "fmin"))


def _nan_propagating(st: _Stmt) -> bool:
    return isinstance(_minmax_value(st), (Max, Min))


def _minmax_along(st: _Stmt, r: int) -> bool:
    """A max or min reduction carried by loop r (softmax's row maximum as declared), which
    LLVM's vectoriser takes: lane-wise maxima in a register, combined after the loop."""
    if not _is_minmax(st):
        return False
    kept = [m for _, w, _, m, _ in st.accesses if w and
            st.footprint(m, r) == st.footprint(m, r - 1)]
    return bool(kept)


def _llvm_vectorises(st: _Stmt, r: int) -> bool:
    """Whether LLVM's loop vectoriser takes loop r (serial, everything inside it unrolled)
    by itself: the written element moves along memory with it, one element per iteration
    (so no accumulator is carried by it)."""
    for _, write, _, m, _ in st.accesses:
        if write:
            inner = st.footprint(m, r - 1)
            if not inner or inner[-1] != st.trips[r] or _count(inner[:-1]) != 1:
                return False
    return True


def _split(st: _Stmt, m: isl.Map, r: int, size: int, stride) -> bool:
    """Whether the vectors of a line-wide vector load along the last axis start off a line
    boundary (each then reads two lines, as two loads): its first lane's index is not a
    multiple of a line, or the rows of the tensor are not a whole number of lines apart (a
    row of 1026 floats: most rows start mid-line). A stencil's shifted reads X[i, j + 1]
    are. Measured on a 2-core Zen 4: a 3x3 blur with its nine loads a vector split ran at
    the speed of eighteen (0.165 ms against the model's 0.065 without them)."""
    line = max(1, LINE_BYTES // size)
    if st.first_last_index(m, r) % line:
        return True
    return any(x % LINE_BYTES for x in (stride or ())[:-1])
