"""Misuse of the tensor-expression language raises TensorlangError naming the argument."""

import pytest

import tensorlang as tl


def test_constant_index_out_of_range():
    A = tl.placeholder((4, 8), name="A")
    with pytest.raises(tl.TensorlangError, match=r"constant index 8 .*dimension 1"):
        tl.compute((4,), lambda i: A[i, 8])
    with pytest.raises(tl.TensorlangError, match="constant index -1"):
        tl.compute((4,), lambda i: A[-1, i])


def test_wrong_number_of_indices_and_float_index():
    A = tl.placeholder((4, 8), name="A")
    with pytest.raises(tl.TensorlangError, match="2 dimensions but was indexed with 1"):
        tl.compute((4,), lambda i: A[i])
    with pytest.raises(tl.TensorlangError, match="index 1 must be an integer"):
        tl.compute((4,), lambda i: A[i, A[i, 0]])


@pytest.mark.parametrize("shape,msg", [((-1,), "must be >= 0"), ((2.5,), "int or tl.var"),
                                       ("abc", "shape")])
def test_bad_shapes(shape, msg):
    with pytest.raises(tl.TensorlangError, match=msg):
        tl.placeholder(shape, name="A")


def test_bad_dtype_and_names():
    with pytest.raises(tl.TensorlangError, match="unsupported dtype 'float8'"):
        tl.placeholder((3,), "float8", name="A")
    with pytest.raises(tl.TensorlangError, match="identifier"):
        tl.placeholder((3,), name="not a name")
    with pytest.raises(tl.TensorlangError, match="integer type"):
        tl.var("n", "float32")


def test_fcompute_arity_must_match_shape():
    A = tl.placeholder((4,), name="A")
    with pytest.raises(tl.TensorlangError, match="takes 1 index arguments but the shape has 2"):
        tl.compute((4, 4), lambda i: A[i])


def test_reduction_must_be_whole_body():
    A = tl.placeholder((4, 4), name="A")
    k = tl.reduce_axis(4, name="k")
    with pytest.raises(tl.TensorlangError, match="must be the whole body"):
        tl.compute((4,), lambda i: tl.sum(A[i, k], axis=k) * 2.0)


def test_reduce_axis_outside_reduction():
    A = tl.placeholder((4, 4), name="A")
    k = tl.reduce_axis(4, name="k")
    with pytest.raises(tl.TensorlangError, match="reduce axis k is used outside"):
        tl.compute((4,), lambda i: A[i, k])


def test_reducer_axis_must_be_reduce_axis():
    A = tl.placeholder((4, 4), name="A")
    with pytest.raises(tl.TensorlangError, match="axis must be tl.reduce_axis"):
        tl.compute((4,), lambda i: tl.sum(A[i, 0], axis=i))


def test_python_if_on_expression_is_refused():
    A = tl.placeholder((4,), name="A")
    with pytest.raises(tl.TensorlangError, match="no Python truth value"):
        tl.compute((4,), lambda i: A[i] if A[i] > 0 else 0.0)


def test_bool_arithmetic_and_logic_on_numbers_refused():
    A = tl.placeholder((4,), "bool", name="A")
    F = tl.placeholder((4,), "float32", name="F")
    with pytest.raises(tl.TensorlangError, match="two bool expressions"):
        tl.compute((4,), lambda i: A[i] + A[i])
    with pytest.raises(tl.TensorlangError, match="must be bool"):
        tl.compute((4,), lambda i: F[i] & F[i])
    with pytest.raises(tl.TensorlangError, match="cannot reduce bool"):
        k = tl.reduce_axis(4, name="k")
        tl.compute((1,), lambda i: tl.sum(A[k], axis=k))


def test_non_affine_extent_is_not_implemented():
    # products of sizes work (tests/te/test_products_of_sizes.py); a division by one not
    n, m = tl.var("n"), tl.var("m")
    A = tl.placeholder((n // m,), name="A")
    B = tl.compute((n // m,), lambda i: A[i] + 1.0, name="B")
    with pytest.raises(NotImplementedError, match="not affine"):
        tl.create_schedule(B)


def test_multi_output_recurrence_not_implemented():
    # computes with several outputs work (tests/test_tuple_outputs.py); recurrences not yet
    A = tl.placeholder((4,), name="A")
    with pytest.raises(NotImplementedError, match="several outputs"):
        tl.recurrence((4,), lambda y, i: (A[i], A[i]))


def test_tensor_attributes():
    n = tl.var("n")
    A = tl.placeholder((n, 3), "float16", name="A")
    k = tl.reduce_axis(3, name="k")
    C = tl.compute((n,), lambda row: tl.sum(A[row, k], axis=k), name="C")
    assert C.name == "C" and C.dtype.name == "float16" and C.ndim == 1
    assert [a.name for a in C.op.axis] == ["row"]
    assert [a.name for a in C.op.reduce_axis] == ["k"]
    assert str(C.shape[0]) == "n" and str(A.shape[1]) == "3"
    assert C.op.input_tensors == [A]


def test_tvm_idioms_for_dtypes_shapes_and_index_division():
    # what a port of TVM's tutorials writes (issue 16, item 5)
    import numpy as np

    n = tl.var("n")
    A = tl.placeholder((n, 8), "float32", name="A")
    C = tl.compute((n, 8), lambda i, j: A[i, tl.indexmod(j + 1, 8)] +
                   tl.indexdiv(j, 3).astype("float32"), name="C")
    assert np.zeros((2, 3), dtype=C.dtype).dtype == np.float32
    assert C.dtype == "float32" and C.dtype != "float64"
    assert int(C.shape[1]) == 8
    with pytest.raises(tl.TensorlangError, match="not a constant"):
        int(C.shape[0])
    f = tl.build(tl.create_schedule(C), [A, C])
    a = np.arange(16, dtype="float32").reshape(2, 8)
    c = np.zeros((2, 8), C.dtype)
    f(a, c)
    j = np.arange(8)
    np.testing.assert_array_equal(c, a[:, (j + 1) % 8] + (j // 3))


@pytest.mark.parametrize("size", [64, 96])
def test_tvm_opt_gemm_ported_line_by_line(size):
    """TVM's opt_gemm tutorial (array packing, write cache, parallel), its schedule lines
    as written there: after `s.cache_write(C, ...)` the original tensor's axes,
    `C.op.axis`, name the write-back stage's loops (issue 16, item 5); `s[CC].op.axis`
    the cache stage's."""
    import numpy as np

    bn, kfactor = 32, 4
    M = N = K = size
    k = tl.reduce_axis((0, K), "k")
    A = tl.placeholder((M, K), name="A")
    B = tl.placeholder((K, N), name="B")
    packedB = tl.compute((N // bn, K, bn), lambda bigN, k, littleN: B[k, bigN * bn + littleN],
                         name="packedB")
    C = tl.compute((M, N), lambda m, n: tl.sum(
        A[m, k] * packedB[tl.indexdiv(n, bn), k, tl.indexmod(n, bn)], axis=k), name="C")
    s = tl.create_schedule(C)
    CC = s.cache_write(C, "global")
    mo, no, mi, ni = s[C].tile(C.op.axis[0], C.op.axis[1], bn, bn)
    s[CC].compute_at(s[C], no)
    mc, nc = s[CC].op.axis
    (kaxis,) = s[CC].op.reduce_axis
    ko, ki = s[CC].split(kaxis, factor=kfactor)
    s[CC].reorder(ko, mc, ki, nc)
    s[CC].vectorize(nc)
    s[CC].unroll(ki)
    s[C].parallel(mo)
    bigN, _, littleN = s[packedB].op.axis
    s[packedB].vectorize(littleN)
    s[packedB].parallel(bigN)
    f = tl.build(s, [A, B, C], name="mmult")
    rng = np.random.default_rng(size)
    a = rng.random((M, K), dtype=np.float32)
    b = rng.random((K, N), dtype=np.float32)
    c = np.zeros((M, N), dtype=C.dtype)
    f(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5)
    # an axis of an unrelated stage is still refused, naming it
    with pytest.raises(tl.ScheduleError, match="axis bigN of another stage"):
        s[C].split(bigN, factor=2)
