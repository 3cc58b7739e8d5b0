"""The isl model: statements, domains with size parameters, read/write relations."""

import islpy as isl
import pytest

import tensorlang as tl


def test_matmul_statements_and_access_relations():
    n = tl.var("n")
    A = tl.placeholder((n, 64), name="A")
    B = tl.placeholder((64, 32), name="B")
    k = tl.reduce_axis((0, 64), name="k")
    C = tl.compute((n, 32), lambda i, j: tl.sum(A[i, k] * B[k, j], axis=k), name="C")
    f = tl.lower(tl.create_schedule(C), [A, B, C])
    want_reads = isl.UnionMap(
        "[n] -> { C_update[i, j, k] -> A[i, k] : 0 <= i < n and 0 <= j < 32 and 0 <= k < 64;"
        "         C_update[i, j, k] -> B[k, j] : 0 <= i < n and 0 <= j < 32 and 0 <= k < 64;"
        "         C_update[i, j, k] -> C[i, j] : 0 <= i < n and 0 <= j < 32 and 0 <= k < 64 }")
    want_writes = isl.UnionMap(
        "[n] -> { C_init[i, j] -> C[i, j] : 0 <= i < n and 0 <= j < 32;"
        "         C_update[i, j, k] -> C[i, j] : 0 <= i < n and 0 <= j < 32 and 0 <= k < 64 }")
    assert f.reads.is_equal(want_reads)
    assert f.writes.is_equal(want_writes)


def test_guarded_reads_are_restricted_to_their_condition():
    n = tl.var("n")
    A = tl.placeholder((n,), name="A")
    B = tl.compute((n,), lambda i: tl.if_then_else(i > 0, A[i - 1], A[i]), name="B")
    f = tl.lower(tl.create_schedule(B), [A, B])
    want = isl.UnionMap("[n] -> { B[i] -> A[i - 1] : 0 < i < n; B[i] -> A[i] : i = 0 < n }")
    assert f.reads.is_equal(want)


def test_non_affine_read_may_touch_the_whole_tensor():
    n = tl.var("n")
    A = tl.placeholder((n,), name="A")
    I = tl.placeholder((n,), "int32", name="I")
    B = tl.compute((n,), lambda i: A[I[i]], name="B")
    f = tl.lower(tl.create_schedule(B), [A, I, B])
    a_reads = f.reads.intersect_range(isl.UnionSet("[n] -> { A[x] }"))
    assert a_reads.is_equal(isl.UnionMap("[n] -> { B[i] -> A[x] : 0 <= i < n and 0 <= x < n }"))


def _brute_extent(r, sizes):
    """Largest count of values of r's one set dim over the listed parameter values."""
    import itertools

    names = [r.get_dim_name(isl.dim_type.param, k) for k in range(r.dim(isl.dim_type.param))]
    best = 0
    for vals in itertools.product(*(sizes[n] for n in names)):
        fixed = r
        for k, v in enumerate(vals):
            fixed = fixed.fix_val(isl.dim_type.param, k, isl.Val(v))
        pts: list[int] = []
        fixed.foreach_point(pts.append)
        pts = [p.get_coordinate_val(isl.dim_type.set, 0).to_python() for p in pts]
        if pts:
            best = max(best, max(pts) - min(pts) + 1)
    return best


@pytest.mark.parametrize("text,bounded", [
    # a fused-then-split loop whose max - min has a rational coefficient (found by the fuzzer)
    ("[n, __l0] -> { [i0] : 0 <= __l0 <= 1 and -2n + __l0 + 2i0 <= "
     "2*floor((-1 + 3__l0 + 2i0)/6) < __l0 + 2i0 }", False),
    ("[n, __l0] -> { [i] : 0 <= i < 8 and 0 <= i + 8__l0 < n }", True),
    ("[n, __l0] -> { [i] : 0 <= i < 6 and 0 <= i + 6__l0 < 3n and i mod 3 = 1 }", True),
    ("[__l0] -> { [i] : 0 <= __l0 < 5 and __l0 <= 2i <= 3__l0 }", True),
])
def test_extent_bound_matches_brute_force(text, bounded):
    from tensorlang.polyhedral.transform import extent_bound

    r = isl.Set(text)
    got = extent_bound(r)
    if not bounded:
        assert got is None
        return
    sizes = {"n": range(0, 9), "__l0": range(-2, 8)}
    assert got == _brute_extent(r, sizes)
