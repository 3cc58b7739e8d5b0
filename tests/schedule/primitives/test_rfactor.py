"""rfactor: a reduce loop made a data-parallel axis of a new stage."""

import numpy as np
import pytest

import tensorlang as tl

from .helpers import (
    assert_computes, assert_refused_with_witness, assert_replays, matmul, matmul_cases,
)


def test_rfactor_sum_over_1027_with_nparts_4_then_parallel():
    A = tl.placeholder((1027,), name="A")
    k = tl.reduce_axis((0, 1027), name="k")
    C = tl.compute((), lambda: tl.sum(A[k], axis=k), name="C")
    s = tl.create_schedule(C)
    ko, ki = s[C].split(k, nparts=4)
    R = s.rfactor(C, ko)
    assert R.shape[0].value == 4
    s[R].parallel(R.op.axis[0])
    text = str(tl.lower(s, [A, C]))
    assert "# parallel" in text and "min(257, 1027 - k_outer * 257)" in text
    f = tl.build(s, [A, C])
    a = np.random.default_rng(0).random(1027, dtype=np.float32)
    c = np.zeros((), np.float32)
    f(a, c)
    np.testing.assert_allclose(c, a.astype(np.float64).sum(), rtol=1e-5)


@pytest.mark.parametrize("reducer,ident", [(tl.min, np.inf), (tl.max, -np.inf)])
def test_rfactor_predicated_min_max_vectorised(reducer, ident):
    n = tl.var("n")
    A = tl.placeholder((n, 10), name="A")
    k = tl.reduce_axis((0, 10), name="k")
    C = tl.compute((n,), lambda i: reducer(A[i, k], axis=k, where=A[i, k] > 0.5), name="C")
    s = tl.create_schedule(C)
    ko, ki = s[C].split(k, factor=4)
    R = s.rfactor(C, ki)
    kr = s[R].op.reduce_axis[0]
    s[R].reorder(R.op.axis[1], kr, R.op.axis[0])
    s[R].vectorize(R.op.axis[0])
    f = tl.build(s, [A, C])
    np_red = np.min if reducer is tl.min else np.max
    for N in (1, 3, 17):
        a = np.random.default_rng(N).random((N, 10), dtype=np.float32)
        a[0] = 0.1    # nothing passes: the identity is the answer
        c = np.zeros(N, np.float32)
        f(a, c)
        ref = np_red(np.where(a > 0.5, a, ident), axis=1).astype(np.float32)
        np.testing.assert_array_equal(c, ref)


@pytest.mark.parametrize("n", [1, 7, 64])
@pytest.mark.parametrize("reducer, ref", [(tl.sum, np.sum), (tl.max, np.max)])
def test_rfactor_of_the_only_reduce_loop_leaves_no_reduction(n, reducer, ref):
    # the partial results are the values themselves (an UnboundLocalError before: the
    # factored stage had an init statement and no reduce axis)
    A = tl.placeholder((3, n), name="A")
    k = tl.reduce_axis((0, n), name="k")
    C = tl.compute((3,), lambda i: reducer(A[i, k], axis=k, where=A[i, k] > 0.25), name="C")
    s = tl.create_schedule(C)
    R = s.rfactor(C, k)
    assert not R.op.reduce_axis
    s[R].parallel(R.op.axis[0])
    f = tl.build(s, [A, C])
    a = np.random.default_rng(n).random((3, n), dtype=np.float32)
    c = np.zeros(3, np.float32)
    f(a, c)
    ident = 0.0 if reducer is tl.sum else -np.inf
    np.testing.assert_allclose(c, ref(np.where(a > 0.25, a, ident), axis=1), rtol=1e-6)


def test_rfactor_symbolic_extent_and_misuse():
    n = tl.var("n")
    A = tl.placeholder((n,), name="A")
    k = tl.reduce_axis((0, n), name="k")
    C = tl.compute((), lambda: tl.sum(A[k], axis=k), name="C")
    s = tl.create_schedule(C)
    ko, ki = s[C].split(k, factor=8)
    R = s.rfactor(C, ki)
    s[R].parallel(R.op.axis[0])
    f = tl.build(s, [A, C])
    for N in (1, 7, 8, 100):
        a = np.random.default_rng(N).random(N, dtype=np.float32)
        c = np.zeros((), np.float32)
        f(a, c)
        np.testing.assert_allclose(c, a.sum(), rtol=1e-5)
    B = tl.placeholder((4, 5), name="B")
    D = tl.compute((4,), lambda i: B[i, 0] * 2.0, name="D")
    s2 = tl.create_schedule(D)
    with pytest.raises(tl.ScheduleError, match="not a reduction"):
        s2.rfactor(D, D.op.axis[0])
    j = tl.reduce_axis((0, 5), name="j")
    E = tl.compute((4,), lambda i: tl.sum(B[i, j], axis=j), name="E")
    s3 = tl.create_schedule(E)
    with pytest.raises(tl.ScheduleError, match="not a reduction loop"):
        s3.rfactor(E, E.op.axis[0])
    am = tl.compute((4,), lambda i: tl.argmax(B[i, j], axis=j), name="am")
    with pytest.raises(NotImplementedError, match="several values"):
        tl.create_schedule(am).rfactor(am, j)


# ------------------------------------------- the interpreter, the witness, the replay
def _sum(n=None):
    n = tl.var("n") if n is None else n
    A = tl.placeholder((n,), name="A")
    k = tl.reduce_axis((0, n), name="k")
    return A, tl.compute((), lambda: tl.sum(A[k], axis=k), name="C")


@pytest.mark.parametrize("factor", [2, 4, 7])
def test_rfactor_matches_numpy_and_the_interpreter(factor):
    # (a factor of 1 leaves k.inner constant 0: rfactor refuses it as no reduction loop)
    A, C = _sum()
    s = tl.create_schedule(C)
    ko, ki = s[C].split(C.op.reduce_axis[0], factor=factor)
    R = s.rfactor(C, ki)
    s[R].parallel(R.op.axis[0])
    cases = [([a], np.array(a.sum(), np.float32))
             for a in (np.random.default_rng(n).random(n, dtype=np.float32)
                       for n in (1, 7, 8, 29))]
    assert_computes(s, [A, C], cases)


def test_rfactor_makes_the_refused_parallel_reduction_legal():
    A, B, C = matmul()
    s = tl.create_schedule(C)
    w = assert_refused_with_witness(s, lambda: s[C].parallel("k"), "parallel", "C")
    assert w.sink["k"] == w.source["k"] + 1
    R = s.rfactor(C, "k")
    s[R].parallel(R.op.axis[0])          # the factored loop of the new stage carries nothing
    # the stage that combines the partial results still reduces over k_rf: refused
    w = assert_refused_with_witness(s, lambda: s[C].parallel("k_rf"), "parallel", "C")
    assert w.sink["k_rf"] == w.source["k_rf"] + 1
    assert_computes(s, [A, B, C], matmul_cases())


def test_rfactor_replays():
    A, C = _sum()
    s = tl.create_schedule(C)
    ko, ki = s[C].split(C.op.reduce_axis[0], factor=8)
    R = s.rfactor(C, ki)
    s[R].parallel(R.op.axis[0])
    assert_replays(s, [A, C], _sum)
