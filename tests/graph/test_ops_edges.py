"""Graph ops at their edges: integer powers, slices of Variables without a shape, means of
no elements."""

import warnings

import numpy as np
import pytest

import tensorlang.graph as G
from tensorlang.graph.ops import OPS


@pytest.mark.parametrize("build, want", [
    (lambda x, y: G.power(x, y), lambda x, y: np.float_power(x, y)),
    (lambda x, y: x ** y, lambda x, y: np.float_power(x, y)),
    (lambda x, y: x ** 3, lambda x, y: np.float_power(x, 3)),
    (lambda x, y: 2 ** x, lambda x, y: np.float_power(2, x)),
    (lambda x, y: x ** -1, lambda x, y: np.float_power(x, -1))])
def test_power_of_int64_is_float64_as_float_power(build, want):
    # FLOAT_RESULT: power of integers is floating point, numpy's float_power (exact where
    # numpy's integer power does not wrap; 2 ** -1 is 0.5, which numpy refuses for ints)
    x, y = G.Variable("x", dtype="int64"), G.Variable("y", dtype="int64")
    xv, yv = np.arange(-3, 5), np.array([0, 1, 2, 3, 4, 5, 6, 7])
    node = build(x, y)
    assert node.dtype == "float64"
    (got,) = G.Executor([node]).run({x: xv, y: yv})
    with np.errstate(divide="ignore"):
        want = want(xv, yv)
    assert got.dtype == np.float64
    np.testing.assert_array_equal(got, want)
    env = {x.id: xv, y.id: yv}
    with np.errstate(divide="ignore"):
        ref = OPS[node.op].reference(*[env[i.id] if i.op == "variable" else
                                       i.attr("value").array for i in node.inputs])
    assert ref.dtype == np.float64
    np.testing.assert_array_equal(ref, want)


@pytest.mark.parametrize("axis, start, stop", [(0, 1, 3), (-1, 0, 2), (1, 2, 4), (0, 0, 4)])
def test_gradient_through_a_slice_of_a_variable_without_a_shape(axis, start, stop):
    u = G.Variable("u", dtype="float64")
    w = G.Variable("w", dtype="float64")
    y = G.slice(u, axis, start, stop)
    (g,) = G.gradients(G.sum(y * w), [u])
    (gg,) = G.gradients(G.sum(g * g), [w])      # the adjoint's own gradient: a slice
    uv = np.arange(20.0).reshape(4, 5)
    ax = axis % 2
    wv = np.random.default_rng(3).standard_normal(np.take(uv, range(start, stop), ax).shape)
    gv, ggv = G.Executor([g, gg]).run({u: uv, w: wv})
    want = np.zeros_like(uv)
    idx = [slice(None)] * 2
    idx[ax] = slice(start, stop)
    want[tuple(idx)] = wv
    np.testing.assert_array_equal(gv, want)
    np.testing.assert_array_equal(ggv, 2 * wv)
    (t,) = G.jvp([g], [w], [G.constant(np.ones_like(wv))])
    (tv,) = G.Executor([t]).run({u: uv, w: wv})
    np.testing.assert_array_equal(tv, want != 0)


def test_slice_gradient_refuses_a_mismatched_adjoint():
    u = G.Variable("u", shape=(4, 5))
    with pytest.raises(G.GraphError, match=r"unslice: \(3, 5\) is not the shape of the slice"):
        G.make("unslice", (G.Variable("g", shape=(3, 5)), u), axis=0, start=1, stop=3)


@pytest.mark.parametrize("shape, axis, keepdims", [((0,), None, False), ((3, 0), 1, False),
                                                   ((3, 0), 0, False), ((3, 0), None, True),
                                                   ((0, 4), 0, True), ((2, 0, 3), (0, 1), False)])
@pytest.mark.parametrize("dtype", ["float32", "float64", "int64"])
def test_mean_of_no_elements_is_nan_as_numpy(shape, axis, keepdims, dtype):
    u = G.Variable("u", dtype=dtype)
    v = np.ones(shape, dtype)
    (got,) = G.Executor([G.mean(u, axis=axis, keepdims=keepdims)]).run({u: v})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)     # numpy warns of the empty mean
        want = np.mean(v, axis=axis, keepdims=keepdims)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)
    if dtype != "int64":
        (g,) = G.gradients(G.sum(G.mean(u, axis=axis, keepdims=keepdims)), [u])
        (gv,) = G.Executor([g]).run({u: v})
        assert gv.shape == shape
