"""Random graphs with batched, broadcast and transposed matmuls, epilogues, softmax and
reductions, forward and backward (reverse-mode gradients of a weighted sum), run by the
executor against the graph's numpy references in float64. The attention projection's
gradient (a batched times a 2-D matmul) once failed with invalid LLVM IR (its regression
test is test_executor.py's test_batched_times_2d_matmul_gradient_compiles); these graphs
cover that shape family, with sizes 1, primes and small composites."""

import pytest
import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tensorlang.graph as G
from tests.graph.test_ops import _reference

DIMS = (1, 2, 3, 5, 7)


@st.composite
def matmul_graphs(draw):
    return {
        "batch": draw(st.sampled_from((None, 1, 3))),      # None: 2-D activations
        "w_batched": draw(st.booleans()),
        "m": draw(st.sampled_from(DIMS)), "k": draw(st.sampled_from(DIMS)),
        "n": draw(st.sampled_from(DIMS)), "p": draw(st.sampled_from(DIMS)),
        "ta": draw(st.booleans()), "tb": draw(st.booleans()),
        "bias": draw(st.booleans()),
        "act": draw(st.sampled_from(("none", "relu", "tanh", "sigmoid"))),
        "second": draw(st.booleans()),
        "softmax": draw(st.booleans()),
        "reduce": draw(st.sampled_from(("sum", "mean_rows", "sum_batch"))),
        "seed": draw(st.integers(0, 1 << 16)),
    }


def _build(c):
    rng = np.random.default_rng(c["seed"])
    b, m, k, n, p = c["batch"], c["m"], c["k"], c["n"], c["p"]
    lead = () if b is None else (b,)
    a_shape = lead + ((k, m) if c["ta"] else (m, k))
    w_lead = lead if (c["w_batched"] and b is not None) else ()
    w_shape = w_lead + ((n, k) if c["tb"] else (k, n))
    a, w = G.Variable("a", a_shape, "float64"), G.Variable("w", w_shape, "float64")
    feeds = {a: rng.uniform(-1, 1, a_shape), w: rng.uniform(-1, 1, w_shape)}
    y = G.make("matmul", (a, w), ta=c["ta"], tb=c["tb"])
    wrt = [a, w]
    if c["bias"]:
        bias = G.Variable("bias", (n,), "float64")
        feeds[bias] = rng.uniform(-1, 1, (n,))
        y = y + bias
        wrt.append(bias)
    if c["act"] != "none":
        y = getattr(G, c["act"])(y)
    if c["second"]:
        v = G.Variable("v", (n, p), "float64")
        feeds[v] = rng.uniform(-1, 1, (n, p))
        y = y @ v
        wrt.append(v)
    if c["softmax"]:
        y = G.softmax(y, axis=-1)
    weights = G.constant(rng.uniform(-1, 1, y.shape))
    z = y * weights
    if c["reduce"] == "mean_rows":
        z = G.mean(z, axis=-1)
    elif c["reduce"] == "sum_batch" and b is not None:
        z = G.sum(z, axis=0)
    loss = G.sum(z)
    return loss, wrt, feeds


@pytest.mark.slow
@settings(max_examples=25, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(matmul_graphs())
def test_matmul_graphs_forward_and_backward_match_numpy(c):
    loss, wrt, feeds = _build(c)
    grads = G.gradients(loss, wrt)
    outs = [loss, *grads]
    got = G.Executor(outs).run(feeds)
    env = {x.id: v for x, v in feeds.items()}
    for node, g in zip(outs, got):
        want = _reference(node, env)
        assert g.shape == want.shape, (node, c)
        np.testing.assert_allclose(g, want, rtol=1e-9, atol=1e-11, err_msg=str(c))
    # the gradients are the loss's: a finite difference along a random direction
    rng = np.random.default_rng(c["seed"] + 1)
    ex = G.Executor([loss])
    eps = 1e-6
    for x, g in zip(wrt, got[1:]):
        d = rng.standard_normal(feeds[x].shape)
        plus = {**feeds, x: feeds[x] + eps * d}
        minus = {**feeds, x: feeds[x] - eps * d}
        num = (ex.run(plus)[0] - ex.run(minus)[0]) / (2 * eps)
        np.testing.assert_allclose(np.sum(g * d), num, rtol=1e-5, atol=1e-7, err_msg=str(c))

