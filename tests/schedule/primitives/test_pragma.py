"""pragma: TVM's `s[C].pragma(axis, key, value)`; "auto_unroll_max_step" unrolls the loops
inside `axis` while their trip counts' product is at most the value, "unroll_explicit"
says whether they are unrolled in the loop IR or left to LLVM."""

import numpy as np
import pytest

import tensorlang as tl

from .helpers import (
    assert_computes, assert_replays, matmul_nmk, prefix_cases, prefix_sum, run_matmul,
    run_vadd, vadd,
)


def unrolled(s, args) -> list[str]:
    """The loops the lowered nest marks unrolled, outer first, each once (a reduction's
    initialisation has a loop of the same name)."""
    names = [ln.split("for ")[1].split(" in")[0] for ln in str(tl.lower(s, args)).splitlines()
             if ln.strip().startswith("for ") and "# unrolled" in ln]
    return list(dict.fromkeys(names))


def tiled_matmul(n=None, m=None, k=None):
    """A matmul tiled 4 x 8, k inside the tile: i.outer, j.outer, k, i.inner, j.inner."""
    n, m = n or tl.var("n"), m or tl.var("m")
    A, B, C = matmul_nmk(n, n, m) if k is None else matmul_nmk(n, n, k)
    s = tl.create_schedule(C)
    io, jo, ii, ji = s[C].tile(*C.op.axis, 4, 8)
    s[C].reorder(io, jo, *C.op.reduce_axis, ii, ji)
    return s, (A, B, C), (io, jo, ii, ji)


def test_pragma_prints_the_unrolled_nest():
    A, B = vadd(20)
    s = tl.create_schedule(B)
    io, ii = s[B].split(B.op.axis[0], factor=4)
    s[B].pragma(io, "auto_unroll_max_step", 4)
    assert str(tl.lower(s, [A, B])).splitlines()[1:] == [
        "  for i_outer in range(5):",
        "    for i_inner in range(4):  # unrolled",
        "      B[i_outer * 4 + i_inner] = A[i_outer * 4 + i_inner] * 2.0 + 1.0",
    ]


@pytest.mark.parametrize("max_step, want", [
    (0, []), (7, []), (8, ["j_inner"]), (31, ["j_inner"]), (32, ["i_inner", "j_inner"]),
])
def test_auto_unroll_max_step_unrolls_innermost_loops_while_the_product_fits(max_step, want):
    s, args, (io, jo, ii, ji) = tiled_matmul(32, k=16)
    s[args[2]].pragma(jo, "auto_unroll_max_step", max_step)
    assert unrolled(s, args) == want


def test_the_pragma_loop_itself_and_loops_beyond_a_symbolic_extent_stay_serial():
    s, args, (io, jo, ii, ji) = tiled_matmul()      # k's extent is the symbolic m
    s[args[2]].pragma(io, "auto_unroll_max_step", 1024)
    assert unrolled(s, args) == ["i_inner", "j_inner"]      # k stops it; j.outer too


def test_a_vector_loop_counts_as_one_step():
    A, B = vadd()
    s = tl.create_schedule(B)
    io, ii = s[B].split(B.op.axis[0], factor=32)
    iio, iii = s[B].split(ii, factor=8)
    s[B].vectorize(iii)
    s[B].pragma(io, "auto_unroll_max_step", 4)
    assert unrolled(s, [A, B]) == ["i_inner_outer"]          # 4 vectors, not 32 lanes
    run_vadd(s, A, B)


@pytest.mark.parametrize("max_step", [1, 4, 12, 32])
def test_pragma_vadd_matches_numpy_at_sizes_that_do_and_do_not_divide(max_step):
    A, B = vadd()
    s = tl.create_schedule(B)
    io, ii = s[B].split(B.op.axis[0], factor=4)
    iio, iii = s[B].split(io, factor=3)
    s[B].pragma(iio, "auto_unroll_max_step", max_step)
    run_vadd(s, A, B, sizes=(1, 2, 3, 7, 13, 64, 301))


@pytest.mark.parametrize("max_step", [8, 32, 64])
def test_pragma_matmul_matches_numpy_and_the_interpreter(max_step):
    s, (A, B, C), (io, jo, ii, ji) = tiled_matmul(k=5)
    s[C].pragma(jo, "auto_unroll_max_step", max_step)
    assert unrolled(s, [A, B, C])
    run_matmul(s, A, B, C, sizes=((1, 5), (7, 5), (8, 5), (13, 5), (33, 5)))
    rng = np.random.default_rng(1)
    cases = []
    for n in (1, 11, 16):
        a, b = rng.random((n, 5), np.float32), rng.random((5, n), np.float32)
        cases.append(([a, b], a @ b))
    assert_computes(s, [A, B, C], cases, llvm=False)


def test_pragma_under_compute_at_takes_the_tile_bound():
    """The register tile of a cache_write stage computed per tile: its loops are bounded by
    the tile (4 x 16), not by n, so the pragma unrolls them at any n."""
    n = 37
    A, B, C = matmul_nmk(n, 40, 9)
    s = tl.create_schedule(C)
    CC = s.cache_write(C, "local")
    io, jo, ii, ji = s[C].tile(*s[C].op.axis, 4, 16)
    s[CC].compute_at(s[C], jo)
    ci, cj = s[CC].op.axis
    (ck,) = s[CC].op.reduce_axis
    s[CC].reorder(ck, ci, cj)
    s[CC].vectorize(cj)
    s[CC].pragma(ck, "auto_unroll_max_step", 4)
    assert any("# unrolled" in ln and "i_outer * 4" in ln
               for ln in str(tl.lower(s, [A, B, C])).splitlines())
    f = tl.build(s, [A, B, C])
    rng = np.random.default_rng(n)
    a, b = rng.random((n, 9), dtype=np.float32), rng.random((9, 40), dtype=np.float32)
    c = np.full((n, 40), np.nan, np.float32)
    f(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5)


def test_unroll_explicit_false_leaves_the_loops_to_llvm_in_either_order():
    for order in (("auto_unroll_max_step", "unroll_explicit"),
                  ("unroll_explicit", "auto_unroll_max_step")):
        s, args, (io, jo, ii, ji) = tiled_matmul(32, k=16)
        values = {"auto_unroll_max_step": 64, "unroll_explicit": False}
        for key in order:
            s[args[2]].pragma(jo, key, values[key])
        assert unrolled(s, args) == [], order
        run_matmul(s, *args, sizes=((32, 16),))
    s[args[2]].pragma(jo, "unroll_explicit", True)      # re-decided with both keys
    assert unrolled(s, args) == ["i_inner", "j_inner"]


def test_a_loop_unrolled_by_unroll_stays_unrolled():
    s, args, (io, jo, ii, ji) = tiled_matmul(32, k=16)
    s[args[2]].unroll(ii)
    s[args[2]].pragma(jo, "auto_unroll_max_step", 8)
    s[args[2]].pragma(jo, "unroll_explicit", False)
    assert unrolled(s, args) == ["i_inner"]


def test_pragma_on_a_recurrence_keeps_its_order():
    x, y = prefix_sum()
    s = tl.create_schedule(y)
    io, ii = s[y].split("i", factor=5)
    s[y].pragma(io, "auto_unroll_max_step", 8)
    assert_computes(s, [x, y], prefix_cases(sizes=(1, 5, 7, 23)), rtol=1e-12)


# ------------------------------------------------------------ refusals and the replay
@pytest.mark.parametrize("key", ["parallel_launch_point", "parallel_stride_pattern",
                                 "parallel_barrier_when_finish", "unroll", 3])
def test_an_unknown_key_is_refused_naming_it_and_the_supported_ones(key):
    A, B = vadd(16)
    s = tl.create_schedule(B)
    with pytest.raises(tl.TensorlangError, match=rf"pragma: unknown key {key!r}; the "
                       r"supported keys are 'auto_unroll_max_step', 'unroll_explicit'"):
        s[B].pragma(B.op.axis[0], key, 1)
    assert s.trace == []


@pytest.mark.parametrize("key, value, match", [
    ("auto_unroll_max_step", -1, "must be >= 0"),
    ("auto_unroll_max_step", 2.5, "must be an int"),
    ("auto_unroll_max_step", None, "must be an int"),
    ("unroll_explicit", 2, "must be True or False"),
    ("unroll_explicit", "yes", "must be True or False"),
])
def test_a_bad_value_is_refused(key, value, match):
    A, B = vadd(16)
    s = tl.create_schedule(B)
    with pytest.raises(tl.ScheduleError, match=match):
        s[B].pragma(B.op.axis[0], key, value)


def test_a_loop_of_another_stage_is_refused():
    A, B = vadd(16)
    C = tl.compute((16,), lambda i: B[i] + 1.0, name="C")
    s = tl.create_schedule(C)
    with pytest.raises(tl.ScheduleError, match="pragma: loop is the axis i of another stage"):
        s[C].pragma(B.op.axis[0], "auto_unroll_max_step", 4)


def test_pragma_replays():
    def make():
        return vadd()
    A, B = make()
    s = tl.create_schedule(B)
    io, ii = s[B].split(B.op.axis[0], factor=4)
    s[B].pragma(io, "unroll_explicit", True)
    s[B].pragma(io, "auto_unroll_max_step", 16)
    assert 's["B"].pragma("i.outer", "auto_unroll_max_step", 16)' in s.trace_text()
    assert_replays(s, [A, B], make)
