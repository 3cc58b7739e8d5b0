"""The isl program of a schedule: its dependence analysis, shared between schedules."""

import pytest

import tensorlang as tl


def test_programs_of_one_structure_share_their_dependence_analysis():
    """The dependences are cached by the isl text they are computed from (the
    auto-scheduler builds a program per candidate): two schedules of one computation share
    the analysis, a computation with other accesses gets its own, and an illegal schedule
    is refused either way."""
    from tensorlang.schedule import program as P

    def stencil(shift):
        A = tl.placeholder((64,), "float32", name="A")
        B = tl.recurrence((64,), lambda b, i: A[i] + tl.if_then_else(
            i >= shift, b[i - shift], 0.0), dtype="float32", name="B")
        return B

    P._DEPS.clear()
    one, two = tl.create_schedule(stencil(1)), tl.create_schedule(stencil(1))
    assert two.program.deps is one.program.deps and len(P._DEPS) == 1
    other = tl.create_schedule(stencil(2))
    assert other.program.deps is not one.program.deps and len(P._DEPS) == 2
    B = other.outputs[0]
    with pytest.raises(tl.IllegalScheduleError):
        other[B].parallel(B.op.axis[0])
