"""Kernels as shared libraries: `Module.export_library("k.so")` (TVM's name; also
`save("k.so")`) links the kernel's object file into a shared library for the host, with its
signature (the tensors' dtypes and shapes, the size parameters) in it as data;
`load_module("k.so")` loads it into another process — no tensorlang compiler needed there
beyond this module — as a callable that checks and binds numpy arrays as `tl.build`'s
modules do. The library is also an ordinary C library (`ctypes.CDLL`, or linked into a C
program with the header `save("k.h")` writes)."""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import tempfile

from .backends.abi import Status
from .backends.runtime import bind_arguments
from .errors import TensorlangError

SIGNATURE_SYMBOL = "tensorlang_signature"


_OPS = ("Add", "Sub", "Mul", "FloorDiv", "FloorMod", "Min", "Max")


def _encode(e) -> object:
    """A size expression as JSON data: an int, {"var": name}, or {"op": ..., "a", "b"}."""
    from .ir import expr as E

    if isinstance(e, E.Const):
        return int(e.value)
    if isinstance(e, E.Var):
        return {"var": e.name, "dtype": str(e.dtype)}
    if type(e).__name__ in _OPS:
        return {"op": type(e).__name__, "a": _encode(e.a), "b": _encode(e.b)}
    raise TensorlangError(f"export_library: the size expression {e} of an argument is not "
                          f"one a library records (sizes, constants and {', '.join(_OPS)})")


def _decode(d):
    from .ir import expr as E
    from .ir.dtype import DType, int64

    if isinstance(d, int):
        return E.Const(d, int64)
    if "var" in d:
        return E.Var(d["var"], DType(d["dtype"]))
    return getattr(E, d["op"])(_decode(d["a"]), _decode(d["b"]))


def signature(module) -> dict:
    """The kernel's calling convention as JSON data: per argument a tensor (its buffer's
    name, dtype and shape) or a scalar (a tl.var), the int64 parameters after the pointers,
    and the arguments the kernel writes — what `bind_arguments` checks a call against."""
    low = module.lowered
    args = []
    for buf, sv in zip(module._buffers, module._scalars):
        if sv is not None:
            args.append({"scalar": sv.name, "dtype": str(sv.dtype)})
        else:
            args.append({"tensor": buf.name, "dtype": str(buf.dtype),
                         "shape": [_encode(d) for d in buf.shape]})
    return {"version": 1, "name": low.name, "args": args,
            "params": [_encode(p) for p in low.params], "written": sorted(module.written)}


def export(module, path: str) -> None:
    """Link `module`'s object file and its signature into the shared library `path`."""
    if not module.target.is_host:
        raise TensorlangError(f"export_library: a shared library is made for the host only; "
                              f"this kernel is built for {module.target} (save its .o and "
                              "link it with that target's toolchain)")
    cc = os.environ.get("CC", "cc")
    sig = json.dumps(signature(module))
    with tempfile.TemporaryDirectory() as d:
        obj = os.path.join(d, "kernel.o")
        with open(obj, "wb") as f:
            f.write(module.code.object())
        src = os.path.join(d, "signature.c")
        with open(src, "w") as f:
            f.write(f"const char {SIGNATURE_SYMBOL}[] = {json.dumps(sig)};\n")
        cmd = [cc, "-shared", "-fPIC", "-O1", "-o", os.fspath(path), src, obj, "-lm",
               "-lpthread"]
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        except FileNotFoundError:
            raise TensorlangError(f"export_library: no C compiler {cc!r} to link the shared "
                                  "library (install gcc or set CC)") from None
        if r.returncode:
            raise TensorlangError(f"export_library: linking failed ({' '.join(cmd)}):\n"
                                  f"{r.stderr.strip()}")


def decode_signature(sig: dict) -> tuple[list, list, list, set]:
    """`signature`'s data back as (buffers, scalars, params, written): per argument a Buffer
    or None and a Var or None, the size parameters, the indices of the written arguments —
    what `bind_arguments` takes."""
    from .ir.dtype import DType
    from .ir.expr import Var
    from .ir.stmt import Buffer

    buffers = [None if "scalar" in a else Buffer(
        a["tensor"], tuple(_decode(d) for d in a["shape"]), DType(a["dtype"]))
        for a in sig["args"]]
    scalars = [Var(a["scalar"], DType(a["dtype"])) if "scalar" in a else None
               for a in sig["args"]]
    return buffers, scalars, [_decode(p) for p in sig["params"]], set(sig["written"])


class LoadedModule:
    """A kernel loaded from a shared library (`load_module`): called with numpy arrays
    (and ints for scalar arguments) in the order it was built with."""

    def __init__(self, path: str):
        try:
            self.lib = ctypes.CDLL(os.path.abspath(os.fspath(path)))
        except OSError as e:
            raise TensorlangError(f"load_module: cannot load {path}: {e}") from None
        try:
            raw = ctypes.c_char_p.in_dll(self.lib, SIGNATURE_SYMBOL)
        except ValueError:
            raise TensorlangError(f"load_module: {path} is not a tensorlang kernel library "
                                  f"(no {SIGNATURE_SYMBOL}); make it with "
                                  "Module.export_library") from None
        sig = json.loads(ctypes.string_at(ctypes.addressof(raw)).decode())
        self.signature = sig
        self.name = sig["name"]
        self.entry_name = self.name
        self._buffers, self._scalars, self._params, self._written = decode_signature(sig)
        fn = getattr(self.lib, self.name)
        fn.restype = ctypes.c_int32
        fn.argtypes = [ctypes.c_void_p] * sum(b is not None for b in self._buffers) + \
            [ctypes.c_int64] * len(self._params)
        self._fn = fn

    def __call__(self, *args) -> None:
        # the same checks and binding as a built module's call (`backends.runtime`)
        ptrs, values, _ = bind_arguments(self._buffers, self._scalars, self._params,
                                         self._written, args)
        status = self._fn(*ptrs, *values)
        if status != Status.OK:
            what = {Status.NO_MEMORY: "a temporary buffer could not be allocated",
                    Status.BAD_SIZES: "these sizes would read outside a tensor",
                    Status.INDEX: "an index read outside its tensor"}.get(status, "")
            if status == Status.NO_MEMORY:
                raise MemoryError(f"{self.name}: {what}")
            raise TensorlangError(f"{self.name}: the kernel refused the call (status "
                                  f"{int(status)}: {what})")

    def __repr__(self) -> str:
        return f"LoadedModule({self.name})"


def load_module(path) -> LoadedModule:
    """A kernel library made by `Module.export_library`, loaded and callable."""
    return LoadedModule(path)
