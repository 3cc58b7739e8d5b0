"""Replaying a trace (autoschedule/records.py): each entry is checked against the schedule
before it applies — its stage, its primitive, its arguments against the primitive's
parameters — and each refusal is a `ScheduleError` naming the entry; a tuning log's record
that is refused, or that the compiler does not implement, or whose primitives change
nothing, is passed over for the next."""

import json
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

import tensorlang as tl
from tensorlang.autoschedule import records, search
from tensorlang.schedule.schedule import Schedule, Stage, TraceEntry


def program():
    X = tl.placeholder((16, 16), "float32", name="X")
    P = tl.compute((16, 16), lambda i, j: X[i, j] * 2.0, name="P")
    r = tl.reduce_axis((0, 16), name="r")
    return X, tl.compute((16, 16), lambda i, j: tl.sum(P[i, r] * X[r, j], axis=r), name="Y")


def entry(stage, prim, args=(), kwargs=None) -> TraceEntry:
    return TraceEntry.from_json([stage, [prim, list(args), kwargs or {}]])


@pytest.mark.parametrize("bad, message", [
    (entry("Z", "split", ["i"], {"factor": 4}), r"trace entry 0 .*no stage 'Z'"),
    (entry("Y", "replay", ["i"]), r"'replay' is not a primitive of a stage"),
    (entry("Y", "stage", ["Y"]), r"'stage' is not a primitive of a stage"),
    (entry("", "replay", ["i"]), r"'replay' is not a primitive of the schedule"),
    (entry("Y", "cache_write", ["Y", "local"]), r"'cache_write' is not a primitive of a stage"),
    (entry("", "split", ["i"], {"factor": 4}), r"'split' is not a primitive of the schedule"),
    (entry("Y", "split", ["i"], {"factr": 4}), r"arguments do not fit split"),
    (entry("Y", "compute_root", ["i"]), r"arguments do not fit compute_root"),
    (entry("", "cache_write", ["Y"]), r"arguments do not fit cache_write"),
])
def test_an_entry_that_does_not_apply_is_a_schedule_error_naming_it(bad, message):
    X, Y = program()
    good = entry("Y", "split", ["i"], {"factor": 4})
    with pytest.raises(tl.ScheduleError, match=message.replace("entry 0", "entry 1")):
        records.replay_trace(Y, [good, bad])


def test_the_primitive_lists_name_methods_and_cover_what_the_search_records():
    assert all(callable(getattr(Stage, p)) for p in records.STAGE_PRIMITIVES)
    assert all(callable(getattr(Schedule, p)) for p in records.SCHEDULE_PRIMITIVES)
    X, Y = program()
    rng = random.Random(0)
    for _ in range(12):
        s = search.sample([Y], "llvm", rng)
        for t in s.trace:
            known = records.STAGE_PRIMITIVES if t.stage else records.SCHEDULE_PRIMITIVES
            assert t.call.prim in known, t
        again = records.replay_trace(Y, s.trace)
        assert again.trace_text() == s.trace_text()


JSON = hs.recursive(hs.none() | hs.booleans() | hs.integers(-3, 20) |
                    hs.sampled_from([0.5, "i", "j", "r", "P", "Y", "X", "i.outer", "local",
                                     "shared", "blockIdx.x", "nope"]),
                    lambda xs: hs.lists(xs, max_size=3), max_leaves=4)


@given(hs.sampled_from(sorted(records.STAGE_PRIMITIVES | records.SCHEDULE_PRIMITIVES)),
       hs.sampled_from(["Y", "P"]), hs.lists(JSON, max_size=4),
       hs.dictionaries(hs.sampled_from(["factor", "nparts", "readers", "atomic"]), JSON,
                       max_size=1))
@settings(max_examples=150, deadline=None)
def test_arguments_of_any_json_type_are_refused_as_tensorlang_errors(prim, stage, args,
                                                                    kwargs):
    """What a record may hold (JSON values) given to any primitive: it applies, or it is
    refused with a TensorlangError (or, for a combination the compiler does not implement,
    a NotImplementedError) — what `recorded` passes over; nothing else escapes."""
    X, Y = program()
    where = stage if prim in records.STAGE_PRIMITIVES else ""
    try:
        records.replay_trace(Y, [entry(where, prim, args, kwargs)])
    except (tl.TensorlangError, NotImplementedError):
        pass


def _log(tmp_path, key, traces):
    log = tmp_path / "t.jsonl"
    log.write_text("".join(json.dumps({"key": key, "target": "llvm", "time": 1e-6 * (k + 1),
                                       "mode": "measured", "predicted": 1e-3, "trace": t})
                           + "\n" for k, t in enumerate(traces)))
    return log


@pytest.mark.parametrize("first, why", [
    ([["Y", ["fuse", ["j", "r"], {}]]], "NotImplementedError"),
    ([["P", ["compute_root", [], {}]]], "one changes nothing"),
    ([["Y", ["stage", ["Y"], {}]]], "is not a primitive"),
])
def test_a_record_passed_over_gives_way_to_the_next(first, why, tmp_path, monkeypatch,
                                                    capsys):
    monkeypatch.setenv("TL_DEBUG", "1")
    X, Y = program()
    key = records.program_key([Y], "llvm")
    good = [["Y", ["split", ["i"], {"factor": 4}]]]
    s = records.recorded(Y, "llvm", _log(tmp_path, key, [first, good]))
    assert s is not None and s.trace_text() == 's["Y"].split("i", factor=4)'
    err = capsys.readouterr().err
    assert "does not replay" in err and why in err
