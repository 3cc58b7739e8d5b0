"""reorder_storage: a stage's tensor laid out with its dimensions permuted."""

import pytest

import tensorlang as tl

from .helpers import (
    allocations, assert_computes, assert_replays, blur, blur_cases, check_rect_blur,
)






@pytest.mark.parametrize("n,m", [(1, 1), (5, 3), (16, 33)])
def test_reorder_storage_transposes_a_stage_and_its_readers(n, m):
    A, B, C = blur(n, m)
    s = tl.create_schedule(C)
    BT = s[B].reorder_storage("x", "y")
    assert [x.value for x in BT.shape] == [m, n + 2]
    assert s[BT].loops == ["y", "x"]            # the loops keep their order
    assert 's["B"].reorder_storage("x", "y")' in s.trace_text()
    f = tl.lower(s, [A, C])
    assert allocations(f)["B"] == (m, n + 2)
    check_rect_blur(s, A, C, n, m)
    again = tl.create_schedule(C).replay(tl.create_schedule(C), s.trace)
    assert str(tl.lower(again, [A, C])) == str(f)


def test_reorder_storage_of_a_cache_tile_then_placed():
    A, B, C = blur(20, 24)
    s = tl.create_schedule(C)
    CL = s.cache_write(C, "local")
    CL = s[CL].reorder_storage("x", "y")
    yo, xo, yi, xi = s[C].tile(*s[C].op.axis, 4, 8)
    s[CL].compute_at(s[C], xo)
    assert allocations(tl.lower(s, [A, C]))["C_local"] == (8, 4)
    check_rect_blur(s, A, C, 20, 24)


def test_reorder_storage_misuse():
    A, B, C = blur(4)
    s = tl.create_schedule(C)
    with pytest.raises(tl.ScheduleError, match="output of the schedule"):
        s[C].reorder_storage("x", "y")
    with pytest.raises(tl.ScheduleError, match="each spatial axis of stage B once"):
        s[B].reorder_storage("x")
    with pytest.raises(tl.ScheduleError, match="argument 1 must be a spatial axis"):
        s[B].reorder_storage("x", "q")
    s[B].split("x", factor=2)
    with pytest.raises(tl.ScheduleError, match="apply reorder_storage first"):
        s[B].reorder_storage("x", "y")


# --------------------------------------------- the interpreter, the replay
def test_reorder_storage_matches_numpy_and_the_interpreter():
    A, B, C = blur(tl.var("n"))
    s = tl.create_schedule(C)
    s[B].reorder_storage("x", "y")
    assert allocations(tl.lower(s, [A, C]))["B"] == ("n", "n + 2")
    assert_computes(s, [A, C], blur_cases())


def test_reorder_storage_replays():
    # a layout reorders no iteration: no witness to give; its refusals are misuse
    A, B, C = blur(tl.var("n"))
    s = tl.create_schedule(C)
    s[B].reorder_storage("x", "y")
    assert_replays(s, [A, C], lambda: blur(tl.var("n"))[::2])
