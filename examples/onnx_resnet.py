"""Import an ONNX model, look at its graph, run it, and compare with onnxruntime.

The model is ResNet-50 from the light zoo bundled in the onnx wheel, with random weights
(`tensorlang.onnx.zoo`); pass a path to use your own: python examples/onnx_resnet.py [model.onnx]
"""

import sys
import time

import numpy as np
import onnx

import tensorlang.graph as G
import tensorlang.onnx as TO
from tensorlang.onnx.zoo import light_model_path, model_input, with_random_weights

if len(sys.argv) > 1:
    model = onnx.load(sys.argv[1])
else:
    model = with_random_weights(onnx.load(light_model_path("resnet50")))
name, x = model_input(model)
print(f"{len(model.graph.node)} ONNX nodes, input {name} {x.shape}")

outputs, inputs = TO.from_onnx(model, shapes={name: x.shape})
ops = [n.op for n in G.topological_order(outputs)]
print(f"imported: {len(ops)} graph nodes; convolutions {ops.count('conv2d')}, "
      f"batch norms left after folding: {ops.count('sqrt')}")

t0 = time.perf_counter()
ex = G.Executor(outputs)
(y,) = ex.run({inputs[0]: x})
print(f"compiled and ran in {time.perf_counter() - t0:.1f} s; output {y.shape}")

t0 = time.perf_counter()
for _ in range(5):
    ex.run({inputs[0]: x})
print(f"tensorlang: {(time.perf_counter() - t0) / 5 * 1e3:.1f} ms a call")

try:
    import onnxruntime as ort
except ImportError:
    sys.exit("onnxruntime is not installed: no comparison")
s = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
(want,) = s.run(None, {name: x})
print(f"largest difference from onnxruntime: {np.abs(y - want).max():.2e} "
      f"(values up to {np.abs(want).max():.2e})")
