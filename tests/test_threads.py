"""Thread safety as a property (docs/guide/threads.md): one Executor run from several threads at
once gives every thread its own right answer; a kernel's failed index check reports the
failing call's own index, whichever thread made it; an Executor keeps a bounded number of
plans; fed numbers are checked against the Variable's dtype."""

import threading

import numpy as np
import pytest

import tensorlang as tl
import tensorlang.graph as G


def _in_threads(n: int, fn) -> list:
    """fn(k) in n threads started together; the exceptions they raised (none expected)."""
    start, errors = threading.Barrier(n), []

    def body(k):
        try:
            start.wait()
            fn(k)
        except BaseException as e:    # noqa: BLE001 (collected, the test fails on it)
            errors.append(e)
    ts = [threading.Thread(target=body, args=(k,)) for k in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in ts), "a thread did not finish"
    return errors


def _graph():
    x = G.Variable("x", (37, 19), "float32")
    w = G.Variable("w", (19, 23), "float32")
    y = G.sum(G.relu(G.matmul(x, w)) * 2.0, axis=1) + G.mean(x, axis=1)
    return x, w, y


def _ref(a, b):
    return (np.maximum(a @ b, 0) * 2).sum(1) + a.mean(1)


@pytest.mark.parametrize("fuse", [True, False])
def test_one_executor_shared_by_threads_gives_each_its_own_result(fuse):
    # fuse=False: one kernel per node, so every run writes intermediate arrays; before
    # each run had its own, threads overwrote each other's (43 of 600 results wrong)
    x, w, y = _graph()
    ex = G.Executor([y], fuse=fuse)
    rng = np.random.default_rng(0)
    feeds = [(rng.standard_normal((37, 19)).astype("f4"),
              rng.standard_normal((19, 23)).astype("f4")) for _ in range(8)]
    ex.run({x: feeds[0][0], w: feeds[0][1]})             # compiled before the threads
    wrong = []

    def work(k):
        for r in range(40):
            a, b = feeds[(k + r) % len(feeds)]
            got = ex.run({x: a, w: b})[0] if r % 2 else \
                ex.run({x: a, w: b}, out=[np.empty(37, "f4")])[0]
            if not np.allclose(got, _ref(a, b), rtol=1e-4, atol=1e-4):
                wrong.append((k, r))
    assert _in_threads(4, work) == []
    assert wrong == []


def test_threads_compiling_one_executors_first_plan_share_it():
    x, w, y = _graph()
    ex = G.Executor([y])
    a = np.ones((37, 19), "f4")
    b = np.full((19, 23), 0.5, "f4")
    got = [None] * 4

    def work(k):
        got[k] = ex.run({x: a, w: b})[0]
    assert _in_threads(4, work) == []
    for g in got:
        np.testing.assert_allclose(g, _ref(a, b), rtol=1e-5)
    assert len(ex._plans) == 1


def _gather(parallel: bool):
    n, m = tl.var("n"), tl.var("m")
    A = tl.placeholder((m,), "float32", name="A")
    Idx = tl.placeholder((n,), "int64", name="I")
    B = tl.compute((n,), lambda i: A[Idx[i]], name="B")
    s = tl.create_schedule(B)
    if parallel:
        o, i = s[B].split(B.op.axis[0], factor=8)
        s[B].parallel(o)
    return tl.build(s, [A, Idx, B])


@pytest.mark.parametrize("parallel", [False, True])
def test_each_failing_call_reports_its_own_index(parallel):
    # the record of a failed check was one global per kernel: 4 threads got another
    # thread's index in 86-262 of 1,200 errors, and "status 3" alone in 58-189
    f = _gather(parallel)
    a = np.arange(50, dtype="f4")
    reported = []

    def work(k):
        bad = 1000 + k
        for r in range(60):
            idx = np.arange(64) % 50
            idx[(7 * r + k) % 64] = bad
            try:
                f(a, idx, np.zeros(64, "f4"))
                reported.append((k, "no error"))
            except tl.IndexBoundsError as e:
                reported.append((k, e.index))
    assert _in_threads(4, work) == []
    assert len(reported) == 240
    assert [r for r in reported if r[1] != 1000 + r[0]] == []


def test_the_c_entry_point_still_writes_the_global_record():
    # an object file's callers read `<kernel>_tl_error`; the JIT's entry with the
    # caller's record is an extra function beside it
    f = _gather(False)
    ll = f.get_source("ll")
    assert "B_tl_error" in ll or "_tl_error" in ll
    assert ".record" in ll


def test_a_kernel_without_checks_has_no_record_entry():
    A = tl.placeholder((16,), "float32", name="A")
    B = tl.compute((16,), lambda i: A[i] + 1.0, name="B")
    f = tl.build(tl.create_schedule(B), [A, B])
    assert ".record" not in f.get_source("ll")
    b = np.zeros(16, "f4")
    f(np.arange(16, dtype="f4"), b)
    np.testing.assert_array_equal(b, np.arange(16) + 1)


def test_executor_keeps_at_most_max_plans():
    x = G.Variable("x", None, "float32")
    y = G.exp(x) * 2.0
    ex = G.Executor([y], max_plans=2)
    for n in (3, 5, 3, 7):              # 3 used again: 5 is the least recently used
        a = np.linspace(-1, 1, n).astype("f4")
        np.testing.assert_allclose(ex.run({x: a})[0], np.exp(a) * 2, rtol=1e-6)
        assert len(ex._plans) <= 2
    assert [k[0][1] for k in ex._plans] == [(3,), (7,)]


@pytest.mark.parametrize("bad", [0, -1, 2.5, True, "4"])
def test_max_plans_is_a_positive_int(bad):
    with pytest.raises(tl.TensorlangError, match="max_plans"):
        G.Executor([G.Variable("x", (2,), "float32") * 2.0], max_plans=bad)


def test_a_float_fed_to_an_integer_variable_is_refused():
    i = G.Variable("i", (), "int64")
    ex = G.Executor([i * 3])
    assert ex.run({i: 5})[0] == 15
    with pytest.raises(tl.TensorlangError, match="int64.*float 2.5"):
        ex.run({i: 2.5})
    with pytest.raises(tl.TensorlangError, match="int64.*float"):
        ex.run({i: np.float64(2.0)})
    with pytest.raises(tl.TensorlangError, match=r"is outside its range \[-9223372036854775808"):
        ex.run({i: 2**70})
