"""TVM's TE spellings (issue: a TVM user at home): `.op` where a tensor is expected,
`te.max(a, b)` elementwise, floordiv/floormod, size_var, max_value/min_value, compute's
tag, `time_evaluator`, `export_library` / `load_module`; and TVM's get-started tutorial
ported line by line with only the import changed."""

import subprocess
import sys

import numpy as np
import pytest

import tensorlang as tl


def test_tvm_get_started_vector_add_ported_line_by_line(tmp_path):
    import tensorlang as te          # TVM: from tvm import te
    tvm = te                         # TVM: import tvm

    tgt = "llvm"
    n = te.var("n")
    A = te.placeholder((n,), name="A")
    B = te.placeholder((n,), name="B")
    C = te.compute(A.shape, lambda i: A[i] + B[i], name="C")
    s = te.create_schedule(C.op)
    outer, inner = s[C].split(C.op.axis[0], factor=64)
    s[C].parallel(outer)
    s[C].vectorize(inner)
    fadd = tvm.build(s, [A, B, C], tgt, name="myadd")
    for size in (1, 1021, 4096):
        a = np.random.uniform(size=size).astype(A.dtype.name)
        b = np.random.uniform(size=size).astype(B.dtype.name)
        c = np.zeros(size, dtype=C.dtype.name)
        fadd(a, b, c)
        np.testing.assert_allclose(c, a + b)
    evaluator = fadd.time_evaluator(fadd.entry_name, None, number=10)
    mean_time = evaluator(a, b, c).mean
    assert 0 < mean_time < 1
    fadd.export_library(str(tmp_path / "myadd.so"))
    loaded = tl.load_module(str(tmp_path / "myadd.so"))
    c2 = np.zeros_like(c)
    loaded(a, b, c2)
    np.testing.assert_array_equal(c2, c)


def test_operations_are_taken_where_tensors_are_expected():
    A = tl.placeholder((8,), name="A")
    B = tl.compute((8,), lambda i: A[i] * 2.0, name="B")
    s = tl.create_schedule(B.op)
    assert s[B.op] is s[B]
    s.cache_write(B.op, "local")
    f = tl.build(s, [A, B])
    a = np.arange(8, dtype="f4")
    b = np.zeros(8, "f4")
    f(a, b)
    np.testing.assert_array_equal(b, a * 2)


@pytest.mark.parametrize("n", [1, 7, 64])
def test_max_and_min_of_two_expressions_are_elementwise(n):
    A = tl.placeholder((n,), name="A")
    relu = tl.compute((n,), lambda i: tl.max(A[i], 0.0), name="relu")
    clip = tl.compute((n,), lambda i: tl.min(tl.max(A[i], -0.5), 0.5), name="clip")
    k = tl.reduce_axis((0, n), "k")
    top = tl.compute((1,), lambda i: tl.max(A[k], axis=k), name="top")
    f = tl.build(tl.create_schedule([relu, clip, top]), [A, relu, clip, top])
    a = np.random.default_rng(n).standard_normal(n).astype("f4")
    r, c, t = np.zeros(n, "f4"), np.zeros(n, "f4"), np.zeros(1, "f4")
    f(a, r, c, t)
    np.testing.assert_array_equal(r, np.maximum(a, 0))
    np.testing.assert_array_equal(c, np.clip(a, -0.5, 0.5))
    assert t[0] == a.max()
    with pytest.raises(tl.TensorlangError, match="reduce axes .* or a second expression"):
        tl.max(A[0])


def test_floordiv_floormod_size_var_and_limits():
    n = tl.size_var("n")
    A = tl.placeholder((n,), "int32", name="A")
    Q = tl.compute((n,), lambda i: tl.floordiv(A[i], 3), name="Q")
    R = tl.compute((n,), lambda i: tl.floormod(A[i], 3), name="R")
    f = tl.build(tl.create_schedule([Q, R]), [A, Q, R])
    a = np.arange(-7, 8, dtype="int32")
    q, r = np.zeros_like(a), np.zeros_like(a)
    f(a, q, r)
    np.testing.assert_array_equal(q, a // 3)
    np.testing.assert_array_equal(r, a % 3)
    assert float(tl.max_value("float32").value) == np.inf
    assert int(tl.min_value("int8").value) == -128
    assert int(tl.max_value("uint8").value) == 255
    with pytest.raises(tl.TensorlangError):
        tl.max_value("not_a_type")


def test_compute_tag_and_attrs_are_kept_through_schedules():
    A = tl.placeholder((8,), name="A")
    B = tl.compute((8,), lambda i: A[i] + 1.0, name="B", tag="elemwise",
                   attrs={"layout": "N"})
    s = tl.create_schedule(B)
    s[B].split(B.op.axis[0], factor=4)
    assert s[B].op.tag == "elemwise" and s[B].op.attrs == {"layout": "N"}
    with pytest.raises(tl.TensorlangError, match="tag must be a string"):
        tl.compute((8,), lambda i: A[i], name="C", tag=3)


def test_time_evaluator_and_benchmark_report_rounds_and_refuse_bad_counts():
    A = tl.placeholder((256,), name="A")
    B = tl.compute((256,), lambda i: A[i] * 3.0, name="B")
    f = tl.build(tl.create_schedule(B), [A, B], name="triple")
    a, b = np.ones(256, "f4"), np.zeros(256, "f4")
    r = f.time_evaluator("triple", number=5, repeat=3)(a, b)
    assert len(r.results) == 3 and r.min <= r.median <= r.max and r.mean > 0
    assert "3 rounds of 5 calls" in str(r)
    with pytest.raises(tl.TensorlangError, match="func_name"):
        f.time_evaluator("other")
    calls = []
    tl.testing.benchmark(lambda: calls.append(1), number=4, repeat=2, warmup=1)
    assert len(calls) == 1 + 4 * 2
    for bad in ({"number": 0}, {"repeat": -1}, {"warmup": -1}, {"min_repeat_ms": -5}):
        with pytest.raises(tl.TensorlangError):
            tl.testing.benchmark(lambda: None, **bad)


def test_a_benchmark_rate_gives_the_median_with_the_slowest_and_fastest_rounds():
    r = tl.testing.BenchmarkResult((0.02, 0.01, 0.04), 1)
    assert r.rate(2e9) == "100.0 GFLOPS (50.0-200.0 over 3 rounds)"
    assert r.rate(4e6, "MB/s", 1e6) == "200.0 MB/s (100.0-400.0 over 3 rounds)"
    for bad in (0, -1.0, "1e9"):
        with pytest.raises(tl.TensorlangError, match="amount must be a positive number"):
            r.rate(bad)


def test_an_exported_library_runs_in_another_process_and_checks_its_arguments(tmp_path):
    n = tl.var("n")
    A = tl.placeholder((n, 16), name="A")
    s_ = tl.var("s")
    B = tl.compute((n, 16), lambda i, j: A[i, j] * 2.0 + s_.astype("float32"), name="B")
    sch = tl.create_schedule(B)
    sch[B].parallel(B.op.axis[0])
    f = tl.build(sch, [A, s_, B], name="double")
    path = tmp_path / "double.so"
    f.save(str(path))
    code = f"""
import numpy as np, tensorlang as tl
m = tl.load_module({str(path)!r})
for rows in (1, 3, 97):
    a = np.arange(rows * 16, dtype="f4").reshape(rows, 16); b = np.zeros_like(a)
    m(a, 5, b); assert np.array_equal(b, a * 2 + 5)
for args, msg in (((a, 5, np.zeros((4, 16), "f4")), "n = 97"),
                  ((a, 5, b.astype("f8")), "dtype float32"),
                  ((a, 5.0, b), "expected an int"), ((a, b), "expected 3 arguments")):
    try:
        m(*args)
    except tl.TensorlangError as e:
        assert msg in str(e), (msg, str(e))
    else:
        raise AssertionError(msg)
print("ok")
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr
    bad = tmp_path / "plain.so"
    bad.write_bytes(b"not a library")
    with pytest.raises(tl.TensorlangError, match="cannot load"):
        tl.load_module(str(bad))


def test_a_library_checks_sizes_given_as_expressions(tmp_path):
    n = tl.var("n")
    A = tl.placeholder((n + 2,), name="A")
    B = tl.compute((n,), lambda i: A[i] + A[i + 2], name="B")
    f = tl.build(tl.create_schedule(B), [A, B], name="window")
    f.export_library(str(tmp_path / "w.so"))
    m = tl.load_module(str(tmp_path / "w.so"))
    a, b = np.arange(9, dtype="f4"), np.zeros(7, "f4")
    m(a, b)
    np.testing.assert_array_equal(b, a[:-2] + a[2:])
    with pytest.raises(tl.TensorlangError, match="n \\+ 2 = 9"):
        m(np.zeros(8, "f4"), b)
