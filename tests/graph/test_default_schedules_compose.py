"""The executor's default schedules on composed graphs: matmuls, elementwise ops,
reductions over either axis, broadcasts, reshapes and transposes, forward and backward,
through `G.Executor` (fused) against numpy. A matmul or conv2d whose elementwise reader
feeds a reduction (`sum(relu(x @ w), axis=1)`) once took the reduction's group as its
epilogue and its blocked schedule failed on the reduced output (IndexError)."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tensorlang.graph as G
from tests.graph.test_ops import _reference

DIMS = (1, 2, 3, 5, 8)
UNARY = {"relu": G.relu, "tanh": G.tanh, "exp": lambda y: G.exp(G.tanh(y)),
         "sigmoid": G.sigmoid, "scale": lambda y: y * 2.0, "neg": lambda y: -y}
STEPS = ("unary", "bias_row", "scale_col", "broadcast", "transpose", "reshape", "matmul",
         "reduce_keep")
REDUCERS = ("sum", "mean", "max")


@st.composite
def programs(draw):
    """A matmul, then a few steps on its 2-D value, then a reduction (or none)."""
    return {
        "m": draw(st.sampled_from(DIMS)), "k": draw(st.sampled_from(DIMS)),
        "n": draw(st.sampled_from(DIMS)),
        "steps": draw(st.lists(st.tuples(st.sampled_from(STEPS), st.sampled_from(sorted(UNARY)),
                                         st.sampled_from(REDUCERS), st.sampled_from((0, 1)),
                                         st.sampled_from(DIMS)),
                               min_size=1, max_size=4)),
        "end": draw(st.tuples(st.sampled_from(REDUCERS), st.sampled_from((0, 1, None)))),
        "seed": draw(st.integers(0, 1 << 16)),
    }


def _build(c):
    rng = np.random.default_rng(c["seed"])
    feeds = {}

    def var(shape):
        v = G.Variable(f"v{len(feeds)}", shape, "float64")
        feeds[v] = rng.uniform(-1, 1, shape)
        return v
    y = G.matmul(var((c["m"], c["k"])), var((c["k"], c["n"])))
    for step, unary, reducer, axis, size in c["steps"]:
        r, q = y.shape
        if step == "unary":
            y = UNARY[unary](y)
        elif step == "bias_row":
            y = y + var((q,))                       # broadcast along the rows
        elif step == "scale_col":
            y = y * var((r, 1))                     # broadcast along the columns
        elif step == "broadcast":
            y = y + G.broadcast_to(var((1, q)), (r, q))
        elif step == "transpose":
            y = G.transpose(y)
        elif step == "reshape":
            y = G.reshape(y, (q, r) if axis else (r * q, 1))
        elif step == "matmul":
            y = G.matmul(y, var((q, size)))
        elif step == "reduce_keep":
            y = getattr(G, reducer)(y, axis=axis, keepdims=True)
    reducer, axis = c["end"]
    y = getattr(G, reducer)(UNARY["relu"](y) if reducer != "max" else y, axis=axis)
    return y, feeds


@pytest.mark.parametrize("reducer", REDUCERS)
@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize("epilogue", ["relu", "tanh", "exp", "scale"])
def test_reduction_of_a_matmul_epilogue(reducer, axis, epilogue):
    rng = np.random.default_rng(0)
    xv, wv = rng.uniform(-1, 1, (6, 9)), rng.uniform(-1, 1, (9, 10))
    x, w = G.Variable("x", (6, 9), "float64"), G.Variable("w", (9, 10), "float64")
    f = {"relu": (G.relu, lambda a: np.maximum(a, 0)), "tanh": (G.tanh, np.tanh),
         "exp": (G.exp, np.exp), "scale": (lambda a: a * 2, lambda a: a * 2)}[epilogue]
    y = getattr(G, reducer)(f[0](G.matmul(x, w)), axis=axis)
    (got,) = G.Executor([y]).run({x: xv, w: wv})
    want = getattr(np, reducer)(f[1](xv @ wv), axis=axis)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("axis", [0, 1, 3, None])
def test_reduction_of_a_conv2d_epilogue(axis):
    rng = np.random.default_rng(1)
    xv, wv = rng.standard_normal((2, 3, 7, 7)), rng.standard_normal((4, 3, 3, 3))
    x, w = G.Variable("x", xv.shape, "float64"), G.Variable("w", wv.shape, "float64")
    y = G.sum(G.relu(G.conv2d(x, w)), axis=axis)
    (got,) = G.Executor([y]).run({x: xv, w: wv})
    want = _reference(y, {x.id: xv, w.id: wv})
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.slow
@settings(max_examples=16, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(programs())
def test_composed_graphs_forward_and_backward_match_numpy(c):
    y, feeds = _build(c)
    wrt = list(feeds)
    weights = G.constant(np.random.default_rng(c["seed"] + 1).uniform(-1, 1, y.shape))
    loss = G.sum(y * weights)
    grads = G.gradients(loss, wrt)
    got = G.Executor([y, loss, *grads]).run(feeds)
    env = {x.id: v for x, v in feeds.items()}
    for node, g in zip([y, loss], got):
        want = _reference(node, env)
        assert g.shape == want.shape, c
        np.testing.assert_allclose(g, want, rtol=1e-9, atol=1e-11, err_msg=str(c))
    # the gradients are the loss's: a central difference along one random direction in
    # every variable at once (relu's kink and max's ties have probability zero here)
    rng = np.random.default_rng(c["seed"] + 2)
    d = {x: rng.standard_normal(v.shape) for x, v in feeds.items()}
    eps = 1e-6
    ex = G.Executor([loss])
    plus = ex.run({x: v + eps * d[x] for x, v in feeds.items()})[0]
    minus = ex.run({x: v - eps * d[x] for x, v in feeds.items()})[0]
    slope = sum(float(np.sum(g * d[x])) for x, g in zip(wrt, got[2:]))
    np.testing.assert_allclose(slope, (plus - minus) / (2 * eps), rtol=1e-5, atol=1e-7,
                               err_msg=str(c))
