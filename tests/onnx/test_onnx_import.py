"""ONNX import (`tensorlang.onnx`): the API, errors, batch-norm folding, a BERT-style encoder
with symbolic sizes, and a sample of ONNX's own node cases (all of them: the slow step)."""

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper as oh, numpy_helper  # noqa: E402

import tensorlang as tl  # noqa: E402
import tensorlang.graph as G  # noqa: E402
import tensorlang.onnx as TO  # noqa: E402
from tensorlang.onnx.conformance import in_scope_cases, ours, run_case  # noqa: E402
from tensorlang.onnx.zoo import bert_layer  # noqa: E402


def _init(name, a):
    return numpy_helper.from_array(np.asarray(a), name)


def _ort(model, feed):
    # written at IR 8 (what the opsets of these models need): onnx's helper writes its own
    # newest IR version, which an older onnxruntime refuses (1.30 reads up to 13)
    model = type(model).FromString(model.SerializeToString())
    model.ir_version = min(model.ir_version, 8)
    s = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return s.run(None, feed)


def small_cnn(rng, n="N"):
    """Conv -> BatchNormalization -> Relu -> MaxPool (padded) -> Flatten -> Gemm -> Softmax,
    with a symbolic batch."""
    nodes = [
        oh.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1], strides=[1, 1]),
        oh.make_node("BatchNormalization", ["c", "g", "be", "mu", "var"], ["bn"],
                     epsilon=1e-5),
        oh.make_node("Relu", ["bn"], ["r"]),
        oh.make_node("MaxPool", ["r"], ["p"], kernel_shape=[3, 3], strides=[2, 2],
                     pads=[1, 1, 1, 1]),
        oh.make_node("Flatten", ["p"], ["f"]),
        oh.make_node("Gemm", ["f", "fw", "fb"], ["l"], transB=1),
        oh.make_node("Softmax", ["l"], ["y"], axis=1),
    ]
    inits = [_init("w", rng.standard_normal((8, 3, 3, 3)).astype("f4") * 0.3),
             _init("b", rng.standard_normal(8).astype("f4")),
             _init("g", rng.uniform(0.5, 1.5, 8).astype("f4")),
             _init("be", rng.standard_normal(8).astype("f4")),
             _init("mu", rng.standard_normal(8).astype("f4")),
             _init("var", rng.uniform(0.5, 2, 8).astype("f4")),
             _init("fw", rng.standard_normal((10, 8 * 5 * 5)).astype("f4") * 0.1),
             _init("fb", rng.standard_normal(10).astype("f4"))]
    g = oh.make_graph(nodes, "cnn", [oh.make_tensor_value_info("x", TensorProto.FLOAT,
                                                               [n, 3, 9, 9])],
                      [oh.make_tensor_value_info("y", TensorProto.FLOAT, [n, 10])], inits)
    return oh.make_model(g, opset_imports=[oh.make_opsetid("", 13)])


def test_from_onnx_gives_nodes_and_variables_matching_onnxruntime(rng):
    model = small_cnn(rng)
    outs, ins = TO.from_onnx(model, shapes={"N": 2})
    assert [v.name for v in ins] == ["x"] and ins[0].shape == (2, 3, 9, 9)
    xv = rng.standard_normal((2, 3, 9, 9)).astype("f4")
    (got,) = G.Executor(outs).run({ins[0]: xv})
    (want,) = _ort(model, {"x": xv})
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)


def test_batch_norm_folds_into_the_convolution(rng):
    outs, _ = TO.from_onnx(small_cnn(rng), shapes={"N": 1})
    ops = [n.op for n in G.topological_order(outs)]
    assert ops.count("conv2d") == 1
    assert "sqrt" not in ops                # no batch norm left: its scale is in the weights


def test_a_symbolic_size_left_open_is_a_variable_of_any_shape(rng):
    g = oh.make_graph([oh.make_node("Relu", ["x"], ["r"]), oh.make_node("Add", ["r", "x"], ["y"])],
                      "g", [oh.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])],
                      [oh.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4])])
    (y,), (x,) = TO.from_onnx(oh.make_model(g))
    assert x.shape is None
    xv = rng.standard_normal((5, 4)).astype("f4")
    np.testing.assert_array_equal(G.Executor([y]).run({x: xv})[0], np.maximum(xv, 0) + xv)
    # an operator that needs the size says how to give it
    with pytest.raises(TO.ONNXImportError, match="shapes="):
        TO.from_onnx(small_cnn(rng))


def test_backend_runs_several_batch_sizes_from_one_prepare(rng):
    model = small_cnn(rng)
    rep = TO.Backend.prepare(model)
    for n in (1, 3, 2):
        xv = rng.standard_normal((n, 3, 9, 9)).astype("f4")
        (got,) = rep.run([xv])
        np.testing.assert_allclose(got, _ort(model, {"x": xv})[0], rtol=1e-4, atol=1e-6)
    (got,) = rep.run({"x": xv})
    assert got.shape == (2, 10)


@pytest.mark.slow
def test_a_bert_style_encoder_matches_onnxruntime_at_several_sizes(rng):
    model = bert_layer(rng)
    rep = TO.Backend.prepare(model)
    for b, s in ((1, 8), (2, 5), (3, 1), (1, 13)):
        xv = rng.standard_normal((b, s, 32)).astype("f4")
        (got,) = rep.run([xv])
        np.testing.assert_allclose(got, _ort(model, {"x": xv})[0], rtol=1e-4, atol=1e-5)


# ------------------------------------------------------------------------- errors
def test_an_unsupported_operator_is_named_with_its_node_and_the_supported_list():
    node = oh.make_node("Einsum", ["a", "b"], ["y"], name="contract", equation="ij,jk->ik")
    g = oh.make_graph([node], "g", [oh.make_tensor_value_info("a", TensorProto.FLOAT, [2, 2]),
                                    oh.make_tensor_value_info("b", TensorProto.FLOAT, [2, 2])],
                      [oh.make_tensor_value_info("y", TensorProto.FLOAT, [2, 2])])
    with pytest.raises(TO.UnsupportedOperatorError) as e:
        TO.from_onnx(oh.make_model(g))
    msg = str(e.value)
    assert "Einsum" in msg and "contract" in msg and "Conv" in msg and "MatMul" in msg
    assert isinstance(e.value, tl.TensorlangError)


def test_unreadable_models_are_clear_errors(tmp_path, rng):
    data = small_cnn(rng).SerializeToString()
    for bad in (data[: len(data) // 2], b"not a model"):
        with pytest.raises(TO.ONNXImportError, match="from_onnx"):
            TO.from_onnx(bad)
    with pytest.raises(TO.ONNXImportError, match="no such file"):
        TO.from_onnx(str(tmp_path / "missing.onnx"))
    with pytest.raises(TO.ONNXImportError, match="ModelProto, bytes or a path"):
        TO.from_onnx(42)
    p = tmp_path / "m.onnx"
    p.write_bytes(data)
    outs, ins = TO.from_onnx(str(p), shapes={"N": 1})
    assert outs[0].shape == (1, 10)


def test_wrong_inputs_are_clear_errors(rng):
    rep = TO.Backend.prepare(small_cnn(rng, n=2))
    x = rng.standard_normal((2, 3, 9, 9)).astype("f4")
    with pytest.raises(tl.TensorlangError, match="takes 1 input"):
        rep.run([x, x])
    with pytest.raises(tl.TensorlangError, match="missing input"):
        rep.run({})
    with pytest.raises(tl.TensorlangError, match="unknown input"):
        rep.run({"x": x, "z": x})
    with pytest.raises(tl.TensorlangError, match="fixed dimension"):
        rep.run([rng.standard_normal((3, 3, 9, 9)).astype("f4")])
    with pytest.raises(tl.TensorlangError, match="float16"):
        rep.run([x.astype("f2")])
    with pytest.raises(tl.TensorlangError, match="model declares float32"):
        rep.run([x.astype("f8")])


# ------------------------------------------------------------ ONNX's own node cases
SAMPLE_OPS = ("Relu", "Conv", "MaxPool", "AveragePool", "Gemm", "Softmax", "Reshape",
              "Transpose", "Concat", "Gather", "Where", "Clip", "ReduceMean", "Slice",
              "LayerNormalization", "BatchNormalization", "Erf", "Expand", "Pad", "Cast")


def _cases(ops=None):
    return [pytest.param(c, id=c.name) for c in in_scope_cases(ops)]


@pytest.mark.parametrize("case", _cases(SAMPLE_OPS)[::16])
def test_onnx_node_cases_sample(case):
    kind, detail = run_case(case)
    assert kind in ("match", "refused"), f"{case.name}: {kind}: {detail}"
    if kind == "refused":
        assert detail.strip(), case.name        # the refusal says why


@pytest.mark.slow
def test_every_onnx_node_case_in_scope_matches_or_is_refused_clearly():
    counts = {"match": 0, "refused": 0}
    bad = []
    matched_ours = total_ours = 0
    for c in in_scope_cases():
        kind, detail = run_case(c)
        if kind in counts:
            counts[kind] += 1
        else:
            bad.append(f"{c.name}: {kind}: {detail}")
        if ours(c):
            total_ours += 1
            matched_ours += kind == "match"
    assert not bad, "\n".join(bad)
    assert matched_ours >= 0.95 * total_ours, (matched_ours, total_ours)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["shufflenet", "squeezenet", "bvlc_alexnet"])
def test_light_zoo_models_with_random_weights_match_onnxruntime(name):
    from tensorlang.onnx.zoo import light_model_path, logits, model_input, with_random_weights

    model = logits(with_random_weights(onnx.load(light_model_path(name))))
    inp, x = model_input(model)
    (got,) = TO.Backend.prepare(model).run([x])
    (want,) = _ort(model, {inp: x})
    assert got.shape == want.shape
    assert np.abs(got - want).max() <= 1e-4 * np.abs(want).max()


def test_tensorlang_run_reports_outputs_and_kernels(tmp_path, rng, capsys):
    from tensorlang.cli import main

    path = tmp_path / "cnn.onnx"
    onnx.save(small_cnn(rng, n=2), str(path))
    xf = tmp_path / "x.npy"
    np.save(xf, np.ones((2, 3, 9, 9), "f4"))
    assert main(["run", str(path), "--input", f"x={xf}", "--profile", "--runs", "2"]) == 0
    out = capsys.readouterr().out
    assert "output y: float32[2, 10]" in out and "kernels, slowest first" in out
    assert "conv2d" in out and "%" in out
    with pytest.raises(tl.TensorlangError, match="unknown input"):
        main(["run", str(path), "--input", f"z={xf}"])
    with pytest.raises(tl.TensorlangError, match="NAME=FILE.npy"):
        main(["run", str(path), "--input", "x"])
