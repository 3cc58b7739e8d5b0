"""The cost model's compute part: the cycles of a statement's register block and of the
loop nest that runs it (`register_block`; `cost` adds the cores and the memory traffic).

The *register block* is the body of the innermost loop that is neither unrolled nor
vectorised (`BlockLoops`): its arithmetic (a multiply feeding an add is one fused
instruction; exp, log, division cost more, `_arith`) over the vector lanes of the
innermost vectorised loop; its loads and stores (`_access_counts`: the block's distinct
vectors — a register tile loads each row value once for all its columns — or one per read
for reads at shifted columns, two for a line-wide vector that starts mid-line; an
accumulator kept across the block's loop stays in a register); the dependent chain of an
accumulator or a recurrence (`_recurrence_chain`). A block takes the largest of these
at the core's pipes and ports (`_block_cycles`); the nest runs its blocks and pays an exit
branch a run of each loop around them (`_nest_cycles`).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import islpy as isl

from ..ir.expr import (Add, And, Call, CmpOp, Div, Expr, Load, Max, Min, Mul, Not, Or,
                       Select, Sub, Var)
from ..ir.stmt import LoopKind, Store
from ..ir.visit import walk, walk_stmt
from ..polyhedral.affine import interval_condition
from .placed import (PlacedStatement, box_size, carries_recurrence, carry_distance,
                     int_value, moving_dims, moving_vars)
from .traffic import LINE_BYTES

# LLVM's habits and the model's own weights (the machine's facts come from the target's
# CPU model, `Target.cpu_model`)
LOOP_OPS = 2              # a loop's own instructions an iteration: increment, compare-branch
MINMAX_LATENCY = 7        # a NaN-propagating max: compare, blend, max, dependent
INTERLEAVE = 4            # accumulators LLVM's loop vectoriser keeps for a reduction
CALL_COST = {"exp": 16, "log": 20, "tanh": 30, "erf": 30, "sigmoid": 20, "sqrt": 6,
             "rsqrt": 6, "pow": 40, "sin": 30, "cos": 30, "fmax": 1, "fmin": 1,
             "fmax_any": 1}
MASKED_CYCLES = 10        # a masked vector load or store (a row's partial last vector)
CONFLICT_CYCLES = 20      # a lane of a vector store whose lanes are 4 KiB apart (L1 sets)
SMALL_LOOP = 4            # LLVM unrolls innermost loops this short completely
PREDICTED_TRIPS = 32      # a loop of a constant trip count up to this: its exit predicted


@dataclass
class BlockLoops:
    """Which loop of a statement is its register block's, and how it is vectorised."""

    kinds: list               # the loop kinds as compiled (`as_compiled`; promoted buffers'
                              # loops unrolled)
    iters: list[int]          # iters[d + 1]: iterations of loops 0..d (representative trips)
    r: int                    # the block's loop: the innermost neither unrolled nor
                              # vectorised (-1: the whole statement is one block)
    v: int                    # lanes of the schedule's vector loop (1: none)
    autovec: int              # lanes of LLVM's own vectorisation of loop r (1: none)
    minmax: bool              # loop r carries a max or min that LLVM vectorises
    distance: int | None      # iterations of loop r a recurrence spans (None: none)
    block: int                # instances in one block


@dataclass
class Accesses:
    """A register block's memory instructions, in vectors (`_access_counts`)."""

    loads: float = 0.0
    stores: float = 0.0
    rows: float = 0.0         # vectors along a tensor's last axis
    strided: float = 0.0      # cycles of lanes accessed one by one (a vector across rows)
    chain: float = 0.0        # cycles of an accumulator's dependent updates


@dataclass
class RegisterBlock:
    """A statement's register block: its parts in cycles and the nest's cycles in all."""

    loops: BlockLoops
    arith: float              # arithmetic instructions a block
    accesses: Accesses
    chain: float              # the longest dependent chain a block, cycles
    throughput: tuple         # cycles a block at the FMA pipes, load ports, store ports
    issue: float              # cycles to issue the block's operations
    loop_ops: float           # cycles to issue the block loop's own instructions
    base: float               # the block's cycles before the additive ones
    cycles: float             # the block's cycles (strided lanes, masked vectors added)
    blocks: int               # blocks the nest runs
    compute_cycles: float     # the nest's cycles: its blocks and its loops' exits

    @property
    def chained(self) -> bool:
        """Whether the block waits on its dependent chain rather than on issue."""
        return self.chain > max(*self.throughput, self.issue + self.loop_ops)

    @property
    def parts(self) -> tuple:
        """(arithmetic, loads, stores, chain, additive cycles, loop issue, operation issue):
        what `cost._shared_blocks` adds up over statements that share a block."""
        return (*self.throughput, self.chain, self.cycles - self.base, self.loop_ops,
                self.issue)

    def key(self, st: PlacedStatement) -> tuple | None:
        """The block's loop, as the statement's path to it (None when LLVM's vectoriser
        makes the block): statements with the same key share one block."""
        lp = self.loops
        return tuple(st.e.path[:lp.r + 2]) if lp.r >= 0 and lp.autovec == 1 else None

    @property
    def text(self) -> str:
        lp, a = self.loops, self.accesses
        return (f"{lp.iters[lp.r + 1] // max(lp.autovec, 1)} blocks x {self.cycles:.1f} "
                f"cycles (arith {self.arith:.0f}, loads {a.loads:.0f}, stores "
                f"{a.stores:.0f}, chain {self.chain:.1f}, strided {a.strided:.0f}, v "
                f"{lp.v}/{lp.autovec})")


def register_block(st: PlacedStatement, tgt, promoted: set[str] = frozenset()) -> RegisterBlock:
    """The register block of `st` on `tgt` and the cycles of the nest that runs it (see
    the module); `promoted`: the local buffers LLVM keeps in registers."""
    if st.instruction is not None:
        return _instruction_block(st, tgt)
    lp = block_loops(st, tgt, promoted)
    ops, reads = _arith(st.e.stmt.body, lambda names: (
        moving_vars(st, lp.r, names),
        moving_vars(st, st.n - 1, names) if lp.v > 1 else set()))
    arith = lp.block * ops / lp.v
    straddle = _straddle(st, lp, tgt)
    acc = _access_counts(st, tgt, lp, reads, straddle, promoted)
    chain = acc.chain
    if lp.distance is not None:
        chain = max(chain, _recurrence_chain(st, lp, tgt.cpu_model,
                                             ops + acc.loads + acc.stores + 1))
    throughput, issue, loop_ops, base, cycles = _block_cycles(st, tgt, lp, arith, acc, chain,
                                                              straddle)
    blocks, compute_cycles = _nest_cycles(st, tgt.cpu_model, lp, cycles)
    return RegisterBlock(lp, arith, acc, chain, throughput, issue, loop_ops, base, cycles,
                         blocks, compute_cycles)


def _instruction_block(st: PlacedStatement, tgt) -> RegisterBlock:
    """The register block of a statement whose loops from `st.instruction` on are one use
    of a backend's instruction (`tensorize`): the block is the innermost loop outside
    them that is not unrolled; each use is one instruction at the FMA pipes, at the width
    of its sums; each operand loads its distinct blocks of one use a block (a register
    tile's row of b serves its every row), and sums kept across the block's loop stay in
    registers where they fit (LLVM promotes them: a dependent chain of the instruction's
    latency a use). Uses that a partial box leaves to plain code are not counted."""
    d, n, trips, cpu = st.instruction, st.n, st.trips, tgt.cpu_model
    kinds = as_compiled(st, [lp.kind for lp in st.e.loops])
    kinds[d:] = [LoopKind.UNROLLED] * (n - d)
    iters = [1]
    for t in trips:
        iters.append(iters[-1] * t)
    r = max((x for x in range(d) if kinds[x] not in (LoopKind.UNROLLED, LoopKind.VECTORIZED)),
            default=-1)
    uses = iters[d] // iters[r + 1]
    lp = BlockLoops(kinds, iters, r, trips[d] if d < n else 1, 1, False, None,
                    iters[-1] // iters[r + 1])
    acc = Accesses()
    written = {name for name, write, *_ in st.accesses if write}
    bits = 32
    for name, write, _, m, size in st.accesses:
        one = max(1, box_size(st.footprint(m, d - 1)))       # what one use touches
        blocks = max(1.0, box_size(st.footprint(m, r)) / one)
        if name in written:
            bits = max(bits, min(tgt.vector_bits or 32, one * size * 8))
            kept = r >= 0 and st.footprint(m, r) == st.footprint(m, r - 1)
            if kept and blocks <= tgt.vector_registers - 2:
                if write:
                    acc.chain = max(acc.chain, cpu.fma_latency * uses / blocks)
                continue
        if write:
            acc.stores += blocks
        else:
            acc.loads += blocks
    throughput = (uses / cpu.per_cycle(cpu.fma_pipes, bits),
                  acc.loads / cpu.per_cycle(cpu.load_ports, bits),
                  acc.stores / cpu.per_cycle(cpu.store_ports, bits))
    issue = (uses + acc.loads + acc.stores) / cpu.issue_width
    loop_ops = (LOOP_OPS if r >= 0 else 0) / cpu.issue_width
    base = max(*throughput, acc.chain, issue + loop_ops)
    blocks, compute_cycles = _nest_cycles(st, cpu, lp, base)
    return RegisterBlock(lp, float(uses), acc, acc.chain, throughput, issue, loop_ops, base,
                         base, blocks, compute_cycles)


def block_loops(st: PlacedStatement, tgt, promoted: set[str] = frozenset()) -> BlockLoops:
    """The loops of `st` as compiled and which of them is the register block's: the
    innermost loop neither unrolled nor vectorised (the loops that move a buffer LLVM keeps
    in registers count as unrolled); the schedule's vector lanes, and LLVM's own when it
    vectorises the block's loop by itself."""
    n, trips = st.n, st.trips
    lanes = max(1, tgt.vector_lanes("float32"))
    kinds = as_compiled(st, [lp.kind for lp in st.e.loops])
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
    r = max((d for d in range(n) if kinds[d] not in (LoopKind.UNROLLED, LoopKind.VECTORIZED)),
            default=-1)
    v = 1
    if n and kinds[-1] is LoopKind.VECTORIZED:
        v = min(lanes, trips[-1])
    autovec = 1
    distance = carry_distance(st, r)         # None: loop r carries no recurrence
    minmax = v == 1 and r >= 0 and trips[r] >= lanes and _minmax_along(st, r)
    if v == 1 and r >= 0 and trips[r] >= lanes and distance is None and \
            (minmax or _llvm_vectorises(st, r)):
        autovec = lanes          # LLVM's vectoriser: one block does `lanes` iterations of r
    return BlockLoops(kinds, iters, r, v, autovec, minmax, distance,
                      iters[-1] // iters[r + 1])


def _straddle(st: PlacedStatement, lp: BlockLoops, tgt) -> float:
    """The share of the vector loop's runs that straddle their vectors (isl: the runs
    whose first value is not a multiple of the vector width — a tile whose columns the
    vector split, made from column 0, does not divide): their accesses are masked, and a
    local accumulator indexed by them is no register tile. A row's last vector that stops
    short (28 columns of a 28-column image) starts on a multiple: a register tile still
    (the code generator masks that vector whole), counted as a row end (`_block_cycles`)."""
    n, e, v = st.n, st.e, lp.v
    lanes = max(1, tgt.vector_lanes("float32"))
    if n >= 2 and lp.kinds[-1] is LoopKind.VECTORIZED and v > 1 and e.own_start > 0:
        # (a stage at root splits its own axes from 0: its vectors cannot straddle)
        width = min(lanes, e.loops[-1].max_extent or lanes)
        if width > 1:
            first = isl.Map.from_range(st.prefix[-1].range()).move_dims(
                isl.dim_type.in_, 0, isl.dim_type.out, 0, n - 1).lexmin()
            off = isl.Set(f"{{ [x] : x mod {width} > 0 }}").align_params(first.get_space())
            off = first.intersect_range(off)
            if not off.is_empty() and st.runs(n - 2):
                return min(1.0, int_value(off.domain().count_val()) / st.runs(n - 2))
    return 0.0


def _access_counts(st: PlacedStatement, tgt, lp: BlockLoops, reads: Counter, straddle: float,
                   promoted: set[str]) -> Accesses:
    """The block's loads and stores, in vectors, per access: what stays in registers (a
    local accumulator, a promoted buffer) costs none; a vector along the last axis loads
    its footprint's distinct vectors (or one per read, for reads at shifted columns), two
    when it starts mid-line; lanes along another axis one access each. An accumulator
    updated across the block's loop adds its dependent chain."""
    r, v, autovec, block, minmax = lp.r, lp.v, lp.autovec, lp.block, lp.minmax
    n, cpu = st.n, tgt.cpu_model
    out = Accesses()
    # a local accumulator tile larger than the registers (a tile factor a mutation moved
    # to 128 x 8 vectors) spills: each update a load and a store, chained through memory
    spilled = {name for name, write, local, m, _ in st.accesses
               if write and local and r >= 0 and st.footprint(m, r) == st.footprint(m, r - 1)
               and (box_size(st.footprint(m, r)) / v > tgt.vector_registers - 2 or
                    straddle > 0.05)}
    for (name, write, local, m, size), stride in zip(st.accesses, st.strides):
        in_regs = local and name not in spilled
        box = st.footprint(m, r)
        if (v > 1 or autovec > 1) and n and not local:     # (a local buffer is compact)
            # the vector lanes along a dimension other than the last: one access per lane,
            # each in its own line; a store whose lanes are a multiple of 4 KiB apart puts
            # them in one L1 set, which they thrash (m_rf[lane, row] of a rfactor with the
            # lanes outermost)
            moving = moving_dims(st, m)
            step = stride[moving[-1]] if moving and stride else size
            if step != size:
                lanes_ = v if v > 1 else autovec
                per = CONFLICT_CYCLES if write and step % 4096 == 0 else 1
                out.strided += lanes_ * per * (block / lanes_ if v > 1 else 1)
        kept = r >= 0 and box == st.footprint(m, r - 1)     # the same elements across loop r
        if kept and write:
            # an accumulator updated across loop r: a dependent chain, in registers when it
            # is a local buffer (cache_write), else through memory (LLVM does not keep a
            # tensor's elements in registers across a loop: a store, then a load forwarded)
            # — except a max or min along loop r, which LLVM vectorises into a register
            acc_vectors = max(1.0, box_size(box) / v)
            latency = cpu.fma_latency if in_regs or minmax else cpu.forward_latency
            if _is_minmax(st):
                # max/min propagate NaN as numpy does: a compare, a blend and the max
                # depend on each other (three steps a vector; fmax/fmin, NaN ignored, are
                # one vmaxps); LLVM's own vectorisation of the loop (`minmax`) keeps
                # INTERLEAVE accumulators, a rfactor one
                latency = (MINMAX_LATENCY if _nan_propagating(st) else cpu.fma_latency) / \
                    (INTERLEAVE if minmax else 1)
            out.chain = max(out.chain, latency * (block / v) / acc_vectors)
            if in_regs or minmax:
                continue
        if kept and (in_regs or minmax) and not write and \
                any(w and mm is not m and nm == name for nm, w, _, mm, _ in st.accesses):
            continue                           # the accumulator's read
        if local and name in promoted and name not in spilled:
            continue                           # a value in a register (`cost._promoted`)
        vec = box_size(box)
        # vectors along the last axis: the vector loop moves the access along it (not a
        # value broadcast to the lanes, as a convolution's input to a tile of output
        # channels, which LLVM loads as one broadcast a column)
        along = v > 1 and box and box[-1] >= v and len(box) - 1 in moving_dims(st, m)
        if along:
            vec = box_size(box[:-1]) * -(-box[-1] // v)
            out.rows += vec
            if not write and reads[name] > 1:
                # several reads of one tensor at shifted columns (a stencil's X[i, j + 1]):
                # a load a read a vector, not the distinct vectors of their footprint. A
                # single read is loaded once a vector of its footprint (a matmul tile's
                # row of B serves its every row; a convolution's weights every column)
                vec = max(vec, reads[name] * block / v)
        elif v == 1 and autovec > 1 and box:            # LLVM's vectors of loop r
            along = len(box) - 1 in moving_dims(st, m)
        width = (v if v > 1 else autovec) * size
        if along and not write and not local and width >= LINE_BYTES and \
                _split(st, m, r, size, stride):
            vec *= 2                     # each vector spans two cache lines: two loads
        if write:
            out.stores += vec
        else:
            out.loads += vec
    return out


def _recurrence_chain(st: PlacedStatement, lp: BlockLoops, cpu, per: float) -> float:
    """Cycles a block waits on a recurrence (y[j] from y[j - 1]) carried by its loop r,
    `per` operations a block: each block waits for the last, unless loop r is short enough
    for the out-of-order window to overlap the chains of several of its executions (a tile
    of rows, each a short recurrence). When loop r - 1 carries one too (u[i, j] from
    u[i - 1, j] and u[i, j - 1]), row i + 1 can run one element behind row i: the rows
    that fit the window at once overlap (a wavefront's tiles)."""
    r, trips = lp.r, st.trips
    if r > 0 and carries_recurrence(st, r - 1):
        window = 1.0 / max(1.0, min(trips[r - 1], cpu.ooo_window / (trips[r] * per)))
    else:
        window = min(1.0, trips[r] * per / cpu.ooo_window)
    # under a fused loop the indices are divisions of its counter, so LLVM does not see
    # that the element read is the one the last iteration stored: through memory (not
    # when a parallel loop lies between: its tasks see the fused counter as a constant)
    p0 = next((d for d in range(st.n) if lp.kinds[d] is LoopKind.PARALLEL), None)
    inner = st.e.loops[(p0 + 1 if p0 is not None and p0 < r else 0):r + 1]
    latency = cpu.fma_latency * _chain_ops(st) + (cpu.forward_latency if any(
        x.name.endswith(".fused") for x in inner) else 0)
    # a dependence d iterations of loop r apart (a time step under a loop fused with the
    # row's vectors) leaves d - 1 independent blocks between: each waits for 1/d of the
    # chain
    return latency * window / lp.distance


def _block_cycles(st: PlacedStatement, tgt, lp: BlockLoops, arith: float, acc: Accesses,
                  chain: float, straddle: float) -> tuple:
    """(throughput at the pipes and ports, issue cycles of the operations and of the loop's
    own instructions, the largest of these and the chain, and that plus the additive
    cycles: strided lanes, masked vectors) of one block."""
    cpu, n, v, autovec = tgt.cpu_model, st.n, lp.v, lp.autovec
    # the loop's own instructions, once a block (LLVM's vector loop, autovec, runs
    # INTERLEAVE vectors an iteration), issue with the block's arithmetic, loads and
    # stores, the core's issue width a cycle: they cost where the block is short (a
    # stencil's rows of one vector) and hide under a block bound by its loads
    overhead = (1 / INTERLEAVE if autovec > 1 else 1) if lp.r >= 0 else 0
    # the pipes and ports at the block's vector width (Zen 4 runs 512-bit ones as halves)
    bits = min(tgt.vector_bits, 32 * max(v, autovec)) if tgt.vector_bits else 32
    throughput = (arith / cpu.per_cycle(cpu.fma_pipes, bits),
                  acc.loads / cpu.per_cycle(cpu.load_ports, bits),
                  acc.stores / cpu.per_cycle(cpu.store_ports, bits))
    issue = (arith + acc.loads + acc.stores) / cpu.issue_width
    loop_ops = LOOP_OPS * overhead / cpu.issue_width
    base = max(*throughput, chain, issue + loop_ops)
    cycles = base + acc.strided
    if n and lp.kinds[-1] is LoopKind.VECTORIZED and v > 1:
        # a row whose length the vector loop does not divide ends in a masked vector
        # (and a store that the next row's loads cannot forward from)
        row = next((st.footprint(m, -1)[-1] for _, w, _, m, _ in st.accesses if w and
                    moving_dims(st, m) == [len(st.footprint(m, -1)) - 1]), 0)
        if straddle:
            # straddling runs of the vector loop: their vectors are masked
            cycles += straddle * acc.rows * MASKED_CYCLES
        elif row % v:
            cycles += acc.rows / -(-row // v) * MASKED_CYCLES
    return throughput, issue, loop_ops, base, cycles


def _nest_cycles(st: PlacedStatement, cpu, lp: BlockLoops, cycles: float) -> tuple[int, float]:
    """(blocks, cycles) of the nest that runs `cycles` a block: its blocks (LLVM's vector
    iterations, then the remainder one by one), and an exit branch a run of each loop
    outside the block."""
    n, r, autovec, iters, trips = st.n, lp.r, lp.autovec, lp.iters, st.trips
    if autovec > 1:              # vector iterations, then the remainder one by one
        blocks = iters[r] * (trips[r] // autovec + trips[r] % autovec)
    else:
        blocks = iters[r + 1]
    compute_cycles = cycles * blocks
    if r >= 0 and autovec == 1 and not all(st.constant[r + 1:]):
        # the block's own loops vary in count (a stage computed at a tile whose column
        # window its vectors straddle): the representative block is the middle one, not
        # the average; the average block holds isl's instances over its count of blocks
        runs = st.runs(r)
        if runs:
            compute_cycles *= st.runs(n - 1) / runs / (iters[-1] / iters[r + 1])
    # each run of a loop outside the block ends in its exit branch: mispredicted when the
    # loop is long or its trip count varies (a stage computed at a tile, clipped to its
    # window), predicted for a short loop of a constant count
    compute_cycles += sum(iters[d] * (cpu.mispredict_cycles if not st.constant[d] or
                                      trips[d] > PREDICTED_TRIPS else 1)
                          for d in range(1, r + 1))
    return blocks, compute_cycles


def _arith(body, moving=None) -> tuple[float, Counter]:
    """(instructions of one instance's arithmetic, its loads per tensor name) of a
    statement body: a multiply feeding an add fuses; calls cost CALL_COST, a division 4; a
    select and each compare or mask operation of its condition 1 — the condition's
    compares nothing when `moving` (variable names -> those of them that change along the
    register block's loop, and along its vector loop) says that none of its variables
    changes along the block's loop and some along the vector lanes: LLVM computes such a
    mask once, outside that loop (a convolution's padding test on rows and columns of
    vectors along the columns, inside a loop over channels: counted in the loop, it made
    the model predict such a conv several times slower than it runs). A scalar test whose
    select reads memory is a branch, not hoisted."""
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
                        # run the true arm alone, unmasked (faster than masking every
                        # vector, as the heat stencil's explicit vectors show)
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


def as_compiled(st: PlacedStatement, kinds: list) -> list:
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


def _chain_ops(st: PlacedStatement) -> int:
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


def _minmax_value(st: PlacedStatement):
    stores = [x for x in walk_stmt(st.e.stmt.body) if isinstance(x, Store)]
    return stores[0].value if len(stores) == 1 else None


def _is_minmax(st: PlacedStatement) -> bool:
    """A max or min update: NaN-propagating (Max, Min) or NaN-ignoring (fmax, fmin)."""
    v = _minmax_value(st)
    return isinstance(v, (Max, Min)) or \
        (isinstance(v, Call) and v.name in ("fmax", "fmin", "fmax_any"))


def _nan_propagating(st: PlacedStatement) -> bool:
    return isinstance(_minmax_value(st), (Max, Min))


def _minmax_along(st: PlacedStatement, r: int) -> bool:
    """A max or min reduction carried by loop r (softmax's row maximum as declared), which
    LLVM's vectoriser takes: lane-wise maxima in a register, combined after the loop."""
    if not _is_minmax(st):
        return False
    kept = [m for _, w, _, m, _ in st.accesses if w and
            st.footprint(m, r) == st.footprint(m, r - 1)]
    return bool(kept)


def _llvm_vectorises(st: PlacedStatement, r: int) -> bool:
    """Whether LLVM's loop vectoriser takes loop r (serial, everything inside it unrolled)
    by itself: the written element moves along memory with it, one element per iteration
    (so no accumulator is carried by it)."""
    for _, write, _, m, _ in st.accesses:
        if write:
            inner = st.footprint(m, r - 1)
            if not inner or inner[-1] != st.trips[r] or box_size(inner[:-1]) != 1:
                return False
    return True


def _split(st: PlacedStatement, m: isl.Map, r: int, size: int, stride) -> bool:
    """Whether the vectors of a line-wide vector load along the last axis start off a line
    boundary (each then reads two lines, as two loads): its first lane's index is not a
    multiple of a line, or the rows of the tensor are not a whole number of lines apart (a
    row of 1026 floats: most rows start mid-line). A stencil's shifted reads X[i, j + 1]
    are. A split vector costs two loads: a 3x3 blur with its nine loads a vector split
    runs at the speed of eighteen, and the model without them predicts it far too fast."""
    line = max(1, LINE_BYTES // size)
    if st.first_last_index(m, r) % line:
        return True
    return any(x % LINE_BYTES for x in (stride or ())[:-1])
