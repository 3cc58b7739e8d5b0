"""tl.extern: stages computed by a C symbol, a Python callable or TVM's call_packed form,
built and run against numpy; the refusals (schedule primitives, GPU targets, bad
arguments) and errors raised by the extern function itself."""

import ctypes
import shutil
import subprocess
import threading

import numpy as np
import pytest

import tensorlang as tl

SIZES = (1, 13, 1000)       # one element, a prime, larger


def _addone_chain():
    n = tl.var("n")
    A = tl.placeholder((n,), name="A")
    B = tl.extern((n,), [A], lambda a, out: np.add(a, 1, out=out), name="B")
    C = tl.compute((n,), lambda i: B[i] * 2.0, name="C")
    return A, B, C


@pytest.mark.parametrize("n", SIZES)
def test_python_callable_then_compute_matches_numpy(n):
    A, B, C = _addone_chain()
    s = tl.create_schedule(C)
    xo, xi = s[C].split(C.op.axis[0], factor=8)
    s[C].vectorize(xi)
    s[C].parallel(xo)
    f = tl.build(s, [A, C])
    a = np.random.default_rng(n).standard_normal(n).astype("float32")
    c = np.zeros(n, "float32")
    f(a, c)
    np.testing.assert_allclose(c, (a + 1) * 2, rtol=1e-6)


def test_lowered_nest_shows_the_call_and_the_interpreter_runs_it():
    A, B, C = _addone_chain()
    s = tl.create_schedule(C)
    low = tl.lower(s, [A, C])
    text = str(low)
    assert "B = allocate(float32, [n], 'global')" in text
    assert "B = extern <lambda>(A)" in text
    a, c = np.arange(5, dtype="float32"), np.zeros(5, "float32")
    tl.run_lowered(low, [a, c])
    np.testing.assert_allclose(c, (a + 1) * 2)


def test_producer_extern_consumer_are_ordered():
    """A stage before the extern (read by it) and a stage after it (reading its output and
    an input again, computed inside the consumer's loop): each runs where its data is."""
    n = tl.var("n")
    A = tl.placeholder((n, 7), name="A")
    P = tl.compute((n, 7), lambda i, j: A[i, j] * 3.0, name="P")
    B = tl.extern((n, 7), [P], lambda p, out: np.cumsum(p, axis=1, out=out), name="B")
    E = tl.compute((n, 7), lambda i, j: A[i, j] + 1.0, name="E")
    C = tl.compute((n, 7), lambda i, j: B[i, j] - E[i, j], name="C")
    s = tl.create_schedule(C)
    s[E].compute_at(s[C], C.op.axis[0])
    s[C].parallel(C.op.axis[0])
    f = tl.build(s, [A, C])
    for rows in SIZES:
        a = np.random.default_rng(rows).standard_normal((rows, 7)).astype("float32")
        c = np.zeros((rows, 7), "float32")
        f(a, c)
        np.testing.assert_allclose(c, np.cumsum(a * 3, axis=1) - (a + 1), rtol=1e-5,
                                   atol=1e-5)


def test_extern_output_and_dtype():
    A = tl.placeholder((6,), name="A")
    B = tl.extern((6,), [A], lambda a, out: np.floor(a, out=out, casting="unsafe"),
                  name="B", dtype="int32")
    assert B.dtype == "int32" and B.shape[0].value == 6
    s = tl.create_schedule(B)
    f = tl.build(s, [A, B])
    a = np.array([0.5, 1.5, -1.5, 2.0, 7.9, -0.1], "float32")
    b = np.zeros(6, "int32")
    f(a, b)
    np.testing.assert_array_equal(b, np.floor(a).astype("int32"))


def test_inputs_are_read_only_in_the_callable():
    A = tl.placeholder((4,), name="A")

    def scribble(a, out):
        a[0] = 1.0            # numpy refuses: the input's view is read-only

    B = tl.extern((4,), [A], scribble, name="B")
    f = tl.build(tl.create_schedule(B), [A, B])
    with pytest.raises(tl.TensorlangError, match="extern stage B raised ValueError") as e:
        f(np.zeros(4, "float32"), np.zeros(4, "float32"))
    assert isinstance(e.value.__cause__, ValueError)


def test_exception_in_callable_is_raised_from_the_call_and_the_kernel_stays_usable():
    A = tl.placeholder((3,), name="A")

    def picky(a, out):
        if a[0] < 0:
            raise KeyError("negative")
        out[:] = a * 10

    B = tl.extern((3,), [A], picky, name="B")
    f = tl.build(tl.create_schedule(B), [A, B])
    b = np.zeros(3, "float32")
    with pytest.raises(tl.TensorlangError, match="KeyError") as e:
        f(np.array([-1, 2, 3], "float32"), b)
    assert isinstance(e.value.__cause__, KeyError)
    f(np.array([1, 2, 3], "float32"), b)
    np.testing.assert_allclose(b, [10, 20, 30])


def test_a_returned_result_is_refused_not_lost():
    A = tl.placeholder((3,), name="A")
    B = tl.extern((3,), [A], lambda a, out: a + 1, name="B")
    f = tl.build(tl.create_schedule(B), [A, B])
    with pytest.raises(tl.TensorlangError, match="returned a ndarray instead of None"):
        f(np.zeros(3, "float32"), np.zeros(3, "float32"))


def test_kernel_called_from_several_threads_at_once():
    A, B, C = _addone_chain()
    s = tl.create_schedule(C)
    xo, xi = s[C].split(C.op.axis[0], factor=16)
    s[C].parallel(xo)
    f = tl.build(s, [A, C])
    errors = []

    def work(seed):
        try:
            rng = np.random.default_rng(seed)
            for _ in range(20):
                a = rng.standard_normal(int(rng.integers(1, 3000))).astype("float32")
                c = np.zeros_like(a)
                f(a, c)
                np.testing.assert_allclose(c, (a + 1) * 2, rtol=1e-6)
        except Exception as e:  # noqa: BLE001 (reported by the main thread)
            errors.append(e)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


def test_failures_in_several_threads_each_get_their_own_error():
    A = tl.placeholder((1,), name="A")

    def fail_with(a, out):
        raise RuntimeError(f"value {int(a[0])}")

    B = tl.extern((1,), [A], fail_with, name="B")
    f = tl.build(tl.create_schedule(B), [A, B])
    got = {}

    def work(k):
        for _ in range(20):
            try:
                f(np.array([k], "float32"), np.zeros(1, "float32"))
            except tl.TensorlangError as e:
                got.setdefault(k, set()).add(str(e.__cause__))

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert got == {k: {f"value {k}"} for k in range(4)}


# ------------------------------------------------------------------------ C symbols
_C_SOURCE = r"""
#include <stdint.h>
/* out = a * s[0] + b, elementwise over any shape (the extern C ABI) */
int scale_add(const float *a, const int64_t *a_shape, const float *s, const int64_t *s_shape,
              const float *b, const int64_t *b_shape, float *out, const int64_t *out_shape) {
    int64_t n = out_shape[0] * out_shape[1];
    if (a_shape[0] != out_shape[0] || b_shape[1] != out_shape[1] || s_shape[0] != 1)
        return 5;
    for (int64_t i = 0; i < n; i++) out[i] = a[i] * s[0] + b[i];
    return 0;
}
int always_fails(const float *a, const int64_t *a_shape, float *out, const int64_t *o) {
    return 3;
}
"""


@pytest.fixture(scope="module")
def clib(tmp_path_factory):
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler (cc) to build the extern library")
    d = tmp_path_factory.mktemp("extern")
    src, lib = d / "ext.c", d / "libext.so"
    src.write_text(_C_SOURCE)
    subprocess.run([cc, "-O2", "-shared", "-fPIC", "-o", str(lib), str(src)], check=True)
    return str(lib)


@pytest.mark.parametrize("rows", SIZES)
def test_c_symbol_from_a_library(clib, rows):
    n = tl.var("n")
    A = tl.placeholder((n, 3), name="A")
    S = tl.placeholder((1,), name="S")
    Bb = tl.compute((n, 3), lambda i, j: A[i, j] - 1.0, name="Bb")
    C = tl.extern((n, 3), [A, S, Bb], "scale_add", name="C", library=clib)
    D = tl.compute((n, 3), lambda i, j: C[i, j] + 0.5, name="D")
    s = tl.create_schedule(D)
    s[D].parallel(D.op.axis[0])
    f = tl.build(s, [A, S, D])
    assert "call i32 @scale_add" in f.get_source()
    a = np.random.default_rng(rows).standard_normal((rows, 3)).astype("float32")
    d = np.zeros((rows, 3), "float32")
    f(a, np.array([2.5], "float32"), d)
    np.testing.assert_allclose(d, a * 2.5 + (a - 1) + 0.5, rtol=1e-5, atol=1e-6)


def test_c_symbol_nonzero_status_is_an_error(clib):
    A = tl.placeholder((4,), name="A")
    B = tl.extern((4,), [A], "always_fails", name="B", library=clib)
    f = tl.build(tl.create_schedule(B), [A, B])
    with pytest.raises(tl.TensorlangError, match=r"nonzero status.*B \(always_fails\)"):
        f(np.zeros(4, "float32"), np.zeros(4, "float32"))


def test_c_symbol_of_the_process_loaded_with_ctypes(clib):
    ctypes.CDLL(clib, mode=ctypes.RTLD_GLOBAL)
    A = tl.placeholder((2, 2), name="A")
    S = tl.placeholder((1,), name="S")
    C = tl.extern((2, 2), [A, S, A], "scale_add", name="C")
    f = tl.build(tl.create_schedule(C), [A, S, C])
    a = np.arange(4, dtype="float32").reshape(2, 2)
    c = np.zeros((2, 2), "float32")
    f(a, np.array([3.0], "float32"), c)
    np.testing.assert_allclose(c, a * 4)


def test_unknown_c_symbol_is_refused_at_build_not_a_crash():
    A = tl.placeholder((4,), name="A")
    B = tl.extern((4,), [A], "tl_no_such_function_anywhere", name="B")
    with pytest.raises(tl.TensorlangError, match="'tl_no_such_function_anywhere' is not "
                                                 "defined in this process"):
        tl.build(tl.create_schedule(B), [A, B])
    B2 = tl.extern((4,), [A], "f", name="B2", library="/nonexistent/libx.so")
    with pytest.raises(tl.TensorlangError, match="cannot load library="):
        tl.build(tl.create_schedule(B2), [A, B2])


def test_object_file_keeps_c_symbols_and_refuses_python(clib, tmp_path):
    A = tl.placeholder((4,), name="A")
    B = tl.extern((4,), [A], "always_fails", name="B", library=clib)
    tl.build(tl.create_schedule(B), [A, B], name="k").save(tmp_path / "k.o")
    assert (tmp_path / "k.o").stat().st_size > 0
    P = tl.extern((4,), [A], lambda a, out: None, name="P")
    f = tl.build(tl.create_schedule(P), [A, P], name="p")
    with pytest.raises(tl.TensorlangError, match="cannot go into an object file"):
        f.save(tmp_path / "p.o")


# ------------------------------------------------------------------ TVM's packed form
@pytest.mark.parametrize("transa,transb", [(False, False), (True, False), (False, True),
                                           (True, True)])
def test_cblas_matmul_flags(transa, transb):
    n, k, m = 13, 7, 5
    A = tl.placeholder((k, n) if transa else (n, k), name="A")
    B = tl.placeholder((m, k) if transb else (k, m), name="B")
    C = tl.extern((n, m), [A, B], lambda ins, outs: tl.call_packed(
        "tvm.contrib.cblas.matmul", ins[0], ins[1], outs[0], transa, transb), name="C")
    f = tl.build(tl.create_schedule(C), [A, B, C])
    rng = np.random.default_rng(0)
    a = rng.standard_normal(tuple(int(x.value) for x in A.shape)).astype("float32")
    b = rng.standard_normal(tuple(int(x.value) for x in B.shape)).astype("float32")
    c = np.zeros((n, m), "float32")
    f(a, b, c)
    np.testing.assert_allclose(c, (a.T if transa else a) @ (b.T if transb else b),
                               rtol=1e-5, atol=1e-5)


def test_register_func_decorator_override_and_unknown_names():
    @tl.register_func("test_extern.scale", override=True)
    def scale(x, y, factor):
        y[:] = x * factor

    with pytest.raises(tl.TensorlangError, match="already registered"):
        tl.register_func("test_extern.scale", scale)
    assert tl.get_global_func("test_extern.scale") is scale
    A = tl.placeholder((5,), name="A")
    B = tl.extern(A.shape, [A], lambda ins, outs: tl.call_packed(
        "test_extern.scale", ins[0], outs[0], 3.0), name="B")
    f = tl.build(tl.create_schedule(B), [A, B])
    b = np.zeros(5, "float32")
    f(np.arange(5, dtype="float32"), b)
    np.testing.assert_allclose(b, np.arange(5) * 3.0)
    with pytest.raises(tl.TensorlangError, match=r"'test_extern\.nope' is not registered; "
                                                 r"registered: \[.*tvm\.contrib\.cblas"):
        tl.extern(A.shape, [A], lambda ins, outs: tl.call_packed(
            "test_extern.nope", ins[0], outs[0]), name="B")
    with pytest.raises(tl.TensorlangError, match="argument 1 must be a buffer"):
        tl.extern(A.shape, [A], lambda ins, outs: tl.call_packed(
            "test_extern.scale", ins[0], [1, 2], outs[0]), name="B")


# ---------------------------------------------------------------------------- refusals
def test_primitives_on_an_extern_stage_are_refused():
    n = tl.var("n")
    A = tl.placeholder((n,), name="A")
    P = tl.compute((n,), lambda i: A[i] * 3.0, name="P")
    B = tl.extern((n,), [P], lambda p, out: np.add(p, 1, out=out), name="B")
    C = tl.compute((n,), lambda i: B[i] * 2.0, name="C")
    s = tl.create_schedule(C)
    with pytest.raises(tl.ScheduleError, match="split: stage B is an extern stage"):
        s[B].split("x", 4)
    with pytest.raises(tl.ScheduleError, match="is an extern stage"):
        s[B].compute_at(s[C], C.op.axis[0])
    with pytest.raises(tl.ScheduleError, match="is an extern stage"):
        s[B].compute_inline()
    with pytest.raises(tl.ScheduleError, match="read by the extern stage"):
        s[P].compute_inline()
    with pytest.raises(tl.ScheduleError, match="read by the extern stage"):
        s[P].compute_at(s[C], C.op.axis[0])
    with pytest.raises(tl.ScheduleError, match="cache_read: stage B is an extern stage"):
        s.cache_read(P, "local", [B])
    with pytest.raises(tl.ScheduleError, match="computed by the extern stage B"):
        s.cache_write(B, "local")
    # the schedule is unchanged: it still builds and runs
    f = tl.build(s, [A, C])
    a, c = np.arange(4, dtype="float32"), np.zeros(4, "float32")
    f(a, c)
    np.testing.assert_allclose(c, (a * 3 + 1) * 2)


def test_gpu_targets_refuse_extern_stages():
    A, B, C = _addone_chain()
    with pytest.raises(tl.TensorlangError, match="cannot run on the GPU"):
        tl.build(tl.create_schedule(C), [A, C], target="cuda")
    X = tl.placeholder((4,), name="X")
    Y = tl.extern((4,), [X], "some_c_function", name="Y")
    with pytest.raises(NotImplementedError, match="not supported yet"):
        tl.build(tl.create_schedule(Y), [X, Y], target="cuda")


def test_declared_reads_outside_the_input_are_a_bounds_error():
    A = tl.placeholder((8,), name="A")
    ok = tl.extern((4,), [A], lambda a, out: np.copyto(out, a[:4]), name="B",
                   reads={A: [(0, 4)]})
    f = tl.build(tl.create_schedule(ok), [A, ok])
    b = np.zeros(4, "float32")
    f(np.arange(8, dtype="float32"), b)
    np.testing.assert_allclose(b, np.arange(4))
    bad = tl.extern((4,), [A], lambda a, out: None, name="C", reads={A: [(4, 12)]})
    with pytest.raises(tl.BoundsError, match=r"C reads A\[4:12\] outside its bounds"):
        tl.lower(tl.create_schedule(bad), [A, bad])


@pytest.mark.parametrize("kwargs,match", [
    (dict(fn=3), "fn must be a C symbol name"),
    (dict(fn="not a symbol"), "fn must be a C symbol name"),
    (dict(fn=lambda a, b, c, out: None), "fn must take 2 arguments"),
    (dict(fn=lambda ins, outs: None, inputs="A2"), "returned None instead of tl.call_packed"),
    (dict(inputs=[np.zeros(3)]), r"inputs\[0\] must be a tensor"),
    (dict(shape=(3.5,)), r"shape\[0\] must be an int"),
    (dict(dtype="float13"), "dtype"),
    (dict(name="a b"), "name must be an identifier"),
    (dict(reads={"A": [(0, 3)]}), "not one of the inputs"),
    (dict(writes=[(0, 3), (0, 1)]), "one \\(begin, end\\) pair per dimension"),
    (dict(fn=lambda a, out: None, library="x.so"), "library= is for a C symbol"),
])
def test_bad_arguments_name_the_argument(kwargs, match):
    A = tl.placeholder((3,), name="A")
    args = dict(shape=(3,), inputs=[A], fn=lambda a, out: None, name="E")
    args.update(kwargs)
    if args["inputs"] == "A2":
        args["inputs"] = [A, A]
    with pytest.raises(tl.TensorlangError, match=match):
        tl.extern(args.pop("shape"), args.pop("inputs"), args.pop("fn"), **args)


def test_wrong_shapes_and_dtypes_at_call_are_refused_before_the_function_runs():
    A, B, C = _addone_chain()
    f = tl.build(tl.create_schedule(C), [A, C])
    with pytest.raises(tl.TensorlangError, match="C"):
        f(np.zeros(3, "float32"), np.zeros(4, "float32"))
    with pytest.raises(tl.TensorlangError, match="A"):
        f(np.zeros(3, "float64"), np.zeros(3, "float32"))


def test_several_outputs_not_yet():
    A = tl.placeholder((3,), name="A")
    with pytest.raises(NotImplementedError, match="several outputs"):
        tl.extern([(3,), (3,)], [A], lambda a, o1, o2: None, name="E")


def test_auto_schedule_refuses_extern_stages_clearly():
    X = tl.placeholder((16,), name="X")
    Y = tl.extern((16,), [X], lambda x, out: np.add(x, 1, out=out), name="Y")
    Z = tl.compute((16,), lambda i: Y[i] * 2.0, name="Z")
    with pytest.raises(NotImplementedError, match=r"extern stage\(s\) \['Y'\]"):
        tl.auto_schedule(Z, target="llvm", budget_s=1)
