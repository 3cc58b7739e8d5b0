"""A search's result and the records it leaves: `Candidate` (a trace with its predicted
and measured times), `AutoResult` (every candidate of one search), the tuning log's key
(`program_key`), and replaying a trace — one the search made, a seed, or a record read
from the log (`recorded`).

A record is data from outside the process (another version's primitives, a hand edit):
`tuning_log` checks its JSON shape, and `replay_trace` checks each entry against the
schedule before applying it — its stage exists, its primitive is one a trace records, its
arguments fit the primitive's parameters — and the primitive checks the values. Each
refusal is a `ScheduleError` (a combination the compiler does not implement, a
`NotImplementedError`); `recorded` passes over a record so refused for the next.
"""

from __future__ import annotations

import hashlib
import inspect
from dataclasses import dataclass, field

import numpy as np

from ..config import debug_print
from ..errors import ScheduleError, TensorlangError
from ..schedule.lower import lower
from ..schedule.schedule import Schedule, Stage, TraceEntry, create_schedule
from .sample import as_outputs, as_target
from .tuning_log import ranked_records

# the primitives a trace records (`Stage._apply`, `Schedule._edit`), by receiver: a trace
# entry of stage "" is the schedule's, any other a stage's
STAGE_PRIMITIVES = frozenset({
    "split", "tile", "reorder", "fuse", "skew", "unroll", "vectorize", "parallel", "bind",
    "pragma", "compute_at", "no_sync", "compute_root", "compute_inline", "reorder_storage",
    "tensorize"})
SCHEDULE_PRIMITIVES = frozenset({"cache_read", "cache_write", "pack", "rfactor"})


@dataclass
class Candidate:
    trace: list[TraceEntry]
    predicted: float                     # seconds, the model's
    measured: float | None = None        # seconds, on the host
    # the trace replayed, kept during the search so that it is replayed (isl-checked) once
    schedule: Schedule | None = field(default=None, compare=False, repr=False)
    refined: bool = False                # made by `_refine` (the model's own local search)
    # timing cut short after its first call or calls, each over CAP_RATIO times the
    # fastest measured at the time (`_Bench.time`): `measured` is its fastest call
    capped: bool = False
    # measured over OUTLIER_RATIO times what the model expects of it, calibrated on the
    # fastest, in every timing (`_Bench.suspect`): a disturbed measurement, or the model's
    # error, which no clock here tells apart
    disturbed: bool = False

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
    # why the result was not recorded in the tuning log although measured (`_doubt`)
    doubt: str | None = None

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
    outs = as_outputs(outputs)
    s = create_schedule(outs)
    text = str(lower(s, [*s.placeholders, *outs]))
    return hashlib.sha1(f"{text}|{as_target(target)}".encode()).hexdigest()[:20]


def _receiver(s: Schedule, entry: TraceEntry, k: int) -> Schedule | Stage:
    """The schedule or stage that trace entry `k` applies its primitive to, its
    primitive and arguments checked against it: a `ScheduleError` names the entry and what
    it lacks."""
    prim = entry.call.prim
    if entry.stage:
        known = STAGE_PRIMITIVES
        ids = [st.id for st in s.stages]
        if entry.stage not in ids:
            raise ScheduleError(f"trace entry {k} ({entry}): no stage {entry.stage!r}; the "
                                f"stages are {ids}")
        receiver = s.stage(entry.stage)
    else:
        known, receiver = SCHEDULE_PRIMITIVES, s
    if prim not in known:
        raise ScheduleError(f"trace entry {k} ({entry}): {prim!r} is not a primitive of "
                            f"{'a stage' if entry.stage else 'the schedule'}; those are "
                            f"{sorted(known)}")
    try:
        inspect.signature(getattr(receiver, prim)).bind(*entry.call.args,
                                                        **dict(entry.call.kwargs))
    except TypeError as e:          # (what Signature.bind raises for a mismatch)
        raise ScheduleError(f"trace entry {k} ({entry}): its arguments do not fit "
                            f"{prim}: {e}") from None
    return receiver


def replay_trace(outputs, trace: list[TraceEntry]) -> Schedule:
    """A fresh schedule of `outputs` with `trace` applied, each entry checked first
    (`_receiver`) and each primitive checked as applied: a `ScheduleError` (or another
    `TensorlangError` of a primitive) when an entry does not apply."""
    s = create_schedule(as_outputs(outputs))
    for k, entry in enumerate(trace):
        receiver = _receiver(s, entry, k)
        getattr(receiver, entry.call.prim)(*entry.call.args, **dict(entry.call.kwargs))
    return s


def recorded(outputs, target, log, model: bool = False, key: str | None = None):
    """The tuning log's schedule for `outputs` on `target`, replayed (its `auto` a result
    from the log), or None: the fastest measured record, else with `model` the model-only
    mode's latest choice (a record without a time), so that it searches once per program
    and target. Malformed lines are skipped (`tuning_log.read_log`); a record that does
    not replay (another version's primitives, a hand edit: `replay_trace` refuses it) is
    passed over for the next best, and TL_DEBUG=1 says so: nothing in the log stops a
    run."""
    if log is None:
        return None
    outs, tgt = as_outputs(outputs), as_target(target)
    key = key or program_key(outs, tgt)
    for rec in ranked_records(log, key, model=model):
        trace = [TraceEntry.from_json(x) for x in rec["trace"]]     # well-formed: checked
        try:
            s = replay_trace(outs, trace)
        except (TensorlangError, NotImplementedError) as e:
            # a refused entry or primitive, or a combination of primitives the compiler
            # does not implement (a fused loop of spatial and reduce axes)
            debug_print(1, f"auto_schedule: the record of {key} in {log} does not replay "
                           f"({type(e).__name__}: {e}); trying the next, else searching")
            continue
        # a primitive that changes nothing adds no entry (compute_root of a stage at the
        # root): the record is then not this schedule's
        if [(t.stage, t.call.prim) for t in s.trace] != [(t.stage, t.call.prim) for t in trace]:
            debug_print(1, f"auto_schedule: the record of {key} in {log} does not replay "
                           f"(its {len(trace)} entries replay as {len(s.trace)} primitives: "
                           f"one changes nothing); trying the next, else searching")
            continue
        result = AutoResult(key, str(tgt), from_log=True)
        result.best = Candidate(list(s.trace), rec.get("predicted") or 0.0, rec["time"])
        result.candidates = [result.best]
        debug_print(1, f"auto_schedule: {'measured' if rec['time'] else 'model'} record "
                       f"{key} from {log}")
        s.auto = result
        return s
    return None
