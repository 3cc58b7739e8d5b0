"""Quantized ONNX models (QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear,
MatMulInteger, QLinearMatMul, QLinearConv) against onnxruntime: models made by
onnxruntime's own quantizer and by hand. ONNX's node cases of these operators run with the
others (test_onnx_import.py)."""

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
quantization = pytest.importorskip("onnxruntime.quantization")
from onnx import TensorProto, helper as oh, numpy_helper  # noqa: E402

import tensorlang as tl  # noqa: E402
import tensorlang.onnx as TO  # noqa: E402

VNNI = tl.Target.parse("llvm").has_feature("avx512vnni")


def _ort(model, feed):
    model = type(model).FromString(model.SerializeToString())
    model.ir_version = min(model.ir_version, 8)
    s = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return s.run(None, feed)


def _mlp(rng, d_in, d_hidden, d_out):
    """x @ W1 + b1 -> Relu -> @ W2 + b2, float32, a symbolic batch."""
    init = [numpy_helper.from_array(a, n) for n, a in (
        ("w1", rng.standard_normal((d_in, d_hidden)).astype("f4") * 0.1),
        ("b1", rng.standard_normal(d_hidden).astype("f4") * 0.1),
        ("w2", rng.standard_normal((d_hidden, d_out)).astype("f4") * 0.1),
        ("b2", rng.standard_normal(d_out).astype("f4") * 0.1))]
    nodes = [oh.make_node("MatMul", ["x", "w1"], ["h"]), oh.make_node("Add", ["h", "b1"], ["hb"]),
             oh.make_node("Relu", ["hb"], ["r"]), oh.make_node("MatMul", ["r", "w2"], ["o"]),
             oh.make_node("Add", ["o", "b2"], ["y"])]
    g = oh.make_graph(nodes, "mlp", [oh.make_tensor_value_info("x", TensorProto.FLOAT,
                                                               ["N", d_in])],
                      [oh.make_tensor_value_info("y", TensorProto.FLOAT, ["N", d_out])], init)
    return oh.make_model(g, opset_imports=[oh.make_opsetid("", 17)])


@pytest.mark.parametrize("weights", ["QInt8", pytest.param("QUInt8", marks=pytest.mark.slow)])
def test_a_dynamically_quantized_mlp_matches_onnxruntime(weights, rng, tmp_path):
    src, dst = tmp_path / "mlp.onnx", tmp_path / "mlp_q.onnx"
    onnx.save(_mlp(rng, 96, 200, 37), src)
    quantization.quantize_dynamic(str(src), str(dst),
                                  weight_type=getattr(quantization.QuantType, weights))
    model = onnx.load(dst)
    ops = {n.op_type for n in model.graph.node}
    assert {"DynamicQuantizeLinear", "MatMulInteger"} <= ops, ops
    rep = TO.Backend.prepare(model)
    for batch in (1, 13, 64):
        x = rng.standard_normal((batch, 96)).astype("f4")
        (got,) = rep.run([x])
        (want,) = _ort(model, {"x": x})
        # onnxruntime's DynamicQuantizeLinear may round a value the other way (its scale
        # in another order of operations): one step of the activations' scale at most
        np.testing.assert_allclose(got, want, rtol=1e-3, atol=2e-2)
    kernels = [k for k in rep._plans.values()][-1][1].kernels
    assert any(any(n.op == "matmul_integer" for n in k.nodes) for k in kernels)


def _qlinear_matmul_model(a_dt, b_dt, m, k, n, rng):
    info = np.iinfo
    b = rng.integers(info(b_dt).min, int(info(b_dt).max) + 1, (k, n)).astype(b_dt)
    init = [numpy_helper.from_array(np.asarray(v, dt), name) for name, v, dt in (
        ("xs", 0.05, "f4"), ("xz", 7 if a_dt == "uint8" else -3, a_dt), ("b", b, b_dt),
        ("bs", 0.02, "f4"), ("bz", 0 if b_dt == "int8" else 128, b_dt),
        ("ys", 0.3, "f4"), ("yz", 128 if a_dt == "uint8" else 0, a_dt))]
    nodes = [oh.make_node("QuantizeLinear", ["x", "xs", "xz"], ["qa"]),
             oh.make_node("QLinearMatMul", ["qa", "xs", "xz", "b", "bs", "bz", "ys", "yz"],
                          ["qy"]),
             oh.make_node("DequantizeLinear", ["qy", "ys", "yz"], ["y"])]
    g = oh.make_graph(nodes, "qmm", [oh.make_tensor_value_info("x", TensorProto.FLOAT, [m, k])],
                      [oh.make_tensor_value_info("y", TensorProto.FLOAT, [m, n])], init)
    return oh.make_model(g, opset_imports=[oh.make_opsetid("", 13)])


QMM = [(a, b, *size) for a, b in (("uint8", "int8"), ("uint8", "uint8"), ("int8", "int8"))
       for size in ((1, 1, 1), (7, 33, 19), (64, 128, 48))]


@pytest.mark.parametrize("a_dt,b_dt,m,k,n", [
    c if i % 3 == 1 else pytest.param(*c, marks=pytest.mark.slow) for i, c in enumerate(QMM)])
def test_qlinear_matmul_matches_onnxruntime(a_dt, b_dt, m, k, n, rng):
    model = _qlinear_matmul_model(a_dt, b_dt, m, k, n, rng)
    x = rng.standard_normal((m, k)).astype("f4") * 3
    (got,) = TO.Backend.prepare(model).run([x])
    (want,) = _ort(model, {"x": x})
    # onnxruntime rescales in float32, ONNX's reference (and tensorlang) in float64: a
    # value at a rounding midpoint may land one step of y's scale apart
    assert np.abs(got - want).max() <= 0.3 * 1.001
    assert np.mean(got == want) > 0.95


def test_qlinear_conv_matches_onnxruntime(rng):
    w = rng.integers(-128, 128, (16, 8, 3, 3)).astype("int8")
    init = [numpy_helper.from_array(np.asarray(v, dt), name) for name, v, dt in (
        ("xs", 0.05, "f4"), ("xz", 10, "uint8"), ("w", w, "int8"),
        ("ws", rng.uniform(0.005, 0.02, 16), "f4"), ("wz", np.zeros(16), "int8"),
        ("ys", 0.5, "f4"), ("yz", 100, "uint8"), ("bias", rng.integers(-500, 500, 16), "i4"))]
    nodes = [oh.make_node("QuantizeLinear", ["x", "xs", "xz"], ["qx"]),
             oh.make_node("QLinearConv", ["qx", "xs", "xz", "w", "ws", "wz", "ys", "yz", "bias"],
                          ["qy"], pads=[1, 1, 1, 1], strides=[1, 1]),
             oh.make_node("DequantizeLinear", ["qy", "ys", "yz"], ["y"])]
    g = oh.make_graph(nodes, "qconv", [oh.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                 [2, 8, 11, 11])],
                      [oh.make_tensor_value_info("y", TensorProto.FLOAT, [2, 16, 11, 11])],
                      init)
    model = oh.make_model(g, opset_imports=[oh.make_opsetid("", 13)])
    x = rng.standard_normal((2, 8, 11, 11)).astype("f4")
    (got,) = TO.Backend.prepare(model).run([x])
    (want,) = _ort(model, {"x": x})
    assert np.abs(got - want).max() <= 0.5 * 1.001       # one step of y's scale
    assert np.mean(got == want) > 0.95


def test_quantized_types_that_are_not_computed_are_refused_clearly(rng):
    x = oh.make_tensor_value_info("x", TensorProto.FLOAT, [4])
    y = oh.make_tensor_value_info("y", TensorProto.UINT16, [4])
    g = oh.make_graph([oh.make_node("QuantizeLinear", ["x", "s", "z"], ["y"])], "q", [x], [y],
                      [numpy_helper.from_array(np.float32(0.1), "s"),
                       numpy_helper.from_array(np.uint16(3), "z")])
    model = oh.make_model(g, opset_imports=[oh.make_opsetid("", 21)])
    with pytest.raises(TO.UnsupportedOperatorError, match="QuantizeLinear"):
        TO.Backend.prepare(model).run([np.ones(4, "f4")])
