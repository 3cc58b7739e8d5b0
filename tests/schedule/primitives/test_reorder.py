"""reorder: the given loops in this order, in the positions they hold together."""

import pytest

import tensorlang as tl

from .helpers import (
    anti, assert_computes, assert_refused_with_witness, assert_replays, grid, grid_cases,
    matmul, run_matmul,
)






def test_reorder_matmul_and_nest():
    A, B, C = matmul()
    s = tl.create_schedule(C)
    i, j = C.op.axis
    (k,) = C.op.reduce_axis
    s[C].reorder(k, j, i)
    assert s[C].loops == ["k", "j", "i"]
    text = str(tl.lower(s, [A, B, C]))
    # the init moves out of the reduction: its own nest comes first
    assert text.index("C[i, j] = 0.0") < text.index("for k in range(m)")
    run_matmul(s, A, B, C)


def test_reorder_partial_keeps_other_positions():
    A, B, C = matmul()
    s = tl.create_schedule(C)
    i, j = C.op.axis
    io, ii = s[C].split(i, factor=4)
    s[C].reorder(ii, io)
    assert s[C].loops == ["i.inner", "i.outer", "j", "k"]
    run_matmul(s, A, B, C)


def test_reorder_misuse_names_the_argument():
    A, B, C = matmul()
    s = tl.create_schedule(C)
    io, ii = s[C].split(C.op.axis[0], factor=4)
    with pytest.raises(tl.ScheduleError, match="once"):
        s[C].reorder(io, io)


# ------------------------------------------- the interpreter, the witness, the replay
def test_reorder_interchange_of_a_recurrence_matches_numpy_and_the_interpreter():
    x, u = grid()            # dependences (1, 0) and (0, 1): the interchange is legal
    s = tl.create_schedule(u)
    s[u].reorder("j", "i")
    assert_computes(s, [x, u], grid_cases(), rtol=1e-12)


def test_reorder_that_breaks_a_dependence_is_refused_with_a_witness():
    x, v = anti()
    s = tl.create_schedule(v)
    w = assert_refused_with_witness(s, lambda: s[v].reorder("j", "i"), "reorder", "v")
    assert (w.sink["i"] - w.source["i"], w.sink["j"] - w.source["j"]) == (1, -1)
    # the new order (j, i) runs the sink first
    assert (w.sink_loops["j"], w.sink_loops["i"]) < (w.source_loops["j"], w.source_loops["i"])


def test_reorder_replays():
    A, B, C = matmul()
    s = tl.create_schedule(C)
    s[C].reorder(C.op.reduce_axis[0], *C.op.axis)
    assert_replays(s, [A, B, C], matmul)
