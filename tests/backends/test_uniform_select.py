"""A condition that is the same in every lane of a vector loop (a time step's `t == 0`)
is a branch around the arms, not a lane mask (backends/llvm/vector.py, `uniform`): a
masked load whose lanes are all off still costs a microcode assist when its address lies
on an unmapped page — the heat stencil's reads of row t - 1 at t = 0 fall before the
array's first page, and the kernel ran 0.10-0.18 ms instead of 0.028 on numpy's
mmap-backed arrays (AMD Zen 5). Lane-dependent conditions stay masks."""

import mmap

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
