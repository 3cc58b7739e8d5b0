"""Data-dependent reads are checked when the kernel runs: an index outside its tensor raises
tl.IndexBoundsError naming the tensor, the index and the iteration, never a crash or a read
of foreign memory. Affine indices stay proven by isl at build time (no check emitted)."""

import subprocess
import sys
import textwrap

import numpy as np
import pytest

import tensorlang as tl
from tensorlang.ir.interp import Interpreter


def _gather(dtype="int64", vector=0, parallel=False, guarded=False):
    n, m = tl.var("n"), tl.var("m")
    A = tl.placeholder((m,), "float32", name="A")
    Idx = tl.placeholder((n,), dtype, name="I")
    if guarded:
        B = tl.compute((n,), lambda i: tl.if_then_else((Idx[i] >= 0) & (Idx[i] < m),
                                                       A[Idx[i]], -1.0), name="B")
    else:
        B = tl.compute((n,), lambda i: A[Idx[i]], name="B")
    s = tl.create_schedule(B)
    if vector:
        o, i = s[B].split(B.op.axis[0], factor=vector)
        s[B].vectorize(i)
        if parallel:
            s[B].parallel(o)
    elif parallel:
        s[B].parallel(B.op.axis[0])
    return s, [A, Idx, B]


RISKY = textwrap.dedent('''
    import numpy as np
    import tensorlang as tl

    n, m = tl.var("n"), tl.var("m")
    A = tl.placeholder((m,), "float32", name="A")
    I = tl.placeholder((n,), "int64", name="I")
    B = tl.compute((n,), lambda i: A[I[i]], name="B")
    f = tl.build(tl.create_schedule(B), [A, I, B])
    a = np.arange(10, dtype=np.float32)
    idx = np.arange(8)
    idx[5] = 10**8
    try:
        f(a, idx, np.zeros(8, np.float32))
    except tl.IndexBoundsError as e:
        print("RAISED", e.tensor, e.index, e.witness)
''')


def test_bad_index_raises_in_a_subprocess(tmp_path):
    # the risky call runs in a child: a regression (a segfault) fails this test only
    script = tmp_path / "bad_index.py"
    script.write_text(RISKY)
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    assert "RAISED A 100000000 {'i': 5}" in r.stdout


@pytest.mark.parametrize("vector,parallel", [(0, False), (8, False), (0, True), (4, True)])
@pytest.mark.parametrize("dtype", ["int64", "int32", "uint8"])
def test_gather_checks_every_schedule(dtype, vector, parallel):
    s, args = _gather(dtype, vector, parallel)
    f = tl.build(s, args)
    a = np.arange(10, dtype=np.float32) * 3
    for n in (1, 13, 300):
        idx = (np.arange(n) * 7 % 10).astype(dtype)
        b = np.zeros(n, np.float32)
        f(a, idx, b)
        np.testing.assert_array_equal(b, a[idx])
        bad = n // 2
        idx[bad] = 10 if dtype == "uint8" else -3
        with pytest.raises(tl.IndexBoundsError) as err:
            f(a, idx, b)
        e = err.value
        assert e.tensor == "A" and e.index == idx[bad] and e.extent == 10
        if not parallel:  # the first failure in loop order
            assert e.witness == {"i": bad}
        assert f"B[i={e.witness['i']}] reads A[I[i]]" in str(e)
        idx[bad] = 0
        f(a, idx, b)  # the record was cleared: the next good call succeeds
        np.testing.assert_array_equal(b, a[idx])


@pytest.mark.parametrize("vector", [0, 8])
def test_guarded_reads_are_checked_only_where_taken(vector):
    s, args = _gather("int32", vector, guarded=True)
    f = tl.build(s, args)
    a = np.arange(10, dtype=np.float32)
    idx = np.array([1, -5, 9, 10, 2**30, 3, -1, 0, 11, 4, 5], np.int32)
    b = np.zeros(idx.size, np.float32)
    f(a, idx, b)
    ok = (idx >= 0) & (idx < 10)
    np.testing.assert_array_equal(b, np.where(ok, a[np.clip(idx, 0, 9)], -1.0))


def test_affine_dimension_beside_a_data_dependent_one():
    n, V = tl.var("n"), tl.var("V")
    E = tl.placeholder((V, 16), "float32", name="E")
    T = tl.placeholder((n,), "int32", name="T")
    ok = tl.compute((n, 16), lambda b, d: E[T[b], d], name="ok")
    over = tl.compute((n, 16), lambda b, d: E[T[b], d + b], name="over")
    low_ok = tl.lower(tl.create_schedule(ok), [E, T, ok])
    assert "checked(T[b] < V), d]" in str(low_ok)          # d is proven by isl
    low_over = tl.lower(tl.create_schedule(over), [E, T, over])
    assert "checked(d + b < 16)" in str(low_over)          # d + b is not
    f = tl.build(tl.create_schedule(over), [E, T, over])
    e = np.random.default_rng(0).random((5, 16), dtype=np.float32)
    out = np.zeros((2, 16), np.float32)
    with pytest.raises(tl.IndexBoundsError, match=r"over\[b=1, d=15\] reads E\[T\[b\], d \+ b\]"
                       r".*dimension 1 is 16"):
        f(e, np.array([1, 2], np.int32), out)


def test_non_affine_index_and_reduction():
    n, m = tl.var("n"), tl.var("m")
    A = tl.placeholder((m,), "float64", name="A")
    Sq = tl.compute((n,), lambda i: A[i * i], name="Sq")
    f = tl.build(tl.create_schedule(Sq), [A, Sq])
    a = np.arange(30.0)
    out = np.zeros(5)
    f(a, out)
    np.testing.assert_array_equal(out, a[np.arange(5) ** 2])
    with pytest.raises(tl.IndexBoundsError, match=r"Sq\[i=6\].*is 36"):
        f(a, np.zeros(7))
    Idx = tl.placeholder((n, 4), "int64", name="I")
    k = tl.reduce_axis(4, name="k")
    S = tl.compute((n,), lambda i: tl.sum(A[Idx[i, k]], axis=k), name="S")
    g = tl.build(tl.create_schedule(S), [A, Idx, S])
    idx = np.array([[0, 1, 2, 3], [4, 5, 29, 7]])
    s_out = np.zeros(2)
    g(a, idx, s_out)
    np.testing.assert_array_equal(s_out, a[idx].sum(1))
    idx[1, 2] = 30
    with pytest.raises(tl.IndexBoundsError) as err:
        g(a, idx, s_out)
    assert err.value.witness == {"i": 1, "k": 2}


def test_checks_false_removes_them():
    s, args = _gather()
    low = tl.lower(s, args, checks=False)
    assert "checked" not in str(low) and not low.checks
    f = tl.build(s, args, checks=False)
    a = np.arange(10, dtype=np.float32)
    idx = np.array([3, 1, 4, 1, 5, 9])
    b = np.zeros(6, np.float32)
    f(a, idx, b)
    np.testing.assert_array_equal(b, a[idx])
    with pytest.raises(tl.TensorlangError, match="checks must be True or False"):
        tl.build(s, args, checks="no")


def test_interpreter_raises_on_a_failed_check():
    s, args = _gather()
    low = tl.lower(s, args)
    a = np.arange(10, dtype=np.float32)
    idx = np.array([1, 12])
    b = np.zeros(2, np.float32)
    bufs = {id(buf): arr for buf, arr in zip(low.buffers, (a, idx, b))}
    interp = Interpreter(bufs, {"n": 2, "m": 10})
    with pytest.raises(tl.IndexBoundsError, match="index 12 outside"):
        interp.stmt(low.body)


@pytest.mark.parametrize("target", ["x86-64-v3", "aarch64"])
def test_saved_kernels_check_too(target, tmp_path):
    from tensorlang.aot import ToolchainMissing, run_emulated

    s, args = _gather(vector=4)
    f = tl.build(s, args, target=target, name="gather")
    f.save(tmp_path / "gather.h")
    assert "gather_tl_error[16]" in (tmp_path / "gather.h").read_text()
    a = np.arange(10, dtype=np.float32)
    idx = np.array([3, 1, 4, 1, 5, 9, 2, 6, 5])
    b = np.zeros(9, np.float32)
    try:
        run_emulated(f, a, idx, b)
    except ToolchainMissing as e:
        pytest.skip(str(e))
    np.testing.assert_array_equal(b, a[idx])
    idx[7] = 99
    with pytest.raises(tl.IndexBoundsError) as err:
        run_emulated(f, a, idx, b)
    assert err.value.index == 99 and err.value.witness == {"i": 7}


def test_checked_embedding_row_is_still_a_contiguous_vector_load():
    # the check's iteration (for the message) must not make the access look lane-variant
    n, V = tl.var("n"), tl.var("V")
    E = tl.placeholder((V, 64), "float32", name="E")
    T = tl.placeholder((n,), "int64", name="T")
    O = tl.compute((n, 64), lambda t, d: E[T[t], d], name="O")
    s = tl.create_schedule(O)
    s[O].vectorize(s[O].split(O.op.axis[1], factor=16)[1])
    ir_on = tl.build(s, [E, T, O]).get_source()
    ir_off = tl.build(s, [E, T, O], checks=False).get_source()
    assert "gather" not in ir_on and "gather" not in ir_off
    assert "load <16 x float>" in ir_on or "llvm.memcpy" in ir_on  # a row copy
