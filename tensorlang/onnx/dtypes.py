"""The element types and errors of ONNX import."""

from __future__ import annotations

import numpy as np

from ..errors import TensorlangError


class ONNXImportError(TensorlangError):
    """A model that cannot be imported: unreadable, invalid, or using what is not supported;
    the message names the tensor or node."""


class UnsupportedOperatorError(ONNXImportError, NotImplementedError):
    """An operator type without a converter (the message lists the supported ones)."""


# ONNX's TensorProto element types -> (numpy dtype of the declared type, the graph's dtype)
# (uint8 and int8 stay: they carry quantized data to `G.matmul_integer`)
_TYPES = {1: ("float32", "float32"), 11: ("float64", "float64"), 7: ("int64", "int64"),
          6: ("int32", "int64"), 5: ("int16", "int64"), 3: ("int8", "int8"),
          2: ("uint8", "uint8"), 4: ("uint16", "int64"), 12: ("uint32", "int64"),
          9: ("bool", "int64")}


def graph_dtype(elem_type: int, what: str) -> str:
    """The graph's dtype for an ONNX element type (a clear error for those not supported)."""
    import onnx

    if elem_type not in _TYPES:
        name = onnx.TensorProto.DataType.Name(elem_type) if elem_type in \
            onnx.TensorProto.DataType.values() else str(elem_type)
        raise ONNXImportError(f"{what}: element type {name} is not supported (supported: "
                              "float32, float64, uint8, int8, and the other integer and bool "
                              "types, computed as int64)")
    return _TYPES[elem_type][1]


def as_graph_array(a: np.ndarray, what: str) -> np.ndarray:
    """A constant's array in a dtype the graph has (ints and bools as int64)."""
    a = np.asarray(a)
    if a.dtype.kind == "f" and a.dtype.itemsize in (4, 8):
        return a
    if a.dtype.kind in "iub":
        return a.astype(np.int64)
    raise ONNXImportError(f"{what}: dtype {a.dtype} is not supported (float32, float64, "
                          "integers, bool)")




class ValueNeededError(UnsupportedOperatorError):
    """An argument that decides shapes (a Reshape's shape, a reduction's axes) is computed at
    run time; `Backend` imports again with the model's small integer inputs as constants."""
