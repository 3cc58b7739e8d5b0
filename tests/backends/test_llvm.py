"""The LLVM backend: sources, assembly, caching, and the checks on call arguments."""

import numpy as np
import pytest

import tensorlang as tl
from tensorlang.backends.llvm import CACHE, host_target


def _vadd(dtype="float32"):
    n = tl.var("n")
    A = tl.placeholder((n,), dtype, name="A")
    B = tl.placeholder((n,), dtype, name="B")
    C = tl.compute((n,), lambda i: A[i] + B[i], name="C")
    return A, B, C


def test_get_source_llvm_and_asm():
    A, B, C = _vadd()
    f = tl.build(tl.create_schedule(C), [A, B, C], target="llvm")
    ll = f.get_source()
    assert "define" in ll and "@main(" in ll and "fadd" in ll
    asm = f.get_source("asm")
    assert "main:" in asm
    if "+avx512f" in host_target().features.split(","):
        assert "zmm" in asm  # the host's 512-bit vectors are used
    assert f.get_source("loops").startswith("def main(")
    with pytest.raises(tl.TensorlangError, match="unknown format"):
        f.get_source("pdf")


def test_building_twice_hits_the_cache():
    A, B, C = _vadd("float64")
    f = tl.build(tl.create_schedule(C), [A, B, C])
    hits = CACHE.hits
    g = tl.build(tl.create_schedule(C), [A, B, C])
    assert CACHE.hits == hits + 1 and g.kernel is f.kernel


def test_argument_errors_name_the_argument():
    A, B, C = _vadd()
    f = tl.build(tl.create_schedule(C), [A, B, C])
    a, b, c = (np.zeros(4, "float32") for _ in range(3))
    with pytest.raises(tl.TensorlangError, match="expected 3 arguments, got 2"):
        f(a, b)
    with pytest.raises(tl.TensorlangError, match=r"argument 1 \(B\): expected dtype float32"):
        f(a, b.astype("float64"), c)
    with pytest.raises(tl.TensorlangError, match=r"argument 2 \(C\): expected 1 dimensions"):
        f(a, b, np.zeros((4, 1), "float32"))
    with pytest.raises(tl.TensorlangError, match=r"argument 1 \(B\): dimension 0 is 5, but n = 4"):
        f(a, np.zeros(5, "float32"), c)
    with pytest.raises(tl.TensorlangError, match="C-contiguous"):
        f(np.zeros(8, "float32")[::2], b, c)
    with pytest.raises(tl.TensorlangError, match="expected a numpy array"):
        f([0.0] * 4, b, c)
    with pytest.raises(tl.TensorlangError, match="overlaps"):
        f(a, b, a)
    ro = np.zeros(4, "float32")
    ro.flags.writeable = False
    with pytest.raises(tl.TensorlangError, match="read-only"):
        f(a, b, ro)


def test_a_repeated_call_with_changed_arrays_is_checked_again():
    """A call with the previous call's arrays skips the argument checks; anything about
    them that a check reads (shape, strides, dtype, writeability) changed in between sends
    the call through the checks again."""
    A, B, C = _vadd()
    f = tl.build(tl.create_schedule(C), [A, B, C])
    a, b, c = (np.arange(4, dtype="float32") for _ in range(3))
    f(a, b, c)
    f(a, b, c)                                          # the fast path
    np.testing.assert_array_equal(c, a + b)
    c.flags.writeable = False
    with pytest.raises(tl.TensorlangError, match="read-only"):
        f(a, b, c)
    c.flags.writeable = True
    f(a, b, c)
    b.shape = (2, 2)
    with pytest.raises(tl.TensorlangError, match=r"argument 1 \(B\): expected 1 dimensions"):
        f(a, b, c)
    b.shape = (4,)
    f(a, b, c)
    b.dtype = np.int32                                  # the same memory seen as int32
    with pytest.raises(tl.TensorlangError, match="expected dtype float32"):
        f(a, b, c)
    b.dtype = np.float32
    f(a, b, c)
    f(a, b, a + 0)                                      # a new output array: checked
    with pytest.raises(tl.TensorlangError, match="overlaps"):
        f(a, b, a)
    wide = np.zeros(8, "float32")
    f(a, b, c)
    with pytest.raises(tl.TensorlangError, match="C-contiguous"):
        f(a, b, wide[::2])
    np.testing.assert_array_equal(c, a + b)


def test_size_that_cannot_be_inferred_and_explicit_var_args():
    n, m = tl.var("n"), tl.var("m")
    A = tl.placeholder((n,), name="A")
    C = tl.compute((n,), lambda i: A[i] * m.astype("float32"), name="C")
    f = tl.build(tl.create_schedule(C), [A, C])
    with pytest.raises(tl.TensorlangError, match="size m cannot be inferred"):
        f(np.ones(3, "float32"), np.zeros(3, "float32"))
    g = tl.build(tl.create_schedule(C), [A, C, m])
    c = np.zeros(3, "float32")
    g(np.ones(3, "float32"), c, 7)
    np.testing.assert_array_equal(c, [7, 7, 7])
    with pytest.raises(tl.TensorlangError, match=r"argument 2 \(m\): expected an int"):
        g(np.ones(3, "float32"), c, 7.5)


def test_compound_shape_is_checked():
    n = tl.var("n")
    A = tl.placeholder((n + 2,), name="A")
    C = tl.compute((n,), lambda i: A[i] + A[i + 1] + A[i + 2], name="C")
    f = tl.build(tl.create_schedule(C), [A, C])
    a = np.arange(7, dtype="float32")
    c = np.zeros(5, "float32")
    f(a, c)
    np.testing.assert_array_equal(c, a[:-2] + a[1:-1] + a[2:])
    with pytest.raises(tl.TensorlangError, match=r"dimension 0 must be n \+ 2 = 7, got 6"):
        f(np.zeros(6, "float32"), c)


def test_large_intermediate_goes_to_the_heap():
    n = tl.var("n")
    A = tl.placeholder((n,), name="A")
    B = tl.compute((n,), lambda i: A[i] * 2.0, name="B")
    C = tl.compute((n,), lambda i: B[i] + 1.0, name="C")
    f = tl.build(tl.create_schedule(C), [A, C])
    assert "malloc" in f.get_source()
    a = np.arange(1 << 20, dtype="float32")
    c = np.zeros_like(a)
    f(a, c)
    np.testing.assert_array_equal(c, a * 2 + 1)


def test_unknown_targets():
    A, B, C = _vadd()
    s = tl.create_schedule(C)
    with pytest.raises(tl.TensorlangError, match="unknown target 'opencl'.*aarch64"):
        tl.build(s, [A, B, C], target="opencl")
    with pytest.raises(tl.TensorlangError, match="unknown option -mfoo"):
        tl.build(s, [A, B, C], target="llvm -mfoo=1")
    assert ".entry main_k0" in tl.build(s, [A, B, C], target="nvptx").get_source()
    assert "__global__" in tl.build(s, [A, B, C], target="cuda").get_source()


def test_cache_eviction_keeps_llvm_alive(monkeypatch):
    """Regression: an evicted kernel's engine freed the shared target machine (segfault)."""
    import gc

    from tensorlang.backends.llvm import jit

    monkeypatch.setattr(jit.CACHE, "size", 3)
    def kernel(t):
        A = tl.placeholder((t + 1,), name="A")
        B = tl.compute((t + 1,), lambda i: A[i] * 2.0 + float(t), name="B")
        return tl.build(tl.create_schedule(B), [A, B])

    kept = []
    for t in range(12):
        f = kernel(t)
        if t % 4 == 0:
            kept.append((f, t))
        gc.collect()
    for f, t in kept:
        a = np.ones(t + 1, np.float32)
        b = np.zeros_like(a)
        f(a, b)
        np.testing.assert_array_equal(b, 2 + t)
