"""compute_inline: a stage's expression substituted into its readers."""

import numpy as np
import pytest

import tensorlang as tl

from .helpers import assert_computes, assert_replays



def test_compute_inline_and_root():
    n = tl.var("n")
    A = tl.placeholder((n,), name="A")
    B = tl.compute((n,), lambda i: A[i] + 1.0, name="B")
    C = tl.compute((n,), lambda i: B[i] * B[i] + B[n - 1 - i], name="C")
    s = tl.create_schedule(C)
    s[B].compute_inline()
    text = str(tl.lower(s, [A, C]))
    assert "B" not in text.replace("def main", "")
    f = tl.build(s, [A, C])
    for N in (1, 4, 11):
        a = np.random.default_rng(N).random(N, dtype=np.float32)
        c = np.zeros(N, np.float32)
        f(a, c)
        np.testing.assert_allclose(c, (a + 1) ** 2 + (a + 1)[::-1], rtol=1e-6)


def test_compute_inline_refuses_reductions_recurrences_and_outputs():
    n = tl.var("n")
    A = tl.placeholder((n, 4), name="A")
    k = tl.reduce_axis((0, 4), name="k")
    R = tl.compute((n,), lambda i: tl.sum(A[i, k], axis=k), name="R")
    P = tl.recurrence((n,), lambda P, i: tl.if_then_else(i > 0, P[i - 1], 0.0) + R[i],
                      name="P")
    Q = tl.compute((n,), lambda i: P[i] + 1.0, name="Q")
    s = tl.create_schedule(Q)
    with pytest.raises(tl.ScheduleError, match="reduction"):
        s[R].compute_inline()
    with pytest.raises(tl.ScheduleError, match="recurrence"):
        s[P].compute_inline()
    with pytest.raises(tl.ScheduleError, match="output"):
        s[Q].compute_inline()


def test_primitives_on_an_inlined_stage_are_refused():
    A = tl.placeholder((8,), name="A")
    P = tl.compute((8,), lambda i: A[i] * 2.0, name="P")
    C = tl.compute((8,), lambda i: P[i] + 1.0, name="C")
    s = tl.create_schedule(C)
    s[P].compute_inline()
    for prim in (lambda: s[P].compute_inline(), lambda: s[P].compute_root(),
                 lambda: s[P].split(P.op.axis[0], factor=2),
                 lambda: s[P].compute_at(s[C], C.op.axis[0]),
                 lambda: s[P].parallel(P.op.axis[0])):
        with pytest.raises(tl.ScheduleError, match="inlined"):
            prim()


# ------------------------------------------------- the interpreter, the replay
def _reversed_reader():
    n = tl.var("n")
    A = tl.placeholder((n,), name="A")
    B = tl.compute((n,), lambda i: A[i] + 1.0, name="B")
    C = tl.compute((n,), lambda i: B[i] * B[i] + B[n - 1 - i], name="C")
    return A, B, C


def test_compute_inline_matches_numpy_and_the_interpreter():
    A, B, C = _reversed_reader()
    s = tl.create_schedule(C)
    s[B].compute_inline()
    s[C].split(C.op.axis[0], factor=4)
    cases = [([a], (a + 1) ** 2 + (a + 1)[::-1])
             for a in (np.random.default_rng(n).random(n, dtype=np.float32) for n in (1, 7, 8))]
    assert_computes(s, [A, C], cases)


def test_compute_inline_replays():
    # substitution reorders nothing, so compute_inline has no witness to give: its
    # refusals are the misuse above
    A, B, C = _reversed_reader()
    s = tl.create_schedule(C)
    s[B].compute_inline()
    assert_replays(s, [A, C], lambda: _reversed_reader()[::2])
