"""`tl.auto_schedule`: a search over schedule traces, legal by construction.

Candidates are sampled from sketches over the landed primitives (sample.py: producers
inlined or placed, register tiles, channel tiles, vector partials, wavefronts, tiled
vectors), each primitive checked exactly by isl as it is applied, so every candidate is
legal and an illegal schedule is never built or measured. This module searches among them.

A candidate is a trace (`Schedule.trace`, data: primitive names and arguments); it replays
on a fresh schedule and prints as Python (`trace_text()`). The cost model predicts each
candidate's time (cost.py: instructions per register block and traffic per cache level,
counted by isl on the placed statements, against the target's vector lanes, registers,
caches and cores: a cross target is scheduled without running anything); on the
host the best predicted candidates are built and measured, and the fastest wins. The
result's `auto` attribute holds every candidate with its predicted and measured times, and
the Spearman correlation between the two.

The tuning log (JSON lines, like TVM's records) keys each program by a hash of its lowered
default loop nest and the target; `auto_schedule(..., log=path)` reuses the best record
and appends new ones. `tensorlang tune script.py` runs a script with a default log.
"""

from __future__ import annotations

import hashlib
import random
import time
from dataclasses import dataclass, field

import numpy as np

from ..config import debug_print, tune_budget, tune_log
from ..errors import ScheduleError, TensorlangError
from .measure import (_append_log, best_record, measure, measure_many,  # noqa: F401
                      time_in_turn)                 # (auto.measure_many etc. are API)
from .sample import (_channel_axis, _lowers, _outputs, _target,  # noqa: F401
                     sample)                    # (auto.sample, auto._lowers: used outside)
from .schedule import Schedule, TraceEntry, create_schedule

MEASURE_TOP = 8          # candidates built and timed on the host, best predicted first
SAMPLES = 48             # candidates sampled per search (fewer when the budget runs out)
FINALISTS = 4            # the fastest candidates timed again, in turn, before choosing
SKETCHES = 6             # sketches whose best predicted candidate is timed first
SKETCH_RATIO = 4.0       # ... when predicted within this factor of the best prediction
# the model-only mode (a cross target, the executor's first call) ranks a fixed number of
# candidates, sampled and refined from one seed of the random generator, so that it picks
# the same schedule every time (the budget only stops a slow one early, and says so)
MODEL_SAMPLES = 8
MODEL_REFINES = 8
# ... and keeps a seed (the executor's hand schedule) unless a candidate is predicted this
# much faster: the model's errors between close candidates are a few per cent to 1.3x
# (benchmarks/RESULTS-autoschedule.md), and a model-only choice is never checked by a clock
MODEL_MARGIN = 1.25


@dataclass
class Candidate:
    trace: list[TraceEntry]
    predicted: float                     # seconds, the model's
    measured: float | None = None        # seconds, on the host
    # the trace replayed, kept during the search so that it is replayed (isl-checked) once
    schedule: Schedule | None = field(default=None, compare=False, repr=False)
    refined: bool = False                # made by `_refine` (the model's own local search)

    @property
    def text(self) -> str:
        return "\n".join(str(t) for t in self.trace)


@dataclass
class AutoResult:
    key: str
    target: str
    candidates: list[Candidate] = field(default_factory=list)
    best: Candidate | None = None
    from_log: bool = False

    @property
    def spearman(self) -> float | None:
        """Rank correlation of predicted and measured times over the measured candidates."""
        pairs = [(c.predicted, c.measured) for c in self.candidates if c.measured is not None]
        if len(pairs) < 3:
            return None
        p, m = (np.argsort(np.argsort(np.array(x))) for x in zip(*pairs))
        if p.std() == 0 or m.std() == 0:
            return None
        return float(np.corrcoef(p, m)[0, 1])


def program_key(outputs, target) -> str:
    """The tuning log's key: a hash of the default loop nest (names, shapes, bodies) and
    the target."""
    from .lower import lower

    outs = _outputs(outputs)
    s = create_schedule(outs)
    text = str(lower(s, [*s.placeholders, *outs]))
    return hashlib.sha1(f"{text}|{_target(target)}".encode()).hexdigest()[:20]


def predict(s: Schedule, target) -> float:
    """Seconds the schedule should take on `target`: the analytic model of cost.py
    (instructions per register block, traffic per cache level from isl's footprints,
    the cores its parallel loop occupies)."""
    from .cost import estimate

    return estimate(s, _target(target)).seconds


def replay_trace(outputs, trace: list[TraceEntry]) -> Schedule:
    s = create_schedule(_outputs(outputs))
    return s.replay(s, trace)


def recorded(outputs, target, log, model: bool = False, key: str | None = None):
    """The tuning log's schedule for `outputs` on `target`, replayed (its `auto` a result
    from the log), or None: the fastest measured record, else with `model` the model-only
    mode's latest choice (a record without a time), so that it searches once per program
    and target. A record that does not replay (another version's primitives) is passed
    over, and TL_DEBUG=1 says so."""
    if log is None:
        return None
    outs, tgt = _outputs(outputs), _target(target)
    key = key or program_key(outs, tgt)
    rec = best_record(log, key, model=model)
    if rec is None:
        return None
    try:
        trace = [TraceEntry.from_json(x) for x in rec["trace"]]
        s = replay_trace(outs, trace)
    except (TensorlangError, AttributeError, KeyError, TypeError, ValueError,
            IndexError) as e:
        debug_print(1, f"auto_schedule: the record of {key} in {log} does not replay ({e}); "
                       f"searching instead")
        return None
    result = AutoResult(key, str(tgt), from_log=True)
    result.best = Candidate(trace, rec.get("predicted") or 0.0, rec["time"])
    result.candidates = [result.best]
    debug_print(1, f"auto_schedule: {'measured' if rec['time'] else 'model'} record {key} "
                   f"from {log}")
    s.auto = result
    return s


# ------------------------------------------------------------------------------ search
def auto_schedule(outputs, target="llvm", budget_s: float | None = None, log=None,
                  measure_on_host: bool | None = None, seed: int = 0,
                  progress: bool = False, seeds=()) -> Schedule:
    """A schedule for `outputs` found by search (see the module). Sizes must be constant.
    `measure_on_host` (default: when the target runs here) times the best predicted
    candidates; otherwise the model alone chooses. `log` (or $TL_TUNE_LOG) is a JSON-lines
    tuning log to reuse and extend. `seeds`: schedules of the same outputs (a hand-written
    one, an earlier record) that join the candidates — measured first, and mutated like
    any other when one is the fastest — so that the result is never slower than them as
    measured (TVM's MetaSchedule and Ansor start their searches from such schedules too)."""
    outs = _outputs(outputs)
    tgt = _target(target)
    if budget_s is None:
        budget_s = tune_budget(30.0)
    if budget_s <= 0:
        raise TensorlangError(f"auto_schedule: budget_s must be > 0, got {budget_s}")
    for t in outs:
        if any(not hasattr(x, "value") for x in t.shape):
            raise NotImplementedError(f"auto_schedule: {t.name} has symbolic sizes; the "
                                      "search needs constant shapes (bind the tl.var sizes "
                                      "first)")
    log = log or tune_log()
    if measure_on_host is None:
        measure_on_host = tgt.is_host
    key = program_key(outs, tgt)
    got = recorded(outs, tgt, log, model=not measure_on_host, key=key)
    if got is not None:
        return got
    result = AutoResult(key, str(tgt))
    rng = random.Random(seed)
    t0 = time.perf_counter()
    seen: dict[str, Candidate] = {}
    base = create_schedule(outs)
    seen[""] = Candidate([], predict(base, tgt), schedule=base)   # the declared loop nest
    seeded = []
    for k, sd in enumerate(seeds):
        if not isinstance(sd, Schedule):
            raise TensorlangError(f"auto_schedule: seeds[{k}] must be a Schedule of the same "
                                  f"outputs, got {type(sd).__name__}")
        try:
            again = replay_trace(outs, list(sd.trace))
        except TensorlangError as e:
            raise TensorlangError(f"auto_schedule: seeds[{k}] does not replay on these "
                                  f"outputs ({e})") from None
        text = again.trace_text()
        if text not in seen:
            seen[text] = Candidate(list(again.trace), predict(again, tgt), schedule=again)
            seeded.append(seen[text])
    sample_budget = budget_s * (0.4 if measure_on_host else 0.7)
    samples = SAMPLES if measure_on_host else len(seen) + MODEL_SAMPLES
    tries = 0
    while len(seen) < samples and time.perf_counter() - t0 < sample_budget and \
            tries < 4 * SAMPLES:
        tries += 1
        s = sample(outs, tgt, rng)      # (whether it lowers: asked when it is measured)
        text = s.trace_text()
        if text not in seen:
            seen[text] = Candidate(list(s.trace), predict(s, tgt), schedule=s)
            debug_print(1, f"auto_schedule: candidate {len(seen)} predicted "
                           f"{seen[text].predicted * 1e3:.3f} ms")
    _refine(seen, outs, tgt, rng, t0 + budget_s * (0.55 if measure_on_host else 1.0),
            tries=None if measure_on_host else MODEL_REFINES)
    if not measure_on_host and time.perf_counter() - t0 > budget_s:
        debug_print(1, f"auto_schedule: the model-only search stopped at its budget "
                       f"({budget_s:g} s) after {len(seen)} candidates")
    cands = sorted((c for c in seen.values() if c.schedule is not None),
                   key=lambda c: c.predicted)
    result.candidates = cands
    if measure_on_host:
        # sampled and refined candidates in turn, best predicted first: the refinement
        # follows the model where it errs too (a matmul tile of 7 rows and 32-lane
        # vectors, predicted best, measured 2x slower), so it never takes every slot
        rest = [c for c in cands if c.trace and all(c is not x for x in seeded)]
        firsts = _sketch_leaders(rest)
        rest = [c for c in rest if all(c is not x for x in firsts)]
        pools = [[c for c in rest if not c.refined], [c for c in rest if c.refined]]
        todo = [seen[""]] + seeded + firsts + [c for pair in zip(*pools) for c in pair] + \
            pools[0][len(pools[1]):] + pools[1][len(pools[0]):]
        bar = _progress(todo, progress)
        best = None
        for k, c in enumerate(bar):
            if best is not None and k > len(seeded) and (
                    time.perf_counter() - t0 > 0.7 * budget_s or
                    k >= MEASURE_TOP and time.perf_counter() - t0 > 0.5 * budget_s):
                break       # (the seeds are always measured)
            if not _lowers(c.schedule):
                c.schedule = None
                continue
            c.measured = measure(c.schedule, tgt)
            debug_print(1, f"auto_schedule: predicted {c.predicted * 1e3:.3f} ms, measured "
                           f"{c.measured * 1e3:.3f} ms\n{c.text}")
            if best is None or c.measured < best.measured:
                best = c
            if hasattr(bar, "set_postfix"):
                bar.set_postfix(best_ms=f"{best.measured * 1e3:.3f}")
        while best is not None and time.perf_counter() - t0 < budget_s:
            child = _mutate(best.trace, rng)              # evolve the fastest: new tile sizes
            if child is None:
                continue
            text = "\n".join(str(t) for t in child)
            if text in seen:
                continue
            try:                        # a primitive may refuse the new factor: never measured
                cs = replay_trace(outs, child)
            except (ScheduleError, TensorlangError):
                cs = None
            if cs is None or not _lowers(cs):
                seen[text] = Candidate(child, float("inf"))     # not tried again
                continue
            c = seen[text] = Candidate(child, predict(cs, tgt), schedule=cs)
            result.candidates.append(c)
            c.measured = measure(cs, tgt)
            debug_print(1, f"auto_schedule: mutant predicted {c.predicted * 1e3:.3f} ms, "
                           f"measured {c.measured * 1e3:.3f} ms")
            if c.measured < best.measured:
                best = c
        # the fastest few (and the seeds) timed again, in turn: each was timed once, at
        # its own moment, and a moment when the machine ran fast can make a slower
        # schedule look best
        final = sorted((c for c in result.candidates if c.measured is not None and
                        c.schedule is not None), key=lambda c: c.measured)[:FINALISTS]
        final += [c for c in seeded if all(c is not x for x in final)]
        if best is not None and len(final) > 1:
            again = measure_many([c.schedule for c in final], tgt)
            for c, t in zip(final, again):
                c.measured = t
            best = min(final, key=lambda c: c.measured)
            debug_print(1, "auto_schedule: finalists timed again: " + ", ".join(
                f"{c.measured * 1e3:.3f}" for c in final) + " ms")
        result.best = best
    else:
        result.best = next((c for c in cands if _lowers(c.schedule)), seen[""])
        keep = min(seeded, key=lambda c: c.predicted, default=None)
        if keep is not None and keep is not result.best and \
                result.best.predicted * MODEL_MARGIN > keep.predicted:
            debug_print(1, f"auto_schedule: the seed kept (predicted {keep.predicted * 1e3:.3f} "
                           f"ms; the best candidate {result.best.predicted * 1e3:.3f} ms, not "
                           f"{MODEL_MARGIN:g}x faster)")
            result.best = keep
    for c in result.candidates:
        c.schedule = None                   # the result keeps traces and times, not schedules
    s = replay_trace(outs, result.best.trace)
    if log is not None:
        _append_log(log, {"key": key, "target": str(tgt), "time": result.best.measured,
                          "mode": "measured" if measure_on_host else "model",
                          "predicted": result.best.predicted,
                          "trace": [t.to_json() for t in result.best.trace]})
    s.auto = result
    return s


PLACEMENTS = ("compute_at", "compute_inline", "compute_root", "cache_write", "cache_read",
              "pack", "rfactor")


def _sketch(trace: list[TraceEntry]) -> tuple:
    """Where each stage is computed and which buffers the trace adds (its placement
    primitives, without their sizes): Ansor's sketch."""
    return tuple((t.stage, t.call.prim) + tuple(a for a in t.call.args if not isinstance(a, int))
                 for t in trace if t.call.prim in PLACEMENTS)


def _sketch_leaders(cands: list[Candidate]) -> list[Candidate]:
    """The best predicted candidate of each sketch (`cands` sorted by prediction) whose
    prediction is within SKETCH_RATIO of the best, at most SKETCHES of them: measured
    before the rest, because the model ranks tile sizes within a sketch better than it
    ranks sketches against each other. (The 3x3 blur's two-pass schedule, each pass at
    the root, is predicted at twice the inlined ones and measured fastest on a Zen 4;
    among ~40 inlined samples it was measured only when the sampling order reached it.)"""
    leaders: dict[tuple, Candidate] = {}
    for c in cands:
        if c.predicted > SKETCH_RATIO * cands[0].predicted or len(leaders) >= SKETCHES:
            break
        leaders.setdefault(_sketch(c.trace), c)
    return list(leaders.values())


def _refine(seen: dict, outs, tgt, rng: random.Random, until: float, pool: int = 4,
            tries: int | None = None) -> None:
    """A local search on the model alone, before anything is measured: mutants of the
    best predicted candidates (one tile factor moved) are predicted, and one predicted
    faster joins the pool that is mutated next. Sampling finds the sketches; this finds
    their sizes (a conv's 14-column tile, which the model ranks first, came up in few of
    30 samples)."""
    best = sorted((c for c in seen.values() if c.schedule is not None and c.trace),
                  key=lambda c: c.predicted)[:pool]
    # `tries` new mutants at most, among 8 times as many draws (most seen before)
    draws = None if tries is None else 8 * tries
    while best and time.perf_counter() < until and (tries is None or tries > 0 and draws > 0):
        if draws is not None:
            draws -= 1
        child = _mutate(rng.choice(best).trace, rng)
        if child is None:
            return
        text = "\n".join(str(t) for t in child)
        if text in seen:
            continue
        if tries is not None:
            tries -= 1
        try:
            cs = replay_trace(outs, child)
        except (ScheduleError, TensorlangError):
            cs = None
        if cs is None:
            seen[text] = Candidate(child, float("inf"))
            continue
        c = seen[text] = Candidate(child, predict(cs, tgt), schedule=cs, refined=True)
        debug_print(1, f"auto_schedule: refined candidate predicted {c.predicted * 1e3:.3f} ms")
        if c.predicted < best[-1].predicted:
            best = sorted(best + [c], key=lambda x: x.predicted)[:pool]


# split and tile factors a mutation moves between: powers of two and their multiples of 3,
# and the divisors of common image widths (7, 14, 28, 56: a conv's column tile)
FACTORS = (1, 2, 3, 4, 6, 7, 8, 12, 14, 16, 24, 28, 32, 48, 56, 64, 96, 128)


def _factor(call):
    """A split's factor, given by position or by keyword."""
    return call.args[1] if len(call.args) > 1 else dict(call.kwargs).get("factor")


def _mutate(trace: list[TraceEntry], rng: random.Random) -> list[TraceEntry] | None:
    """The trace with one split or tile factor moved to a neighbouring value (None when it
    has none); the caller replays it, and drops it when a primitive refuses."""
    from .schedule import Call

    # a split whose inner loop is vectorised has the target's vector width: not a tile
    # size to move (32 lanes on a 16-lane machine is two registers per "vector")
    vector = {(t.stage, t.call.args[0]) for t in trace if t.call.prim == "vectorize"}
    spots = [(k, a) for k, t in enumerate(trace)
             for a, v in enumerate(list(t.call.args) + [v for _, v in t.call.kwargs])
             if t.call.prim in ("split", "tile", "pack") and isinstance(v, int) and v > 1 and
             not (t.call.prim == "pack" and a == 1) and
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
    # then lives in memory, masked: 2.0 ms against 0.07 at 32 columns)
    loops = {"tile": args[:2], "split": args[:1]}.get(t.call.prim, [])  # tile(x, y, fx, fy)
    inner = f"{loops[a - len(loops)]}.inner" if 0 <= a - len(loops) < len(loops) else None
    lanes = next((_factor(u.call) for u in trace if u.stage == t.stage and
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


def _progress(items, show: bool):
    if not show:
        return items
    try:
        from tqdm import tqdm
    except ImportError:   # the bar is optional
        return items
    return tqdm(items, desc="auto_schedule: measuring", leave=False)
