"""split: loop -> (outer, inner), outer * factor + inner."""

import numpy as np
import pytest

import tensorlang as tl

from .helpers import (
    allocations, assert_computes, assert_refused_with_witness, assert_replays, blur, check_blur,
    matmul, prefix_cases, prefix_sum, RNG, run_vadd, vadd, vadd_cases,
)






def test_split_loop_nest_and_numbers():
    A, B = vadd(10)
    s = tl.create_schedule(B)
    io, ii = s[B].split(B.op.axis[0], factor=4)
    assert (io.name, ii.name) == ("i.outer", "i.inner")
    text = str(tl.lower(s, [A, B]))
    assert "for i_outer in range(3):" in text
    assert "for i_inner in range(min(4, 10 - i_outer * 4)):" in text
    f = tl.build(s, [A, B])
    a = RNG.random(10, dtype=np.float32)
    b = np.zeros(10, np.float32)
    f(a, b)
    np.testing.assert_allclose(b, a * 2 + 1)


@pytest.mark.parametrize("factor", [1, 3, 4, 8, 500])
def test_split_symbolic(factor):
    A, B = vadd()
    s = tl.create_schedule(B)
    s[B].split(B.op.axis[0], factor=factor)
    run_vadd(s, A, B)


def test_split_nparts_and_twice():
    A, B = vadd(13)
    s = tl.create_schedule(B)
    io, ii = s[B].split(B.op.axis[0], nparts=4)
    assert "for i_outer in range(4)" in str(tl.lower(s, [A, B]))
    s[B].split(ii, factor=2)
    assert s[B].loops == ["i.outer", "i.inner.outer", "i.inner.inner"]
    run_vadd(s, A, B, sizes=(13,))


def test_split_extent_one_and_offset_axis():
    A, B = vadd(1)
    s = tl.create_schedule(B)
    s[B].split(B.op.axis[0], factor=4)
    run_vadd(s, A, B, sizes=(1,))
    # a reduction axis that starts at 3: the first tile is full
    X = tl.placeholder((20,), name="X")
    k = tl.reduce_axis((3, 17), name="k")
    Y = tl.compute((1,), lambda i: tl.sum(X[k], axis=k), name="Y")
    s = tl.create_schedule(Y)
    ko, ki = s[Y].split(k, factor=5)
    assert "for k_outer in range(3)" in str(tl.lower(s, [X, Y]))
    f = tl.build(s, [X, Y])
    x = RNG.random(20, dtype=np.float32)
    y = np.zeros(1, np.float32)
    f(x, y)
    np.testing.assert_allclose(y[0], x[3:17].sum(), rtol=1e-5)


def test_split_factor_larger_than_extent_gives_the_real_extent():
    A, B, C = blur(5)
    s = tl.create_schedule(C)
    yo, yi = s[C].split(C.op.axis[0], factor=64)
    s[B].compute_at(s[C], yo)
    assert allocations(tl.lower(s, [A, C]))["B"] == (7, 5)   # not 66
    check_blur(s, A, C, sizes=(5,))


def test_split_misuse_names_the_argument():
    A, B, C = matmul()
    s = tl.create_schedule(C)
    i, j = C.op.axis
    with pytest.raises(tl.ScheduleError, match="factor must be >= 1"):
        s[C].split(i, factor=0)
    with pytest.raises(tl.ScheduleError, match="factor must be an int"):
        s[C].split(i, factor=2.5)
    with pytest.raises(tl.ScheduleError, match="exactly one"):
        s[C].split(i)
    with pytest.raises(tl.ScheduleError, match="nparts needs"):
        s[C].split(i, nparts=2)
    X, Y = vadd()
    with pytest.raises(tl.ScheduleError, match="another stage"):
        s[C].split(Y.op.axis[0], factor=2)
    s[C].split(i, factor=4)
    with pytest.raises(tl.ScheduleError, match="no longer exists"):
        s[C].split(i, factor=2)


# ------------------------------------------- the interpreter, the witness, the replay
@pytest.mark.parametrize("factor", [1, 4, 7])
def test_split_matches_numpy_and_the_interpreter(factor):
    A, B = vadd()
    s = tl.create_schedule(B)
    s[B].split(B.op.axis[0], factor=factor)
    assert_computes(s, [A, B], vadd_cases())       # 1, 7, 8, 28: some divide, some not


def test_split_loops_name_the_witness_of_a_refused_primitive():
    x, y = prefix_sum()
    s = tl.create_schedule(y)
    s[y].split("i", factor=4)
    for prim, args in (("parallel", ("i.inner",)), ("reorder", ("i.inner", "i.outer"))):
        w = assert_refused_with_witness(s, lambda p=prim, a=args: getattr(s[y], p)(*a),
                                        prim, "y")
        assert w.sink["i"] == w.source["i"] + 1
        for point, loops in ((w.source, w.source_loops), (w.sink, w.sink_loops)):
            assert loops["i.outer"] * 4 + loops["i.inner"] == point["i"], w
    assert_computes(s, [x, y], prefix_cases())     # refused twice, still the split nest


def test_split_replays():
    A, B = vadd()
    s = tl.create_schedule(B)
    io, ii = s[B].split(B.op.axis[0], factor=8)
    s[B].split(ii, factor=3)
    assert_replays(s, [A, B], vadd)
