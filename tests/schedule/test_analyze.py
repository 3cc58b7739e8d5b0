"""tl.analyze: exact counts checked against the CSE 291 formulas and brute force."""

import itertools
from fractions import Fraction

import pytest

import tensorlang as tl


def _cached_matmul(v1, v2, v3):
    n = tl.var("n")
    A = tl.placeholder((n, n), name="A")
    B = tl.placeholder((n, n), name="B")
    k = tl.reduce_axis((0, n), name="k")
    C = tl.compute((n, n), lambda i, j: tl.sum(A[i, k] * B[j, k], axis=k), name="C")
    s = tl.create_schedule(C)
    i, j = C.op.axis
    io, ii = s[C].split(i, factor=v1)
    jo, ji = s[C].split(j, factor=v2)
    ko, ki = s[C].split(k, factor=v3)
    s[C].reorder(io, jo, ko, ii, ji, ki)
    AA = s.cache_read(A, "local", [C])
    BB = s.cache_read(B, "local", [C])
    s[AA].compute_at(s[C], ko)
    s[BB].compute_at(s[C], ko)
    return s, [A, B, C]


@pytest.mark.parametrize("n,v", [(32, (4, 8, 2)), (24, (8, 4, 3)), (16, (2, 2, 16))])
def test_cse291_data_movement_counts(n, v):
    v1, v2, v3 = v
    s, args = _cached_matmul(*v)
    r = tl.analyze(s, args, sizes={"n": n})
    assert r.stage("A_local").iterations == n ** 3 // v2
    assert r.stage("B_local").iterations == n ** 3 // v1
    assert r.stage("C").writes == {"C": n * n}
    assert r.stage("C").flops == 2 * n ** 3
    ko = next(lv for lv in r.stage("C").levels if lv.loop == "k.outer")
    assert ko.iterations == (n // v1) * (n // v2) * (n // v3)
    assert ko.per_iteration["A_local"] == v1 * v3
    assert "A_local" in str(r)


def test_fusion_raises_arithmetic_intensity_from_one_third_to_three_fifths():
    n = tl.var("n")
    A, B, C, D = (tl.placeholder((n,), name=c) for c in "ABCD")
    T = tl.compute((n,), lambda i: A[i] + B[i], name="T")
    E = tl.compute((n,), lambda i: D[i] + T[i] * C[i], name="E")
    s = tl.create_schedule(E)
    r = tl.analyze(s, [A, B, C, D, E], sizes={"n": 1000})
    assert r.stage("T").intensity == Fraction(1, 3)
    s[T].compute_inline()
    r = tl.analyze(s, [A, B, C, D, E], sizes={"n": 1000})
    assert r.stage("E").intensity == Fraction(3, 5) == r.intensity


def test_footprints_match_brute_force_for_a_tiled_stencil():
    A = tl.placeholder((13, 11), name="A")
    B = tl.compute((13, 11), lambda y, x: A[y, x] * 2.0, name="B")
    C = tl.compute((11, 11), lambda y, x: B[y, x] + B[y + 2, x], name="C")
    s = tl.create_schedule(C)
    yo, xo, yi, xi = s[C].tile(*C.op.axis, 4, 3)
    s[B].compute_at(s[C], xo)
    r = tl.analyze(s, [A, C])
    # brute force: B's iterations = sum over tiles of its footprint there
    total = 0
    for ty, tx in itertools.product(range(3), range(4)):
        rows = {y + d for y in range(4 * ty, min(11, 4 * ty + 4)) for d in (0, 2)}
        cols = set(range(3 * tx, min(11, 3 * tx + 3)))
        total += len(rows) * len(cols)
    assert r.stage("B").iterations == total
    lv = next(lv for lv in r.stage("C").levels if lv.loop == "x.outer")
    assert lv.moved["B"] == total


def test_analyze_misuse():
    n = tl.var("n")
    A = tl.placeholder((n,), name="A")
    B = tl.compute((n,), lambda i: A[i] + 1.0, name="B")
    s = tl.create_schedule(B)
    with pytest.raises(tl.TensorlangError, match="sizes"):
        tl.analyze(s, [A, B])
    with pytest.raises(tl.TensorlangError, match="does not use"):
        tl.analyze(s, [A, B], sizes={"n": 4, "m": 2})
    with pytest.raises(tl.TensorlangError, match=">= 0"):
        tl.analyze(s, [A, B], sizes={"n": -1})
