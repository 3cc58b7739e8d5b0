"""`tensorlang run model.onnx`: run an ONNX model on given or random inputs, print its
outputs' shapes and a summary, and with `profile` each kernel's time and share beside the
operators fused into it (`Executor.profile`)."""

from __future__ import annotations

import time

import numpy as np

from ..errors import TensorlangError
from ..graph.executor import Executor
from .dtypes import _TYPES
from .importer import import_model, load_model

def _random_input(vi, rng) -> np.ndarray:
    tt = vi.type.tensor_type
    shape = [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else 1
             for d in tt.shape.dim]
    dtype = _TYPES[tt.elem_type][0] if tt.elem_type in _TYPES else "float32"
    if np.dtype(dtype).kind == "f":
        return rng.standard_normal(shape).astype(dtype)
    return rng.integers(0, 2, shape).astype(dtype)


def parse_inputs(specs: list[str]) -> dict[str, np.ndarray]:
    """`name=file.npy` pairs to arrays (a clear error naming a bad pair or file)."""
    out = {}
    for spec in specs:
        name, sep, path = spec.partition("=")
        if not sep or not name or not path:
            raise TensorlangError(f"run: --input must be NAME=FILE.npy, got {spec!r}")
        try:
            out[name] = np.load(path, allow_pickle=False)
        except (OSError, ValueError) as e:
            raise TensorlangError(f"run: cannot read {path} for input {name}: {e}") from None
    return out


def run_file(path: str, inputs: dict[str, np.ndarray] | None = None, profile: bool = False,
             runs: int = 10, seed: int = 0) -> str:
    """The report of running the model at `path` (see the module's docstring)."""
    proto = load_model(path)
    init = {i.name for i in proto.graph.initializer}
    graph_inputs = [vi for vi in proto.graph.input if vi.name not in init]
    inputs = dict(inputs or {})
    unknown = sorted(set(inputs) - {vi.name for vi in graph_inputs})
    if unknown:
        raise TensorlangError(f"run: unknown input(s) {unknown}; the model's inputs are "
                              f"{[vi.name for vi in graph_inputs]}")
    rng = np.random.default_rng(seed)
    arrays = {vi.name: inputs[vi.name] if vi.name in inputs else _random_input(vi, rng)
              for vi in graph_inputs}
    lines = [f"{path}: {len(proto.graph.node)} nodes; inputs " + ", ".join(
        f"{n} {a.dtype}{list(a.shape)}" + ("" if n in inputs else " (random)")
        for n, a in arrays.items())]
    t0 = time.perf_counter()
    m = import_model(proto, {n: a.shape for n, a in arrays.items()},
                     checked=True)
    ex = Executor(m.outputs)
    feed = {v: np.asarray(arrays[n]).astype(v.dtype) for v, n in zip(m.inputs, m.input_names)}
    results = m.cast_outputs(ex.run(feed))
    lines.append(f"compiled and ran in {time.perf_counter() - t0:.2f} s")
    t0 = time.perf_counter()
    for _ in range(runs):
        ex.run(feed)
    lines.append(f"{(time.perf_counter() - t0) / runs * 1e3:.3f} ms a run (mean of {runs})")
    for name, r in zip(m.output_names, results):
        lines.append(f"output {name}: {r.dtype}{list(r.shape)}"
                     + (f", mean {r.mean():.6g}" if r.size and r.dtype.kind in "fi" else ""))
    if profile:
        lines.append("kernels, slowest first:")
        lines += [f"  {k}" for k in ex.profile(feed, runs)]
    return "\n".join(lines)
