"""ONNX import: `from_onnx(model, shapes=None) -> (outputs, inputs)` gives graph nodes for a
model's outputs and `G.Variable`s for its inputs; `Backend` runs models as an ONNX backend
(``Backend.prepare(model).run(inputs)``), so ONNX's own test cases run against tensorlang.
Needs the `onnx` package (``pip install tensorlang[onnx]``)."""

try:
    import onnx as _onnx  # noqa: F401
except ImportError as e:             # pragma: no cover - the extra is not installed
    raise ImportError("tensorlang.onnx needs the onnx package: pip install "
                      "'tensorlang[onnx]'") from e

from .backend import Backend, BackendRep  # noqa: F401,E402
from .converters import CONVERTERS  # noqa: E402
from .dtypes import ONNXImportError, UnsupportedOperatorError  # noqa: F401,E402
from .importer import from_onnx, import_model  # noqa: F401,E402

SUPPORTED = tuple(sorted(CONVERTERS))
