"""A recurrence's previous value carried in a register across a serial loop (carry.py):
the generated code reads memory only in the loop's first iteration, and matches numpy
under every tiling, with rows of lengths that do and do not divide the tiles."""

import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tensorlang as tl
from tensorlang.backends.llvm.carry import carried_loads
from tensorlang.ir.stmt import For, Store
from tensorlang.ir.visit import walk_stmt


def _iir(m, n, dtype="float32"):
    X = tl.placeholder((m, n), dtype, name="X")
    Y = tl.recurrence((m, n), lambda y, i, j: X[i, j] + tl.if_then_else(
        j >= 1, tl.const(0.5, dtype) * y[i, j - 1], tl.const(0.0, dtype)), dtype=dtype, name="Y")
    return X, Y


def _want(x):
    want = np.zeros(x.shape, "f8")
    for j in range(x.shape[1]):
        want[:, j] = x[:, j] + (0.5 * want[:, j - 1] if j else 0.0)
    return want


def _innermost_store_loops(lowered):
    return [s for s in walk_stmt(lowered.body) if isinstance(s, For) and isinstance(s.body, Store)]


@settings(max_examples=15, deadline=None)
@given(m=st.sampled_from([1, 3, 17]), n=st.sampled_from([1, 2, 31, 64, 97]),
       tj=st.sampled_from([1, 4, 16]), ti=st.sampled_from([1, 2, 5]),
       unroll=st.booleans(), parallel=st.booleans())
def test_a_carried_recurrence_matches_numpy_under_any_tiling(m, n, tj, ti, unroll, parallel):
    X, Y = _iir(m, n)
    s = tl.create_schedule(Y)
    io, jo, ii, ji = s[Y].tile("i", "j", ti, tj)
    if unroll:
        s[Y].unroll(ii)
    if parallel:
        s[Y].parallel(io)
    f = tl.build(s, [X, Y])
    x = np.random.default_rng(m * 1000 + n).standard_normal((m, n)).astype("f4")
    y = np.zeros_like(x)
    f(x, y)
    np.testing.assert_allclose(y, _want(x), rtol=1e-5, atol=1e-5)


def test_the_loop_carries_the_stored_value_and_reads_memory_once_per_run(monkeypatch):
    """The inner loop over j of a tiled IIR: its load of y[i, j - 1] is recognised, and
    the optimised code has one scalar load of Y (the first iteration's) per 16-step run
    instead of one a step — against the same kernel built without the carry (that reload
    made a 2 x 64 tiling 3x slower on a Zen 4)."""
    import tensorlang.backends.llvm.loops as loops

    X, Y = _iir(64, 64)
    s = tl.create_schedule(Y)
    s[Y].split("j", factor=16)
    lowered = tl.lower(s, [X, Y])
    (inner,) = _innermost_store_loops(lowered)
    store, loads = carried_loads(inner.body, inner.var.name)
    assert store is inner.body and len(loads) == 1
    x = np.random.default_rng(0).standard_normal((64, 64)).astype("f4")
    counts = []
    for carry in (True, False):
        if not carry:
            monkeypatch.setattr(loops, "carried_loads", lambda body, var: None)
        f = tl.build(s, [X, Y])
        counts.append(len(re.findall(r"= load float", f.get_source("ll"))))
        y = np.zeros_like(x)
        f(x, y)
        np.testing.assert_allclose(y, _want(x), rtol=1e-5, atol=1e-5)
    assert counts[0] <= counts[1] - 14, counts      # 15 reloads of Y a run, then 1


@pytest.mark.parametrize("index", ["same", "two back", "other row"])
def test_only_the_element_the_last_iteration_stored_is_carried(index):
    """y[i, j] from y[i, j] (no loop dependence), y[i, j - 2] and y[i - 1, j] are read
    from memory: only y[i, j - 1] is what the previous iteration of j stored."""
    X = tl.placeholder((8, 8), "float32", name="X")
    read = {"same": lambda y, i, j: y[i, j], "two back": lambda y, i, j: y[i, j - 2],
            "other row": lambda y, i, j: y[i - 1, j]}[index]
    guard = {"same": lambda i, j: j >= 0, "two back": lambda i, j: j >= 2,
             "other row": lambda i, j: i >= 1}[index]
    if index == "same":
        Y = tl.compute((8, 8), lambda i, j: X[i, j] * 2.0, name="Y")
    else:
        Y = tl.recurrence((8, 8), lambda y, i, j: X[i, j] + tl.if_then_else(
            guard(i, j), read(y, i, j), 0.0), dtype="float32", name="Y")
    s = tl.create_schedule(Y)
    lowered = tl.lower(s, [X, Y])
    for lp in _innermost_store_loops(lowered):
        assert carried_loads(lp.body, lp.var.name) is None
