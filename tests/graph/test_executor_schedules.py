"""Where the executor's CPU schedules come from: by default the auto-scheduler's model-only
mode, seeded with the hand-written schedule and recorded in the tuning log (issue 17);
`schedules="hand"` the hand-written ones; small kernels keep them."""

import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tensorlang as tl
import tensorlang.graph as G
from tensorlang.graph import executor as E
from tensorlang.autoschedule import search

from . import test_fusion as F

R = np.random.default_rng(5)


@pytest.fixture
def fresh_log(tmp_path, monkeypatch):
    """An empty tuning log of this test's own, and no kernel compiled before it."""
    monkeypatch.setenv("TL_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("TL_TUNE_LOG", raising=False)
    monkeypatch.setattr(E, "_KERNELS", type(E._KERNELS)())
    return tmp_path / "tuning.jsonl"


def _trace(nodes, schedules="default") -> str:
    ((_, s),) = [g for g in E.default_schedules(nodes, schedules=schedules)]
    return s.trace_text()


def test_a_column_sum_takes_the_models_schedule_and_records_it(fresh_log):
    """A sum down the columns of 1024 x 1280: the hand schedule (a vector reduction along
    each column) is predicted several times slower than the auto-scheduler's candidates
    that keep rows in vectors; the default takes the model's choice and matches numpy."""
    x = G.Variable("x", (1024, 1280))
    y = G.sum(x, axis=0)
    assert E._work((1280,), ((1024, 1280),)) >= E.MODEL_MIN_WORK
    xv = R.standard_normal((1024, 1280)).astype("float32")
    (got,) = G.Executor([y]).run({x: xv})
    np.testing.assert_allclose(got, xv.sum(axis=0), rtol=1e-4, atol=1e-3)
    recs = [json.loads(line) for line in fresh_log.read_text().splitlines()]
    assert [r["mode"] for r in recs] == ["model"] and recs[0]["time"] is None
    chosen = "\n".join(str(search.TraceEntry.from_json(t)) for t in recs[0]["trace"])
    assert chosen == _trace([y])                       # the record, read back
    assert chosen != _trace([y], "hand")


def test_a_recorded_choice_is_read_back_without_searching(fresh_log, monkeypatch):
    x = G.Variable("x", (1024, 1280))
    y = G.sum(x, axis=0)
    first = _trace([y])
    E._KERNELS.clear()

    def no_search(*a, **k):
        raise AssertionError("searched again")
    monkeypatch.setattr(search, "sample", no_search)
    assert _trace([y]) == first
    xv = R.standard_normal((1024, 1280)).astype("float32")
    (got,) = G.Executor([y]).run({x: xv})
    np.testing.assert_allclose(got, xv.sum(axis=0), rtol=1e-4, atol=1e-3)


def test_a_measured_record_wins_over_the_models(fresh_log, monkeypatch):
    """`tensorlang tune` (schedules="auto") measures and records; the default then reads
    the measured record, not the model's."""
    monkeypatch.setenv("TL_TUNE_BUDGET", "2")
    x = G.Variable("x", (1024, 1280))
    y = G.sum(x, axis=0)
    _trace([y])
    s_auto = _trace([y], "auto")
    recs = [json.loads(line) for line in fresh_log.read_text().splitlines()]
    assert [r["mode"] for r in recs] == ["model", "measured"] and recs[1]["time"] > 0
    E._KERNELS.clear()
    assert _trace([y]) == s_auto


def test_a_broken_log_line_or_a_record_that_does_not_replay_is_skipped(fresh_log,
                                                                         monkeypatch, capfd):
    """The log is a cache: a line cut short (two processes appending at once) or a record
    of primitives this version does not have is skipped — said at TL_DEBUG=1 — and the
    kernel is searched anew; never an error in the user's run."""
    monkeypatch.setenv("TL_DEBUG", "1")
    x = G.Variable("x", (1024, 1280))
    y = G.sum(x, axis=0)
    first = _trace([y])
    rec = json.loads(fresh_log.read_text())
    rec["trace"] = [["red", ["no_such_primitive", ["r0"], {}]]]
    fresh_log.write_text('{"key": "cut sh\n' + json.dumps(rec) + "\n")
    E._KERNELS.clear()
    capfd.readouterr()
    assert _trace([y]) == first                     # searched again: the same choice
    err = capfd.readouterr().err
    assert "line 1 of the tuning log" in err and "does not replay" in err
    xv = R.standard_normal((1024, 1280)).astype("float32")
    (got,) = G.Executor([y]).run({x: xv})
    np.testing.assert_allclose(got, xv.sum(axis=0), rtol=1e-4, atol=1e-3)


def test_an_unwritable_cache_folder_runs_without_a_log(tmp_path, monkeypatch, capfd):
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("TL_CACHE_DIR", str(blocker / "cache"))     # under a file: no mkdir
    monkeypatch.delenv("TL_TUNE_LOG", raising=False)
    monkeypatch.setenv("TL_DEBUG", "1")
    monkeypatch.setattr(E, "_KERNELS", type(E._KERNELS)())
    x = G.Variable("x", (1024, 1280))
    xv = R.standard_normal((1024, 1280)).astype("float32")
    (got,) = G.Executor([G.sum(x, axis=0)]).run({x: xv})
    np.testing.assert_allclose(got, xv.sum(axis=0), rtol=1e-4, atol=1e-3)
    assert "no tuning log in" in capfd.readouterr().err


def test_a_failing_search_runs_the_hand_schedule_and_says_so_unless_strict(fresh_log,
                                                                          monkeypatch, capfd):
    """A bug of the search must not end a user's run that has a correct hand schedule:
    TL_DEBUG=1 names it; under TL_STRICT=1 (the test suite) it is an error."""
    def broken(*a, **k):
        raise RuntimeError("a bug in the search")
    monkeypatch.setattr(tl, "auto_schedule", broken)
    x = G.Variable("x", (1024, 1280))
    y = G.sum(x, axis=0)
    xv = R.standard_normal((1024, 1280)).astype("float32")
    monkeypatch.setenv("TL_STRICT", "1")
    with pytest.raises(RuntimeError, match="a bug in the search"):
        G.Executor([y]).run({x: xv})
    monkeypatch.setenv("TL_STRICT", "0")
    monkeypatch.setenv("TL_DEBUG", "1")
    capfd.readouterr()
    assert _trace([y]) == _trace([y], "hand")
    (got,) = G.Executor([y]).run({x: xv})
    np.testing.assert_allclose(got, xv.sum(axis=0), rtol=1e-4, atol=1e-3)
    assert "the model-only search failed on" in capfd.readouterr().err


def test_a_small_kernel_keeps_the_hand_schedule_and_says_so(fresh_log, monkeypatch, capfd):
    monkeypatch.setenv("TL_DEBUG", "1")
    x = G.Variable("x", (64, 100))
    y = G.sum(x, axis=0)
    assert _trace([y]) == _trace([y], "hand")
    assert "keeps the hand schedule: below MODEL_MIN_WORK" in capfd.readouterr().err
    assert not fresh_log.exists()


def test_the_model_only_search_chooses_the_same_schedule_every_time():
    """A fixed number of candidates from one seed of the generator: no clock in the
    choice (a budget that runs out is said at TL_DEBUG=1)."""
    A = tl.placeholder((300, 257), "float32", name="A")
    k = tl.reduce_axis((0, 300), name="k")
    B = tl.compute((257,), lambda j: tl.sum(A[k, j], axis=k), name="B")
    texts = {tl.auto_schedule(B, measure_on_host=False, budget_s=600).trace_text()
             for _ in range(2)}
    assert len(texts) == 1


@pytest.mark.parametrize("margin", [1.0, 1e9])
def test_the_model_only_mode_keeps_a_seed_unless_a_candidate_is_predicted_margin_faster(
        margin, monkeypatch):
    A = tl.placeholder((300, 257), "float32", name="A")
    k = tl.reduce_axis((0, 300), name="k")
    B = tl.compute((257,), lambda j: tl.sum(A[k, j], axis=k), name="B")
    seed = tl.create_schedule(B)
    seed[B].parallel(B.op.axis[0])
    monkeypatch.setattr(search, "MODEL_MARGIN", margin)
    s = tl.auto_schedule(B, measure_on_host=False, budget_s=600, seeds=[seed])
    best = min(c.predicted for c in s.auto.candidates)
    if margin > 1e6:
        assert s.trace_text() == seed.trace_text()
    else:
        assert s.auto.best.predicted == best < search.predict(seed, "llvm")
        assert s.trace_text() != seed.trace_text()


@pytest.mark.slow
@settings(max_examples=6, deadline=None, suppress_health_check=[
    HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(case=F.row_graphs(), backward=st.booleans())
def test_random_row_graphs_on_the_models_schedules_match_numpy(case, backward, monkeypatch):
    """Every kernel of a random graph (no size too small) scheduled by the model-only
    search (a few candidates each, to stay quick; any predicted faster than the hand
    schedule taken), forward and backward, against numpy."""
    monkeypatch.setattr(E, "MODEL_MIN_WORK", 0)
    monkeypatch.setattr(search, "MODEL_MARGIN", 1.0)
    monkeypatch.setattr(search, "MODEL_SAMPLES", 3)
    monkeypatch.setattr(search, "MODEL_REFINES", 2)
    monkeypatch.setattr(E, "_KERNELS", type(E._KERNELS)())
    F.test_random_row_graphs_match_numpy.hypothesis.inner_test(case, backward)


def test_schedules_must_be_one_of_the_modes():
    x = G.Variable("x", (3,))
    with pytest.raises(G.GraphError, match="schedules must be one of 'default', 'model', "
                                           "'auto', 'hand', got 'fast'"):
        G.Executor([x * 2.0], schedules="fast")
