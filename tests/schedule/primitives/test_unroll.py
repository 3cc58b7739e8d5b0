"""unroll: a loop of constant (or constant-bounded) extent, unrolled."""

import numpy as np
import pytest

import tensorlang as tl

from .helpers import (
    assert_computes, assert_replays, matmul, matmul_nmk, prefix_cases, prefix_sum, run_vadd,
    vadd,
)






def test_unroll_is_real():
    A, B = vadd(16)
    s = tl.create_schedule(B)
    io, ii = s[B].split(B.op.axis[0], factor=4)
    s[B].unroll(ii)
    lowered = tl.lower(s, [A, B])
    assert "# unrolled" in str(lowered)
    f = tl.build(s, [A, B])
    assert f.get_source().count("fmul") >= 4 or f.get_source().count("<4 x float>") >= 1
    run_vadd(s, A, B, sizes=(16,))


@pytest.mark.parametrize("n", [127, 128])
def test_unrolled_loops_under_compute_at_take_the_tile_bound(n):
    """An unrolled row loop of the local tile runs at most 4 times under its tile, not n:
    the full-tile case (unrolled, vector) is the one taken, and the tail still computes."""
    A, B, C = matmul_nmk(n, 40, 9)
    s = tl.create_schedule(C)
    CC = s.cache_write(C, "local")
    io, jo, ii, ji = s[C].tile(*s[C].op.axis, 4, 16)
    s[CC].compute_at(s[C], jo)
    ci, cj = s[CC].op.axis
    (ck,) = s[CC].op.reduce_axis
    s[CC].reorder(ck, ci, cj)
    s[CC].unroll(ci)
    s[CC].vectorize(cj)
    text = str(tl.lower(s, [A, B, C]))
    assert "range(i_outer * 4, i_outer * 4 + 4):  # unrolled" in text
    assert f"i_outer * 4 + {n}" not in text
    f = tl.build(s, [A, B, C])
    rng = np.random.default_rng(n)
    a, b = rng.random((n, 9), dtype=np.float32), rng.random((9, 40), dtype=np.float32)
    c = np.zeros((n, 40), np.float32)
    f(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5)


def test_unroll_partial_tiles():
    A, B = vadd()
    s = tl.create_schedule(B)
    io, ii = s[B].split(B.op.axis[0], factor=8)
    s[B].unroll(ii)
    text = str(tl.lower(s, [A, B]))
    assert "== 8:" in text and "range(8):" in text  # the full tile is separated
    run_vadd(s, A, B)


def test_unroll_misuse_names_the_loop():
    A, B, C = matmul()
    s = tl.create_schedule(C)
    i, j = C.op.axis
    with pytest.raises(tl.ScheduleError, match="grows with the sizes"):
        s[C].unroll(j)


# ------------------------------------ the interpreter, the refusals, the replay
@pytest.mark.parametrize("factor", [1, 4, 7])
def test_unroll_of_a_recurrence_matches_numpy_and_the_interpreter(factor):
    x, y = prefix_sum()      # unrolling keeps every order: legal even on a recurrence
    s = tl.create_schedule(y)
    s[y].split("i", factor=factor)
    s[y].unroll("i.inner")
    assert_computes(s, [x, y], prefix_cases(), rtol=1e-12)


def test_unroll_beyond_the_limit_is_refused_and_names_the_loop():
    # unroll reorders nothing, so it has no witness to give: its refusals are misuse
    A, B = vadd()
    s = tl.create_schedule(B)
    s[B].split(B.op.axis[0], factor=2048)
    with pytest.raises(tl.ScheduleError, match=r"unroll: loop i.inner runs up to 2048 "
                                               r"iterations; at most 1024"):
        s[B].unroll("i.inner")
    assert s.trace_text().count("unroll") == 0


def test_unroll_replays():
    A, B = vadd()
    s = tl.create_schedule(B)
    io, ii = s[B].split(B.op.axis[0], factor=4)
    s[B].unroll(ii)
    assert_replays(s, [A, B], vadd)
