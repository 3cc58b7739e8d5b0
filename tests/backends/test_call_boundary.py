"""What a built kernel accepts at its call and build boundary: scalar (tl.var) arguments are
ints inside their dtype's range (ctypes would wrap 2**70 to 0 and an int8 var took 300),
kernel names are ASCII C identifiers, and an argument that is not an array is refused by
name even when the previous call's arrays are gone."""

import gc

import numpy as np
import pytest

import tensorlang as tl


def _shifted(dtype: str):
    """B[i] = A[i] + s for a scalar argument s of `dtype`, s converted to float64."""
    n = tl.var("n")
    s = tl.var("s", dtype=dtype)
    A = tl.placeholder((n,), "float64", name="A")
    B = tl.compute((n,), lambda i: A[i] + s.astype("float64"), name="B")
    return tl.build(tl.create_schedule(B), [A, s, B])


@pytest.mark.parametrize("dtype", ["int8", "int16", "int32", "int64", "uint8"])
def test_scalar_arguments_at_their_range_limits_are_passed_exactly(dtype):
    f = _shifted(dtype)
    info = np.iinfo(dtype)
    for v in (int(info.min), int(info.max), np.dtype(dtype).type(info.max)):
        b = np.zeros(3)
        f(np.zeros(3), v, b)
        np.testing.assert_array_equal(b, np.full(3, float(v)))


@pytest.mark.parametrize("dtype, value", [("int8", 300), ("int8", -129), ("uint8", -1),
                                          ("uint8", 256), ("int32", 2**31),
                                          ("int64", 2**63), ("int64", 2**70),
                                          ("int64", -2**63 - 1), ("int16", np.int64(40000)),
                                          ("int64", np.uint64(2**64 - 1))])
def test_scalar_arguments_outside_their_dtype_are_refused(dtype, value):
    f = _shifted(dtype)
    b = np.full(3, -1.0)
    info = np.iinfo(dtype)
    msg = (rf"argument 1 \(s\): {int(value)} is outside the range of its dtype {dtype}, "
           rf"\[{info.min}, {info.max}\]")
    with pytest.raises(tl.TensorlangError, match=msg):
        f(np.zeros(3), value, b)
    np.testing.assert_array_equal(b, -1.0)      # nothing ran


@pytest.mark.parametrize("value", [3.5, 3.0, True, np.float32(2.0), np.bool_(False), "3",
                                   None])
def test_scalar_arguments_that_are_not_ints_are_refused(value):
    # a var is an integer: nothing is rounded, and a bool is not taken for 0 or 1
    f = _shifted("int32")
    with pytest.raises(tl.TensorlangError,
                       match=r"argument 1 \(s\): expected an int \(a tl.var of dtype int32\)"):
        f(np.zeros(3), value, np.zeros(3))


@pytest.mark.parametrize("name", ["ké", "k\u0435rnel", "σ", "1k", "my kernel", "", 7])
def test_build_names_must_be_ascii_identifiers(name):
    A = tl.placeholder((4,), name="A")
    B = tl.compute((4,), lambda i: A[i] * 2, name="B")
    with pytest.raises(tl.TensorlangError, match=r"build: name must be a C identifier of "
                                                 r"ASCII letters, digits and _"):
        tl.build(tl.create_schedule(B), [A, B], name=name)


def test_none_after_a_call_whose_arrays_are_gone():
    # the call after a call with the same arrays skips the checks; a dead reference to the
    # last call's array and a None argument are both None, which is no array
    A = tl.placeholder((4,), name="A")
    B = tl.compute((4,), lambda i: A[i] * 2, name="B")
    f = tl.build(tl.create_schedule(B), [A, B])
    a, b = np.ones(4, "float32"), np.zeros(4, "float32")
    f(a, b)
    del a, b
    gc.collect()
    with pytest.raises(tl.TensorlangError, match=r"argument 0 \(A\): expected a numpy array, "
                                                 r"got NoneType"):
        f(None, np.zeros(4, "float32"))
    with pytest.raises(tl.TensorlangError, match=r"argument 0 \(A\)"):
        f(None, None)
    b = np.zeros(4, "float32")
    f(np.arange(4, dtype="float32"), b)
    np.testing.assert_array_equal(b, [0, 2, 4, 6])
