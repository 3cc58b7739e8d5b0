"""A strided copy of an L x L block of a local array (a vector loop of L lanes inside a
loop of L iterations, each lane reading P elements after the previous one) is emitted as a
transpose in registers: L row loads, L log2 L shuffles, L vector stores
(backends/llvm/transpose.py). The channel-blocked conv writes its rows back to NCHW so."""

import re

import numpy as np
import pytest

import tensorlang as tl
from tensorlang.backends.llvm.transpose import transpose_rows


class _Lists:
    """`shuffle_vector` over Python lists, to check the shuffle masks by themselves."""

    def shuffle_vector(self, a, b, mask):
        both = list(a) + list(b)
        return [both[int(m.constant)] for m in mask.constant]


@pytest.mark.parametrize("n", [2, 4, 8, 16])
def test_transpose_rows_gives_the_columns(n):
    rows = [[(i, c) for c in range(n)] for i in range(n)]
    cols = transpose_rows(_Lists(), rows)
    assert cols == [[(i, c) for i in range(n)] for c in range(n)]


def transposing_copy(m, n, lanes, dtype):
    """B = A^T with A's L x L blocks cached in a local array at B's column tile: the copy
    out of the block reads A_local[j, i] along j."""
    A = tl.placeholder((n, m), dtype, name="A")
    B = tl.compute((m, n), lambda i, j: A[j, i], name="B")
    s = tl.create_schedule(B)
    AL = s.cache_read(A, "local", [B])
    io, ii = s[B].split(B.op.axis[0], factor=lanes)
    jo, ji = s[B].split(B.op.axis[1], factor=lanes)
    s[B].reorder(io, jo, ii, ji)
    s[B].vectorize(ji)
    s[AL].compute_at(s[B], jo)
    return s, A, B


@pytest.mark.parametrize("m,n", [(1, 1), (7, 13), (16, 16), (17, 33), (64, 48)])
@pytest.mark.parametrize("dtype,lanes", [("float32", 16), ("float64", 8), ("int32", 8),
                                         ("float32", 4)])
@pytest.mark.parametrize("target", ["llvm", "llvm -mcpu=x86-64"])
def test_a_transposing_copy_matches_numpy(m, n, dtype, lanes, target, rng):
    s, A, B = transposing_copy(m, n, lanes, dtype)
    f = tl.build(s, [A, B], target=target)
    a = (rng.standard_normal((n, m)) * 100).astype(dtype)
    b = np.zeros((m, n), dtype)
    f(a, b)
    np.testing.assert_array_equal(b, a.T)


def test_full_blocks_are_shuffled_not_gathered():
    s, A, B = transposing_copy(64, 64, 16, "float32")
    asm = tl.build(s, [A, B], target="llvm -mcpu=znver4").get_source("asm")  # built only
    ops = re.findall(r"^\s+(v\w+)", asm, re.M)
    assert not [o for o in ops if "gather" in o]
    assert sum("shuf" in o or "perm" in o or "unpck" in o for o in ops) >= 32


def test_a_block_that_overhangs_the_array_loads_only_its_rows():
    # 24 columns: the second column tile has 8 of 16 lanes, shuffled too, its stores masked
    s, A, B = transposing_copy(16, 24, 16, "float32")
    ops = re.findall(r"^\s+(v\w+)", tl.build(s, [A, B], target="llvm -mcpu=znver4")
                     .get_source("asm"), re.M)
    assert not [o for o in ops if "gather" in o]
    assert sum("shuf" in o or "perm" in o or "unpck" in o for o in ops) >= 64
    f = tl.build(s, [A, B])
    a = np.arange(16 * 24, dtype="float32").reshape(24, 16)
    b = np.zeros((16, 24), "float32")
    f(a, b)
    np.testing.assert_array_equal(b, a.T)
