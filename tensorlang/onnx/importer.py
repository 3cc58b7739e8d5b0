"""ONNX models to graph nodes: `from_onnx`.

The importer walks the model's nodes in order with an environment of values by name. A
value is either a numpy array known at import (initializers, `Constant`, and every node
whose inputs are all known: shape computations such as Shape -> Gather -> Concat -> Reshape
fold here, evaluated by ONNX's own reference implementation) or a graph node. Each operator
type has one converter (`converters.CONVERTERS`); an operator without one is a
`UnsupportedOperatorError` naming it, the node and the supported list.

Types: float32, float64, uint8 and int8 stay (the last two carry quantized data: QuantizeLinear,
MatMulInteger, QLinearMatMul); the other integer types and bool are int64 inside the graph
(their values are exact there) and the declared type again at the outputs
(`ModelImport.cast_outputs`);
float16, bfloat16, strings and complex numbers are refused, naming the tensor.
"""

from __future__ import annotations

from dataclasses import dataclass, field
import os

import numpy as np

from ..errors import TensorlangError
from .. import graph as G
from ..graph.node import Node
from .converters import CONVERTERS, fold
from . import quantized  # noqa: F401  (registers the quantized operators' converters)
from .dtypes import (
    _TYPES, ONNXImportError, UnsupportedOperatorError, ValueNeededError, as_graph_array,
    graph_dtype,
)


def load_model(model):
    """A ModelProto from a ModelProto, bytes or a path, checked by onnx.checker."""
    import onnx

    if isinstance(model, onnx.ModelProto):
        proto = model
    elif isinstance(model, (bytes, bytearray)):
        try:
            proto = onnx.load_from_string(bytes(model))
        except Exception as e:         # protobuf's DecodeError and friends
            raise ONNXImportError(f"from_onnx: the bytes are not an ONNX model ({e})") from None
    elif isinstance(model, (str, os.PathLike)):
        if not os.path.isfile(model):
            raise ONNXImportError(f"from_onnx: no such file: {model}")
        try:
            proto = onnx.load(os.fspath(model))
        except Exception as e:
            raise ONNXImportError(f"from_onnx: {model} is not a readable ONNX model "
                                  f"({type(e).__name__}: {e})") from None
    else:
        raise ONNXImportError(f"from_onnx: model must be an onnx.ModelProto, bytes or a path, "
                              f"got {type(model).__name__}")
    try:
        onnx.checker.check_model(proto)
    except Exception as e:
        raise ONNXImportError(f"from_onnx: the model is not valid ONNX: {e}") from None
    return proto


@dataclass
class Context:
    """What a converter sees: the default domain's opset, consumers per value name, and the
    per-import record of convolutions (for batch-norm folding)."""

    opset: int
    consumers: dict[str, int]
    convs: dict[str, tuple] = field(default_factory=dict)


@dataclass
class ModelImport:
    """The result of importing: graph nodes of the outputs, the input Variables, and the
    declared output types."""

    outputs: list
    inputs: list
    output_names: list[str]
    output_dtypes: list[str]
    input_names: list[str]

    def cast_outputs(self, arrays) -> list[np.ndarray]:
        """The executor's results in the model's declared output types."""
        out = []
        for a, dt in zip(arrays, self.output_dtypes):
            a = np.asarray(a)
            out.append((a != 0) if dt == "bool" else a.astype(dt, copy=False))
        return out


def _input_shape(vi, shapes: dict, name: str):
    dims = vi.type.tensor_type.shape.dim if vi.type.tensor_type.HasField("shape") else None
    if name in shapes:
        given = tuple(int(s) for s in shapes[name])
        if dims is not None and len(dims) != len(given):
            raise ONNXImportError(f"from_onnx: shapes[{name!r}] = {given} has {len(given)} "
                                  f"dimensions; the model's input has {len(dims)}")
        for d, g in zip(dims or (), given):
            if d.HasField("dim_value") and d.dim_value != g:
                raise ONNXImportError(f"from_onnx: shapes[{name!r}] = {given} differs from "
                                      f"the model's fixed dimension {d.dim_value}")
        return given
    if dims is None:
        return None
    out = []
    for d in dims:
        if d.HasField("dim_value") and d.dim_value > 0:
            out.append(int(d.dim_value))
        elif d.HasField("dim_param") and d.dim_param in shapes:
            out.append(int(shapes[d.dim_param]))
        else:
            return None                # symbolic: the Variable takes the fed array's shape
    return tuple(out)


def import_model(model, shapes=None, known=None, checked: bool = False) -> ModelImport:
    """The model's graph as tensorlang graph nodes (see the module's docstring). `shapes`
    maps input names or symbolic dimension names to sizes; `known` maps input names to
    their values, taken as constants (inputs that decide shapes: a Reshape's shape or a
    reduction's axes fed at run time). `checked`: `model` is a ModelProto that
    `load_model` returned (checked already: the checker serialises the whole model)."""
    import onnx

    proto = model if checked and isinstance(model, onnx.ModelProto) else load_model(model)
    shapes = dict(shapes or {})
    opset = next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), 1)
    g = proto.graph
    env: dict[str, object] = {}
    for init in g.initializer:
        env[init.name] = onnx.numpy_helper.to_array(init)   # its own dtype until used
    inputs, input_names = [], []
    known = dict(known or {})
    for vi in g.input:
        if vi.name in known:
            env[vi.name] = np.asarray(known[vi.name])
            continue
        if vi.name in env:
            continue                       # an initializer listed as an input (old models)
        tt = vi.type.tensor_type
        if not vi.type.HasField("tensor_type"):
            raise ONNXImportError(f"from_onnx: input {vi.name} is not a tensor")
        dtype = graph_dtype(tt.elem_type, f"input {vi.name}")
        v = G.Variable(vi.name, _input_shape(vi, shapes, vi.name), dtype)
        env[vi.name] = v
        inputs.append(v)
        input_names.append(vi.name)
    consumers: dict[str, int] = {}
    for n in g.node:
        for i in n.input:
            consumers[i] = consumers.get(i, 0) + 1
    for o in g.output:
        consumers[o.name] = consumers.get(o.name, 0) + 1
    ctx = Context(opset, consumers)
    for k, n in enumerate(g.node):
        label = n.name or f"#{k}"
        if n.domain not in ("", "ai.onnx"):
            raise UnsupportedOperatorError(
                f"from_onnx: node {label} is {n.domain}.{n.op_type}: only the default ONNX "
                "domain is supported")
        ins = []
        for i in n.input:
            if i == "":
                ins.append(None)
            elif i in env:
                ins.append(env[i])
            else:
                raise ONNXImportError(f"from_onnx: node {label} ({n.op_type}) reads {i}, "
                                      "which no earlier node, input or initializer defines")
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in n.attribute}
        if n.op_type not in CONVERTERS:
            raise UnsupportedOperatorError(
                f"from_onnx: operator {n.op_type} (node {label}) is not supported; supported: "
                f"{', '.join(sorted(CONVERTERS))}")
        try:
            if all(i is None or isinstance(i, np.ndarray) for i in ins) and \
                    n.op_type not in ("RandomNormal", "RandomUniform"):
                outs = fold(n, ins, opset)
            else:
                outs = CONVERTERS[n.op_type](ctx, n, ins, attrs)
        except ValueNeededError as e:
            raise ValueNeededError(f"from_onnx: node {label} ({n.op_type}): {e}") from None
        except ONNXImportError:
            raise
        except NotImplementedError as e:
            raise UnsupportedOperatorError(f"from_onnx: node {label} ({n.op_type}): {e}") \
                from None
        except (TensorlangError, ValueError) as e:     # shapes that do not fit, named
            raise ONNXImportError(f"from_onnx: node {label} ({n.op_type}): {e}") from None
        for name, v in zip(n.output, outs):
            if name:
                env[name] = v
    outputs, names, dtypes = [], [], []
    for o in g.output:
        if o.name not in env:
            raise ONNXImportError(f"from_onnx: output {o.name} is never computed")
        v = env[o.name]
        if isinstance(v, np.ndarray):
            v = G.constant(as_graph_array(v, f"output {o.name}"))
        elif not isinstance(v, Node):
            raise ONNXImportError(f"from_onnx: output {o.name} is not a tensor")
        et = o.type.tensor_type.elem_type
        outputs.append(v)
        names.append(o.name)
        dtypes.append(_TYPES[et][0] if et in _TYPES else v.dtype)
    return ModelImport(outputs, inputs, names, dtypes, input_names)


def from_onnx(model, shapes=None):
    """(graph nodes of the model's outputs, `G.Variable`s of its inputs) for an ONNX model
    (a ModelProto, bytes or a path). Symbolic dimensions take the fed arrays' sizes unless
    `shapes` fixes them: ``shapes={"batch": 1, "seq": 128}`` or ``{"input_ids": (1, 128)}``.
    Outputs of integer or bool type are int64 nodes (see `Backend` for the declared types)."""
    m = import_model(model, shapes)
    return m.outputs, m.inputs
