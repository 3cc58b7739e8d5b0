"""The graph layer's user functions: variables, constants and every op (numpy names and
broadcasting). Primitive ops make one node each (`ops.OPS`); the others are compositions."""

from __future__ import annotations

import itertools

import numpy as np

from .node import OPERATORS, ConstValue, GraphError, Node
from .registry import OPS

_names = itertools.count(1)
_FLOATS = ("float32", "float64", "bfloat16")
# integers: forward graphs (no gradients), numpy's rules (uint8 + int8 is int16, a uint8 sum
# accumulates in int64); the narrow ones carry quantized data (`quantize_linear`)
_INTS = ("int64", "int32", "int16", "int8", "uint8")
_DTYPES = _FLOATS + _INTS
_NAMES = "float32, float64, bfloat16, int64, int32, int16, int8 or uint8"
# ops whose result is floating point for integer inputs, as numpy's (true division, means)
FLOAT_RESULT = frozenset({"exp", "log", "sin", "cos", "tanh", "sqrt", "sigmoid", "div",
                          "mean", "softmax", "log_softmax", "power", "avg_pool2d"})


# ops that sum inside (reductions, convolutions, pools, softmax): of bfloat16 inputs, in
# float32 (`make`); a bfloat16 matmul and conv2d sum in float32 inside their kernels
# (graph/bfloat16.py)
F32_SUMS = frozenset({"sum", "mean", "conv", "avg_pool2d", "pool", "softmax",
                      "log_softmax"})


def _dtype_name(dtype) -> str | None:
    try:
        return str(np.dtype(dtype))
    except TypeError:
        return None


def Variable(name: str, shape=None, dtype: str = "float32") -> Node:  # noqa: N802
    """An input fed at run time; shape None takes the fed array's shape. `dtype`: float32,
    float64, bfloat16 (an `ml_dtypes` array), int64, int32, int16, int8 or uint8."""
    if not isinstance(name, str) or not name:
        raise GraphError(f"Variable: name must be a non-empty string, got {name!r}")
    if _dtype_name(dtype) not in _DTYPES:
        raise GraphError(f"Variable {name}: dtype must be {_NAMES}, got {dtype}")
    if shape is not None:
        try:
            shape = tuple(int(s) for s in shape)
        except TypeError:
            raise GraphError(f"Variable {name}: shape must be a tuple of ints, got "
                             f"{shape!r}") from None
        if any(s < 1 for s in shape):
            raise GraphError(f"Variable {name}: every dimension must be >= 1, got {shape}")
    return Node("variable", (), {}, shape, str(np.dtype(dtype)), name)


def constant(value, dtype: str | None = None, name: str | None = None) -> Node:
    """A constant array (its own dtype where the graph takes it: float32, float64, bfloat16
    or an integer; Python numbers are float32 unless `dtype` says otherwise)."""
    arr = np.asarray(value)
    if dtype is None:
        dtype = arr.dtype if arr.dtype.name in _DTYPES else "float32"
    if _dtype_name(dtype) not in _DTYPES:
        raise GraphError(f"constant: dtype must be {_NAMES}, got {dtype}")
    arr = arr.astype(dtype)
    label = name or f"const_{next(_names)}"
    return Node("constant", (), {"value": ConstValue(arr)}, arr.shape, str(arr.dtype), label)


def _as_node(x, like: Node | None) -> Node:
    if isinstance(x, Node):
        return x
    if isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(x, bool):
        dtype = like.dtype if like is not None else "float32"
        if isinstance(x, (float, np.floating)) and dtype == "int64":
            dtype = "float64"           # int64 array * 0.5 is float64, as numpy's
        return constant(x, dtype)
    if isinstance(x, np.ndarray):
        return constant(x)
    raise GraphError(f"expected a graph node, a number or a numpy array, got {type(x).__name__}")


def make(op: str, inputs, **attrs) -> Node:
    """A node of primitive op `op`; its shape and dtype come from the op's rules. An op
    that sums (`F32_SUMS`) of bfloat16 inputs sums in float32 and rounds its result once,
    as torch's: bfloat16 sums would lose a long row's small terms (1 + 256 is 256)."""
    d = OPS[op]
    first = next((i for i in inputs if isinstance(i, Node)), None)
    nodes = tuple(_as_node(i, first) for i in inputs)
    if any(n.dtype == "bfloat16" for n in nodes) and (
            op in F32_SUMS or op in ("matmul", "conv2d") and
            any(n.dtype != "bfloat16" for n in nodes)):
        # (a matmul or conv2d of bfloat16 and another type: in float32 throughout, its
        # result the promoted type, as numpy's)
        wide = [_cast(n, "float32") if n.dtype == "bfloat16" else n for n in nodes]
        got = make(op, wide, **attrs)
        promoted = np.result_type(*[n.dtype for n in nodes]).name
        return _cast(got, "bfloat16") if promoted == "bfloat16" else got
    shapes = [n.shape for n in nodes]
    shape = None
    if all(s is not None for s in shapes):
        try:
            shape = tuple(d.shape(*shapes, **attrs))
        except ValueError as e:
            raise GraphError(f"{op}: {e} (input shapes {', '.join(map(str, shapes))})") from None
    dtype = np.result_type(*[n.dtype for n in nodes]).name if nodes else "float32"
    if op in FLOAT_RESULT and np.dtype(dtype).kind in "iu":
        dtype = "float64"
    return Node(op, nodes, attrs, shape, dtype, f"{op}_{next(_names)}")


def _axis(axis):
    if axis is None or isinstance(axis, int):
        return axis
    return tuple(int(a) for a in axis)


# ------------------------------------------------------------------- elementwise
def add(a, b):
    return make("add", (a, b))


def sub(a, b):
    return make("sub", (a, b))


def mul(a, b):
    return make("mul", (a, b))


def div(a, b):
    return make("div", (a, b))


def power(a, b):
    """a ** b. For integer operands the result is float64, numpy's float_power (numpy's
    integer power wraps on overflow and refuses negative exponents)."""
    return make("power", (a, b))


def neg(x):
    return make("neg", (x,))


def exp(x):
    return make("exp", (x,))


def log(x):
    return make("log", (x,))


def sin(x):
    return make("sin", (x,))


def cos(x):
    return make("cos", (x,))


def tanh(x):
    return make("tanh", (x,))


def sqrt(x):
    return make("sqrt", (x,))


def relu(x):
    return make("relu", (x,))


def sigmoid(x):
    return make("sigmoid", (x,))


def equal(a, b):
    """1.0 where a == b, else 0.0 (a mask; its gradient is zero)."""
    return make("equal", (a, b))


# ------------------------------------------------------------------- reductions
def _cast(x: Node, dtype: str) -> Node:
    """A cast node of x to `dtype` (`model_ops.cast` without its checks: the graph's own
    widenings)."""
    n = make("cast", (x,), dtype=dtype)
    return Node(n.op, n.inputs, n.kwargs, n.shape, dtype, n.name)


def _wide(x):
    """x, or x in int64 when it is a narrower integer (numpy sums small integers in the
    platform's integer: a uint8 sum does not wrap at 256)."""
    if isinstance(x, Node) and x.dtype in _INTS and x.dtype != "int64":
        return _cast(x, "int64")
    return x


def sum(x, axis=None, keepdims: bool = False):  # noqa: A001
    """The sum (small integers in int64, as numpy's; bfloat16 in float32: `make`)."""
    return make("sum", (_wide(x),), axis=_axis(axis), keepdims=bool(keepdims))


def mean(x, axis=None, keepdims: bool = False):
    """The mean; over no elements (an axis of extent 0) it is NaN, as numpy's."""
    return make("mean", (_wide(x),), axis=_axis(axis), keepdims=bool(keepdims))


def max(x, axis=None, keepdims: bool = False):  # noqa: A001
    """The maximum; its gradient is split evenly among tied maxima."""
    return make("max", (x,), axis=_axis(axis), keepdims=bool(keepdims))


# ------------------------------------------------------------------- shapes
def reshape(x, shape):
    return make("reshape", (x,), shape=tuple(int(s) for s in shape))


def transpose(x, axes=None):
    return make("transpose", (x,), axes=None if axes is None else tuple(int(a) for a in axes))


def broadcast_to(x, shape):
    return make("broadcast_to", (x,), shape=tuple(int(s) for s in shape))


CONCAT_FANIN = 32      # inputs of one concat node; more become a tree of concats


def concat(xs, axis: int = 0):
    """numpy's concatenate. More than CONCAT_FANIN inputs become a tree of concat nodes,
    each a kernel of at most CONCAT_FANIN inputs (one kernel's arguments are bounded, and
    its element expression selects among its inputs: its size grows with their number)."""
    xs = list(xs)
    if not xs:
        raise GraphError("concat: expected at least one node")
    axis = int(axis)
    first = next((x for x in xs if isinstance(x, Node)), None)
    xs = [_as_node(x, first) for x in xs]
    while len(xs) > CONCAT_FANIN:
        xs = [xs[k] if k + 1 == len(xs) else make("concat", tuple(xs[k:k + CONCAT_FANIN]),
                                                   axis=axis)
              for k in range(0, len(xs), CONCAT_FANIN)]
    return make("concat", tuple(xs), axis=axis)


def slice(x, axis: int, start: int, stop: int):  # noqa: A001
    """x's elements start .. stop - 1 along `axis` (numpy's x[..., start:stop, ...])."""
    return make("slice", (x,), axis=int(axis), start=int(start), stop=int(stop))


# ------------------------------------------------------------------- linear algebra, nn
def matmul(a, b):
    """Batched matrix product (numpy's matmul for 2-D and higher operands). Of bfloat16
    operands: float32 sums, rounded once (on AVX512-BF16 where the target has it)."""
    return make("matmul", (a, b), ta=False, tb=False)


def softmax(x, axis: int = -1):
    return make("softmax", (x,), axis=int(axis))


def log_softmax(x, axis: int = -1):
    return make("log_softmax", (x,), axis=int(axis))


def conv2d(x, w, stride: int = 1, padding: int = 0):
    """2-D convolution (cross-correlation), x in NCHW and w in OIHW."""
    return make("conv2d", (x, w), stride=int(stride), padding=int(padding))


def max_pool2d(x, kernel: int = 2, stride: int | None = None):
    """Max pooling over kernel x kernel windows (no padding); ties share the gradient."""
    return make("max_pool2d", (x,), kernel=int(kernel),
                stride=int(stride if stride is not None else kernel))


def avg_pool2d(x, kernel: int = 2, stride: int | None = None):
    return make("avg_pool2d", (x,), kernel=int(kernel),
                stride=int(stride if stride is not None else kernel))


def layer_norm(x, eps: float = 1e-5):
    """Normalise over the last axis (no scale or shift)."""
    m = mean(x, axis=-1, keepdims=True)
    d = x - m
    v = mean(d * d, axis=-1, keepdims=True)
    # a quotient per element, as numpy's reference and TVM's: no slower than the product
    # by the row's reciprocal, and faster where the rows fill the last-level cache
    # (benchmarks/RESULTS-decisions.md); the quotient also rounds once fewer.
    return d / sqrt(v + eps)


def batch_norm(x, gamma, beta, running_mean, running_var, eps: float = 1e-5):
    """Inference batch norm of NCHW (or NC) input with per-channel parameters of shape (C,)."""
    nd = x.shape is not None and len(x.shape) == 2

    def per_channel(p):
        return reshape(p, (1, -1) if nd else (1, -1, 1, 1))

    scale = per_channel(gamma) / sqrt(per_channel(running_var) + eps)
    return (x - per_channel(running_mean)) * scale + per_channel(beta)


def mse_loss(pred, target):
    """The mean of the squared errors over all elements (a scalar)."""
    d = pred - target
    return mean(d * d)


def softmax_cross_entropy(logits, labels_onehot):
    """The mean over the batch (axis 0) of -sum(labels * log_softmax(logits), axis=-1)."""
    return neg(mean(sum(labels_onehot * log_softmax(logits, -1), axis=-1)))


# ------------------------------------------------------------------- used by the rules
def unreduce(g, x, axis, keepdims: bool, mean_: bool = False):
    """Broadcast a reduction's result `g` back to x's shape (divided by the count if mean_)."""
    return make("unreduce", (g, x), axis=axis, keepdims=keepdims, mean=mean_)


def sum_like(x, like):
    """Sum `x` over the dimensions that broadcasting added to `like`'s shape."""
    if x.shape is not None and x.shape == like.shape:
        return x
    return make("sum_like", (x, like))


def broadcast_like(x, like):
    if x.shape is not None and x.shape == like.shape:
        return x
    return make("broadcast_like", (x, like))


def reshape_like(x, like):
    if x.shape is not None and x.shape == like.shape:
        return x
    return make("reshape_like", (x, like))


def zeros_like(x):
    return make("zeros_like", (x,))


# Node's operators (+, -, *, /, **, @, unary -, .T) are these functions
OPERATORS.update(add=add, sub=sub, mul=mul, div=div, power=power, matmul=matmul, neg=neg,
                 transpose=transpose)
