"""A condition that is the same in every lane of a vector loop (a time step's `t == 0`)
is a branch around the arms, not a lane mask (backends/llvm/vector.py, `uniform`): a
masked load whose lanes are all off still costs a microcode assist when its address lies
on an unmapped page — the heat stencil's reads of row t - 1 at t = 0 fall before the
array's first page, and the kernel ran 0.10-0.18 ms instead of 0.028 on numpy's
mmap-backed arrays (AMD Zen 5). Lane-dependent conditions stay masks."""

import mmap
import re

import numpy as np
import pytest

import tensorlang as tl


def _first_row_or_previous(n, steps):
    X = tl.placeholder((n,), "float32", name="X")
    U = tl.recurrence((steps, n), lambda u, t, i: tl.if_then_else(
        t == 0, X[i], u[t - 1, i] * 0.5 + 1.0), dtype="float32", name="U")
    s = tl.create_schedule(U)
    s[U].vectorize(s[U].split(U.op.axis[1], factor=16)[1])
    return X, U, s


def _reference(x, steps):
    out = np.empty((steps, x.size), np.float32)
    out[0] = x
    for t in range(1, steps):
        out[t] = out[t - 1] * np.float32(0.5) + np.float32(1.0)
    return out


@pytest.mark.parametrize("n", [1, 7, 16, 37, 256])
def test_a_uniform_select_is_a_branch_and_matches_numpy(n):
    X, U, s = _first_row_or_previous(n, 5)
    f = tl.build(s, [X, U], name="uniform_sel")
    ll = f.get_source("ll")
    # whole rows of 16 read row t - 1 unmasked, behind a branch on t
    if n % 16 == 0:
        assert "llvm.masked.load" not in ll, "a uniform condition became a lane mask"
    x = np.random.default_rng(n).standard_normal(n).astype(np.float32)
    out = np.zeros((5, n), np.float32)
    f(x, out)
    np.testing.assert_allclose(out, _reference(x, 5), rtol=1e-6)


def test_the_first_step_reads_nothing_before_the_array():
    """The output placed at the start of a mapping whose previous page is unreadable: the
    first step's arm is the only one that runs, so nothing touches that page."""
    n, steps = 1024, 3
    page = mmap.PAGESIZE
    buf = mmap.mmap(-1, 2 * page + steps * n * 4, prot=mmap.PROT_READ | mmap.PROT_WRITE)
    import ctypes

    libc = ctypes.CDLL(None)
    base = ctypes.addressof(ctypes.c_char.from_buffer(buf))
    assert libc.mprotect(ctypes.c_void_p(base), page, 0) == 0       # PROT_NONE
    out = np.frombuffer(buf, np.float32, steps * n, offset=page).reshape(steps, n)
    X, U, s = _first_row_or_previous(n, steps)
    f = tl.build(s, [X, U], name="guarded")
    x = np.arange(n, dtype=np.float32)
    f(x, out)
    np.testing.assert_allclose(out, _reference(x, steps), rtol=1e-6)
    libc.mprotect(ctypes.c_void_p(base), page, mmap.PROT_READ | mmap.PROT_WRITE)
    del out


def test_a_lane_dependent_condition_stays_a_mask():
    X = tl.placeholder((64,), "float32", name="X")
    Y = tl.compute((64,), lambda i: tl.if_then_else(i >= 1, X[i - 1], 0.0), name="Y")
    s = tl.create_schedule(Y)
    s[Y].vectorize(s[Y].split(Y.op.axis[0], factor=16)[1])
    f = tl.build(s, [X, Y], name="lane_sel")
    assert "llvm.masked.load" in f.get_source("ll")
    x = np.arange(64, dtype=np.float32)
    y = np.zeros(64, np.float32)
    f(x, y)
    np.testing.assert_array_equal(y, np.concatenate([[0], x[:-1]]))


def _guarded_stencil(n, lo, hi, lanes=16):
    """Y[i] = X[i - 1] + X[i + 1] inside [lo, hi], X[i] outside: the reads at i - 1 and
    i + 1 are in bounds only where the condition holds."""
    X = tl.placeholder((n,), "float32", name="X")
    Y = tl.compute((n,), lambda i: tl.if_then_else(
        tl.all(i >= lo, i <= hi), X[i - 1] + X[i + 1], X[i]), name="Y")
    s = tl.create_schedule(Y)
    s[Y].vectorize(s[Y].split(Y.op.axis[0], factor=lanes)[1])
    return X, Y, s


def _guarded_reference(x, lo, hi):
    y = x.copy()
    for i in range(max(lo, 1), min(hi, x.size - 2) + 1):
        y[i] = x[i - 1] + x[i + 1]
    return y


def test_an_interval_condition_runs_whole_vectors_unmasked():
    """`i >= 1 and i <= n - 2` holds in a set of lanes that is an interval: a vector whose
    first and last lanes satisfy it takes the true arm unmasked (one branch), the edge
    vectors lane by lane. The heat stencil's explicit 16-lane rows: 0.030 -> 0.020 ms
    (LLVM's own vectorisation of the declared nest 0.026; AMD Zen 5). Here: both paths in
    the IR (whole-vector loads and masked ones), and the input placed between two
    unreadable pages — a read one element outside it would fault."""
    import ctypes

    n = 1024
    X, Y, s = _guarded_stencil(n, 1, n - 2)
    f = tl.build(s, [X, Y], name="interval_sel")
    ll = f.get_source("ll")
    assert re.search(r"= load <16 x float>", ll) and "llvm.masked.load" in ll
    page = mmap.PAGESIZE
    size = n * 4
    assert size % page == 0
    buf = mmap.mmap(-1, 2 * page + size, prot=mmap.PROT_READ | mmap.PROT_WRITE)
    libc = ctypes.CDLL(None)
    base = ctypes.addressof(ctypes.c_char.from_buffer(buf))
    x = np.frombuffer(buf, np.float32, n, offset=page)
    x[:] = np.random.default_rng(0).standard_normal(n)
    want = _guarded_reference(x.copy(), 1, n - 2)
    assert libc.mprotect(ctypes.c_void_p(base), page, 0) == 0
    assert libc.mprotect(ctypes.c_void_p(base + page + size), page, 0) == 0
    y = np.zeros(n, np.float32)
    f(x, y)
    for off in (0, page + size):
        libc.mprotect(ctypes.c_void_p(base + off), page, mmap.PROT_READ | mmap.PROT_WRITE)
    np.testing.assert_array_equal(y, want)
    del x


def test_a_condition_that_is_no_interval_stays_a_mask():
    """`i % 3 == 0` holds in lanes that are no interval: every load stays masked."""
    X = tl.placeholder((64,), "float32", name="X")
    Y = tl.compute((64,), lambda i: tl.if_then_else(i % 3 == 0, X[i] * 2.0, X[i]), name="Y")
    s = tl.create_schedule(Y)
    s[Y].vectorize(s[Y].split(Y.op.axis[0], factor=16)[1])
    f = tl.build(s, [X, Y], name="mod_sel")
    assert not re.search(r"= load <16 x float>", f.get_source("ll"))
    x = np.arange(64, dtype=np.float32)
    y = np.zeros(64, np.float32)
    f(x, y)
    np.testing.assert_array_equal(y, np.where(np.arange(64) % 3 == 0, 2 * x, x))


def test_interval_conditions_match_numpy_at_any_bounds():
    """Property: random bounds of the interval (empty, inside one vector, across several,
    past the ends), sizes that the vector width does and does not divide."""
    from hypothesis import given, settings
    from hypothesis import strategies as hs

    @settings(max_examples=25, deadline=None, derandomize=True)
    @given(hs.integers(1, 70), hs.integers(-5, 75), hs.integers(-5, 75),
           hs.sampled_from([4, 8, 16]))
    def check(n, lo, hi, lanes):
        X, Y, s = _guarded_stencil(n, max(lo, 1), min(hi, n - 2), lanes)
        x = np.random.default_rng(n).standard_normal(n).astype(np.float32)
        y = np.full(n, np.nan, np.float32)
        tl.build(s, [X, Y])(x, y)
        np.testing.assert_array_equal(y, _guarded_reference(x, max(lo, 1), min(hi, n - 2)))

    check()
