"""Fusion (`graph/fusion.py`): which nodes become one kernel, and that fused kernels compute
what numpy does — layer norm and softmax written out as one kernel each, reductions with
their producers and epilogues, row groups on random graphs, forward and backward."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tensorlang as tl
import tensorlang.graph as G
from tensorlang.graph.executor import default_schedules
from tests.graph.test_ops import _reference

R = np.random.default_rng(5)


def _layer_norm_ref(x, eps=1e-5):
    return (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + eps)


def _kernels(ex):
    return [[n.op for n in k.nodes] for k in ex.kernels]


@pytest.mark.parametrize("shape", [(1, 7), (3, 1), (4, 16), (37, 53), (8, 5, 33),
                                   (2, 4, 200), (64, 1024), (3, 2100)])
def test_layer_norm_is_one_kernel(shape):
    x = G.Variable("x", shape, "float32")
    ex = G.Executor([G.layer_norm(x)])
    xv = R.standard_normal(shape).astype("float32") * 3 + 1
    (got,) = ex.run({x: xv})
    np.testing.assert_allclose(got, _layer_norm_ref(xv.astype("f8")), rtol=1e-4, atol=1e-4)
    assert len(ex.kernels) == 1, ex.kernels


def test_layer_norm_schedule_is_per_row():
    x = G.Variable("x", (256, 512), "float32")
    ((nodes, s),) = default_schedules([G.layer_norm(x)], schedules="hand")
    text = str(tl.lower(s, [*s.placeholders, *s.outputs]))
    head = text.splitlines()[1]
    assert "parallel" in head and "range(256)" in head      # one row loop, in parallel
    assert text.count("# vectorized") >= 3                  # the two sums and the output
    assert "allocate(float32, [256" not in text             # no whole-tensor temporary


def test_softmax_written_out_is_one_kernel():
    x = G.Variable("x", (33, 70), "float64")
    e = G.exp(x - G.max(x, axis=-1, keepdims=True))
    y = e / G.sum(e, axis=-1, keepdims=True)
    ex = G.Executor([y])
    xv = R.standard_normal((33, 70)) * 4
    (got,) = ex.run({x: xv})
    np.testing.assert_allclose(got, _softmax(xv), rtol=1e-12)
    assert len(ex.kernels) == 1


def _softmax(v):
    e = np.exp(v - v.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def test_reduction_takes_its_producer():
    a, b = G.Variable("a", (40, 17), "float64"), G.Variable("b", (40, 17), "float64")
    ex = G.Executor([G.sum(a * b, axis=0), G.mean(G.exp(a), axis=-1)])
    av, bv = R.standard_normal((40, 17)), R.standard_normal((40, 17))
    s0, m1 = ex.run({a: av, b: bv})
    np.testing.assert_allclose(s0, (av * bv).sum(0), rtol=1e-12)
    np.testing.assert_allclose(m1, np.exp(av).mean(-1), rtol=1e-12)
    assert _kernels(ex) == [["mul", "sum"], ["exp", "mean"]]


def test_a_value_read_outside_the_group_is_not_fused_into_it():
    x = G.Variable("x", (16, 40), "float32")
    m = G.mean(x, axis=-1, keepdims=True)
    y = x - m
    ex = G.Executor([y, m])                  # m is an output: one value leaves a kernel
    xv = R.standard_normal((16, 40)).astype("float32")
    got_y, got_m = ex.run({x: xv})
    np.testing.assert_allclose(got_m, xv.mean(-1, keepdims=True), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got_y, xv - xv.mean(-1, keepdims=True), rtol=1e-5, atol=1e-6)
    assert _kernels(ex) == [["mean"], ["sub"]]


def test_matmul_is_not_fused_into_a_row_group():
    x = G.Variable("x", (32, 48), "float32")
    w = G.Variable("w", (48, 64), "float32")
    y = G.layer_norm(G.relu(G.matmul(x, w)))
    ex = G.Executor([y])
    xv, wv = R.standard_normal((32, 48)).astype("f4"), R.standard_normal((48, 64)).astype("f4")
    (got,) = ex.run({x: xv, w: wv})
    np.testing.assert_allclose(got, _layer_norm_ref(np.maximum(xv.astype("f8") @ wv, 0)),
                               rtol=1e-3, atol=1e-3)
    # relu, read by the row group's reductions and its output, goes with the rows
    assert _kernels(ex) == [["matmul"], ["relu", "mean", "sub", "mul", "mean", "add", "sqrt",
                                         "div"]]


def test_layer_norm_gradient_matches_finite_differences():
    shape = (6, 23)
    x = G.Variable("x", shape, "float64")
    w = G.Variable("w", shape, "float64")
    loss = G.sum(G.layer_norm(x) * w)
    (gx,) = G.gradients(loss, [x])
    ex = G.Executor([loss, gx])
    xv, wv = R.standard_normal(shape), R.standard_normal(shape)
    _, got = ex.run({x: xv, w: wv})
    eps, num = 1e-6, np.zeros(shape)
    for idx in np.ndindex(*shape):
        d = np.zeros(shape)
        d[idx] = eps
        num[idx] = ((_layer_norm_ref(xv + d) * wv).sum()
                    - (_layer_norm_ref(xv - d) * wv).sum()) / (2 * eps)
    np.testing.assert_allclose(got, num, rtol=1e-5, atol=1e-6)
    assert len(ex.kernels) <= 12


# ------------------------------------------------------------ random row graphs
UNARY = {"exp": (G.exp, np.exp), "tanh": (G.tanh, np.tanh), "neg": (G.neg, np.negative),
         "sqrt_abs": (lambda v: G.sqrt(G.mul(v, v) + 1.0), lambda v: np.sqrt(v * v + 1.0))}
BINARY = {"add": (G.add, np.add), "sub": (G.sub, np.subtract), "mul": (G.mul, np.multiply)}
REDUCE = {"sum": (G.sum, np.sum), "mean": (G.mean, np.mean), "max": (G.max, np.max)}


@st.composite
def row_graphs(draw):
    """A random DAG over x (rows, n) and s (rows, 1): elementwise ops (broadcasting the
    per-row values), row reductions with kept dimensions, and softmax; some values are
    read several times or are outputs."""
    lead = draw(st.sampled_from([(1,), (3,), (2, 3), (17,)]))
    n = draw(st.sampled_from([1, 5, 16, 37, 130]))
    steps = []
    for _ in range(draw(st.integers(1, 9))):
        k = draw(st.sampled_from(["u", "b", "r", "softmax"]))
        if k == "u":
            steps.append((k, draw(st.sampled_from(sorted(UNARY))), draw(st.integers(0, 30))))
        elif k == "b":
            steps.append((k, draw(st.sampled_from(sorted(BINARY))), draw(st.integers(0, 30)),
                          draw(st.integers(0, 30))))
        elif k == "r":
            steps.append((k, draw(st.sampled_from(sorted(REDUCE))), draw(st.integers(0, 30))))
        else:
            steps.append((k, draw(st.integers(0, 30))))
    outs = draw(st.lists(st.integers(0, 30), min_size=1, max_size=3))
    return lead, n, steps, outs


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(row_graphs(), st.booleans())
def test_random_row_graphs_match_numpy(case, backward):
    lead, n, steps, outs = case
    x = G.Variable("x", (*lead, n), "float64")
    s = G.Variable("s", (*lead, 1), "float64")
    xv, sv = R.uniform(-2, 2, (*lead, n)), R.uniform(-2, 2, (*lead, 1))
    nodes, refs = [x, s], [xv, sv]
    for stp in steps:
        if stp[0] == "u":
            a = stp[2] % len(nodes)
            nodes.append(UNARY[stp[1]][0](nodes[a]))
            refs.append(UNARY[stp[1]][1](refs[a]))
        elif stp[0] == "b":
            a, b = stp[2] % len(nodes), stp[3] % len(nodes)
            nodes.append(BINARY[stp[1]][0](nodes[a], nodes[b]))
            refs.append(BINARY[stp[1]][1](refs[a], refs[b]))
        elif stp[0] == "r":
            a = stp[2] % len(nodes)
            nodes.append(REDUCE[stp[1]][0](nodes[a], axis=-1, keepdims=True))
            refs.append(REDUCE[stp[1]][1](refs[a], axis=-1, keepdims=True))
        else:
            a = stp[1] % len(nodes)
            nodes.append(G.softmax(nodes[a], axis=-1))
            refs.append(_softmax(refs[a]))
    picks = [o % len(nodes) for o in outs]
    targets = [nodes[p] for p in picks]
    if backward:        # the gradient graph's own numpy references (see test_ops)
        loss = G.sum(targets[0] if len(targets) == 1 else G.add(*targets[:2]))
        targets = [loss, *G.gradients(loss, [x, s])]
    got = G.Executor(targets).run({x: xv, s: sv})
    env = {x.id: xv, s.id: sv}
    for g, t in zip(got, targets):
        want = _reference(t, env)
        assert g.shape == want.shape
        np.testing.assert_allclose(g, want, rtol=1e-10, atol=1e-10)
