"""The op registry: one `OpDef` per op (its numpy reference, shape rule, gradient, JVP
rule and TE definition), filled by ops.py and nnops.py, which the package imports. Nodes
(node.py) and the user functions (api.py) read it; the rules, which build graph nodes with
the user functions, sit above them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class OpDef:
    name: str
    reference: Callable
    shape: Callable
    grad: Callable
    jvp: Callable
    te: Callable | None


OPS: dict[str, OpDef] = {}


def register_op(name, reference, shape, grad, jvp, te) -> None:
    OPS[name] = OpDef(name, reference, shape, grad, jvp, te)
