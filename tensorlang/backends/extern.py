"""Python functions behind extern stages: ctypes callbacks with the extern C ABI.

A kernel calls an extern stage's function through the C ABI of `ir.stmt.ExternCall`
(pointers and extents of the inputs, then of the outputs; an int32 status). For a Python
function the backend makes a ctypes callback with that signature (`python_symbol`), which
wraps each pointer as a numpy array (no copy; inputs read-only), calls the function under
the GIL and returns 0. An exception never crosses into the kernel: the callback keeps it
for the calling thread (`take_error`) and returns 1, the kernel stops with
`Status.EXTERN`, and the caller (the driver) raises it, chained, from the kernel's call.

The kernel calls an extern stage at root, in the thread that called the kernel, never from
the thread pool's workers; callbacks of kernels running in several threads take turns for
the GIL. A callback lives as long as the process: JIT code may call it while any kernel
made with it exists, and the symbol table of the JIT (`llvm.add_symbol`) cannot forget a
name.
"""

from __future__ import annotations

import ctypes
import math
import threading

import numpy as np

from ..ir.stmt import ExternCall

# (id of the function, signature) -> (symbol, callback, function); the function is kept so
# that its id is not reused by another object
_THUNKS: dict[tuple, tuple[str, object, object]] = {}
_LOCK = threading.Lock()
_PENDING = threading.local()     # the exception of this thread's last failed callback
PYTHON_SYMBOL_PREFIX = "tl_py_extern_"


def take_error() -> BaseException | None:
    """The exception a Python extern function raised in this thread's last kernel call,
    cleared (None when there is none)."""
    err = getattr(_PENDING, "error", None)
    _PENDING.error = None
    return err


def _view(ptr: int, shape: tuple[int, ...], dtype: np.dtype, writeable: bool) -> np.ndarray:
    count = math.prod(shape)
    if count == 0 or not ptr:        # an empty tensor's pointer may point nowhere
        return np.empty(shape, dtype)
    raw = (ctypes.c_char * (count * dtype.itemsize)).from_address(ptr)
    arr = np.frombuffer(raw, dtype).reshape(shape)
    arr.flags.writeable = writeable
    return arr


def _callback(fn, n_inputs: int, sig: tuple[tuple[np.dtype, int], ...]):
    def call(*raw) -> int:
        try:
            arrays = []
            for k, (dtype, ndim) in enumerate(sig):
                ptr, shp = raw[2 * k], raw[2 * k + 1]
                shape = tuple(int(shp[d]) for d in range(ndim))
                arrays.append(_view(ptr, shape, dtype, k >= n_inputs))
            fn(*arrays)
            return 0
        except BaseException as e:   # noqa: BLE001 (it must not unwind through C frames)
            _PENDING.error = e
            return 1

    argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_int64)] * len(sig)
    return ctypes.CFUNCTYPE(ctypes.c_int32, *argtypes)(call)


def python_symbol(call: ExternCall) -> str:
    """The JIT symbol of a callback running `call.fn` (made once per function and
    signature)."""
    import llvmlite.binding as llvm

    sig = tuple((np.dtype(b.dtype.np), len(b.shape)) for b in call.buffers)
    key = (id(call.fn), len(call.inputs), sig)
    with _LOCK:
        got = _THUNKS.get(key)
        if got is None:
            name = f"{PYTHON_SYMBOL_PREFIX}{len(_THUNKS)}"
            thunk = _callback(call.fn, len(call.inputs), sig)
            llvm.add_symbol(name, ctypes.cast(thunk, ctypes.c_void_p).value)
            got = _THUNKS[key] = (name, thunk, call.fn)
    return got[0]
