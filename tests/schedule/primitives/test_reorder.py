"""reorder: the given loops in this order, in the positions they hold together."""

import pytest

import tensorlang as tl

from .helpers import matmul, run_matmul


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
