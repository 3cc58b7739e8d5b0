"""Deep programs give a result or a clear TensorlangError, never a RecursionError (or a
crash from a C stack overflow): a 10,000-deep expression through every layer, a 10,000-node
graph through autodiff and the executor. The deep parts run in a subprocess."""

import subprocess
import sys
import textwrap

import pytest

import tensorlang as tl
from tensorlang.deep import deep_call

TE_SCRIPT = textwrap.dedent('''
    import numpy as np
    import tensorlang as tl

    DEPTH = 10_000
    n = tl.var("n")
    A = tl.placeholder((n,), "float32", name="A")
    C = tl.placeholder((n,), "int32", name="C")

    def body(i):
        e = A[i]
        for k in range(DEPTH):
            e = e + 1.0 if k % 1000 else tl.if_then_else(C[i] >= 0, e, 0.0) + 1.0
        return e

    B = tl.compute((n,), body, name="B")
    s = tl.create_schedule(B)
    outer, inner = s[B].split(B.op.axis[0], factor=8)
    s[B].vectorize(inner)
    s[B].parallel(outer)
    text = str(tl.lower(s, [A, C, B]))
    assert text.count("+ 1.0") >= DEPTH, text.count("+ 1.0")  # full and partial tiles
    assert "B[" in repr(B.op.body) or "A[" in repr(B.op.body)
    report = tl.analyze(s, [A, C, B], sizes={"n": 16})
    assert "flops" in str(report)
    f = tl.build(s, [A, C, B])
    a = np.arange(37, dtype=np.float32)
    b = np.zeros_like(a)
    f(a, np.ones(37, np.int32), b)
    np.testing.assert_array_equal(b, a + DEPTH)
    print("TE OK")
''')

GRAPH_SCRIPT = textwrap.dedent('''
    import numpy as np
    import tensorlang.graph as G

    DEPTH = 10_000
    x = G.Variable("x", shape=(5,), dtype="float64")
    y = x
    for _ in range(DEPTH):
        y = y * 1.0001 + 0.5
    (g,) = G.gradients(G.sum(y), [x])
    ex = G.Executor([y, g])
    xv = np.linspace(0, 1, 5)
    yv, gv = ex.run(feed_dict={x: xv})
    ref = xv.copy()
    for _ in range(DEPTH):
        ref = ref * 1.0001 + 0.5
    np.testing.assert_allclose(yv, ref, rtol=1e-9)
    np.testing.assert_allclose(gv, np.full(5, 1.0001 ** DEPTH), rtol=1e-9)
    print("GRAPH OK")
''')


def _run(tmp_path, name, text, expect):
    script = tmp_path / f"{name}.py"
    script.write_text(text)
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-4000:]
    assert expect in r.stdout


@pytest.mark.slow
def test_ten_thousand_deep_expression_through_every_layer(tmp_path):
    _run(tmp_path, "deep_te", TE_SCRIPT, "TE OK")


@pytest.mark.slow
def test_ten_thousand_node_graph_through_autodiff_and_the_executor(tmp_path):
    _run(tmp_path, "deep_graph", GRAPH_SCRIPT, "GRAPH OK")


def test_unbounded_recursion_is_a_clear_error():
    def forever(k):
        return forever(k + 1) + 1

    with pytest.raises(tl.TensorlangError, match="nested more deeply"):
        deep_call(forever, 0)


def test_deep_call_passes_results_and_errors_through():
    def deep_sum(k):
        return 0 if k == 0 else 1 + deep_sum(k - 1)

    assert deep_call(deep_sum, 50_000) == 50_000

    def fails(k):
        if k == 0:
            raise ValueError("bottom")
        return fails(k - 1)

    with pytest.raises(ValueError, match="bottom"):
        deep_call(fails, 5_000)
    assert sys.getrecursionlimit() < 100_000  # restored


def test_an_error_leaves_no_wrapper_frames_in_the_traceback():
    import traceback

    import tensorlang as tl

    A = tl.placeholder((4,), name="A")
    try:
        tl.compute((4,), lambda i: A[i, i], name="B")
    except tl.TensorlangError as e:
        names = [f.name for f in traceback.extract_tb(e.__traceback__)]
    assert "deep_call" not in names
    assert names.count("wrapper") <= 1 and "compute" in names and "__getitem__" in names
