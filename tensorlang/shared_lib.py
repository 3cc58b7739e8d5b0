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

import numpy as np

from .backends.abi import Status
from .errors import TensorlangError

SIGNATURE_SYMBOL = "tensorlang_signature"


def signature(lowered) -> dict:
    """The kernel's calling convention as JSON-able data: its arguments in order (tensors
    and scalars), each tensor's dtype and shape (ints, or the name of a size parameter where
    a dimension is one), the int64 parameters after the pointers."""
    from .ir.expr import Const, Var

    params = [p.name for p in lowered.params]
    bufs = []
    for b in lowered.buffers:
        dims = []
        for d in b.shape:
            if isinstance(d, Const):
                dims.append(int(d.value))
            elif isinstance(d, Var) and d.name in params:
                dims.append(d.name)
            else:
                dims.append(str(d))          # an expression: checked by the kernel itself
        bufs.append({"name": b.name, "dtype": str(b.dtype), "shape": dims})
    args = []
    for a in lowered.args:
        if isinstance(a, Var):
            args.append({"scalar": a.name})
        else:
            args.append({"tensor": len([x for x in args if "tensor" in x])})
    return {"version": 1, "name": lowered.name, "buffers": bufs, "params": params,
            "args": args}


def export(module, path: str) -> None:
    """Link `module`'s object file and its signature into the shared library `path`."""
    if not module.target.is_host:
        raise TensorlangError(f"export_library: a shared library is made for the host only; "
                              f"this kernel is built for {module.target} (save its .o and "
                              "link it with that target's toolchain)")
    cc = os.environ.get("CC", "cc")
    sig = json.dumps(signature(module.lowered))
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
        fn = getattr(self.lib, self.name)
        fn.restype = ctypes.c_int32
        fn.argtypes = [ctypes.c_void_p] * len(sig["buffers"]) + \
            [ctypes.c_int64] * len(sig["params"])
        self._fn = fn

    def __call__(self, *args) -> None:
        sig = self.signature
        if len(args) != len(sig["args"]):
            raise TensorlangError(f"{self.name}: expected {len(sig['args'])} arguments, got "
                                  f"{len(args)}")
        values: dict[str, int] = {}
        ptrs = []
        for k, (a, spec) in enumerate(zip(args, sig["args"])):
            if "scalar" in spec:
                if isinstance(a, bool) or not isinstance(a, (int, np.integer)):
                    raise TensorlangError(f"{self.name}: argument {k} ({spec['scalar']}) must "
                                          f"be an int, got {type(a).__name__}")
                values[spec["scalar"]] = int(a)
                continue
            b = sig["buffers"][spec["tensor"]]
            if not isinstance(a, np.ndarray):
                raise TensorlangError(f"{self.name}: argument {k} ({b['name']}) must be a "
                                      f"numpy array, got {type(a).__name__}")
            if str(a.dtype) != b["dtype"]:
                raise TensorlangError(f"{self.name}: argument {k} ({b['name']}): expected "
                                      f"dtype {b['dtype']}, got {a.dtype}")
            if a.ndim != len(b["shape"]) or not a.flags.c_contiguous:
                raise TensorlangError(f"{self.name}: argument {k} ({b['name']}): expected a "
                                      f"C-contiguous array of {len(b['shape'])} dimensions "
                                      f"{b['shape']}, got shape {a.shape}")
            for d, (want, got) in enumerate(zip(b["shape"], a.shape)):
                if isinstance(want, int) and want != got:
                    raise TensorlangError(f"{self.name}: argument {k} ({b['name']}), "
                                          f"dimension {d}: expected {want}, got {got}")
                if isinstance(want, str) and want in sig["params"]:
                    if values.setdefault(want, got) != got:
                        raise TensorlangError(f"{self.name}: size {want} is {values[want]} "
                                              f"elsewhere but {got} in argument {k} "
                                              f"({b['name']}), dimension {d}")
            ptrs.append(a.ctypes.data)
        missing = [p for p in sig["params"] if p not in values]
        if missing:
            raise TensorlangError(f"{self.name}: cannot tell the size(s) {missing} from the "
                                  "arguments' shapes")
        status = self._fn(*ptrs, *[values[p] for p in sig["params"]])
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
