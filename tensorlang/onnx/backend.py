"""`Backend`: tensorlang as an ONNX backend (``onnx.backend.base.Backend``), so that
``onnx.backend.test.BackendTest(tensorlang.onnx.Backend, __name__)`` runs ONNX's own cases.

`Backend.prepare(model, device)` checks and keeps the model; `rep.run(inputs)` imports it for
the inputs' shapes (once per distinct set of shapes: symbolic dimensions take the fed sizes)
and runs the graph with `G.Executor` on the device's target, returning the outputs in the
model's declared types."""

from __future__ import annotations

import numpy as np

from ..errors import TensorlangError
from ..graph.executor import Executor
from .dtypes import ONNXImportError, ValueNeededError
from .importer import import_model, load_model

DEVICES = {"CPU": "llvm", "CUDA": "cuda"}
MAX_KNOWN_ELEMENTS = 64     # integer inputs taken by value when they decide shapes


def _base():
    from onnx.backend.base import Backend as OnnxBackend, BackendRep as OnnxRep

    return OnnxBackend, OnnxRep


class BackendRep(_base()[1]):
    """A prepared model: `run(inputs)` with a list in graph-input order or a dict by name."""

    def __init__(self, proto, device: str):
        self.proto, self.device = proto, device
        init = {i.name for i in proto.graph.initializer}
        self.input_names = [i.name for i in proto.graph.input if i.name not in init]
        self.input_types = {i.name: i.type.tensor_type.elem_type for i in proto.graph.input}
        self._plans: dict[tuple, tuple] = {}
        self._by_value: dict[tuple, tuple] = {}     # shapes -> inputs imported by value

    def _feed_arrays(self, inputs) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        """(the inputs as the graph takes them, the inputs as given)."""
        if isinstance(inputs, dict):
            missing = [n for n in self.input_names if n not in inputs]
            if missing:
                raise TensorlangError(f"run: missing input(s) {missing}; the model's inputs are "
                                      f"{self.input_names}")
            unknown = [n for n in inputs if n not in self.input_names]
            if unknown:
                raise TensorlangError(f"run: unknown input(s) {unknown}; the model's inputs "
                                      f"are {self.input_names}")
            arrays = {n: inputs[n] for n in self.input_names}
        else:
            inputs = list(inputs) if isinstance(inputs, (list, tuple)) else [inputs]
            if len(inputs) != len(self.input_names):
                raise TensorlangError(f"run: the model takes {len(self.input_names)} input(s) "
                                      f"{self.input_names}, got {len(inputs)}")
            arrays = dict(zip(self.input_names, inputs))
        out, given = {}, {}
        for n, a in arrays.items():
            a = given[n] = np.asarray(a)
            if a.dtype.kind in "iub" and a.dtype.name not in ("uint8", "int8"):
                a = a.astype(np.int64)      # (uint8 and int8 stay, as the importer's types)
            elif a.dtype.kind not in "iu" and a.dtype not in (np.float32, np.float64):
                raise TensorlangError(f"run: input {n} has dtype {a.dtype}; expected float32, "
                                      "float64 or an integer or bool type")
            out[n] = a
        return out, given

    def _plan(self, arrays, given):
        key = tuple((n, a.shape, a.dtype.str) for n, a in arrays.items())
        plan = self._plans.get(key)
        if plan is None and key in self._by_value:
            known = {n: given[n] for n in self._by_value[key]}
            vkey = key + tuple((n, v.tobytes()) for n, v in known.items())
            plan = self._plans.get(vkey)
            key = vkey
        if plan is None:
            shapes = {n: a.shape for n, a in arrays.items()}
            # empty inputs (no axes given, an empty set) hold no values: taken as constants,
            # in their own types (graphs hold no empty tensors)
            known = {n: given[n] for n, a in arrays.items() if a.size == 0}
            try:
                m = import_model(self.proto, shapes, known, checked=True)
            except ValueNeededError:
                # an input decides shapes (a Reshape's shape fed at run time): small integer
                # inputs become constants, and the model is imported per their values
                known = {n: given[n] for n, a in arrays.items()
                         if a.dtype == np.int64 and a.size <= MAX_KNOWN_ELEMENTS
                         or a.size <= 1}
                if not known:
                    raise
                m = import_model(self.proto, shapes, known, checked=True)
                self._by_value[key] = tuple(known)
                key = key + tuple((n, v.tobytes()) for n, v in known.items())
            for v, n in zip(m.inputs, m.input_names):
                if v.dtype != arrays[n].dtype.name:
                    raise TensorlangError(f"run: input {n} has dtype {arrays[n].dtype}; the "
                                          f"model declares {v.dtype}")
            plan = (m, Executor(m.outputs, target=DEVICES[self.device])
                    if self.device != "CPU" else Executor(m.outputs))
            self._plans[key] = plan
        return plan

    def run(self, inputs, **kwargs):
        arrays, given = self._feed_arrays(inputs)
        m, ex = self._plan(arrays, given)
        results = ex.run({v: arrays[n] for v, n in zip(m.inputs, m.input_names)})
        if not m.outputs:
            return []
        return m.cast_outputs(results)


class Backend(_base()[0]):
    """tensorlang as an ONNX backend (CPU through LLVM; CUDA where a GPU exists)."""

    @classmethod
    def supports_device(cls, device: str) -> bool:
        if device == "CPU":
            return True
        if device == "CUDA":
            from ..backends.cuda.module import _driver

            try:
                return _driver().Device.count() > 0
            except TensorlangError:
                return False
        return False

    @classmethod
    def prepare(cls, model, device: str = "CPU", **kwargs) -> BackendRep:
        if device not in DEVICES:
            raise ONNXImportError(f"prepare: device must be one of {sorted(DEVICES)}, got "
                                  f"{device!r}")
        proto = load_model(model)
        return BackendRep(proto, device)

    @classmethod
    def run_model(cls, model, inputs, device: str = "CPU", **kwargs):
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def run_node(cls, node, inputs, device: str = "CPU", outputs_info=None, **kwargs):
        raise NotImplementedError("run_node: run a model (onnx.helper.make_model) instead")
