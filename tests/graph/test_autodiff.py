"""The lecture's traces, gradients of gradients, composite graphs, the executor's plans and
its errors."""

import numpy as np
import pytest

import tensorlang as tl
import tensorlang.graph as G
from tensorlang.graph import executor


def test_the_lecture_trace():
    """y = ln(x1) + x1*x2 - sin(x2) at (2, 5) (CSE 234's autodiff example)."""
    x1, x2 = G.Variable("x1"), G.Variable("x2")
    y = G.log(x1) + x1 * x2 - G.sin(x2)
    g1, g2 = G.gradients(y, [x1, x2])
    (t,) = G.jvp(y, [x1, x2], [1.0, 0.0])
    yv, g1v, g2v, tv = G.Executor([y, g1, g2, t]).run(feed_dict={x1: 2.0, x2: 5.0})
    assert yv.shape == () and yv == pytest.approx(11.652, abs=1e-3)
    assert g1v == pytest.approx(5.5) and tv == pytest.approx(5.5)
    assert g2v == pytest.approx(1.716, abs=1e-3)


def test_gradient_of_gradient():
    x2, x3 = G.Variable("x2", dtype="float64"), G.Variable("x3", dtype="float64")
    y = x2 * x2 + x2 * x3
    g2, g3 = G.gradients(y, [x2, x3])
    g22, g23 = G.gradients(g2, [x2, x3])
    got = G.Executor([y, g2, g3, g22, g23]).run({x2: 6.0, x3: 0.0})
    assert [float(v) for v in got] == [36.0, 12.0, 6.0, 2.0, 1.0]


def test_second_derivatives_of_softmax_and_matmul_match_finite_differences():
    rng = np.random.default_rng(3)
    x = G.Variable("x", shape=(2, 3), dtype="float64")
    w = G.constant(rng.standard_normal((3, 4)))
    c = G.constant(rng.standard_normal((2, 4)))
    loss = G.sum(G.softmax(x @ w) * c)
    (g,) = G.gradients(loss, [x])
    v = G.constant(rng.standard_normal((2, 3)))
    (hv,) = G.gradients(G.sum(g * v), [x])     # Hessian-vector product
    x0 = rng.standard_normal((2, 3))
    ex = G.Executor([g])
    eps = 1e-6
    vv = v.attr("value").array
    num = (ex.run({x: x0 + eps * vv})[0] - ex.run({x: x0 - eps * vv})[0]) / (2 * eps)
    np.testing.assert_allclose(G.Executor([hv]).run({x: x0})[0], num, rtol=1e-5, atol=1e-7)


def test_a_composite_mlp_gradient_matches_finite_differences():
    rng = np.random.default_rng(4)
    x = G.constant(rng.standard_normal((5, 6)))
    labels = G.constant(np.eye(3)[[0, 1, 2, 1, 0]])
    w1 = G.Variable("w1", shape=(6, 4), dtype="float64")
    b1 = G.Variable("b1", shape=(4,), dtype="float64")
    w2 = G.Variable("w2", shape=(4, 3), dtype="float64")
    loss = G.softmax_cross_entropy(G.relu(x @ w1 + b1) @ w2, labels)
    grads = G.gradients(loss, [w1, b1, w2])
    vals = {w1: rng.standard_normal((6, 4)), b1: rng.standard_normal(4),
            w2: rng.standard_normal((4, 3))}
    got = G.Executor(grads).run(vals)
    f = G.Executor([loss])
    for (node, v), g in zip(vals.items(), got):
        num = np.zeros_like(v)
        for idx in np.ndindex(v.shape):
            d = np.zeros_like(v)
            d[idx] = 1e-6
            num[idx] = (f.run({**vals, node: v + d})[0] - f.run({**vals, node: v - d})[0]) / 2e-6
        np.testing.assert_allclose(g, num, rtol=1e-5, atol=1e-8)


def test_printer_shows_one_node_per_line():
    x = G.Variable("x", shape=(3,))
    text = str(G.Graph([G.exp(x) * 2.0]))
    lines = text.splitlines()
    assert lines[0] == "x: float32[3] = variable()"
    assert any("= exp(x)" in ln for ln in lines) and lines[-1].startswith("return (mul_")


def test_shapes_are_inferred_at_construction_and_errors_name_the_op():
    a = G.Variable("a", shape=(3, 4))
    assert (a @ G.Variable("b", shape=(4, 5))).shape == (3, 5)
    assert G.sum(a, axis=0, keepdims=True).shape == (1, 4)
    with pytest.raises(G.GraphError, match=r"matmul: inner dimensions differ.*\(3, 4\), \(3, 4\)"):
        a @ a
    with pytest.raises(G.GraphError, match=r"add: shapes do not broadcast"):
        a + G.Variable("c", shape=(5,))
    with pytest.raises(tl.TensorlangError, match="conv2d"):
        G.conv2d(a, a)


def test_bad_feeds_name_the_node():
    x = G.Variable("x", shape=(2, 3))
    y = G.Variable("y")
    ex = G.Executor([G.sum(x) + y])
    with pytest.raises(tl.TensorlangError, match="no value fed for Variable y"):
        ex.run({x: np.zeros((2, 3), "float32")})
    with pytest.raises(tl.TensorlangError, match=r"Variable x has shape \(2, 3\).*\(3, 2\)"):
        ex.run({x: np.zeros((3, 2), "float32"), y: 1.0})
    with pytest.raises(tl.TensorlangError, match="Variable x is float32.*float64"):
        ex.run({x: np.zeros((2, 3)), y: 1.0})
    with pytest.raises(tl.TensorlangError, match="keys must be Variables"):
        ex.run({"x": 1.0})
    z = G.Variable("z")
    ex2 = G.Executor([z @ z])
    with pytest.raises(tl.TensorlangError, match=r"node matmul_\d+ \(matmul\): inner"):
        ex2.run({z: np.zeros((2, 3), "float32")})


def test_a_cycle_is_refused_naming_the_node():
    x = G.Variable("x", shape=(2,))
    a = G.exp(x)
    b = G.log(a)
    object.__setattr__(a, "inputs", (b,))   # graphs are immutable; force a cycle
    with pytest.raises(tl.TensorlangError, match="cycle through node"):
        G.Executor([b])


def test_plans_are_cached_per_signature_and_buffers_reused():
    x = G.Variable("x")
    a = G.sin(x)
    c = G.sin(a * a)            # read twice: a and a * a are not fused into their readers
    y = c * c + 1.0
    ex = G.Executor([y])
    ex.run({x: np.zeros(64, "float32")})
    ex.run({x: np.ones(64, "float32")})
    assert len(ex._plans) == 1
    plan = next(iter(ex._plans.values()))
    # kernels sin, mul+sin, mul+add: two buffers alternate, plus the input and the constant
    assert [[n.op for n in st.nodes] for st in plan.steps] == [
        ["sin"], ["mul", "sin"], ["mul", "add"]]
    assert len(plan.arrays) == 4
    (v,) = ex.run({x: np.ones(10, "float32")})
    assert len(ex._plans) == 2 and v.shape == (10,)
    np.testing.assert_allclose(v, np.sin(np.sin(1.0) ** 2) ** 2 + 1, rtol=1e-6)
    assert executor._KERNELS   # every op ran as a compiled tensorlang kernel


def test_elementwise_chains_run_as_one_kernel():
    x = G.Variable("x", dtype="float64")
    b = G.Variable("b", dtype="float64")
    y = G.sin(G.exp(G.sin(x)) * 2.0 - b)     # b broadcasts (1, 5) -> (3, 5)
    ex = G.Executor([y])
    xv = np.random.default_rng(1).standard_normal((3, 5))
    bv = np.arange(5.0).reshape(1, 5)
    (v,) = ex.run({x: xv, b: bv})
    np.testing.assert_allclose(v, np.sin(np.exp(np.sin(xv)) * 2.0 - bv), rtol=1e-12)
    (plan,) = ex._plans.values()
    assert [[n.op for n in st.nodes] for st in plan.steps] == [["sin", "exp", "mul", "sub",
                                                                 "sin"]]
    assert "exp" in str(plan.steps[0].kernel.lowered)


def test_results_are_not_overwritten_by_later_runs():
    x = G.Variable("x", shape=(3,))
    ex = G.Executor([x * 2.0])
    (a,) = ex.run({x: np.ones(3, "float32")})
    ex.run({x: np.zeros(3, "float32")})
    np.testing.assert_array_equal(a, [2, 2, 2])
