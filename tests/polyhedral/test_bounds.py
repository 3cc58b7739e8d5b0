"""Exact bounds checking: isl's verdict equals brute force over every iteration."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tensorlang as tl


def test_unguarded_shift_is_refused_with_witness():
    n = tl.var("n")
    A = tl.placeholder((n,), name="A")
    B = tl.compute((n,), lambda i: A[i - 1], name="B")
    with pytest.raises(tl.BoundsError, match=r"B reads A\[i - 1\] outside its bounds") as e:
        tl.lower(tl.create_schedule(B), [A, B])
    assert e.value.witness == {"n": 1, "i": 0}


def test_guarded_shift_is_accepted():
    n = tl.var("n")
    A = tl.placeholder((n,), name="A")
    B = tl.compute((n,), lambda i: tl.if_then_else(i > 0, A[i - 1], 0.0), name="B")
    f = tl.build(tl.create_schedule(B), [A, B])
    a, b = np.arange(5, dtype="float32"), np.zeros(5, "float32")
    f(a, b)
    np.testing.assert_array_equal(b, [0, 0, 1, 2, 3])


def test_size_dependent_reads_are_checked_at_call_time():
    n, m = tl.var("n"), tl.var("m")
    A = tl.placeholder((m,), name="A")
    B = tl.compute((n,), lambda i: A[2 * i], name="B")
    f = tl.build(tl.create_schedule(B), [A, B])  # fine whenever m >= 2n - 1
    a = np.arange(9, dtype="float32")
    b = np.zeros(5, "float32")
    f(a, b)
    np.testing.assert_array_equal(b, a[::2])
    with pytest.raises(tl.BoundsError, match=r"A\[i \* 2\]|A\[2 \* i\]") as e:
        f(a, np.zeros(6, "float32"))
    w = e.value.witness
    assert w["n"] == 6 and w["m"] == 9 and 2 * w["i"] >= 9


def test_where_clause_guards_reads():
    n = tl.var("n")
    A = tl.placeholder((n,), name="A")
    k = tl.reduce_axis((0, 4), name="k")
    B = tl.compute((n,), lambda i: tl.sum(A[i + k], axis=k, where=i + k < n), name="B")
    f = tl.build(tl.create_schedule(B), [A, B])
    a = np.arange(6, dtype="float32")
    b = np.zeros(6, "float32")
    f(a, b)
    np.testing.assert_array_equal(b, [a[i:i + 4].sum() for i in range(6)])


def _brute_force_oob(size, lo, hi, coef, off, guard):
    """Does some iteration i in [0, size) read A[coef*i + off] outside [0, size)?"""
    for i in range(size):
        if guard is not None and not (lo <= i < hi):
            continue
        x = coef * i + off
        if not 0 <= x < size:
            return True
    return False


@settings(max_examples=150, deadline=None)
@given(size=st.integers(0, 6), coef=st.integers(-2, 2), off=st.integers(-3, 3),
       lo=st.integers(-1, 4), hi=st.integers(0, 7), guarded=st.booleans())
def test_bounds_verdict_equals_brute_force(size, coef, off, lo, hi, guarded):
    n = tl.var("n")
    A = tl.placeholder((n,), "int32", name="A")

    def body(i):
        read = A[coef * i + off]
        return tl.if_then_else((i >= lo) & (i < hi), read, 0) if guarded else read

    B = tl.compute((n,), body, name="B")
    want_oob = _brute_force_oob(size, lo, hi, coef, off, True if guarded else None)
    try:
        f = tl.build(tl.create_schedule(B), [A, B])
    except tl.BoundsError:
        # refused statically: out of bounds for every size where B runs, this one included
        assert want_oob or size == 0
        return
    a = np.arange(size, dtype="int32")
    b = np.zeros(size, "int32")
    try:
        f(a, b)
        got_oob = False
    except tl.BoundsError:
        got_oob = True
    assert got_oob == want_oob
    if not got_oob:
        want = [(a[coef * i + off] if (not guarded or lo <= i < hi) else 0) for i in range(size)]
        np.testing.assert_array_equal(b, np.array(want, "int32"))
