"""Declared hardware instructions: `TensorIntrin`, what `Stage.tensorize` puts in place of a
loop nest.

An instruction is declared by what it computes, as a small TE computation (`desc`): a
VNNI dot product is `C[j] = sum(A[k].astype("int32") * B[j, k].astype("int32"), axis=k)` over
j < 16, k < 4. Its operands are the placeholders the description reads, in the order they
first appear in its body, then its output. `impl` says how one use of it runs:

- a Python function `impl(*regions) -> Stmt` that writes it in plain loop IR, through one
  `Region` per operand (`region[i, j]` reads the operand's element (i, j) of this use,
  `region.store((i, j), value)` writes one). It runs on every backend.
- `lowering(key, features=...)`: code a backend emits itself (`backends/llvm/tensorcall.py`
  for the CPU's), for targets with the named CPU features.

For a reduction the instruction adds its result to what the output region holds (the
reduction's initial values are written before it, as plain code); otherwise it writes the
output region.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from ..errors import TensorlangError
from ..ir.expr import Const, Expr, Load, as_expr
from ..ir.stmt import For, LoopKind, Stmt, Store
from ..ir.expr import Var
from ..ir.dtype import int64
from ..ir.simplify import simplify
from ..ir.visit import walk
from .tensor import ComputeOp, PlaceholderOp, Reduce, Tensor


@dataclass(frozen=True)
class Lowering:
    """An instruction a backend emits itself: `key` names it in the backend's table,
    `features` are the CPU features (LLVM's names, without '+') a target needs for it."""

    key: str
    features: tuple[str, ...] = ()


def lowering(key: str, features=()) -> Lowering:
    if not isinstance(key, str) or not key:
        raise TensorlangError(f"lowering: key must be a non-empty str, got {key!r}")
    feats = tuple(features)
    if not all(isinstance(f, str) and f for f in feats):
        raise TensorlangError(f"lowering: features must be feature names, got {features!r}")
    return Lowering(key, feats)


class Region:
    """One operand of one use of an instruction, for a plain-IR `impl`: its elements are
    indexed as the description's operand is (`shape`), from the use's origin in the real
    tensor, along that tensor's last dimensions."""

    def __init__(self, tensor, base: tuple[Expr, ...], shape: tuple[int, ...], name: str):
        self.tensor = tensor
        self.base = base
        self.shape = shape
        self.name = name
        self.dtype = tensor.dtype

    def _indices(self, idx) -> tuple[Expr, ...]:
        idx = idx if isinstance(idx, tuple) else (idx,)
        if len(idx) != len(self.shape):
            raise TensorlangError(f"region {self.name}: expected {len(self.shape)} indices "
                                  f"(its shape is {self.shape}), got {len(idx)}")
        lead = len(self.base) - len(idx)
        out = list(self.base[:lead])
        for b, i in zip(self.base[lead:], idx):
            e = as_expr(i, int64) if not isinstance(i, Expr) else i
            if not e.dtype.is_int:
                raise TensorlangError(f"region {self.name}: indices must be integers, got {i!r}")
            out.append(simplify(b + e))
        return tuple(out)

    def __getitem__(self, idx) -> Expr:
        return Load(self.tensor, self._indices(idx))

    def store(self, idx, value) -> Stmt:
        v = as_expr(value, self.dtype) if not isinstance(value, Expr) else value
        return Store(self.tensor, self._indices(idx), v)


_LOOPS = itertools.count()


def serial(extent: int, body) -> Stmt:
    """A loop for a plain-IR `impl`: `body(k)` (k an index expression) for k < extent."""
    if not isinstance(extent, int) or extent < 1:
        raise TensorlangError(f"serial: extent must be a positive int, got {extent!r}")
    v = Var(f"tz_k{next(_LOOPS)}", int64)
    return For(v, Const(0, int64), Const(extent, int64), body(v), LoopKind.SERIAL)


class TensorIntrin:
    """A hardware instruction (TVM's `TensorIntrin`): `desc` what it computes, `impl` how
    one use runs (see the module). `tl.intrin` has the built-in ones."""

    def __init__(self, desc, impl, name: str | None = None):
        if not isinstance(desc, Tensor) or not isinstance(desc.op, ComputeOp):
            raise TensorlangError(f"TensorIntrin: desc must be the output of tl.compute (what "
                                  f"the instruction computes), got {desc!r}")
        op = desc.op
        if len(op.outputs) != 1:
            raise TensorlangError("TensorIntrin: desc must have one output")
        for a in list(op.axis) + list(op.reduce_axis):
            if not isinstance(a.extent, Const) or not (isinstance(a.min, Const) and
                                                        a.min.value == 0):
                raise TensorlangError(f"TensorIntrin: axis {a.name} of desc must run over "
                                      f"range(n) with a constant n, got {a!r}")
        body = op.body
        if isinstance(body, Reduce):
            if len(body.source) != 1 or not (isinstance(body.where, Const) and body.where.value):
                raise TensorlangError("TensorIntrin: desc's reduction must be one value, "
                                      "without where=")
        inputs: list[Tensor] = []
        for x in walk(body.source[0] if isinstance(body, Reduce) else body):
            if isinstance(x, Load):
                if not isinstance(x.buffer, Tensor) or not isinstance(x.buffer.op, PlaceholderOp):
                    raise TensorlangError(f"TensorIntrin: desc must read placeholders only, "
                                          f"it reads {getattr(x.buffer, 'name', x.buffer)}")
                if not all(isinstance(s, Const) for s in x.buffer.shape):
                    raise TensorlangError(f"TensorIntrin: desc's input {x.buffer.name} must "
                                          "have a constant shape")
                if any(t is x.buffer for t in inputs):
                    raise TensorlangError(f"TensorIntrin: desc reads {x.buffer.name} twice; "
                                          "each operand is read once")
                inputs.append(x.buffer)
        if not (callable(impl) or isinstance(impl, Lowering)):
            raise TensorlangError(f"TensorIntrin: impl must be a function of the operands' "
                                  f"regions or tl.intrin.lowering(...), got {impl!r}")
        if name is None:
            name = op.name
        if not isinstance(name, str) or not name:
            raise TensorlangError(f"TensorIntrin: name must be a non-empty str, got {name!r}")
        self.desc = desc
        self.impl = impl
        self.name = name
        self.inputs = tuple(inputs)
        self.operands = self.inputs + (desc,)

    @property
    def desc_source(self) -> Expr:
        """The value the description computes at each point (a reduction's source)."""
        body = self.desc.op.body
        return body.source[0] if isinstance(body, Reduce) else body

    @property
    def axes(self):
        """The description's axes in its loop order: spatial, then reduce."""
        return tuple(self.desc.op.axis) + tuple(self.desc.op.reduce_axis)

    @property
    def extents(self) -> tuple[int, ...]:
        return tuple(int(a.extent.value) for a in self.axes)

    @property
    def is_reduction(self) -> bool:
        return isinstance(self.desc.op.body, Reduce)

    def shape(self, k: int) -> tuple[int, ...]:
        return tuple(int(s.value) for s in self.operands[k].shape)

    def __repr__(self) -> str:
        ext = "x".join(map(str, self.extents))
        return f"TensorIntrin({self.name}: {ext})"
