"""Binding numpy arrays to a kernel's C ABI: checks shapes, dtypes, layout, aliasing."""

from __future__ import annotations

import numpy as np

from ..errors import TensorlangError
from ..ir.expr import Const, Expr, Var
from ..ir.simplify import simplify
from ..ir.stmt import Buffer
from ..ir.visit import substitute


class DeviceArray:
    """A GPU array passed to a CUDA kernel without a copy: anything with
    `__cuda_array_interface__` (torch, cupy, numba) or a pycuda GPUArray, seen through the
    attributes the argument checks read (shape, dtype, layout, address)."""

    class _Flags:
        def __init__(self, contiguous: bool, writeable: bool):
            self.c_contiguous, self.writeable = contiguous, writeable

    def __init__(self, obj):
        iface = getattr(obj, "__cuda_array_interface__", None)
        if iface is not None:
            self.shape = tuple(int(x) for x in iface["shape"])
            self.dtype = np.dtype(iface["typestr"])
            strides = iface.get("strides")
            self.ptr, readonly = int(iface["data"][0]), bool(iface["data"][1])
        elif hasattr(obj, "gpudata") and hasattr(obj, "dtype"):  # pycuda GPUArray
            self.shape, self.dtype = tuple(obj.shape), np.dtype(obj.dtype)
            strides = tuple(obj.strides)
            self.ptr, readonly = int(obj.gpudata), False
        else:
            raise TensorlangError(f"expected a numpy array or a GPU array (an object with "
                                  f"__cuda_array_interface__), got {type(obj).__name__}")
        self.ndim = len(self.shape)
        self.nbytes = int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize
        c_strides, step = [], self.dtype.itemsize
        for n in reversed(self.shape):
            c_strides.append(step)
            step *= n
        contiguous = strides is None or tuple(strides) == tuple(reversed(c_strides)) or \
            self.nbytes == 0
        self.flags = DeviceArray._Flags(contiguous, not readonly)


def aligned_empty(shape, dtype, align: int = 64) -> np.ndarray:
    """An uninitialised C-contiguous array whose data starts on an `align`-byte boundary.
    numpy's own arrays start 16 bytes past one, so a 64-byte vector of a row straddles two
    cache lines, which slows a memory-bound row kernel such as layer norm.
    The graph executor allocates its intermediates and outputs this way."""
    dtype = np.dtype(dtype)
    n = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    buf = np.empty(n + align, np.uint8)
    off = (-buf.ctypes.data) % align
    return buf[off:off + n].view(dtype).reshape(shape)


def _overlap(a, b) -> bool:
    if isinstance(a, np.ndarray) and isinstance(b, np.ndarray):
        return np.may_share_memory(a, b)
    if isinstance(a, DeviceArray) and isinstance(b, DeviceArray):
        return a.ptr < b.ptr + b.nbytes and b.ptr < a.ptr + a.nbytes and a.nbytes and b.nbytes
    return False


def size_value(e: Expr, env: dict[str, int]) -> int | None:
    """The value of a size expression once the sizes in `env` are known (None if not)."""
    v = simplify(substitute(e, {k: Const(x, e.dtype) for k, x in env.items()}))
    return int(v.value) if isinstance(v, Const) else None


def scalar_value(i: int, sv: Var, v) -> int:
    """The value of a tl.var argument: an int (Python's or numpy's; not a bool, not a
    float even if integral: a var is an integer and nothing is rounded) inside the range
    of the var's dtype, as the kernel receives it (ctypes would wrap 2**70 to 0 silently)."""
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
        raise TensorlangError(f"argument {i} ({sv.name}): expected an int (a tl.var of "
                              f"dtype {sv.dtype}), got {v!r}")
    lo, hi = sv.dtype.min_value(), sv.dtype.max_value()
    if not lo <= int(v) <= hi:
        raise TensorlangError(f"argument {i} ({sv.name}): {int(v)} is outside the range of "
                              f"its dtype {sv.dtype}, [{lo}, {hi}]")
    return int(v)


def bind_arguments(buffers: list[Buffer], scalars: list[Var | None], params: list[Var],
                   written: set[int], values: tuple) -> tuple[list[int], list[int], dict]:
    """Check the call's values against the signature; return pointers and parameter values.

    `buffers[i]` (or `scalars[i]` for a tl.var argument) describes argument i; `written` holds
    the indices of arguments the kernel writes.
    """
    n = len(buffers)
    if len(values) != n:
        raise TensorlangError(f"expected {n} arguments, got {len(values)}")
    env: dict[str, int] = {}
    arrays: list[np.ndarray | None] = []
    for i, (buf, sv, v) in enumerate(zip(buffers, scalars, values)):
        if sv is not None:
            env[sv.name] = scalar_value(i, sv, v)
            arrays.append(None)
            continue
        name = buf.name
        if not isinstance(v, (np.ndarray, DeviceArray)):
            raise TensorlangError(
                f"argument {i} ({name}): expected a numpy array, got {type(v).__name__}"
            )
        if v.dtype != buf.dtype.np:
            raise TensorlangError(
                f"argument {i} ({name}): expected dtype {buf.dtype}, got {v.dtype}"
            )
        if v.ndim != len(buf.shape):
            raise TensorlangError(
                f"argument {i} ({name}): expected {len(buf.shape)} dimensions, got {v.ndim} "
                f"(shape {v.shape})"
            )
        if i in written and not v.flags.writeable:
            # (a broadcast view is read-only and has zero strides: say read-only first)
            raise TensorlangError(
                f"argument {i} ({name}): the output array is read-only (a broadcast view or "
                "a read-only buffer); pass a writeable array, e.g. np.empty(shape, dtype)")
        if not v.flags.c_contiguous:
            fix = ("write into a C-contiguous array (np.empty(shape, dtype)) and copy it "
                   "into yours after the call; a copy made from your view would take the "
                   "result instead of it") if i in written else \
                "pass np.ascontiguousarray(x)"
            raise TensorlangError(
                f"argument {i} ({name}): the array must be C-contiguous (strides "
                f"{v.strides} for shape {v.shape}); {fix}")
        for d, (ext, actual) in enumerate(zip(buf.shape, v.shape)):
            if isinstance(ext, Var):
                prev = env.get(ext.name)
                if prev is not None and prev != actual:
                    raise TensorlangError(
                        f"argument {i} ({name}): dimension {d} is {actual}, but {ext.name} = "
                        f"{prev} from an earlier argument"
                    )
                env[ext.name] = actual
        arrays.append(v)
    for p in params:
        if p.name not in env:
            raise TensorlangError(
                f"the size {p.name} cannot be inferred from the arguments' shapes; pass it as a "
                "tl.var argument"
            )
    for i, (buf, arr) in enumerate(zip(buffers, arrays)):
        if arr is None:
            continue
        for d, (ext, actual) in enumerate(zip(buf.shape, arr.shape)):
            # constant and plain symbolic sizes without simplify (a call's fixed cost)
            want = int(ext.value) if isinstance(ext, Const) else \
                env.get(ext.name) if isinstance(ext, Var) else size_value(ext, env)
            if want != actual:
                named = f"{want}" if isinstance(ext, Const) else f"{ext} = {want}"
                raise TensorlangError(
                    f"argument {i} ({buf.name}): dimension {d} must be {named}, got {actual}"
                    f" (shape {tuple(arr.shape)})")
    for i in written:
        if arrays[i] is None:
            continue
        for j, other in enumerate(arrays):
            if j != i and other is not None and _overlap(arrays[i], other):
                raise TensorlangError(
                    f"argument {i} ({buffers[i].name}) overlaps argument {j} "
                    f"({buffers[j].name}); outputs must not share memory with other arguments"
                )
    ptrs = [a.ptr if isinstance(a, DeviceArray) else a.ctypes.data
            for a in arrays if a is not None]
    return ptrs, [env[p.name] for p in params], env
