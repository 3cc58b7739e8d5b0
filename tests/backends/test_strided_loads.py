"""A vector loop's read whose lanes lie 2 or 4 elements apart (a stride-2 convolution's or
pooling's input row) is a few whole vector loads and a shuffle, not a gather
(backends/llvm/vector.py, `strided_load`); the last vector is masked so nothing past the
last lane's element is read."""

import re

import numpy as np
import pytest

import tensorlang as tl


def strided(n, step, lanes, dtype):
    A = tl.placeholder((n * step,), dtype, name="A")
    B = tl.compute((n,), lambda i: A[i * step] * 2, name="B")
    s = tl.create_schedule(B)
    _, i = s[B].split(B.op.axis[0], factor=lanes)
    s[B].vectorize(i)
    return s, A, B


@pytest.mark.parametrize("n", [1, 2, 3, 7, 16, 33, 100])
@pytest.mark.parametrize("step", [2, 3, 4])
@pytest.mark.parametrize("dtype,lanes", [("float32", 16), ("float64", 8), ("int32", 4),
                                         ("float32", 2)])
@pytest.mark.parametrize("target", ["llvm", "llvm -mcpu=x86-64"])
def test_strided_reads_match_numpy(n, step, dtype, lanes, target, rng):
    s, A, B = strided(n, step, lanes, dtype)
    f = tl.build(s, [A, B], target=target)
    # the input ends at the last element read: a read past it would fault or differ
    a = (rng.standard_normal(n * step) * 100).astype(dtype)[: (n - 1) * step + 1]
    a = np.concatenate([a, np.zeros(n * step - a.size, dtype)])
    b = np.zeros(n, dtype)
    f(a, b)
    np.testing.assert_array_equal(b, a[::step][:n] * 2)


@pytest.mark.parametrize("step,gathers", [(2, 0), (4, 0), (3, 1)])
def test_stride_two_and_four_are_shuffled_three_is_gathered(step, gathers):
    s, A, B = strided(64, step, 16, "float32")
    ops = re.findall(r"^\s+(v\w+)", tl.build(s, [A, B], target="llvm -mcpu=znver4")
                     .get_source("asm"), re.M)
    assert (sum("gather" in o for o in ops) > 0) == bool(gathers)


def test_a_stride_two_read_ending_at_a_page_boundary_does_not_fault():
    import mmap

    n = 16
    page = mmap.PAGESIZE
    buf = mmap.mmap(-1, 2 * page)
    arr = np.frombuffer(buf, np.float32)
    # the read's last element is the page's last float; the next page is unmapped
    # (mprotect is not reachable from numpy: use the end of the mapping itself)
    a = arr[arr.size - ((n - 1) * 2 + 1):]
    a[:] = np.arange(a.size, dtype=np.float32)
    A = tl.placeholder(((n - 1) * 2 + 1,), "float32", name="A")
    B = tl.compute((n,), lambda i: A[i * 2], name="B")
    s = tl.create_schedule(B)
    s[B].vectorize(B.op.axis[0])
    b = np.zeros(n, np.float32)
    tl.build(s, [A, B])(a, b)
    np.testing.assert_array_equal(b, a[::2])


@pytest.mark.parametrize("n", [1, 5, 16, 29, 40])
def test_a_strided_read_under_a_lane_mask_reads_only_the_lanes_that_are_on(n, rng):
    # a stride-2 convolution's padded row: lane 0 reads before the row, so it is off (the
    # read masked), and the split's tail is masked too
    A = tl.placeholder((2 * n,), "float32", name="A")
    B = tl.compute((n,), lambda i: tl.if_then_else(i * 2 - 1 >= 0, A[i * 2 - 1], 0.0),
                   name="B")
    s = tl.create_schedule(B)
    _, i = s[B].split(B.op.axis[0], factor=16)
    s[B].vectorize(i)
    a = rng.standard_normal(2 * n).astype("float32")
    b = np.zeros(n, "float32")
    tl.build(s, [A, B])(a, b)
    want = np.concatenate([[0.0], a[1:2 * n - 2:2]]).astype("float32")[:n]
    np.testing.assert_array_equal(b, want)
    ops = re.findall(r"^\s+(v\w+)", tl.build(s, [A, B], target="llvm -mcpu=znver4")
                     .get_source("asm"), re.M)
    assert not [o for o in ops if "gather" in o]
