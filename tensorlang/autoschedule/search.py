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

`budget_s` bounds the whole call: each build and timing starts only when it is expected
to end within the budget, less what the end of the search needs (`_Bench`); a candidate far
slower than the fastest so far is called once (`capped`) or, predicted so, not at all;
the declared loop nest is not timed and is the result only when no candidate lowers.

A measurement knows when it was disturbed (another process on the cores, a parallel
kernel's worker descheduled for a scheduler tick): a candidate measured over OUTLIER_RATIO
times what the model expects of it (calibrated on the fastest) while expected among the
fastest is timed again at once and with the finalists at the end, the fastest timing kept;
rounds far apart are timed again too (`time_in_turn`). A result that candidates predicted
faster might have beaten, had they not been measured only under disturbance, is returned
but not recorded (`AutoResult.doubt`), so that a later run searches again.

The tuning log (JSON lines, like TVM's records; tuning_log.py) keys each program by a
hash of its lowered default loop nest and the target; `auto_schedule(..., log=path)`
reuses the best record and appends new ones. It is a cache: a malformed line or a record
that does not replay is skipped, and a log that cannot be written is a warning before the
search, whose result is returned all the same. `tensorlang tune script.py` runs a script
with a default log.
"""

from __future__ import annotations

import math
import random
import time

from ..config import check_budget, debug_print, tune_budget, tune_log
from ..errors import ScheduleError, TensorlangError
# (the names marked F401 are used through this module by the tests and the benchmarks)
from ..schedule.schedule import Schedule, TraceEntry, create_schedule  # noqa: F401
from ..te.extern import ExternOp
from ..te.update import UpdateOp
from .cost import estimate
from .measure import TIME_MIN_S, kernel_call, measure_many, time_in_turn  # noqa: F401
from .mutate import mutate as _mutate, sketch as _sketch
from .records import (AutoResult, Candidate, program_key, recorded,  # noqa: F401
                      replay_trace)
from .sample import as_outputs, as_target, lower_candidate, lowers, sample  # noqa: F401
from .tuning_log import append_record, log_problem, warn_unwritable

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


def predict(s: Schedule, target) -> float:
    """Seconds the schedule should take on `target`: the analytic model of cost.py
    (instructions per register block, traffic per cache level from isl's footprints,
    the cores its parallel loop occupies)."""
    return estimate(s, as_target(target)).seconds



# ------------------------------------------------------------------------------ search
def auto_schedule(outputs, target="llvm", budget_s: float | None = None, log=None,
                  measure_on_host: bool | None = None, seed: int = 0,
                  progress: bool = False, seeds=()) -> Schedule:
    """A schedule for `outputs` found by search (see the module). Sizes must be constant.
    `budget_s` (or $TL_TUNE_BUDGET, default 30; a finite positive number of seconds)
    bounds the whole call: the search, builds and measurements are planned to end within
    it (`_Bench`). What cannot be planned can overrun it: one call of a kernel far slower
    than the model predicted, a lowering, build or replay slower than those before, and,
    under a budget too short for any, the first sample and one that lowers (a candidate is
    always the result when one lowers). `measure_on_host` (default: when the
    target runs here) times the best predicted candidates; otherwise the model alone
    chooses. `log` (or $TL_TUNE_LOG) is a JSON-lines tuning log to reuse and extend.
    `seeds`: schedules of the same outputs (a hand-written one, an earlier record) that
    join the candidates — measured first, and mutated like any other when one is the
    fastest — so that the result is never slower than them as measured (TVM's
    MetaSchedule and Ansor start their searches from such schedules too). The declared
    loop nest is the result only when no candidate lowers.

    The log is a cache: its malformed lines and records that do not replay are skipped
    (`recorded`); one that cannot be written is a `TuningLogWarning` before the search,
    which runs and returns its result unrecorded, as does a write refused after it. A
    measured result is recorded only when its time is plausible (`_doubt`)."""
    t0 = time.perf_counter()
    if budget_s is None:
        budget_s = tune_budget(30.0)
    else:
        budget_s = check_budget(budget_s, "auto_schedule: budget_s")
    outs = as_outputs(outputs)
    tgt = as_target(target)
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
    problem = None if log is None else log_problem(log)
    if problem is not None:                 # said before the search, not after its result
        warn_unwritable(log, problem)
        log = None
    result = AutoResult(key, str(tgt))
    rng = random.Random(seed)
    bench = _Bench(tgt, t0 + budget_s, budget_s)
    seen: dict[str, Candidate] = {}
    base = create_schedule(outs)
    externs = [st.id for st in base.stages if isinstance(st.op, ExternOp)]
    if externs:
        raise NotImplementedError(
            f"auto_schedule: the program has extern stage(s) {externs}, which the search and "
            "its cost model do not handle yet; schedule it by hand (tl.create_schedule)")
    updates = [st.id for st in base.stages if isinstance(st.op, UpdateOp)]
    if updates:
        raise NotImplementedError(
            f"auto_schedule: the program has update stage(s) {updates} (tl.update), which the "
            "search and its cost model do not handle yet; schedule it by hand "
            "(tl.create_schedule)")
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
        _sample_into(seen, outs, tgt, rng, bench)
    if measure_on_host:
        _time_first(seen, seeded, bench)
    # the model-only mode leaves time to lower its choice and replay it; the measuring
    # mode's refinement ends where measuring begins
    _refine(seen, outs, tgt, rng, t0 + budget_s * (0.55 if measure_on_host else 0.85),
            tries=None if measure_on_host else MODEL_REFINES)
    if not measure_on_host and time.perf_counter() - t0 > 0.85 * budget_s:
        debug_print(1, f"auto_schedule: the model-only search stopped at its budget "
                       f"({budget_s:g} s) after {len(seen)} candidates")
    cands = sorted((c for c in seen.values() if c.schedule is not None),
                   key=lambda c: c.predicted)
    result.candidates = cands
    if measure_on_host:
        _measure_search(result, seen, seeded, outs, tgt, rng, bench, progress)
    else:
        result.best = next((c for c in cands if c.trace and _lowers_once(c, bench)), None)
        keep = min(seeded, key=lambda c: c.predicted, default=None)
        if keep is not None and result.best is not None and keep is not result.best and \
                result.best.predicted * MODEL_MARGIN > keep.predicted:
            debug_print(1, f"auto_schedule: the seed kept (predicted {keep.predicted * 1e3:.3f} "
                           f"ms; the best candidate {result.best.predicted * 1e3:.3f} ms, not "
                           f"{MODEL_MARGIN:g}x faster)")
            result.best = keep
    if result.best is None:
        result.best = _first_lowering(seen, result, outs, tgt, rng, bench)
    if result.best is None:
        result.best = seen[""]
        debug_print(1, f"auto_schedule: no candidate lowers among {len(seen) - 1}; the "
                       f"declared loop nest is the result")
    for c in result.candidates:
        c.schedule = None                   # the result keeps traces and times, not schedules
    s = replay_trace(outs, result.best.trace)
    if measure_on_host and result.best.measured is not None:
        result.doubt = _doubt(result, bench)
    if log is not None and measure_on_host and result.best.measured is None:
        debug_print(1, f"auto_schedule: nothing was measured within the budget "
                       f"({budget_s:g} s); no record written to {log}")
    elif log is not None and result.doubt is not None:
        debug_print(1, f"auto_schedule: no record written to {log}: {result.doubt}")
    elif log is not None:
        append_record(log, {"key": key, "target": str(tgt), "time": result.best.measured,
                            "mode": "measured" if measure_on_host else "model",
                            "predicted": result.best.predicted,
                            "trace": [t.to_json() for t in result.best.trace]})
    took = time.perf_counter() - t0
    debug_print(1, f"auto_schedule: {took:.2f} s of a {budget_s:g} s budget; "
                   f"{sum(c.measured is not None for c in result.candidates)} of "
                   f"{len(result.candidates)} candidates measured")
    s.auto = result
    return s


# the measurement's limits. A candidate whose calls take more than CAP_RATIO times the
# fastest measured so far is timed by its first call or few (marked `capped`, `_Bench.time`
# says how many): it cannot win, and timing it in full (several calls of a kernel that can
# take seconds a call, as a declared matmul nest does) would spend the budget on it
CAP_RATIO = 3.0
# a candidate predicted SKIP_RATIO times slower than the fastest measured so far (its
# prediction scaled by the model's error on that fastest one) is not called at all
SKIP_RATIO = 10.0
# before anything is measured a call is expected to take this many times its prediction
# (the model's times fall short of an untransformed loop nest's: a margin over that error)
UNCALIBRATED = 3.0
# a candidate measured over OUTLIER_RATIO times what the model expects of it (`expect`: its
# prediction scaled by the model's error on the fastest) while expected within CAP_RATIO
# of the fastest is a suspect: its measurement was likely disturbed. The model's error
# between candidates of one program and a shared VM's slow spell each can double a time:
# their product is ordinary, twice it is not, and a disturbance that misleads a search
# (parallel candidates waiting a scheduler tick for a descheduled worker) is far larger
# (the figures: benchmarks/RESULTS-decisions.md)
OUTLIER_RATIO = 8.0
RETIMES = 1              # a suspect is timed again at once this many times at most, ...
SUSPECTS = 2             # ... and the best expected suspects again with the finalists
FINAL_ROUNDS = 3         # rounds of the finalists' timing in turn kept free at the end,
MAX_FINAL_ROUNDS = 10    # ... and at most this many while the budget lasts
END_MARGIN = 0.02        # of the budget, kept free at the end for what was not foreseen


class _Bench:
    """Builds and times candidates on the host within the search's deadline `end`: every
    candidate on the same arrays (`kernel_call`), each built once (the finalists are
    timed again without another build), a hopeless one cut short (CAP_RATIO, SKIP_RATIO),
    and nothing started that is expected to end after `end` less what the end of the
    search needs (`reserve`). It keeps the slowest build and replay seen, and the model's
    error on the fastest candidate, to expect the next ones by, and to tell a disturbed
    measurement by (`suspect`)."""

    def __init__(self, tgt, end: float, budget_s: float):
        self.tgt, self.end, self.budget_s = tgt, end, budget_s
        self.arrays: dict = {}
        self.calls: dict[int, object] = {}   # id(candidate) -> its built kernel (one call)
        self.once: dict[int, float] = {}     # id(candidate) -> its fastest first call(s)
        self.build_s = 0.0                   # the slowest build so far
        self.replay_s = 0.0                  # the slowest sample or replay so far
        self.best: Candidate | None = None   # the fastest measured (not capped)
        self.lowers: set[int] = set()        # id(candidate) of those known to lower
        self.lowered: dict[int, object] = {} # id(candidate) -> its loop nest, until built
        self.tried: set[int] = set()         # id(candidate) of those given to `time`

    def left(self) -> float:
        return self.end - time.perf_counter()

    def finalists(self, cands, seeded) -> list[Candidate]:
        """The fastest few measured in full (and the seeds), and the SUSPECTS best
        expected suspects whose calls are no slower than a finalist's batch: timed again at
        the end, in turn, a suspect's second chance at a moment when the machine may be
        quiet."""
        final = sorted((c for c in cands if id(c) in self.calls and not c.capped),
                       key=lambda c: c.measured)[:FINALISTS]
        final += [c for c in seeded if id(c) in self.calls and not c.capped and
                  all(c is not x for x in final)]
        if self.best is None:
            return final
        short = max(TIME_MIN_S, CAP_RATIO * self.best.measured)
        return final + sorted((c for c in cands if id(c) in self.calls and self.suspect(c) and
                               self.once[id(c)] <= short and all(c is not x for x in final)),
                              key=self.expect)[:SUSPECTS]

    def final_s(self, final) -> float:
        """Seconds of one round of the finalists' timing in turn."""
        return sum(max(TIME_MIN_S, self.once[id(c)]) for c in final) if len(final) > 1 else 0.0

    def tail(self) -> float:
        """Seconds the search needs after its last timing: the result replayed (as
        slowly as the slowest sample so far, which applied as many primitives and more,
        those refused among them) and END_MARGIN."""
        return self.replay_s + END_MARGIN * self.budget_s

    def reserve(self, final) -> float:
        """Seconds the end of the search needs after the candidates' timing: the
        finalists timed again (`FINAL_ROUNDS` rounds) and `tail`."""
        return FINAL_ROUNDS * self.final_s(final) + self.tail()

    def expect(self, c: Candidate) -> float:
        """Seconds one call of `c` should take: its prediction scaled by the model's error
        on the fastest measured candidate (UNCALIBRATED before any)."""
        b = self.best
        if b is None or not b.predicted > 0:
            return c.predicted * UNCALIBRATED
        return c.predicted * b.measured / b.predicted

    def suspect(self, c: Candidate) -> bool:
        """Whether `c`'s measurement looks disturbed: over OUTLIER_RATIO times what the
        model expects of it (`expect`, calibrated on the fastest measured, which `c` is
        not) while expected within CAP_RATIO of the fastest, where its time matters."""
        b = self.best
        if c.measured is None or b is None or b is c:
            return False
        e = self.expect(c)
        return c.measured > OUTLIER_RATIO * e and e < CAP_RATIO * b.measured

    def retime(self, c: Candidate, reserve: float, what: str) -> None:
        """`c`, a suspect, timed again at once, RETIMES times at most while it stays one
        and the budget allows (a call, then `time_in_turn`'s rounds): the fastest timing
        kept. Timed in full, it is capped no more unless still over CAP_RATIO times the
        fastest. The finalists' rounds at the end time it once more (`finalists`).
        TL_DEBUG=1 says each."""
        fn = self.calls[id(c)]
        for _ in range(RETIMES):
            one = self.once[id(c)]
            if self.left() - reserve < one + 2 * max(TIME_MIN_S, one):
                debug_print(1, f"auto_schedule: {what} measured {c.measured * 1e3:.3f} ms, "
                               f"over {OUTLIER_RATIO:g}x the {self.expect(c) * 1e3:.3f} ms "
                               f"expected: not timed again, no budget left")
                return
            before = c.measured
            t = time.perf_counter()
            fn()
            one = min(one, time.perf_counter() - t)
            again = time_in_turn([fn], rounds=2, once=[one], deadline=self.end - reserve)[0]
            self.once[id(c)] = min(one, again)
            c.measured = min(c.measured, again)
            c.capped = c.capped and c.measured > CAP_RATIO * self.best.measured
            debug_print(1, f"auto_schedule: {what} measured {before * 1e3:.3f} ms, over "
                           f"{OUTLIER_RATIO:g}x the {self.expect(c) * 1e3:.3f} ms expected "
                           f"(a disturbed measurement?); timed again: {again * 1e3:.3f} ms")
            if not self.suspect(c):
                return

    def time(self, c: Candidate, reserve: float, what: str = "candidate") -> bool:
        """Build and time `c` (sets `measured`, and `capped` when it was cut short), or
        leave it untimed (False) when it is predicted hopeless or would not end before
        `end` less `reserve`. TL_DEBUG=1 says which.

        A candidate is called until one call takes at most CAP_RATIO times the fastest
        measured, then timed in full (`time_in_turn`); its calls up to then may take
        `cap_s` in all, at least one: a hopeless one ends after one call, and one whose
        first call was slowed by the shared machine (a parallel kernel's calls vary
        severalfold on a busy machine) gets another. A suspect (`suspect`:
        far slower than the model expects, capped or not) is timed again (`retime`)."""
        self.tried.add(id(c))
        est = self.expect(c)
        b = self.best
        if b is not None and est > SKIP_RATIO * b.measured:
            debug_print(1, f"auto_schedule: {what} not timed: predicted "
                           f"{c.predicted * 1e3:.3f} ms (about {est * 1e3:.3f} ms here), over "
                           f"{SKIP_RATIO:g}x the fastest measured ({b.measured * 1e3:.3f} ms)")
            self.lowered.pop(id(c), None)
            return False
        left = self.left() - reserve
        need = self.build_s + est + max(est, TIME_MIN_S)    # a build, a call and a batch
        if need > left:
            debug_print(1, f"auto_schedule: {what} not timed: about {need:.3f} s to build "
                           f"and time, {max(left, 0):.3f} s of the budget left")
            self.lowered.pop(id(c), None)
            return False
        t = time.perf_counter()
        fn = kernel_call(c.schedule, self.tgt, self.arrays, self.lowered.pop(id(c), None))
        self.build_s = max(self.build_s, time.perf_counter() - t)
        calls, one = 0.0, float("inf")
        cap_s = None if b is None else max(TIME_MIN_S, 2 * CAP_RATIO * b.measured)
        while True:
            t = time.perf_counter()
            fn()
            took = time.perf_counter() - t
            calls, one = calls + took, min(one, took)
            if cap_s is None or one <= CAP_RATIO * b.measured or calls >= cap_s or \
                    self.left() - reserve < one:
                break
        self.calls[id(c)], self.once[id(c)] = fn, one
        if b is not None and one > CAP_RATIO * b.measured:
            c.measured, c.capped = one, True
        else:
            c.measured = time_in_turn([fn], once=[one], deadline=self.end - reserve)[0]
        if self.suspect(c):
            self.retime(c, reserve, what)
        if c.capped:
            debug_print(1, f"auto_schedule: {what} capped after {calls * 1e3:.3f} ms of calls: "
                           f"{c.measured * 1e3:.3f} ms a call, over {CAP_RATIO:g}x the fastest "
                           f"measured ({b.measured * 1e3:.3f} ms; predicted "
                           f"{c.predicted * 1e3:.3f} ms)\n{c.text}")
            return True
        debug_print(1, f"auto_schedule: {what} predicted {c.predicted * 1e3:.3f} ms, "
                       f"measured {c.measured * 1e3:.3f} ms\n{c.text}")
        if b is None or c.measured < b.measured:
            self.best = c
        return True


def _sample_into(seen: dict, outs, tgt, rng, bench: _Bench) -> Candidate | None:
    """One sampled candidate added to `seen` (None when it was seen before); its time is
    what a replay is expected to take."""
    t = time.perf_counter()
    s = sample(outs, tgt, rng)      # (whether it lowers: asked when it is measured)
    bench.replay_s = max(bench.replay_s, time.perf_counter() - t)
    text = s.trace_text()
    if text in seen:
        return None
    c = seen[text] = Candidate(list(s.trace), predict(s, tgt), schedule=s)
    debug_print(1, f"auto_schedule: candidate {len(seen)} predicted {c.predicted * 1e3:.3f} ms")
    return c


def _first_lowering(seen, result, outs, tgt, rng, bench: _Bench) -> Candidate | None:
    """A candidate that lowers, when the search ended without a result (none lowered,
    none could be timed within the budget): the best predicted of those known to lower,
    else the first of up to 4 * SAMPLES more samples that lowers, whatever the budget —
    the declared loop nest is the result only when no candidate lowers. TL_DEBUG=1 says
    so."""
    c = next((c for c in sorted(result.candidates, key=lambda c: c.predicted)
              if c.trace and _lowers_once(c, bench)), None)
    if c is not None:
        debug_print(1, f"auto_schedule: no candidate was timed within the budget; the best "
                       f"predicted one that lowers is the result ({c.predicted * 1e3:.3f} ms "
                       f"predicted)")
        return c
    for _ in range(4 * SAMPLES):
        c = _sample_into(seen, outs, tgt, rng, bench)
        if c is not None and _lowers_once(c, bench):
            result.candidates.append(c)
            debug_print(1, "auto_schedule: no sampled candidate lowered within the budget; "
                           "sampled on until one did")
            return c
    return None


def _lowers_once(c: Candidate, bench: _Bench) -> bool:
    """Whether `c` lowers, asked once: one that does not loses its schedule; the loop
    nest of one that does is kept for its build."""
    if id(c) in bench.lowers:
        return True
    lowered = None if c.schedule is None else lower_candidate(c.schedule, "auto")
    if lowered is None:
        c.schedule = None
        return False
    bench.lowers.add(id(c))
    bench.lowered[id(c)] = lowered
    return True


def _time_first(seen: dict, seeded: list, bench: _Bench) -> None:
    """The seeds and the best predicted sample that lowers, timed before the refinement:
    the builds and calls that follow are then expected from ones of this program (a
    first build's time depends on the program and the machine's load, unforeseeable
    before it), and a budget too short for more has a measured result."""
    cands = list(seen.values())
    for c in seeded:
        if _lowers_once(c, bench):
            bench.time(c, bench.reserve(bench.finalists(cands, seeded)), "seed")
    rest = sorted((c for c in cands if c.trace and c.schedule is not None and
                   all(c is not x for x in seeded)), key=lambda c: c.predicted)
    for c in rest:
        if _lowers_once(c, bench):
            bench.time(c, bench.reserve(bench.finalists(cands, seeded)))
            return


def _measure_search(result: AutoResult, seen: dict, seeded: list, outs, tgt, rng,
                    bench: _Bench, progress: bool) -> None:
    """The measuring mode: the best predicted candidates timed in turn (after those of
    `_time_first`), then mutants of the fastest until the budget is spent, then the
    fastest few timed again; sets `result.best` (None when nothing could be timed). The
    declared loop nest is not timed: it is the result only when no candidate lowers (the
    caller's)."""
    budget_s, t0 = bench.budget_s, bench.end - bench.budget_s
    cands = result.candidates
    # sampled and refined candidates in turn, best predicted first: the refinement
    # follows the model where it errs too (a tile it predicts best can run far slower
    # than others), so it never takes every slot
    rest = [c for c in cands if c.trace and all(c is not x for x in seeded)]
    firsts = _sketch_leaders(rest)
    rest = [c for c in rest if all(c is not x for x in firsts)]
    pools = [[c for c in rest if not c.refined], [c for c in rest if c.refined]]
    todo = seeded + firsts + [c for pair in zip(*pools) for c in pair] + \
        pools[0][len(pools[1]):] + pools[1][len(pools[0]):]
    bar = _progress(todo, progress)
    for k, c in enumerate(bar):
        if id(c) in bench.tried:
            continue                                    # tried by `_time_first`
        now = time.perf_counter() - t0
        reserve = bench.reserve(bench.finalists(cands, seeded))
        if bench.lowers and now > budget_s - reserve:
            debug_print(1, f"auto_schedule: measuring stopped at the budget after {k} of "
                           f"{len(todo)} candidates")
            break
        if bench.best is not None and (
                now > 0.7 * budget_s or k >= MEASURE_TOP and now > 0.5 * budget_s):
            break
        if not _lowers_once(c, bench):
            continue
        bench.time(c, reserve)
        if hasattr(bar, "set_postfix") and bench.best is not None:
            bar.set_postfix(best_ms=f"{bench.best.measured * 1e3:.3f}")
    # mutants of the fastest (new tile sizes) while a mutant's replay, lowering and
    # timing fit in the budget. A mutant the refinement predicted but nobody timed is
    # timed now (a long refinement has predicted most of the fastest's neighbours); after
    # FRUITLESS draws in a row that give nothing untimed, the next candidate of `todo`
    pending = iter(todo)
    prep_s, fruitless = bench.replay_s, 0
    while bench.best is not None:
        reserve = bench.reserve(bench.finalists(cands, seeded))
        need = prep_s + bench.build_s + 2 * max(TIME_MIN_S, bench.once[id(bench.best)])
        if bench.left() - reserve < need:
            debug_print(1, f"auto_schedule: mutation stopped: a mutant needs about {need:.3f} "
                           f"s, {bench.left():.3f} s left of which {reserve:.3f} s are kept "
                           f"for the finalists and the result's replay")
            break
        if fruitless >= FRUITLESS:
            c = next((c for c in pending if id(c) not in bench.tried and
                      _lowers_once(c, bench)), None)
            if c is None:
                debug_print(1, f"auto_schedule: search ended: {FRUITLESS} draws in a row "
                               f"gave no untimed mutant, and every candidate was tried")
                break
            debug_print(1, f"auto_schedule: {FRUITLESS} draws in a row gave no untimed "
                           f"mutant of the fastest; the next predicted candidate instead")
            fruitless = 0
            bench.time(c, reserve)
            continue
        t = time.perf_counter()
        child = _mutate(bench.best.trace, rng)
        text = None if child is None else "\n".join(str(x) for x in child)
        old = seen.get(text)
        if child is None or old is not None and (id(old) in bench.tried or
                                                 old.schedule is None):
            fruitless += 1
            continue
        fruitless = 0
        if old is not None:         # predicted by the refinement, not yet timed
            if _lowers_once(old, bench):
                bench.time(old, reserve, "mutant")
            continue
        try:                        # a primitive may refuse the new factor: never measured
            cs = replay_trace(outs, child)
        except (ScheduleError, TensorlangError):
            cs = None
        c = Candidate(child, float("inf"), schedule=cs)
        if not _lowers_once(c, bench):
            seen[text] = c                                  # not tried again
            continue
        c.predicted = predict(cs, tgt)
        seen[text] = c
        prep_s = max(prep_s, time.perf_counter() - t)
        cands.append(c)
        bench.time(c, reserve, "mutant")
    # the fastest few (and the seeds) timed again, in turn: each was timed once, at
    # its own moment, and a moment when the machine ran fast can make a slower
    # schedule look best
    final = bench.finalists(cands, seeded)
    if len(final) > 1:
        deadline = bench.end - bench.tail()
        if time.perf_counter() + bench.final_s(final) > deadline:
            debug_print(1, "auto_schedule: the finalists are not timed again: no budget "
                           "left for a round")
        else:
            # FINAL_ROUNDS were kept free for (`reserve`); more while the budget lasts
            again = time_in_turn([bench.calls[id(c)] for c in final], MAX_FINAL_ROUNDS,
                                 once=[bench.once[id(c)] for c in final], deadline=deadline)
            for c, t in zip(final, again):
                c.measured, c.capped = t, False         # timed in full, in turn
            debug_print(1, "auto_schedule: finalists timed again: " + ", ".join(
                f"{c.measured * 1e3:.3f}" for c in final) + " ms")
    if final:
        result.best = bench.best = min(final, key=lambda c: c.measured)
        for c in cands:                     # by the model's error on the result
            c.disturbed = bench.suspect(c)


def _doubt(result: AutoResult, bench: _Bench) -> str | None:
    """Why the measured result is not to be recorded, or None. Its time must be a finite
    positive number. And no candidate predicted faster than it may have been measured only
    under disturbance (`Candidate.disturbed`: after its re-timings still over
    OUTLIER_RATIO times what the model expects): the result may then be merely what ran
    while the machine was busy, and a record would make every later run reuse it (issue
    40: two processes tuning at once recorded the declared loop nest, and later runs
    reused it). Unrecorded, the result is returned and a later run searches again. The
    price: a candidate the model misjudges by OUTLIER_RATIO or more, predicted faster than
    the result, reads as disturbed, and its program is searched again by every run
    (TL_DEBUG=1 says why); a wrong record would cost more, in every run after it."""
    t = result.best.measured
    if not (isinstance(t, float | int) and math.isfinite(t) and t > 0):
        return f"its time {t!r} is not a finite positive number of seconds"
    over = [c for c in result.candidates if c.disturbed and
            c.predicted < result.best.predicted]
    if over:
        c = min(over, key=lambda c: c.predicted)
        return (f"{len(over)} candidate(s) predicted faster than the result "
                f"({result.best.measured * 1e3:.3f} ms) were measured only under "
                f"disturbance (one predicted {c.predicted * 1e3:.3f} ms, about "
                f"{bench.expect(c) * 1e3:.3f} ms here, measured {c.measured * 1e3:.3f} ms: "
                f"over {OUTLIER_RATIO:g}x that in every timing); a later run searches again")
    return None


FRUITLESS = 200          # mutation draws in a row that give nothing untimed: next candidate


def _sketch_leaders(cands: list[Candidate]) -> list[Candidate]:
    """The best predicted candidate of each sketch (`cands` sorted by prediction) whose
    prediction is within SKETCH_RATIO of the best, at most SKETCHES of them: measured
    before the rest, because the model ranks tile sizes within a sketch better than it
    ranks sketches against each other. (A 3x3 blur's two-pass schedule, each pass at
    the root, is predicted slower than the inlined ones yet can run fastest; among many
    inlined samples it would be timed only when the sampling order reached it.)"""
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
    their sizes (the tile width the model ranks first for a conv is seldom drawn by
    sampling alone)."""
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


def _progress(items, show: bool):
    if not show:
        return items
    try:
        from tqdm import tqdm
    except ImportError:   # the bar is optional
        return items
    import sys

    # a bar redrawn with carriage returns is for a terminal; a log gets no bar
    return tqdm(items, desc="auto_schedule: measuring", leave=False,
                disable=not sys.stderr.isatty())
