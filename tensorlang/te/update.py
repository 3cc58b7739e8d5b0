"""Update stages (Halide's update definitions, TVM's scatter): `tl.update(T, axes, index=,
value=)` is the tensor U equal to T, then, for each point r of the reduce `axes` in
lexicographic order, U[index(r)] = value(U[index(r)], r).

`index` may read tensors (a histogram `hist(im(r.x, r.y)) += 1`, a scatter
`out[indices[r]] = updates[r]`): the element written is then known only when the kernel
runs, so the isl model treats the write as a *may-write* of any element of U (never as a
write that hides earlier ones) and the index is checked against U's bounds at run time.

An update is two stages: `U.op.init`, a compute of U's first value (T's own expression when
T is a pure elementwise compute, else a copy of T), and U's stage, whose loops are the
reduce axes. Both store into one buffer, so the update runs in place. Inside `index` and
`value`, reads of T stand for U's current values (Halide's `f(r) = f(r) + f(r - 1)`, a
prefix sum); `old` is U[index(r)].
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass

from ..deep import deep
from ..errors import TensorlangError
from ..ir.dtype import DType
from ..ir.expr import Add, Expr, Load, Max, Min, ReduceVar, Var
from ..ir.printer import expr_str
from ..ir.visit import map_expr, walk
from .tensor import ComputeOp, IterVar, Reduce, Tensor, TupleBody, to_expr


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class UpdateBody(Expr):
    """The body of an update stage: out[index] = value (value reads out[index] as the old
    value). Not a value itself: only ever the whole body of an `UpdateOp`."""

    index: tuple[Expr, ...]
    value: Expr
    dtype: DType

    def rebuild(self, kids: tuple[Expr, ...]) -> UpdateBody:
        n = len(self.index)
        return UpdateBody(tuple(kids[:n]), kids[n], self.dtype)

    def _print(self, fmt) -> str:
        return f"[{', '.join(fmt(i) for i in self.index)}] <- {fmt(self.value)}"


class UpdateOp(ComputeOp):
    """An update stage of `init`'s tensor over `update_axis` (see the module). Its output
    shares `init`'s buffer; its stage's loops are the reduce axes (`op.reduce_axis`) and it
    has no spatial axes (`op.axis == ()`)."""

    def __init__(self, name: str, axes: tuple[IterVar, ...], init: Tensor, body: UpdateBody,
                 output: Tensor | None = None):
        self.name = name
        self.axis: tuple[IterVar, ...] = ()
        self.is_recurrence = False
        self.init = init
        self.update_axis = tuple(axes)
        self._outputs = (output if output is not None else
                         Tensor(self, init.shape, init.dtype, name),)
        self.output = self._outputs[0]
        self.tag, self.attrs = "", {}
        self.set_body(body)

    def set_body(self, body) -> None:
        self.body = body
        self.reduce_axis = self.update_axis

    @property
    def bodies(self) -> tuple[Expr, ...]:
        return (self.body,)

    def with_body(self, body: Expr) -> UpdateOp:
        op = UpdateOp(self.name, self.update_axis, self.init, body, self.output)
        op.tag, op.attrs = self.tag, self.attrs
        return op

    @property
    def input_tensors(self) -> list[Tensor]:
        """The init's tensor (written before the updates) and the tensors the index and
        value read."""
        return [self.init] + [t for t in super().input_tensors if t is not self.init]

    def __repr__(self) -> str:
        return f"update({self.name})"


ATOMIC_COMBINERS = {Add: "add", Max: "max", Min: "min"}


def atomic_form(op: UpdateOp) -> tuple[str, Expr] | None:
    """("add" | "max" | "min", operand) when the update's value is old + x, max(old, x)
    or min(old, x) (either order) with x reading nothing of the updated tensor: an
    associative and commutative combiner, which may run as one atomic read-modify-write
    per point in any order. None otherwise."""
    body = op.body
    v = body.value
    kind = ATOMIC_COMBINERS.get(type(v))
    if kind is None or v.dtype != op.output.dtype:
        return None
    old = Load(op.output, body.index)
    for a, b in ((v.a, v.b), (v.b, v.a)):
        if isinstance(a, Load) and a.buffer is op.output and \
                [expr_str(i) for i in a.indices] == [expr_str(i) for i in old.indices] and \
                not any(isinstance(e, Load) and e.buffer is op.output for e in walk(b)):
            return kind, b
    return None


def _names(fn, n: int, who: str, argname: str, skip: int) -> None:
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return
    if any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in params):
        return
    pos = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if len(pos) != n + skip:
        raise TensorlangError(f"{who}: {argname} takes {len(pos)} arguments but "
                              f"{'old and ' if skip else ''}{n} reduce axes are passed")


@deep
def update(T: Tensor, axes, index, value, name: str | None = None) -> Tensor:
    """The tensor U: T, then U[index(*r)] = value(U[index(*r)], *r) for each point r of
    the reduce `axes` in lexicographic order (Halide's update definition over an RDom).

    `index(*r)` returns a tuple of T.ndim integer expressions (one may be given bare for a
    1-d T); it may read tensors (a data-dependent write, checked at run time against U's
    bounds). `value(old, *r)` returns the new value; reads of T inside `index` or `value`
    stand for U's current values. Schedule U's loops with `s[U]` (the axes are its loops,
    serial by default); `s[U.op.init]` is the stage computing U's first value.
    `s[U].parallel(r, atomic=True)` runs an update of the form old + x, max(old, x) or
    min(old, x) in parallel with atomic read-modify-writes.

    >>> im = placeholder((4, 3), dtype="int32", name="im")
    >>> zero = compute((8,), lambda i: 0, name="zero")
    >>> x, y = reduce_axis(4, "x"), reduce_axis(3, "y")
    >>> hist = update(zero, [x, y], index=lambda x, y: im[x, y], value=lambda old, x, y: old + 1,
    ...               name="hist")
    >>> hist.op.body
    [im[x, y]] <- hist[im[x, y]] + 1
    """
    who = f"update {name}" if name else "update"
    if not isinstance(T, Tensor):
        raise TensorlangError(f"{who}: T must be a tensor, got {T!r}")
    if name is None:
        name = f"{T.name}_update"
    if not isinstance(name, str) or not name.isidentifier():
        raise TensorlangError(f"update: name must be an identifier, got {name!r}")
    who = f"update {name}"
    if T.ndim == 0:
        raise TensorlangError(f"{who}: T {T.name} is 0-dimensional; update a tensor with at "
                              "least one dimension")
    axs = list(axes) if isinstance(axes, (list, tuple)) else [axes]
    if not axs:
        raise TensorlangError(f"{who}: axes must name at least one tl.reduce_axis")
    for a in axs:
        if not isinstance(a, IterVar) or a.kind != IterVar.REDUCE:
            raise TensorlangError(f"{who}: axes must be tl.reduce_axis(...) values, got {a!r}")
    if len({a.name for a in axs}) != len(axs):
        raise TensorlangError(f"{who}: axis names must differ, got {[a.name for a in axs]}")
    for a in axs:
        stray = (set(_free(a.min)) | set(_free(a.extent))) & {b.name for b in axs}
        if stray:
            raise NotImplementedError(f"{who}: reduce_axis {a.name} has bounds depending on "
                                      f"{sorted(stray)}; only rectangular update domains are "
                                      "supported (guard the value with tl.if_then_else)")
    if not callable(index) or not callable(value):
        raise TensorlangError(f"{who}: index and value must be functions of the reduce axes "
                              "(value: of old, then the axes)")
    _names(index, len(axs), who, "index", 0)
    _names(value, len(axs), who, "value", 1)
    init = _init_tensor(T, name)
    op = UpdateOp(name, tuple(axs), init, UpdateBody((), Var("_", T.dtype), T.dtype))
    U = op.output

    def own(e: Expr) -> Expr:
        """Reads of T (and of the init) are reads of U's current values."""
        return map_expr(e, lambda x: Load(U, x.indices) if isinstance(x, Load) and
                        (x.buffer is T or x.buffer is init) else None)

    idx = index(*axs)
    if not isinstance(idx, (tuple, list)):
        idx = (idx,)
    if len(idx) != T.ndim:
        raise TensorlangError(f"{who}: index returned {len(idx)} indices but {T.name} has "
                              f"{T.ndim} dimensions")
    idx_e = []
    for d, ix in enumerate(idx):
        e = to_expr(ix, f"{who} index {d}")
        if not e.dtype.is_int:
            raise TensorlangError(f"{who}: index {d} must be an integer expression, got "
                                  f"{e.dtype}")
        idx_e.append(own(e))
    old = Load(U, tuple(idx_e))
    v = value(old, *axs)
    if isinstance(v, (tuple, list)):
        raise TensorlangError(f"{who}: value must return one expression, got a tuple")
    v = own(to_expr(v, f"{who} value"))
    if v.dtype != T.dtype:
        v = v.astype(T.dtype)
    body = UpdateBody(tuple(idx_e), v, T.dtype)
    mine = {a.name for a in axs}
    for e in walk(body):
        if isinstance(e, (Reduce, TupleBody, UpdateBody)) and e is not body:
            raise TensorlangError(f"{who}: index and value must be plain expressions; compute "
                                  "a reduction in a stage of its own and read it")
        if isinstance(e, ReduceVar) and e.name not in mine:
            raise TensorlangError(f"{who}: reduce axis {e.name} is not one of the update's "
                                  f"axes {sorted(mine)}")
    op.set_body(body)
    return U


def _free(e: Expr) -> list[str]:
    return [x.name for x in walk(e) if isinstance(x, Var)]


def _init_tensor(T: Tensor, name: str) -> Tensor:
    """The compute of an update's first value, stored in the update's buffer: T's own
    expression when T is a pure elementwise compute of one output (Halide's pure
    definition), else a copy of T (an input, a reduction, an earlier update ...)."""
    op = T.op
    axis = tuple(IterVar(Var(f"i{d}"), ext, IterVar.SPATIAL) for d, ext in enumerate(T.shape))
    pure = type(op) is ComputeOp and not op.is_recurrence and not op.reduce_axis and \
        len(op.outputs) == 1 and not isinstance(op.body, (Reduce, TupleBody)) and \
        getattr(op, "scan_update", None) is None
    if pure:     # the same variables by name: the body needs no substitution
        axis = tuple(IterVar(Var(a.name, a.dtype), a.extent, IterVar.SPATIAL) for a in op.axis)
        body = op.body
    else:
        body = Load(T, tuple(a.var for a in axis))
    init = ComputeOp(f"{name}_init", axis, body, T.dtype)
    return init.output
