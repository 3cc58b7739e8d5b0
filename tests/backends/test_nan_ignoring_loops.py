"""Scalar loops of NaN-ignoring float minima and maxima (fmax, fmin, nanmax, nanmin) build
without taking the process down. LLVM 22's loop vectorizer (llvmlite 0.50, built with
assertions) aborted choosing the vector width of such a loop ("VPlan cost model and legacy
cost model disagreed"): a `tl.nanmax` over 8, 16, 72 or 1024 floats, `G.softmax` of a
(1, 72) array. Codegen gives those loops their width (`FunctionCodegen.vector_width_hint`).
Each case runs in a child process: an abort fails the test, not the suite."""

import subprocess
import sys
import textwrap

import numpy as np
import pytest

import tensorlang as tl

CHILD = textwrap.dedent('''
    import sys
    import numpy as np
    import tensorlang as tl
    import tensorlang.graph as G

    rng = np.random.default_rng(0)
    for n in (1, 7, 8, 13, 16, 24, 72, 136, 1000, 1024):
        for name, red, ref in (("nanmax", tl.nanmax, np.nanmax), ("nanmin", tl.nanmin,
                                                                      np.nanmin)):
            A = tl.placeholder((n,), "float32", name="A")
            r = tl.reduce_axis((0, n), "r")
            B = tl.compute((1,), lambda i: red(A[r], axis=r), name="B")
            f = tl.build(tl.create_schedule(B), [A, B])
            a = rng.standard_normal(n).astype("f4")
            a[n // 2] = np.nan
            b = np.zeros(1, "f4")
            f(a, b)
            assert b[0] == ref(a) or n == 1 and np.isnan(b[0]), (name, n, b[0])
    for shape in ((1, 72), (4, 72), (3, 136), (2, 8)):
        x = G.Variable("x", shape, "float32")
        a = rng.standard_normal(shape).astype("f4")
        got = G.Executor([G.softmax(x)]).run({x: a})[0]
        e = np.exp(a - a.max(1, keepdims=True))
        np.testing.assert_allclose(got, e / e.sum(1, keepdims=True), rtol=1e-5, atol=1e-7)
    print("DONE")
''')


def test_nan_ignoring_reductions_and_softmax_build_in_a_child(tmp_path):
    script = tmp_path / "minmax.py"
    script.write_text(CHILD)
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                       timeout=300, env={**__import__("os").environ, "TL_CACHE_DIR":
                                         str(tmp_path)})
    assert r.returncode == 0, r.stderr[-2000:]
    assert "DONE" in r.stdout
    assert "remark" not in r.stderr          # no loop given a width LLVM could not use


@pytest.mark.parametrize("name", ["fmax", "fmin"])
def test_an_elementwise_fmax_loop_stays_vectorized(name):
    n = 72
    A = tl.placeholder((n,), "float32", name="A")
    B = tl.placeholder((n,), "float32", name="B")
    C = tl.compute((n,), lambda i: getattr(tl, name)(A[i], B[i]), name="C")
    f = tl.build(tl.create_schedule(C), [A, B, C])
    ll = f.get_source("ll")                 # (optimised: the width hint is used up)
    assert "<16 x float>" in ll or "<8 x float>" in ll or "<4 x float>" in ll
    a = np.arange(n, dtype="f4")
    b = np.full(n, 30.0, "f4")
    b[3] = np.nan
    c = np.zeros(n, "f4")
    f(a, b, c)
    np.testing.assert_array_equal(c, getattr(np, name)(a, b))


def _ir(A, B):
    """The unoptimised LLVM IR of B's default schedule."""
    from tensorlang.backends.llvm.jit import make_module
    from tensorlang.backends.llvm.target import host_target

    low = tl.lower(tl.create_schedule(B), [A, B])
    return str(make_module("k", low.buffers, low.params, low.body, host_target()))


def test_only_innermost_nan_ignoring_loops_get_a_width():
    A = tl.placeholder((72,), "float32", name="A")
    r = tl.reduce_axis((0, 72), "r")
    assert "llvm.loop.vectorize.width" in _ir(
        A, tl.compute((1,), lambda i: tl.nanmax(A[r], axis=r), name="B"))
    assert "llvm.loop.vectorize.width" not in _ir(
        A, tl.compute((1,), lambda i: tl.max(A[r], axis=r), name="B"))
    M = tl.placeholder((5, 72), "float32", name="M")
    ir_text = _ir(M, tl.compute((5,), lambda i: tl.nanmax(M[i, r], axis=r), name="B"))
    assert ir_text.count("llvm.loop.vectorize.width") == 1    # the inner loop's, once
