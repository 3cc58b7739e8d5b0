"""The light model zoo bundled in the `onnx` wheel (AlexNet, DenseNet-121, Inception v1/v2,
ResNet-50, ShuffleNet, SqueezeNet, VGG-19, ZFNet-512) with random weights, for tests and
benchmarks: the bundled files make every weight with ConstantOfShape (one value per
tensor); `with_random_weights` replaces them by initializers drawn at the scale of each
layer's fan-in, so that results differ per input and per channel."""

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
