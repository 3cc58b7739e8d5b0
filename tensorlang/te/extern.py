"""External stages: a tensor computed by a function the user provides (TVM's `te.extern`,
Halide's `define_extern`), with its reads and writes declared so that the dependence
analysis and the bounds checks still see it.

The function is a C symbol (called through the extern C ABI, `ir.stmt.ExternCall`), a
Python callable `fn(*inputs, out)` on numpy arrays, or TVM's form, a function of the
stage's buffers that returns `call_packed(name, ...)` of a function registered with
`register_func`. An extern stage has no loops: it runs once, at root, between the stages
before and after it.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from types import SimpleNamespace

from ..errors import TensorlangError
from ..ir.dtype import DType, as_dtype
from ..ir.expr import Expr
from .tensor import Operation, Tensor, _check_shape, to_expr

# TVM's global function table (`tvm.register_func`): packed functions by name. Process-wide
# by design, as TVM's is: `call_packed` names a function registered anywhere in the program.
_PACKED: dict[str, Callable] = {}


def register_func(name, f: Callable | None = None, override: bool = False):
    """Register `f` as the packed function `name` for `call_packed` (TVM's
    `tvm.register_func`); without `f`, a decorator. Registering a name twice needs
    `override=True`. A packed function gets numpy arrays for the extern stage's buffers
    (inputs read-only) and the other arguments of `call_packed` as given.

    >>> @register_func("example.addone", override=True)
    ... def addone(x, y):
    ...     y[:] = x + 1
    """
    if callable(name) and f is None:          # @register_func without a name
        return register_func(name.__name__, name, override)
    if not isinstance(name, str) or not name:
        raise TensorlangError(f"register_func: name must be a non-empty string, got {name!r}")
    if not isinstance(override, bool):
        raise TensorlangError(f"register_func: override must be True or False, got "
                              f"{override!r}")

    def register(func: Callable) -> Callable:
        if not callable(func):
            raise TensorlangError(f"register_func({name!r}): f must be callable, got {func!r}")
        if name in _PACKED and not override:
            raise TensorlangError(f"register_func: {name!r} is already registered; pass "
                                  "override=True to replace it")
        _PACKED[name] = func
        return func

    return register if f is None else register(f)


def get_global_func(name: str, allow_missing: bool = False) -> Callable | None:
    """The packed function registered as `name` (TVM's `tvm.get_global_func`); None when
    it is missing and `allow_missing`, else a TensorlangError listing the registered ones."""
    f = _PACKED.get(name) if isinstance(name, str) else None
    if f is None and not allow_missing:
        raise TensorlangError(f"packed function {name!r} is not registered; registered: "
                              f"{sorted(_PACKED)} (tl.register_func adds one)")
    return f


def _cblas_matmul(a, b, c, transa: bool = False, transb: bool = False) -> None:
    """TVM's "tvm.contrib.cblas.matmul": c = op(a) @ op(b), op a transpose where asked;
    numpy's matmul (its BLAS) writes into c."""
    import numpy as np

    np.matmul(a.T if transa else a, b.T if transb else b, out=c)


register_func("tvm.contrib.cblas.matmul", _cblas_matmul)


def cblas_matmul(lhs: Tensor, rhs: Tensor, transa: bool = False, transb: bool = False,
                 **kwargs) -> Tensor:
    """TVM's `tvm.contrib.cblas.matmul(lhs, rhs, transa, transb)`: an extern stage calling
    "tvm.contrib.cblas.matmul" (numpy's BLAS) for op(lhs) @ op(rhs)."""
    for arg, t in (("lhs", lhs), ("rhs", rhs)):
        if not isinstance(t, Tensor) or t.ndim != 2:
            raise TensorlangError(f"cblas.matmul: {arg} must be a 2-d tensor, got {t!r}")
    n = lhs.shape[1] if transa else lhs.shape[0]
    m = rhs.shape[0] if transb else rhs.shape[1]
    return extern((n, m), [lhs, rhs], lambda ins, outs: call_packed(
        "tvm.contrib.cblas.matmul", ins[0], ins[1], outs[0], transa, transb),
        name=kwargs.get("name", "C"), tag=kwargs.get("tag", ""))


class ExternBuffer:
    """A buffer of an extern stage as TVM's `fcompute(ins, outs)` sees it: pass it to
    `call_packed`, which gets the numpy array in its place when the kernel runs."""

    def __init__(self, tensor: Tensor, index: int):
        self.tensor = tensor
        self.index = index     # position among the stage's buffers (inputs, then outputs)

    @property
    def shape(self) -> tuple[Expr, ...]:
        return self.tensor.shape

    @property
    def dtype(self) -> str:
        return self.tensor.dtype.name

    @property
    def name(self) -> str:
        return self.tensor.name

    def __repr__(self) -> str:
        return f"ExternBuffer({self.tensor.name})"


class PackedCall:
    """`call_packed(name, *args)`: what TVM's extern `fcompute` returns."""

    def __init__(self, name: str, func: Callable, args: tuple):
        self.name, self.func, self.args = name, func, args

    def __call__(self, *arrays) -> None:
        """Run it on the stage's arrays (inputs, then outputs)."""
        self.func(*(arrays[a.index] if isinstance(a, ExternBuffer) else a for a in self.args))

    def __repr__(self) -> str:
        return f"call_packed({self.name!r}, {', '.join(map(repr, self.args))})"


def call_packed(name: str, *args) -> PackedCall:
    """TVM's `tvm.tir.call_packed`: call the registered function `name` on the extern
    stage's buffers (`ins[k]`, `outs[k]`) and constants (numbers, bools, strings)."""
    func = get_global_func(name)
    for k, a in enumerate(args):
        if not isinstance(a, (ExternBuffer, bool, int, float, str)):
            raise TensorlangError(
                f"call_packed({name!r}): argument {k} must be a buffer of the extern stage "
                f"(ins[i] or outs[i]) or a number, bool or string, got {a!r}")
    return PackedCall(name, func, args)


class ExternOp(Operation):
    """A stage computed by `fn` (see module doc); `reads[k]` is the region of `inputs[k]`
    it reads (None: the whole tensor), `writes` the region of the output it writes."""

    def __init__(self, name: str, inputs: tuple[Tensor, ...], shape: tuple[Expr, ...],
                 dtype: DType, fn: object, what: str, library: str | None,
                 reads: tuple, writes):
        self.name = name
        self.inputs = inputs
        self.fn = fn
        self.what = what
        self.library = library
        self.reads = reads
        self.writes = writes
        self.axis: tuple = ()
        self.reduce_axis: tuple = ()
        self.body = None
        self.is_recurrence = False
        self.tag, self.attrs = "", {}
        self.output = Tensor(self, shape, dtype, name)

    @property
    def input_tensors(self) -> list[Tensor]:
        seen: dict[int, Tensor] = {}
        for t in self.inputs:
            seen.setdefault(id(t), t)
        return list(seen.values())

    def __repr__(self) -> str:
        return f"extern({self.name})"


class _NumpyCall:
    """A Python extern function `fn(*inputs, out)`: it writes its result into `out`; a
    returned value other than `out` is refused (a result written nowhere)."""

    def __init__(self, fn: Callable, who: str):
        self.fn, self.who = fn, who

    def __call__(self, *arrays) -> None:
        got = self.fn(*arrays)
        # None, or `out` itself (numpy's `np.add(a, 1, out=out)` returns it); any other
        # value is a result that would be lost
        if got is not None and got is not arrays[-1]:
            raise TensorlangError(
                f"{self.who}: fn returned a {type(got).__name__} instead of None; an extern "
                "function writes its result into its last argument (out[...] = ...)")


def _region(region, t: Tensor, who: str) -> tuple[tuple[Expr, Expr], ...]:
    if not isinstance(region, (tuple, list)) or len(region) != t.ndim:
        raise TensorlangError(f"{who}: the region of {t.name} must be one (begin, end) pair "
                              f"per dimension ({t.ndim}), got {region!r}")
    out = []
    for d, r in enumerate(region):
        if not isinstance(r, (tuple, list)) or len(r) != 2:
            raise TensorlangError(f"{who}: dimension {d} of {t.name}'s region must be a "
                                  f"(begin, end) pair, got {r!r}")
        lo, hi = (to_expr(x, f"{who} {t.name} region") for x in r)
        if not (lo.dtype.is_int and hi.dtype.is_int):
            raise TensorlangError(f"{who}: {t.name}'s region must have integer bounds, got "
                                  f"{r!r}")
        out.append((lo, hi))
    return tuple(out)


def _positional(fn: Callable) -> int | None:
    """How many positional arguments `fn` takes; None: any number (*args)."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):       # a builtin without a signature: any number
        return None
    if any(p.kind is p.VAR_POSITIONAL for p in params):
        return None
    return sum(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and
               p.default is p.empty for p in params)


def _classify(fn, inputs: tuple[Tensor, ...], out: Tensor, who: str):
    """(the function the backend calls, its name for messages)."""
    if isinstance(fn, str):
        if not fn.isascii() or not fn.isidentifier():
            raise TensorlangError(f"{who}: fn must be a C symbol name (an identifier), got "
                                  f"{fn!r}")
        return fn, fn
    if not callable(fn):
        raise TensorlangError(f"{who}: fn must be a C symbol name (str) or a Python callable, "
                              f"got {type(fn).__name__}")
    n = _positional(fn)
    label = getattr(fn, "__name__", type(fn).__name__)
    if n == 2:
        # TVM's form `lambda ins, outs: call_packed(...)`, called once here with the
        # stage's buffers. With one input, `fn(x, out)` on numpy arrays takes two
        # arguments as well: such a function fails on (or ignores) the lists of buffers it
        # gets here, and is taken as a numpy function
        ins = [ExternBuffer(t, k) for k, t in enumerate(inputs)]
        outs = [ExternBuffer(out, len(inputs))]
        if len(inputs) == 1:
            try:
                got = fn(ins, outs)
            except TensorlangError:     # call_packed's: an unknown name, a bad argument
                raise
            except Exception:   # noqa: BLE001 (a numpy function given lists of buffers)
                got = None
        else:
            got = fn(ins, outs)
            if not isinstance(got, PackedCall):
                raise TensorlangError(
                    f"{who}: fn takes two arguments, TVM's (ins, outs), but returned {got!r} "
                    f"instead of tl.call_packed(...); a numpy function of {len(inputs)} "
                    f"inputs takes {len(inputs) + 1} arguments (*inputs, out)")
        if isinstance(got, PackedCall):
            return got, f"call_packed({got.name!r})"
    if n is not None and n != len(inputs) + 1:
        raise TensorlangError(f"{who}: fn must take {len(inputs) + 1} arguments (the "
                              f"{len(inputs)} inputs, then the output), it takes {n}")
    return _NumpyCall(fn, who), label


def extern(shape, inputs, fn, name: str = "extern", reads=None, writes=None, dtype=None,
           library: str | None = None, tag: str = "", attrs=None) -> Tensor:
    """A tensor of `shape` computed by `fn` from the tensors `inputs` (TVM's `te.extern`).

    `fn` is one of:

    - a C symbol name: `int32_t fn(const T *in0, const int64_t *in0_shape, ..., T *out,
      const int64_t *out_shape)`, the inputs then the output, each a row-major contiguous
      array and a pointer to its extents; it returns 0, or a nonzero value that stops the
      kernel with a `tl.TensorlangError`. It is linked when the kernel is built: a symbol
      of this process (libc, libm, a library loaded with ctypes.CDLL(..., RTLD_GLOBAL)),
      or of `library`, a shared library the build loads (once, for the process);
    - a Python callable `fn(*inputs, out)` on numpy arrays (inputs read-only), writing its
      result into `out`. It runs under the GIL, once per kernel call, at root (never inside
      the kernel's parallel loops); kernels called from several threads take turns in it.
      An exception it raises is raised by the kernel's call (a `tl.TensorlangError`
      chained to it). Not for target="cuda";
    - TVM's `lambda ins, outs: tl.call_packed("name", ins[0], ..., outs[0], ...)`, with a
      function registered by `tl.register_func` ("tvm.contrib.cblas.matmul" is built in).

    `reads` (a dict tensor -> ((begin, end), ...) per dimension) narrows what fn reads of an
    input (default: all of it); `writes` ((begin, end) pairs) what it writes of the output
    (default: all). Both are what the dependence analysis and bounds checks use. `dtype`:
    the output's dtype (default: the first input's). The stage has no loops: split,
    vectorize, compute_at and the like refuse it; the stages around it schedule freely.

    >>> A = placeholder((4,), name="A")
    >>> B = extern(A.shape, [A], lambda a, out: np.add(a, 1, out=out), name="B")
    """
    if not isinstance(name, str) or not name.isidentifier():
        raise TensorlangError(f"extern: name must be an identifier, got {name!r}")
    who = f"extern {name}"
    if isinstance(inputs, Tensor):
        inputs = [inputs]
    if not isinstance(inputs, (list, tuple)):
        raise TensorlangError(f"{who}: inputs must be a list of tensors, got {inputs!r}")
    for k, t in enumerate(inputs):
        if not isinstance(t, Tensor):
            raise TensorlangError(f"{who}: inputs[{k}] must be a tensor, got {t!r}")
    inputs = tuple(inputs)
    if isinstance(shape, (list, tuple)) and shape and \
            all(isinstance(s, (list, tuple)) for s in shape):
        raise NotImplementedError(f"{who}: extern stages with several outputs are not "
                                  "supported yet; declare one extern per output")
    shape = _check_shape(shape, who)
    if dtype is None:
        d = inputs[0].dtype if inputs else as_dtype("float32", who)
    else:
        d = as_dtype(dtype, f"{who} dtype")
    if library is not None and not isinstance(library, str):
        raise TensorlangError(f"{who}: library must be a path (str), got {library!r}")
    if library is not None and not isinstance(fn, str):
        raise TensorlangError(f"{who}: library= is for a C symbol fn, got a "
                              f"{type(fn).__name__}")
    if not isinstance(tag, str):
        raise TensorlangError(f"{who}: tag must be a string, got {tag!r}")
    if attrs is not None and not isinstance(attrs, dict):
        raise TensorlangError(f"{who}: attrs must be a dict, got {type(attrs).__name__}")
    if reads is not None and not isinstance(reads, dict):
        raise TensorlangError(f"{who}: reads must be a dict tensor -> region, got {reads!r}")
    regions: list = [None] * len(inputs)
    for t, region in (reads or {}).items():
        ks = [k for k, x in enumerate(inputs) if x is t]
        if not ks:
            raise TensorlangError(f"{who}: reads names {t!r}, which is not one of the inputs")
        for k in ks:
            regions[k] = _region(region, t, f"{who} reads")
    # a stand-in for the output until the op exists: classification needs its shape
    op = ExternOp(name, inputs, shape, d, None, "", library, tuple(regions), None)
    if writes is not None:
        op.writes = _region(writes, op.output, f"{who} writes")
    op.fn, op.what = _classify(fn, inputs, op.output, who)
    op.tag, op.attrs = tag, dict(attrs or {})
    return op.output


# TVM's `tvm.contrib` wrappers that tensorlang has: `contrib.cblas.matmul`
contrib = SimpleNamespace(cblas=SimpleNamespace(matmul=cblas_matmul))
