"""Every function a kernel calls is known at build time: the C library, libm, or tensorlang's
runtime. A call LLVM makes to a support library (compiler-rt) is refused with a clear error
before anything is loaded, instead of a call through address 0."""

import numpy as np
import pytest

import tensorlang as tl
from tensorlang.backends.llvm import codegen
from tensorlang.backends.llvm.symbols import ALLOWED, undefined_symbols

CROSS = ("x86-64-v3", "aarch64", "riscv64", "riscv64+v")


def _half_program():
    n = tl.var("n")
    A = tl.placeholder((n,), "float64", name="A")
    H = tl.placeholder((n,), "float16", name="H")
    B = tl.compute((n,), lambda i: (A[i].astype("float16") * H[i] + tl.exp(H[i])), name="B")
    C = tl.compute((n,), lambda i: B[i].astype("float64") + tl.erf(A[i]), name="C")
    return [A, H, B, C], [B, C]


def test_planted_unresolvable_call_is_a_build_error(monkeypatch):
    monkeypatch.setitem(codegen._LIBM, "erf", ("tl_no_such_erff", "tl_no_such_erf"))
    n = tl.var("n")
    A = tl.placeholder((n,), "float64", name="A")   # float32 erf is inline IR (vmath.py)
    B = tl.compute((n,), lambda i: tl.erf(A[i]), name="B")
    with pytest.raises(tl.TensorlangError, match=r"tl_no_such_erf\b.*") as err:
        tl.build(tl.create_schedule(B), [A, B])
    assert "host" in str(err.value)  # names the target


@pytest.mark.parametrize("target", ["llvm -mcpu=x86-64", "riscv64"])
def test_compiler_rt_calls_are_refused_not_jumped_to(target, monkeypatch):
    # pretend the target converts float16 in hardware: LLVM then calls compiler-rt's
    # __truncdfhf2 / __extendhfsf2, which tensorlang kernels must never need
    monkeypatch.setattr(codegen, "native_conversions", lambda t: (True, True))
    args, outs = _half_program()
    with pytest.raises(tl.TensorlangError, match=r"__(trunc|extend)[a-z]+f2") as err:
        tl.build(tl.create_schedule(outs), args, target=target)
    assert tl.Target.parse(target).triple in str(err.value)


@pytest.mark.parametrize("target", CROSS)
def test_objects_need_only_libc_and_libm(target):
    args, outs = _half_program()
    s = tl.create_schedule(outs)
    for T in outs:
        _, inner = s[T].split(T.op.axis[0], factor=8)
        s[T].vectorize(inner)
    f = tl.build(s, args, target=target, name="halves")
    undefined = undefined_symbols(f.code.object())
    assert undefined <= ALLOWED, undefined - ALLOWED
    assert {"exp", "expf", "erf"} & undefined or target.startswith("x86")


def test_host_kernel_with_float16_math_runs_at_baseline():
    args, outs = _half_program()
    f = tl.build(tl.create_schedule(outs), args, target="llvm -mcpu=x86-64")
    a = np.linspace(-3, 3, 37)
    h = np.linspace(-2, 2, 37).astype(np.float16)
    b, c = np.zeros(37, np.float16), np.zeros(37)
    f(a, h, b, c)
    ref = a.astype(np.float16) * h + np.exp(h)
    np.testing.assert_array_equal(b, ref)
