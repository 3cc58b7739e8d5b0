"""Every graph op: the executor (tensorlang kernels) against the numpy reference, a float64
finite-difference gradient check, and <t, vjp(c)> = <jvp(t), c>."""

import numpy as np
import pytest

import tensorlang.graph as G
from tensorlang.graph.ops import OPS

R = np.random.default_rng(7)


def var(name, shape):
    return G.Variable(name, shape=shape, dtype="float64")


def positive(shape):
    return R.uniform(0.5, 2.0, shape)


def normal(shape):
    return R.standard_normal(shape)


def distinct(shape):
    """No ties (max and max pooling are differentiable there)."""
    return R.permutation(np.prod(shape)).reshape(shape) * 0.1 + R.uniform(0, 0.01, shape)


def _case(fn, *inputs):
    """fn builds the output from Variables; inputs are (shape, sampler)."""
    return fn, inputs


CASES = {
    "add (3,1)+(1,4)": _case(lambda a, b: a + b, ((3, 1), normal), ((1, 4), normal)),
    "sub": _case(lambda a, b: a - b, ((2, 3), normal), ((3,), normal)),
    "mul": _case(lambda a, b: a * b, ((2, 3), normal), ((2, 1), normal)),
    "div": _case(lambda a, b: a / b, ((4,), normal), ((1,), positive)),
    "power": _case(lambda a, b: a ** b, ((3,), positive), ((3,), normal)),
    "neg": _case(lambda a: -a, ((5,), normal)),
    "exp": _case(G.exp, ((2, 2), normal)),
    "log": _case(G.log, ((3,), positive)),
    "sin": _case(G.sin, ((3,), normal)),
    "cos": _case(G.cos, ((3,), normal)),
    "tanh": _case(G.tanh, ((3,), normal)),
    "sqrt": _case(G.sqrt, ((3,), positive)),
    "relu": _case(G.relu, ((7,), normal)),
    "sigmoid": _case(G.sigmoid, ((4,), normal)),
    "sum axis": _case(lambda a: G.sum(a, axis=1), ((3, 4), normal)),
    "sum all": _case(G.sum, ((3, 4), normal)),
    "sum keepdims": _case(lambda a: G.sum(a, axis=(0, 2), keepdims=True), ((2, 3, 2), normal)),
    "mean": _case(lambda a: G.mean(a, axis=-1), ((3, 5), normal)),
    "max": _case(lambda a: G.max(a, axis=0), ((4, 3), distinct)),
    "max keepdims": _case(lambda a: G.max(a, axis=1, keepdims=True), ((2, 5), distinct)),
    "reshape": _case(lambda a: G.reshape(a, (3, -1)), ((2, 6), normal)),
    "transpose": _case(lambda a: G.transpose(a, (2, 0, 1)), ((2, 3, 4), normal)),
    "broadcast_to": _case(lambda a: G.broadcast_to(a, (2, 3, 4)), ((3, 1), normal)),
    "concat": _case(lambda a, b: G.concat([a, b], axis=1), ((2, 2), normal), ((2, 3), normal)),
    "slice": _case(lambda a: G.slice(a, 1, 1, 4), ((2, 5), normal)),
    "slice edge": _case(lambda a: G.slice(a, 0, 0, 2), ((3, 2), normal)),
    "matmul": _case(lambda a, b: a @ b, ((3, 4), normal), ((4, 5), normal)),
    "matmul batched broadcast": _case(lambda a, b: G.matmul(a, b), ((2, 1, 3, 4), normal),
                                      ((3, 4, 2), normal)),
    "matmul transposed": _case(lambda a, b: G.matmul(G.transpose(a), b), ((4, 3), normal),
                               ((4, 2), normal)),
    "softmax": _case(lambda a: G.softmax(a, axis=-1), ((3, 4), normal)),
    "softmax axis 0": _case(lambda a: G.softmax(a, axis=0), ((3, 4), normal)),
    "log_softmax": _case(G.log_softmax, ((2, 5), normal)),
    "conv2d": _case(lambda x, w: G.conv2d(x, w), ((1, 2, 5, 5), normal), ((3, 2, 3, 3), normal)),
    "conv2d stride padding": _case(lambda x, w: G.conv2d(x, w, stride=2, padding=1),
                                   ((2, 2, 5, 6), normal), ((2, 2, 3, 3), normal)),
    "max_pool2d": _case(lambda x: G.max_pool2d(x, 2), ((1, 2, 4, 6), distinct)),
    "max_pool2d overlapping": _case(lambda x: G.max_pool2d(x, 3, stride=2),
                                    ((1, 1, 7, 5), distinct)),
    "avg_pool2d": _case(lambda x: G.avg_pool2d(x, 2), ((2, 1, 4, 4), normal)),
    "layer_norm": _case(G.layer_norm, ((3, 6), normal)),
    "batch_norm": _case(lambda x, g, b: G.batch_norm(x, g, b, G.constant(np.arange(2.0)),
                                                     G.constant(np.array([1.0, 2.0]))),
                        ((2, 2, 3, 3), normal), ((2,), normal), ((2,), normal)),
    "mse_loss": _case(G.mse_loss, ((4, 3), normal), ((4, 3), normal)),
    "softmax_cross_entropy": _case(
        lambda z: G.softmax_cross_entropy(z, G.constant(np.eye(4)[[0, 2, 3]])),
        ((3, 4), normal)),
}


def _build(name):
    fn, inputs = CASES[name]
    xs = [var(f"x{k}", shape) for k, (shape, _) in enumerate(inputs)]
    vals = [sampler(shape) for shape, sampler in inputs]
    return fn(*xs), xs, vals


def _reference(node, env):
    """Evaluate a graph with the numpy references (for the executor test)."""
    if node.id in env:
        return env[node.id]
    if node.op == "constant":
        return node.attr("value").array
    args = [_reference(i, env) for i in node.inputs]
    env[node.id] = np.asarray(OPS[node.op].reference(*args, **node.kwargs))
    return env[node.id]


@pytest.mark.parametrize("name", list(CASES))
def test_executor_matches_numpy(name):
    y, xs, vals = _build(name)
    (got,) = G.Executor([y]).run(dict(zip(xs, vals)))
    want = _reference(y, {x.id: v for x, v in zip(xs, vals)})
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)


def _loss(y, c):
    return G.sum(y * G.constant(c))


@pytest.mark.parametrize("name", list(CASES))
def test_gradient_matches_finite_differences(name):
    y, xs, vals = _build(name)
    (yv,) = G.Executor([y]).run(dict(zip(xs, vals)))
    c = R.standard_normal(yv.shape)
    loss = _loss(y, c)
    grads = G.gradients(loss, xs)
    ex = G.Executor([loss, *grads])
    got = ex.run(dict(zip(xs, vals)))[1:]
    f = G.Executor([loss])
    eps = 1e-6
    for k, v in enumerate(vals):
        num = np.zeros_like(v)
        for idx in np.ndindex(v.shape):
            plus = [w.copy() for w in vals]
            minus = [w.copy() for w in vals]
            plus[k][idx] += eps
            minus[k][idx] -= eps
            num[idx] = (f.run(dict(zip(xs, plus)))[0] - f.run(dict(zip(xs, minus)))[0]) / (2 * eps)
        np.testing.assert_allclose(got[k], num, rtol=1e-5, atol=1e-6, err_msg=f"d/dx{k}")


@pytest.mark.parametrize("name", list(CASES))
def test_forward_and_reverse_mode_agree(name):
    """<t, vjp(c)> = <jvp(t), c> for random t and c."""
    y, xs, vals = _build(name)
    (yv,) = G.Executor([y]).run(dict(zip(xs, vals)))
    c = R.standard_normal(yv.shape)
    ts = [R.standard_normal(v.shape) for v in vals]
    vjps = G.gradients(_loss(y, c), xs)
    (tan,) = G.jvp([y], xs, [G.constant(t) for t in ts])
    out = G.Executor([*vjps, tan]).run(dict(zip(xs, vals)))
    lhs = sum(float(np.sum(t * g)) for t, g in zip(ts, out[:-1]))
    rhs = float(np.sum(out[-1] * c))
    assert lhs == pytest.approx(rhs, rel=1e-9, abs=1e-9)


def test_every_op_has_every_rule():
    for name, d in OPS.items():
        if name in ("variable", "constant"):
            continue
        assert d.reference and d.shape and d.grad and d.jvp and d.te, name


def test_max_ties_share_the_gradient():
    """The convention: the gradient of a maximum is split evenly among tied maxima."""
    x = var("x", (2, 3))
    (g,) = G.gradients(G.max(x, axis=1), [x])
    (gv,) = G.Executor([g]).run({x: np.array([[1.0, 3.0, 3.0], [2.0, 2.0, 2.0]])})
    np.testing.assert_allclose(gv, [[0, 0.5, 0.5], [1 / 3, 1 / 3, 1 / 3]])
    p = var("p", (1, 1, 2, 2))
    (gp,) = G.gradients(G.max_pool2d(p, 2), [p])
    (gpv,) = G.Executor([gp]).run({p: np.ones((1, 1, 2, 2))})
    np.testing.assert_allclose(gpv, np.full((1, 1, 2, 2), 0.25))
