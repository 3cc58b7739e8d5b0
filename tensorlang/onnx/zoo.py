"""Models for tests and benchmarks.

The light model zoo bundled in the `onnx` wheel (AlexNet, DenseNet-121, Inception v1/v2,
ResNet-50, ShuffleNet, SqueezeNet, VGG-19, ZFNet-512) with random weights: the bundled files
make every weight with ConstantOfShape (one value per tensor); `with_random_weights`
replaces them by initializers drawn at the scale of each layer's fan-in, so that results
differ per input and per channel. `bert_layer`: a BERT-style encoder layer written with
onnx.helper, its batch and sequence symbolic."""

from __future__ import annotations

import os

import numpy as np

LIGHT_MODELS = ("bvlc_alexnet", "densenet121", "inception_v1", "inception_v2", "resnet50",
                "shufflenet", "squeezenet", "vgg19", "zfnet512")


def light_model_path(name: str) -> str:
    import onnx

    if name not in LIGHT_MODELS:
        from .dtypes import ONNXImportError

        raise ONNXImportError(f"light model: expected one of {LIGHT_MODELS}, got {name!r}")
    return os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light",
                        f"light_{name}.onnx")


def with_random_weights(model, seed: int = 0):
    """A copy of `model` whose ConstantOfShape weights are random initializers: 4-D and
    2-D tensors normal with variance 2 / fan-in, 1-D ones (biases, batch-norm parameters)
    uniform in [0.5, 1.5] (a positive variance where a batch norm reads them)."""
    import onnx
    from onnx import numpy_helper

    rng = np.random.default_rng(seed)
    m = onnx.ModelProto()
    m.CopyFrom(model)
    inits = {i.name: numpy_helper.to_array(i) for i in m.graph.initializer}
    keep, new = [], []
    for n in m.graph.node:
        if n.op_type == "ConstantOfShape" and n.input[0] in inits:
            shape = tuple(int(s) for s in inits[n.input[0]])
            if len(shape) >= 2:
                fan_in = int(np.prod(shape[1:]))
                w = rng.standard_normal(shape) * np.sqrt(2.0 / max(fan_in, 1))
            else:
                w = rng.uniform(0.5, 1.5, shape)
            new.append(numpy_helper.from_array(w.astype(np.float32), n.output[0]))
        else:
            keep.append(n)
    del m.graph.node[:]
    m.graph.node.extend(keep)
    m.graph.initializer.extend(new)
    m.ir_version = max(m.ir_version, 4)     # initializers that are not graph inputs
    return m


def model_input(model, seed: int = 1) -> tuple[str, np.ndarray]:
    """The name of the model's one data input and a random batch-1 array for it."""
    init = {i.name for i in model.graph.initializer}
    (vi,) = [i for i in model.graph.input if i.name not in init]
    shape = [d.dim_value or 1 for d in vi.type.tensor_type.shape.dim]
    return vi.name, np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def logits(model):
    """A copy of `model` whose output is the input of its final Softmax (random weights
    often saturate the probabilities; logits compare every value)."""
    import onnx

    m = onnx.ModelProto()
    m.CopyFrom(model)
    last = m.graph.node[-1]
    if last.op_type != "Softmax" or last.output[0] != m.graph.output[0].name:
        return m
    src = last.input[0]
    del m.graph.node[-1]
    out = onnx.ValueInfoProto()
    out.CopyFrom(m.graph.output[0])          # a softmax keeps its input's shape and type
    out.name = src
    del m.graph.output[:]
    m.graph.output.extend([out])
    return m


def bert_layer(rng, d=32, heads=4, ff=64):
    """A BERT-style encoder layer with symbolic batch and sequence: attention (MatMul,
    Reshape with shapes computed from Shape, Transpose, Softmax), residuals, LayerNorm, a
    GELU feed-forward (Erf)."""
    from onnx import TensorProto, helper as oh, numpy_helper

    def _initializer(name, a):
        return numpy_helper.from_array(np.asarray(a), name)

    hd = d // heads
    W = {k: _initializer(k, rng.standard_normal(s).astype("f4") * 0.2) for k, s in (
        ("wq", (d, d)), ("wk", (d, d)), ("wv", (d, d)), ("wo", (d, d)), ("w1", (d, ff)),
        ("w2", (ff, d)))}
    B = {k: _initializer(k, rng.standard_normal(s).astype("f4") * 0.1) for k, s in (
        ("bq", (d,)), ("b1", (ff,)), ("g1", (d,)), ("be1", (d,)), ("g2", (d,)), ("be2", (d,)))}
    c = {"heads_shape": _initializer("heads_shape", np.array([heads, hd], np.int64)),
         "zero": _initializer("zero", np.array([0], np.int64)),
         "two": _initializer("two", np.array([2], np.int64)),
         "dshape": _initializer("dshape", np.array([d], np.int64)),
         "scale": _initializer("scale", np.array(1 / np.sqrt(hd), np.float32)),
         "half": _initializer("half", np.array(0.5, np.float32)),
         "one": _initializer("one", np.array(1.0, np.float32)),
         "rsqrt2": _initializer("rsqrt2", np.array(1 / np.sqrt(2), np.float32))}
    n = oh.make_node
    nodes = [
        n("Shape", ["x"], ["xs"]), n("Slice", ["xs", "zero", "two"], ["bs"]),
        n("Concat", ["bs", "heads_shape"], ["hshape"], axis=0),
        n("Concat", ["bs", "dshape"], ["dshape2"], axis=0),
        n("MatMul", ["x", "wq"], ["q0"]), n("Add", ["q0", "bq"], ["q1"]),
        n("MatMul", ["x", "wk"], ["k1"]), n("MatMul", ["x", "wv"], ["v1"]),
        n("Reshape", ["q1", "hshape"], ["q2"]), n("Reshape", ["k1", "hshape"], ["k2"]),
        n("Reshape", ["v1", "hshape"], ["v2"]),
        n("Transpose", ["q2"], ["q"], perm=[0, 2, 1, 3]),
        n("Transpose", ["k2"], ["kt"], perm=[0, 2, 3, 1]),
        n("Transpose", ["v2"], ["v"], perm=[0, 2, 1, 3]),
        n("MatMul", ["q", "kt"], ["s0"]), n("Mul", ["s0", "scale"], ["s1"]),
        n("Softmax", ["s1"], ["p"], axis=-1), n("MatMul", ["p", "v"], ["a0"]),
        n("Transpose", ["a0"], ["a1"], perm=[0, 2, 1, 3]),
        n("Reshape", ["a1", "dshape2"], ["a2"]), n("MatMul", ["a2", "wo"], ["a3"]),
        n("Add", ["a3", "x"], ["r1"]),
        n("LayerNormalization", ["r1", "g1", "be1"], ["h1"], axis=-1, epsilon=1e-5),
        n("MatMul", ["h1", "w1"], ["f0"]), n("Add", ["f0", "b1"], ["f1"]),
        n("Mul", ["f1", "rsqrt2"], ["f2"]), n("Erf", ["f2"], ["f3"]),
        n("Add", ["f3", "one"], ["f4"]), n("Mul", ["f1", "f4"], ["f5"]),
        n("Mul", ["f5", "half"], ["f6"]), n("MatMul", ["f6", "w2"], ["f7"]),
        n("Add", ["f7", "h1"], ["r2"]),
        n("LayerNormalization", ["r2", "g2", "be2"], ["y"], axis=-1, epsilon=1e-5),
    ]
    g = oh.make_graph(nodes, "bert", [oh.make_tensor_value_info(
        "x", TensorProto.FLOAT, ["batch", "seq", d])], [oh.make_tensor_value_info(
            "y", TensorProto.FLOAT, ["batch", "seq", d])],
        list(W.values()) + list(B.values()) + list(c.values()))
    # IR version 8 (opset 17's): onnx.helper stamps its own newest, which an older
    # onnxruntime refuses ("Unsupported model IR version")
    return oh.make_model(g, opset_imports=[oh.make_opsetid("", 17)], ir_version=8)
