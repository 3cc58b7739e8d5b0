"""The cost model's parallel part: the cores a statement's outermost parallel loop
occupies, the load imbalance of its last round and its launches (`parallel_loop`). A
skewed wavefront's parallel loop, whose anti-diagonals hold different numbers of tiles,
is enumerated with isl for its true count of blocks, launches and rounds
(`_exact_rounds`)."""

from __future__ import annotations

from dataclasses import dataclass

import islpy as isl

from ..ir.stmt import LoopKind
from .placed import PlacedStatement, bounding_box, box_size, int_value

EXACT_POINTS = 1 << 16    # loop values a wavefront's exact launch count may enumerate


@dataclass
class ParallelLoop:
    """How a statement's outermost parallel loop runs on the cores."""

    loop: int | None = None   # the loop (None: the statement runs on one core)
    used: int = 1             # cores it occupies
    imbalance: float = 1.0    # the rounds' slots over the iterations (1: every core busy)
    forks: int = 0            # its launches
    scale: float | None = None   # the nest's true blocks over the representative count,
                                 # where isl enumerated them (a wavefront)


def parallel_loop(st: PlacedStatement, kinds: list, iters: list[int], cores: int) -> ParallelLoop:
    """The outermost parallel loop of `st` (its loops' kinds as compiled, `iters[d + 1]`
    the iterations of loops 0..d) on `cores` cores: as many of them as it has iterations,
    in rounds, the last one partly idle; launched once an iteration of the loops around
    it. A loop whose count varies with the loops around it is enumerated
    (`_exact_rounds`)."""
    trips = st.trips
    p = next((d for d in range(st.n) if kinds[d] is LoopKind.PARALLEL), None)
    if p is None:
        return ParallelLoop()
    used = min(cores, trips[p])
    rounds = -(-trips[p] // used)
    out = ParallelLoop(p, used, rounds * used / trips[p], iters[p])
    exact = _exact_rounds(st, p, iters[p + 1], cores)
    if exact is not None:
        out.scale, out.imbalance, out.forks, out.used = exact
    return out


def _exact_rounds(st: PlacedStatement, p: int, rep: int, cores: int):
    """A parallel loop p whose number of iterations varies with the loops around it (a
    skewed wavefront: one tile on the first anti-diagonal, the most in the middle one, which
    is the representative iteration): enumerate the values of loops 0..p (isl, when at most
    EXACT_POINTS) for (true / representative instances, the imbalance of the rounds the
    cores run, the launches, the cores used). None when the nest is rectangular."""
    rng = st.prefix[p].range()
    box = bounding_box(rng)
    if not box or box_size(box) > EXACT_POINTS:
        return None
    total = int_value(rng.count_val())
    if total == rep or total == 0:
        return None
    counts: dict[tuple, int] = {}

    def visit(pt):
        key = tuple(int_value(pt.get_coordinate_val(isl.dim_type.set, k)) for k in range(p))
        counts[key] = counts.get(key, 0) + 1
    rng.foreach_point(visit)
    used = min(cores, max(counts.values()))
    rounds = sum(-(-c // used) for c in counts.values())
    return total / rep, rounds * used / total, len(counts), used
