"""Products of sizes (`n * m`) as extents and shapes: isl sees each product as a parameter of
its own (with what is affine of its definition in the context), the kernel computes it from
its factors, and the call checks it against the arrays' shapes. Indices with a symbolic
divisor or a loop variable times a size (`k // m`, `i * m + j`) are not affine: they are
checked at run time, never assumed in range."""

import numpy as np
import pytest

import tensorlang as tl

SIZES = [(1, 1), (1, 7), (3, 5), (7, 13), (32, 33)]


def _rand(*shape):
    return np.random.default_rng(sum(shape) + len(shape)).random(shape, dtype=np.float32)


@pytest.mark.parametrize("nm", SIZES)
def test_product_extent_reads_flat_and_2d(nm):
    n, m = tl.var("n"), tl.var("m")
    A = tl.placeholder((n, m), name="A")
    F = tl.placeholder((n * m,), name="F")
    B = tl.compute((n * m,), lambda k: F[k] * 2.0 + A[k // m, k % m], name="B")
    f = tl.build(tl.create_schedule(B), [A, F, B])
    assert [p.name for p in f.params] == ["n", "m"]     # the product is never an argument
    a, fl = _rand(*nm), _rand(nm[0] * nm[1])
    b = np.zeros(nm[0] * nm[1], np.float32)
    f(a, fl, b)
    np.testing.assert_allclose(b, fl * 2 + a.ravel(), rtol=1e-6)


@pytest.mark.parametrize("nm", SIZES)
def test_reshape_back_reads_a_flat_tensor(nm):
    n, m = tl.var("n"), tl.var("m")
    B = tl.placeholder((n * m,), name="B")
    A2 = tl.compute((n, m), lambda i, j: B[i * m + j] + 1.0, name="A2")
    s = tl.create_schedule(A2)
    assert "checked" in str(tl.lower(s, [B, A2]))   # i * m + j: checked at run time
    f = tl.build(s, [B, A2])
    b = _rand(nm[0] * nm[1])
    a = np.zeros(nm, np.float32)
    f(b, a)
    np.testing.assert_allclose(a, b.reshape(nm) + 1)
    a2 = np.zeros(nm, np.float32)
    tl.run_lowered(tl.lower(s, [B, A2]), [b, a2])
    np.testing.assert_allclose(a2, a)


@pytest.mark.parametrize("sizes", [(1, 1, 1), (2, 3, 5), (5, 7, 11)])
def test_triple_product_and_constant_times_product(sizes):
    n, m, k = tl.var("n"), tl.var("m"), tl.var("k")
    G = tl.placeholder((n * m * k,), name="G")
    H = tl.compute((n * m * k,), lambda i: G[i] + 1.0, name="H")
    f = tl.build(tl.create_schedule(H), [G, H, n, m, k])
    g = _rand(int(np.prod(sizes)))
    h = np.zeros_like(g)
    f(g, h, *sizes)
    np.testing.assert_allclose(h, g + 1)

    P = tl.placeholder((2 * n * m,), name="P")
    Q = tl.compute((2 * n * m,), lambda i: P[i] * 3.0, name="Q")
    f = tl.build(tl.create_schedule(Q), [P, Q, n, m])
    p = _rand(2 * sizes[1] * sizes[2])
    q = np.zeros_like(p)
    f(p, q, sizes[1], sizes[2])
    np.testing.assert_allclose(q, p * 3)


def test_product_in_either_order_is_one_parameter():
    n, m = tl.var("n"), tl.var("m")
    A = tl.placeholder((n * m,), name="A")
    B = tl.compute((m * n,), lambda k: A[k] + 1.0, name="B")
    s = tl.create_schedule(B)
    assert len(s.program.products) == 1
    lo = tl.lower(s, [A, B, n, m])
    assert not lo.violations            # A[k] in [0, n*m) is proven, not checked
    assert "checked" not in str(lo)
    f = tl.build(s, [A, B, n, m])
    a = _rand(15)
    b = np.zeros_like(a)
    f(a, b, 3, 5)
    np.testing.assert_allclose(b, a + 1)


@pytest.mark.parametrize("nm", [(1, 1), (3, 5), (7, 13), (31, 17)])
@pytest.mark.parametrize("factor", [4, 8])
def test_split_vectorize_parallel_on_the_product_axis(nm, factor):
    n, m = tl.var("n"), tl.var("m")
    A = tl.placeholder((n, m), name="A")
    F = tl.placeholder((n * m,), name="F")
    B = tl.compute((n * m,), lambda k: F[k] + A[k // m, k % m], name="B")
    s = tl.create_schedule(B)
    xo, xi = s[B].split(B.op.axis[0], factor)
    s[B].vectorize(xi)
    s[B].parallel(xo)
    f = tl.build(s, [A, F, B])
    a, fl = _rand(*nm), _rand(nm[0] * nm[1])
    b = np.zeros(nm[0] * nm[1], np.float32)
    f(a, fl, b)
    np.testing.assert_allclose(b, fl + a.ravel(), rtol=1e-6)


def test_compute_at_and_reduction_over_a_product():
    n, m = tl.var("n"), tl.var("m")
    A = tl.placeholder((n * m,), name="A")
    P = tl.compute((n * m,), lambda k: A[k] * 2.0, name="P")
    C = tl.compute((n * m,), lambda k: P[k] + 1.0, name="C")
    s = tl.create_schedule(C)
    xo, xi = s[C].split(C.op.axis[0], 4)
    s[P].compute_at(s[C], xo)
    f = tl.build(s, [A, C, n, m])
    a = _rand(35)
    c = np.zeros_like(a)
    f(a, c, 5, 7)
    np.testing.assert_allclose(c, a * 2 + 1)

    r = tl.reduce_axis((0, n * m), name="r")
    S = tl.compute((1,), lambda i: tl.sum(A[r], axis=r), name="S")
    f = tl.build(tl.create_schedule(S), [A, S, n, m])
    out = np.zeros(1, np.float32)
    f(a, out, 5, 7)
    np.testing.assert_allclose(out[0], a.sum(), rtol=1e-5)


def test_analyze_takes_the_factors():
    n, m = tl.var("n"), tl.var("m")
    A = tl.placeholder((n * m,), name="A")
    B = tl.compute((n * m,), lambda k: A[k] + 1.0, name="B")
    s = tl.create_schedule(B)
    assert tl.analyze(s, [A, B], sizes={"n": 3, "m": 5}).stage("B").flops == 15
    name = next(iter(s.program.products))
    with pytest.raises(tl.TensorlangError, match="give its factors"):
        tl.analyze(s, [A, B], sizes={"n": 3, "m": 5, name: 15})


# ------------------------------------------------------------------ what is refused
def test_shape_inconsistent_with_the_product_is_refused():
    n, m = tl.var("n"), tl.var("m")
    A = tl.placeholder((n, m), name="A")
    F = tl.placeholder((n * m,), name="F")
    B = tl.compute((n * m,), lambda k: F[k] + A[k // m, k % m], name="B")
    f = tl.build(tl.create_schedule(B), [A, F, B])
    with pytest.raises(tl.TensorlangError, match=r"dimension 0 must be n \* m = 15, got 14"):
        f(_rand(3, 5), _rand(14), np.zeros(15, np.float32))


def test_product_alone_does_not_give_its_factors():
    n, m = tl.var("n"), tl.var("m")
    A = tl.placeholder((n * m,), name="A")
    B = tl.compute((n * m,), lambda k: A[k] + 1.0, name="B")
    f = tl.build(tl.create_schedule(B), [A, B])
    with pytest.raises(tl.TensorlangError, match="cannot be inferred"):
        f(_rand(6), np.zeros(6, np.float32))


def test_read_past_the_product_is_refused_with_a_consistent_witness():
    n, m = tl.var("n"), tl.var("m")
    A = tl.placeholder((n * m,), name="A")
    C = tl.compute((n * m,), lambda k: A[k + 1], name="C")
    with pytest.raises(tl.BoundsError, match=r"n=1, m=1, m\*n=1, k=0"):
        tl.build(tl.create_schedule(C), [A, C, n, m])


def test_division_by_a_size_in_an_extent_is_not_implemented():
    n, m = tl.var("n"), tl.var("m")
    B = tl.compute((n // m,), lambda i: tl.const(1.0), name="B")
    with pytest.raises(NotImplementedError, match="division or modulo by a size"):
        tl.create_schedule(B)


def test_size_dependent_read_is_checked_with_the_product_at_call_time():
    # A[k] for k < n * m leaves A (n elements) exactly when m > 1 and n > 0
    n, m = tl.var("n"), tl.var("m")
    A = tl.placeholder((n,), name="A")
    C = tl.compute((n * m,), lambda k: A[k] + 1.0, name="C")
    f = tl.build(tl.create_schedule(C), [A, C, n, m])
    a = _rand(5)
    c = np.zeros(5, np.float32)
    f(a, c, 5, 1)
    np.testing.assert_allclose(c, a + 1)
    f(np.zeros(0, np.float32), np.zeros(0, np.float32), 0, 3)   # nothing runs
    with pytest.raises(tl.BoundsError, match=r"m\*n=10"):
        f(a, np.zeros(10, np.float32), 5, 2)
