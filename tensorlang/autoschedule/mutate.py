"""Edits of a schedule's trace that the auto-scheduler's search makes without looking at
the program: a trace's sketch (where stages are computed, which buffers it adds) and a
mutation that moves one split or tile factor to a neighbouring value."""

from __future__ import annotations

import random

from ..schedule.schedule import Call, TraceEntry

PLACEMENTS = ("compute_at", "compute_inline", "compute_root", "cache_write", "cache_read",
              "pack", "rfactor")


def sketch(trace: list[TraceEntry]) -> tuple:
    """Where each stage is computed and which buffers the trace adds (its placement
    primitives, without their sizes): Ansor's sketch."""
    return tuple((t.stage, t.call.prim) + tuple(a for a in t.call.args if not isinstance(a, int))
                 for t in trace if t.call.prim in PLACEMENTS)


# split and tile factors a mutation moves between: powers of two and their multiples of 3,
# and the divisors of common image widths (7, 14, 28, 56: a conv's column tile)
FACTORS = (1, 2, 3, 4, 6, 7, 8, 12, 14, 16, 24, 28, 32, 48, 56, 64, 96, 128)


def split_factor(call):
    """A split's factor, given by position or by keyword."""
    return call.args[1] if len(call.args) > 1 else dict(call.kwargs).get("factor")


def mutate(trace: list[TraceEntry], rng: random.Random) -> list[TraceEntry] | None:
    """The trace with one split or tile factor moved to a neighbouring value (None when it
    has none); the caller replays it, and drops it when a primitive refuses."""
    # a split whose inner loop is vectorised has the target's vector width: not a tile
    # size to move (32 lanes on a 16-lane machine is two registers per "vector")
    vector = {(t.stage, t.call.args[0]) for t in trace if t.call.prim == "vectorize"}
    # nor are the instruction's own loops of a tensorized stage (the split whose inner
    # loop it replaces, those of the loops ordered after it) and the packs that lay its
    # operands out as it reads them
    tensorized = False
    for k, t in enumerate(trace):
        if t.call.prim == "tensorize":
            tensorized = True
            order = next((list(u.call.args) for u in reversed(trace[:k]) if u.stage == t.stage
                          and u.call.prim == "reorder" and t.call.args[0] in u.call.args), [])
            below = order[order.index(t.call.args[0]):] if order else [t.call.args[0]]
            vector |= {(t.stage, x) for x in below}
    spots = [(k, a) for k, t in enumerate(trace)
             for a, v in enumerate(list(t.call.args) + [v for _, v in t.call.kwargs])
             if t.call.prim in ("split", "tile", "pack") and isinstance(v, int) and v > 1 and
             not (t.call.prim == "pack" and (a == 1 or tensorized)) and
             not (t.call.prim == "split" and (t.stage, f"{t.call.args[0]}.inner") in vector)]
    if not spots:
        return None
    k, a = rng.choice(spots)
    t = trace[k]
    args, kwargs = list(t.call.args), list(t.call.kwargs)
    old = args[a] if a < len(args) else kwargs[a - len(args)][1]
    near = [f for f in FACTORS if f != old and 0.4 * old <= f <= 2.5 * old] or [max(1, old // 2)]
    # a tile whose inner loop is split into vectors keeps whole vectors: 28 columns split
    # by 16 leave every tile's vectors straddling it (a batched matmul's accumulator tile
    # then lives in memory, masked, many times slower than at 32 columns)
    loops = {"tile": args[:2], "split": args[:1]}.get(t.call.prim, [])  # tile(x, y, fx, fy)
    inner = f"{loops[a - len(loops)]}.inner" if 0 <= a - len(loops) < len(loops) else None
    lanes = next((split_factor(u.call) for u in trace if u.stage == t.stage and
                  u.call.prim == "split" and u.call.args[0] == inner and
                  (u.stage, f"{inner}.inner") in vector), None)
    if isinstance(lanes, int):
        near = [f for f in near if f % lanes == 0] or [max(lanes, old // lanes // 2 * lanes)]
    new = rng.choice(near)
    if a < len(args):
        args[a] = new
    else:
        kwargs[a - len(args)] = (kwargs[a - len(args)][0], new)
    child = list(trace)
    child[k] = TraceEntry(t.stage, Call(t.call.prim, tuple(args), tuple(kwargs)))
    return child
