"""compute_root: a stage computed in full before the stages that read it (the default)."""

import pytest

import tensorlang as tl

from .helpers import allocations, assert_computes, assert_replays, blur, blur_cases




def _blur_placed():
    A, B, C = blur(tl.var("n"))
    s = tl.create_schedule(C)
    yo, xo, yi, xi = s[C].tile(*C.op.axis, 4, 3)
    s[B].compute_at(s[C], xo)
    return s, A, B, C


def test_compute_root_undoes_a_placement_and_matches_numpy_and_the_interpreter():
    s, A, B, C = _blur_placed()
    assert allocations(tl.lower(s, [A, C]))["B"] == (6, 3)
    s[B].compute_root()
    assert s[B].state.attach is None
    assert allocations(tl.lower(s, [A, C]))["B"] == ("n + 2", "n")
    assert_computes(s, [A, C], blur_cases())


def test_compute_root_of_a_root_stage_changes_nothing():
    A, B, C = blur(tl.var("n"))
    s = tl.create_schedule(C)
    s[B].compute_root()
    assert s.trace == []


def test_compute_root_of_an_inlined_stage_is_refused():
    # a stage at root runs before all its readers: compute_root never breaks an order, so
    # its only refusal is misuse
    A, B, C = blur(tl.var("n"))
    s = tl.create_schedule(C)
    s[B].compute_inline()
    with pytest.raises(tl.ScheduleError, match="compute_root: stage B was inlined"):
        s[B].compute_root()
    assert len(s.trace) == 1


def test_compute_root_replays():
    s, A, B, C = _blur_placed()
    s[B].compute_root()
    assert [t.call.prim for t in s.trace] == ["tile", "compute_at", "compute_root"]
    assert_replays(s, [A, C], lambda: blur(tl.var("n"))[::2])
