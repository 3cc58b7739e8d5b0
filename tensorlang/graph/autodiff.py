"""Reverse mode (`gradients`, the lecture's algorithm) and forward mode (`jvp`)."""

from __future__ import annotations

from .node import GraphError, Node, topological_order
from .ops import OPS


def _check(nodes, what: str) -> list[Node]:
    nodes = list(nodes) if isinstance(nodes, (list, tuple)) else [nodes]
    for n in nodes:
        if not isinstance(n, Node):
            raise GraphError(f"{what}: expected graph nodes, got {n!r}")
        if n.dtype not in ("float32", "float64"):
            raise GraphError(f"{what}: {n.name} is {n.dtype}; derivatives need float32 or "
                             "float64 nodes")
    return nodes


def gradients(out: Node, wrt) -> list[Node]:
    """Nodes computing d(sum(out))/dx for each x in `wrt`.

    The adjoint of every node is the sum of the partial adjoints its users send it
    (`node_to_grad` lists), visited in reverse topological order; the seed of `out` is ones,
    i.e. the gradient of out's sum. A node of `wrt` that `out` does not depend on gets zeros.
    """
    from . import api

    (out,) = _check([out], "gradients")
    wrt = _check(wrt, "gradients")
    node_to_grad: dict[int, list[Node]] = {out.id: [api.broadcast_like(api.constant(
        1.0, out.dtype), out) if out.shape != () else api.constant(1.0, out.dtype)]}
    adjoint: dict[int, Node] = {}
    for node in reversed(topological_order([out])):
        parts = node_to_grad.get(node.id)
        if not parts:
            continue
        g = parts[0]
        for p in parts[1:]:
            g = g + p
        adjoint[node.id] = g
        if not node.inputs:
            continue
        for x, gx in zip(node.inputs, OPS[node.op].grad(g, node)):
            if gx is not None:
                node_to_grad.setdefault(x.id, []).append(gx)
    return [adjoint.get(x.id) if x.id in adjoint else api.zeros_like(x) for x in wrt]


def jvp(outputs, wrt, tangents) -> list[Node]:
    """Forward mode: the directional derivative of each output along `tangents` (one node,
    number or array per node of `wrt`); a list, one tangent node per output."""
    from . import api

    outs = _check(outputs, "jvp")
    wrt = _check(wrt, "jvp")
    tangents = list(tangents) if isinstance(tangents, (list, tuple)) else [tangents]
    if len(tangents) != len(wrt):
        raise GraphError(f"jvp: {len(wrt)} nodes in wrt but {len(tangents)} tangents")
    tan: dict[int, Node | None] = {}
    for x, t in zip(wrt, tangents):
        t = t if isinstance(t, Node) else api.constant(t, x.dtype)
        tan[x.id] = api.broadcast_like(t, x) if x.shape is None or t.shape != x.shape else t
    for node in topological_order(outs):
        if node.id in tan or not node.inputs:
            continue
        ts = [tan.get(i.id) for i in node.inputs]
        tan[node.id] = None if all(t is None for t in ts) else OPS[node.op].jvp(node, ts)
    return [tan.get(o.id) if tan.get(o.id) is not None else api.zeros_like(o) for o in outs]
