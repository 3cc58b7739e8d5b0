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

The register block's cycles are compute.py's, the cores of a parallel loop parallel.py's,
the traffic traffic.py's; this module puts them together (`_statement`) and sums them.
A statement's time is a smooth maximum (`_overlap`: they overlap imperfectly) of its
instruction time on the cores its parallel loop occupies (with the load imbalance of the
last round; a skewed wavefront's anti-diagonals, which hold different numbers of tiles, are
enumerated with isl for the true count, launches and rounds) and its traffic at each level
over that level's bandwidth, plus a fork per launch of a parallel loop; a program's time is the
sum over its statements. The machine comes from `tl.Target` (vector lanes, registers,
caches, cores), so a cross target is modelled without running anything.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# the public part (docs/api): the rest is the model's machinery
__all__ = ["CostReport", "StatementCost", "estimate"]

from ..ir.stmt import LoopKind
from .compute import as_compiled, register_block
from .parallel import ParallelLoop, parallel_loop
from .placed import PlacedStatement, placed_statements
from .traffic import resident_reads, set_conflict_lines, tile_conflicts, traffic_bytes

# The machine's facts (clock, pipes, ports, latencies, bandwidths, caches) come from the
# target's CPU model (`Target.cpu_model`, tensorlang/cpus.py); what follows are LLVM's habits
# and the model's own fitted weights (the register block's: compute.py).
FORK_S = 0.5e-6           # one launch of a parallel loop, its workers spinning (in a loop)
OVERLAP_NORM = 4          # compute and traffic overlap as the 4-norm of their times
SET_CONFLICT_CYCLES = 10  # a line lost to a set's conflicts and fetched again from L2
TILE_CONFLICT_CYCLES = 5  # ... a tile's line (`tile_conflicts`): the core waits for it
FULL_UNROLL = 16          # LLVM unrolls a loop of up to this many iterations whole (`_promoted`)


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


def estimate(s, target) -> CostReport:
    """The model's time of schedule `s` on `target` (see the module)."""
    from ..target import Target

    tgt = target if isinstance(target, Target) else Target.parse(target)
    stmts = placed_statements(s)
    resident = resident_reads(stmts, tgt)
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
    with the loop's own instructions once — not the sum of each statement's maximum (the
    blur's first stage at each small tile of the second, kept in registers: the second's
    loads are free and the first's arithmetic fills their slots, so such tiles rank above
    the larger ones whose buffer is in memory, as they run). Each statement's compute time
    falls by its share."""
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


def _promoted(stmts: list[PlacedStatement], tgt) -> set[str]:
    """Local buffers that LLVM keeps in registers: at most the vector registers, and
    every loop that moves an access to them unrolled (by the schedule, or by LLVM: up to
    FULL_UNROLL iterations, a count that varies included, with an exit test after each
    copy) in every statement, so that each access has a constant index and SROA turns
    the buffer into values. The blur's first stage computed at each 4 x 16 tile of the
    second (a 6 x 16 buffer) has no stack access in its assembly and runs faster than at
    16 x 64 tiles (a 72-vector buffer in memory); at 6-row tiles, the last one clipped to
    4, its 8 x 16 buffer is in registers too. A model that counts such a buffer's
    accesses as memory ranks these tiles the wrong way."""
    lanes = max(1, tgt.vector_lanes("float32"))
    ok: dict[str, bool] = {}
    for st in stmts:
        kinds = as_compiled(st, [lp.kind for lp in st.e.loops])
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


def _statement(st: PlacedStatement, tgt, resident: dict[str, int] | None = None,
               promoted: set[str] = frozenset()) -> StatementCost:
    """The cost of one placed statement: its register block's cycles (compute.py), on the
    cores its parallel loop occupies (parallel.py), beside its traffic at each cache level
    (`_memory_seconds`); all scaled from the representative iteration to the blocks the
    nest really runs (`_true_scale`)."""
    cpu = tgt.cpu_model
    b = register_block(st, tgt, promoted)
    lp = b.loops
    par = parallel_loop(st, lp.kinds, lp.iters, tgt.cores)
    traffic = traffic_bytes(st, tgt, resident or {})
    lost = set_conflict_lines(st, lp.r, lp.iters, tgt)
    stalls = tile_conflicts(st, lp.r, lp.iters, tgt) * TILE_CONFLICT_CYCLES
    compute_cycles = b.compute_cycles
    scale = _true_scale(st, lp.r, lp.iters, par)
    if scale is not None:
        compute_cycles *= scale
        traffic = [int(t * scale) for t in traffic]
        lost *= scale
        stalls *= scale
    # a tile's lost lines come back from L2 while the core waits, unless the block waits on
    # its own chain anyway (a wavefront's recurrence), where they overlap like any traffic
    if not b.chained:
        compute_cycles += stalls
    compute_s = compute_cycles / cpu.clock_hz / par.used * par.imbalance
    cycle_s = b.blocks * (compute_s / compute_cycles if compute_cycles else 0.0)
    memory = _memory_seconds(traffic, lost * SET_CONFLICT_CYCLES +
                             (stalls if b.chained else 0.0), tgt, par)
    return StatementCost(st.e.orig, lp.iters[-1], compute_s, memory, tuple(traffic), par.used,
                         par.forks, b.text, par.loop == 0, b.key(st), b.parts, cycle_s)


def _true_scale(st: PlacedStatement, r: int, iters: list[int],
                par: ParallelLoop) -> float | None:
    """The blocks the nest runs over those of its representative iteration (None: the
    same): a wavefront's, enumerated (`parallel._exact_rounds`); else, where the loops
    around the block vary in count (a stage computed at a tile, its rows clipped to the
    tile's window), isl's count of loops 0..r — the representative iteration's trips are
    the middle ones, not the average."""
    if par.scale is not None:
        return par.scale
    if r >= 0 and not all(st.constant[:r + 1]):
        return st.runs(r) / iters[r + 1]
    return None


def _memory_seconds(traffic: list[int], overlapped: float, tgt,
                    par: ParallelLoop) -> tuple[float, ...]:
    """Seconds of the traffic into L1 and L2, each at its rate on the cores in use, and
    from DRAM; `overlapped`: cycles of lines fetched again from L2 (set conflicts) that
    overlap like L1 traffic."""
    cpu, used, imbalance = tgt.cpu_model, par.used, par.imbalance
    rates = (cpu.l2_bytes_per_cycle, tgt.l3_bytes_per_cycle)
    # DRAM's bandwidth is the machine's, and one core draws a share of it only (the misses
    # it keeps in flight)
    memory = tuple(traffic[k] / (rates[k] * cpu.clock_hz * used) * imbalance
                   for k in range(2)) + \
        (traffic[2] / min(cpu.dram_bytes_per_s, cpu.dram_core_bytes_per_s * used),)
    if overlapped:
        memory = (memory[0] + overlapped / cpu.clock_hz / used * imbalance,) + memory[1:]
    return memory
