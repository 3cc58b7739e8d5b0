"""The graph ops of imported models (`graph.model_ops`) against numpy and ONNX's reference,
on sizes that do and do not divide the schedules' factors."""

import numpy as np
import pytest

import tensorlang as tl
import tensorlang.graph as G
from tensorlang.graph import model_ops as M
from tensorlang.graph.ops import OPS


def run(node, feed):
    (got,) = G.Executor([node]).run(feed)
    return got


@pytest.mark.parametrize("shape,pads,value", [
    ((1, 1, 1, 1), ((0, 0), (0, 0), (1, 1), (1, 1)), 0.0),
    ((2, 3, 13, 7), ((0, 0), (1, 0), (2, 1), (0, 3)), 1.5),
    ((5, 17), ((3, 0), (0, 2)), -2.0),
])
def test_pad_matches_numpy(shape, pads, value, rng):
    x = G.Variable("x", shape)
    xv = rng.standard_normal(shape).astype("f4")
    np.testing.assert_array_equal(run(M.pad(x, pads, value), {x: xv}),
                                  np.pad(xv, pads, constant_values=value))


def test_pad_gradient_crops_back(rng):
    x = G.Variable("x", (3, 5))
    y = G.sum(M.pad(x, ((1, 2), (0, 1)), 0.0) * 2.0)
    (g,) = G.gradients(y, [x])
    np.testing.assert_allclose(G.Executor([g]).run({x: np.ones((3, 5), "f4")})[0],
                               np.full((3, 5), 2.0))


@pytest.mark.parametrize("n,c,k,hw,groups,strides,pads,dil", [
    (1, 1, 1, (1, 1), 1, (1, 2), (1, 1, 1, 1), (1, 1)),
    (2, 6, 12, (9, 7), 2, (1, 1), (1, 0, 2, 1), (1, 1)),
    (1, 6, 6, (13, 11), 6, (2, 1), (1, 1, 1, 1), (1, 1)),     # depthwise
    (1, 4, 8, (17, 9), 1, (2, 2), (0, 0, 1, 1), (2, 1)),       # dilated
    (1, 9, 3, (8, 8), 3, (3, 3), (2, 2, 2, 2), (1, 2)),
])
def test_general_conv_matches_the_reference(n, c, k, hw, groups, strides, pads, dil, rng):
    x, w = G.Variable("x", (n, c) + hw), G.Variable("w", (k, c // groups, 3, 3))
    xv = rng.standard_normal((n, c) + hw).astype("f4")
    wv = rng.standard_normal((k, c // groups, 3, 3)).astype("f4")
    want = OPS["conv"].reference(xv.astype("f8"), wv.astype("f8"), strides, pads, dil, groups)
    got = run(M.conv(x, w, strides, pads, dil, groups), {x: xv, w: wv})
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_general_conv_with_the_plain_form_is_conv2d():
    x, w = G.Variable("x", (1, 3, 8, 8)), G.Variable("w", (4, 3, 3, 3))
    assert M.conv(x, w, (2, 2), (1, 1, 1, 1)).op == "conv2d"
    assert M.conv(x, w, (2, 1), (1, 1, 1, 1)).op == "conv"


def test_general_conv_refuses_channels_that_do_not_split_into_groups():
    x, w = G.Variable("x", (1, 6, 8, 8)), G.Variable("w", (4, 4, 3, 3))
    with pytest.raises(tl.TensorlangError, match="groups"):
        M.conv(x, w, groups=2)


def _onnx_pool(xv, op, **attrs):
    import onnx.helper as oh
    import onnx.reference

    node = oh.make_node(op, ["X"], ["Y"], **attrs)
    g = oh.make_graph([node], "g", [oh.make_tensor_value_info("X", 1, xv.shape)],
                      [oh.make_tensor_value_info("Y", 1, None)])
    return onnx.reference.ReferenceEvaluator(oh.make_model(g)).run(None, {"X": xv})[0]


@pytest.mark.parametrize("kind", ["max", "avg"])
@pytest.mark.parametrize("count_pad", [False, True])
@pytest.mark.parametrize("hw,kernel,strides,pads,dil", [
    ((1, 1), (1, 1), (1, 1), (0, 0, 0, 0), (1, 1)),
    ((9, 7), (3, 3), (2, 2), (1, 1, 1, 1), (1, 1)),
    ((13, 5), (2, 3), (1, 2), (0, 0, 1, 1), (1, 1)),
    ((11, 11), (3, 2), (2, 1), (1, 0, 1, 0), (2, 2)),
])
def test_pool_matches_onnx(kind, count_pad, hw, kernel, strides, pads, dil, rng):
    pytest.importorskip("onnx")
    xv = rng.standard_normal((2, 3) + hw).astype("f4")
    attrs = dict(kernel_shape=kernel, strides=strides, pads=pads, dilations=dil)
    if kind == "avg":
        attrs["count_include_pad"] = int(count_pad)
    want = _onnx_pool(xv, "MaxPool" if kind == "max" else "AveragePool", **attrs)
    x = G.Variable("x", xv.shape)
    got = run(M.pool(x, kind, kernel, strides, pads, count_pad, dil), {x: xv})
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("shape", [(1,), (13,), (4, 1, 7)])
def test_elementwise_model_ops_match_numpy(shape, rng):
    from math import erf

    x, y = G.Variable("x", shape), G.Variable("y", shape[-1:])
    xv = rng.standard_normal(shape).astype("f4")
    yv = rng.standard_normal(shape[-1:]).astype("f4")
    feed = {x: xv, y: yv}
    np.testing.assert_array_equal(run(M.maximum(x, y), feed), np.maximum(xv, yv))
    np.testing.assert_array_equal(run(M.minimum(x, y), feed), np.minimum(xv, yv))
    for op, f in (("less", np.less), ("greater", np.greater), ("less_equal", np.less_equal),
                  ("greater_equal", np.greater_equal)):
        np.testing.assert_array_equal(run(M.compare(op, x, y), feed), f(xv, yv))
    np.testing.assert_array_equal(run(M.where(M.compare("less", x, y), x, y * 2.0), feed),
                                  np.where(xv < yv, xv, yv * 2))
    np.testing.assert_allclose(run(M.erf(x), feed), np.vectorize(erf)(xv), rtol=1e-6,
                               atol=1e-6)
    np.testing.assert_array_equal(run(M.abs(x), feed), np.abs(xv))
    got = run(M.cast(x * 10.0, "int64"), feed)
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, (xv * np.float32(10)).astype(np.int64))


def test_maximum_gradient_goes_to_the_larger_operand():
    x, y = G.Variable("x", (3,)), G.Variable("y", (3,))
    gx, gy = G.gradients(G.sum(M.maximum(x, y)), [x, y])
    a, b = np.array([1, 5, 2], "f4"), np.array([3, 4, 2], "f4")
    rx, ry = G.Executor([gx, gy]).run({x: a, y: b})
    np.testing.assert_array_equal(rx, [0, 1, 1])
    np.testing.assert_array_equal(ry, [1, 0, 0])


@pytest.mark.parametrize("idx,axis", [
    (np.array([0, -1, 3], "int64"), 0), (np.array([[2, 0], [1, 1]], "int64"), 1),
    (np.array(4, "int64"), 1)])
def test_gather_matches_numpy_take(idx, axis, rng):
    xv = rng.standard_normal((5, 7)).astype("f4")
    x = G.Variable("x", xv.shape)
    got = run(M.gather(x, G.constant(idx), axis), {x: xv})
    np.testing.assert_array_equal(got, np.take(xv, idx, axis=axis))


def test_gather_out_of_range_is_an_index_error(rng):
    x = G.Variable("x", (5, 7))
    with pytest.raises(tl.TensorlangError):
        run(M.gather(x, G.constant(np.array([9], "int64")), 0), {x: np.zeros((5, 7), "f4")})


def test_inference_ops_say_their_gradient_is_not_implemented():
    x, w = G.Variable("x", (1, 2, 5, 5)), G.Variable("w", (2, 1, 3, 3))
    y = G.sum(M.conv(x, w, groups=2))
    with pytest.raises(NotImplementedError, match="gradient of conv"):
        G.gradients(y, [x])


def test_the_general_convolution_is_said_at_tl_debug(monkeypatch, capsys):
    monkeypatch.setenv("TL_DEBUG", "1")
    x, w = G.Variable("x", (1, 8, 9, 9)), G.Variable("w", (8, 2, 3, 3))
    M.conv(x, w, groups=4)
    assert "take the general convolution, not conv2d" in capsys.readouterr().err
    M.conv(x, G.Variable("w1", (8, 8, 3, 3)), pads=(1, 1, 1, 1))     # conv2d: nothing said
    assert "general convolution" not in capsys.readouterr().err


def test_a_comparison_of_mixed_dtypes_has_numpys_result_type():
    x, y = G.Variable("x", (4,), "float32"), G.Variable("y", (4,), "int64")
    node = M.compare("less", x, y)
    xv, yv = np.array([0.5, 2, 3, -1], "f4"), np.array([1, 1, 3, 0])
    got = run(node, {x: xv, y: yv})
    assert node.dtype == got.dtype == np.result_type(xv, yv)
    np.testing.assert_array_equal(got, xv < yv)
