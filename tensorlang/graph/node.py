"""The graph IR: immutable nodes, topological order and a printer.

A `Node` is one application of an op (`registry.OPS`) to input nodes, with attributes. Its shape
and dtype are inferred when it is made (errors name the op and the shapes); a `Variable`
made without a shape has shape None, and so do the nodes computed from it, until the
executor binds feeds. Nodes never change after construction, so a graph is a DAG by
construction; `topological_order` still checks, as graphs can be assembled by other code.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

import numpy as np

from ..errors import TensorlangError

_ids = itertools.count()

# The functions Node's operators call ("add", "sub", "mul", "div", "power", "matmul", "neg",
# "transpose"): api.py's, which it puts here when it is imported. api.py makes nodes, so it
# imports this module; the package imports api before any node can be made.
OPERATORS: dict[str, Callable] = {}


class GraphError(TensorlangError):
    """A graph is malformed or fed wrongly; the message names the node."""


class Node:
    """One op applied to input nodes. Arithmetic operators build new nodes."""

    __slots__ = ("op", "inputs", "attrs", "shape", "dtype", "name", "id")

    def __init__(self, op: str, inputs: tuple, attrs: dict, shape, dtype: str, name: str):
        for k, v in (("op", op), ("inputs", tuple(inputs)), ("attrs", tuple(sorted(
                attrs.items()))), ("shape", shape), ("dtype", dtype), ("name", name),
                ("id", next(_ids))):
            object.__setattr__(self, k, v)

    def __setattr__(self, key, value):
        raise AttributeError("graph nodes are immutable")

    def attr(self, key: str, default=None):
        for k, v in self.attrs:
            if k == key:
                return v
        return default

    @property
    def kwargs(self) -> dict:
        return dict(self.attrs)

    def __repr__(self) -> str:
        shape = "?" if self.shape is None else tuple(self.shape)
        return f"<{self.name}: {self.op} {self.dtype}{list(shape) if shape != '?' else '?'}>"

    __hash__ = object.__hash__

    # arithmetic builds nodes with the user functions (OPERATORS)
    def __add__(self, o):
        return OPERATORS["add"](self, o)

    def __radd__(self, o):
        return OPERATORS["add"](o, self)

    def __sub__(self, o):
        return OPERATORS["sub"](self, o)

    def __rsub__(self, o):
        return OPERATORS["sub"](o, self)

    def __mul__(self, o):
        return OPERATORS["mul"](self, o)

    def __rmul__(self, o):
        return OPERATORS["mul"](o, self)

    def __truediv__(self, o):
        return OPERATORS["div"](self, o)

    def __rtruediv__(self, o):
        return OPERATORS["div"](o, self)

    def __pow__(self, o):
        return OPERATORS["power"](self, o)

    def __rpow__(self, o):
        return OPERATORS["power"](o, self)

    def __matmul__(self, o):
        return OPERATORS["matmul"](self, o)

    def __rmatmul__(self, o):
        return OPERATORS["matmul"](o, self)

    def __neg__(self):
        return OPERATORS["neg"](self)

    @property
    def T(self):  # noqa: N802
        return OPERATORS["transpose"](self)


def topological_order(outputs) -> list[Node]:
    """Every node the outputs depend on, inputs before users; a cycle raises GraphError."""
    order: list[Node] = []
    state: dict[int, int] = {}  # 1: on the stack, 2: done
    for out in outputs:
        if not isinstance(out, Node):
            raise GraphError(f"expected graph nodes, got {out!r}")
        stack = [(out, iter(out.inputs))]
        if state.get(out.id) == 2:
            continue
        state[out.id] = 1
        while stack:
            node, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                stack.pop()
                state[node.id] = 2
                order.append(node)
                continue
            st = state.get(nxt.id)
            if st == 1:
                raise GraphError(f"the graph has a cycle through node {nxt.name} ({nxt.op})")
            if st is None:
                state[nxt.id] = 1
                stack.append((nxt, iter(nxt.inputs)))
    return order


class Graph:
    """The nodes that `outputs` depend on; printing shows one node per line (like torch.fx).

    >>> import tensorlang.graph as G
    >>> x = G.Variable("x", shape=(3,))
    >>> print(G.Graph([G.exp(x) * 2.0]))
    x: float32[3] = variable()
    exp_1: float32[3] = exp(x)
    ...
    """

    def __init__(self, outputs):
        self.outputs = list(outputs) if isinstance(outputs, (list, tuple)) else [outputs]
        self.nodes = topological_order(self.outputs)

    def __str__(self) -> str:
        lines = []
        for n in self.nodes:
            shape = "?" if n.shape is None else ", ".join(map(str, n.shape))
            args = [i.name for i in n.inputs]
            args += [f"{k}={_fmt(v)}" for k, v in n.attrs if k != "value"]
            if n.op == "constant":
                args.append(_fmt(n.attr("value")))
            lines.append(f"{n.name}: {n.dtype}[{shape}] = {n.op}({', '.join(args)})")
        lines.append(f"return ({', '.join(o.name for o in self.outputs)})")
        return "\n".join(lines)

    __repr__ = __str__


def _fmt(v) -> str:
    if isinstance(v, ConstValue):
        a = v.array
        return repr(a.item()) if a.ndim == 0 else f"array{list(a.shape)}"
    return repr(v)


class ConstValue:
    """A constant's array, hashable by content (attributes must be hashable)."""

    __slots__ = ("array", "_key")

    def __init__(self, array: np.ndarray):
        self.array = np.array(array, order="C")  # ascontiguousarray would make 0-d arrays 1-d
        self.array.flags.writeable = False
        self._key = (self.array.dtype.str, self.array.shape, self.array.tobytes())

    def __eq__(self, other):
        return isinstance(other, ConstValue) and self._key == other._key

    def __hash__(self):
        return hash(self._key)
