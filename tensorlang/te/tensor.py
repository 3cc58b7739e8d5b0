"""Tensors, iteration variables, the operations that produce tensors and the reduction
expression (`Reduce`, with its `CommReducer`) that a compute body may be; reduce.py makes
the reducers users call."""

from __future__ import annotations

import inspect
from dataclasses import dataclass

from ..deep import deep
from ..errors import TensorlangError
from ..ir.dtype import DType, as_dtype, int32
from ..ir.expr import Const, Expr, Load, ReduceVar, Var, as_expr, same
from ..ir.visit import free_vars, substitute, walk


def var(name: str = "n", dtype: str | DType = "int32") -> Var:
    """A symbolic size or scalar parameter, bound from the arguments' shapes at call time."""
    if not isinstance(name, str) or not name.isidentifier():
        raise TensorlangError(f"var: name must be an identifier, got {name!r}")
    d = as_dtype(dtype, "var dtype")
    if not d.is_int:
        raise TensorlangError(f"var: dtype must be an integer type, got {d}")
    return Var(name, d)


def size_var(name: str = "n", dtype: str | DType = "int32") -> Var:
    """TVM's `te.size_var`: a symbolic size (`var`)."""
    return var(name, dtype)


class IterVar:
    """An axis of a stage: a variable with a range [min, min + extent) and a kind.

    It can be used like an expression inside compute bodies (it stands for its variable).
    """

    SPATIAL = "spatial"
    REDUCE = "reduce"

    def __init__(self, var: Var, extent: Expr, kind: str, min: Expr | None = None):
        self.var = var
        self.min = min if min is not None else Const(0, int32)
        self.extent = extent
        self.kind = kind

    @property
    def name(self) -> str:
        return self.var.name

    @property
    def dtype(self) -> DType:
        return self.var.dtype

    def __repr__(self) -> str:
        return f"IterVar({self.name}, range({self.min}, {self.min + self.extent}), {self.kind})"

    def __hash__(self) -> int:
        return id(self)

    def __eq__(self, other):
        if isinstance(other, IterVar):
            return self is other
        return self.var == other

    def __bool__(self) -> bool:
        return True

    def __tl_expr__(self) -> Var:
        return self.var


def _delegate(op: str):
    def method(self, *args):
        return getattr(self.var, op)(*args)

    method.__name__ = op
    return method


for _op in ("__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__", "__truediv__",
            "__rtruediv__", "__floordiv__", "__rfloordiv__", "__mod__", "__rmod__", "__neg__",
            "__lt__", "__le__", "__gt__", "__ge__", "__ne__", "__pow__", "astype"):
    setattr(IterVar, _op, _delegate(_op))


def to_expr(value: object, argname: str = "value") -> Expr:
    """Convert an IterVar, Expr or number into an Expr."""
    if isinstance(value, IterVar):
        return value.var
    if isinstance(value, Tensor):
        if value.ndim == 0:
            return value[()]
        raise TensorlangError(f"{argname}: a tensor {value.name} was used where a scalar "
                              "expression was expected; index it, e.g. A[i]")
    return as_expr(value)


def reduce_axis(dom, name: str = "k") -> IterVar:
    """A reduction axis over `dom`: an extent `n` or a range `(min, max)`."""
    if isinstance(dom, (tuple, list)):
        if len(dom) != 2:
            raise TensorlangError(f"reduce_axis: dom must be (min, max) or an extent, got {dom}")
        lo, hi = to_expr(dom[0], "reduce_axis dom"), to_expr(dom[1], "reduce_axis dom")
    else:
        lo, hi = Const(0, int32), to_expr(dom, "reduce_axis dom")
    for b in (lo, hi):
        if not b.dtype.is_int:
            raise TensorlangError(f"reduce_axis: bounds must be integers, got {b.dtype}")
    if not isinstance(name, str) or not name.isidentifier():
        raise TensorlangError(f"reduce_axis: name must be an identifier, got {name!r}")
    from ..ir.simplify import simplify

    extent = simplify(hi - lo)
    if isinstance(extent, Const) and extent.value < 0:
        raise TensorlangError(f"reduce_axis: empty range ({lo}, {hi})")
    return IterVar(ReduceVar(name, int32), extent, IterVar.REDUCE, min=lo)


# --------------------------------------------------------------------------- reductions
@dataclass(frozen=True, eq=False)
class CommReducer:
    """combine(lhs, rhs) -> result over tuples of values, with an identity element each.

    `lhs` and `rhs` are variables standing for the accumulator and the new value; `result`
    is written in terms of them. The combiner must be associative and commutative: schedules
    may reorder the updates of a reduction.
    """

    name: str
    lhs: tuple[Var, ...]
    rhs: tuple[Var, ...]
    result: tuple[Expr, ...]
    identity: tuple[Expr, ...]

    def combine(self, acc: tuple[Expr, ...], value: tuple[Expr, ...]) -> tuple[Expr, ...]:
        m = {v.name: a for v, a in zip(self.lhs, acc)}
        m.update({v.name: b for v, b in zip(self.rhs, value)})
        return tuple(substitute(r, m) for r in self.result)


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Reduce(Expr):
    """combiner over `axis` of `source` (where `where` holds); the value is result[value_index]."""

    combiner: CommReducer
    source: tuple[Expr, ...]
    axis: tuple[IterVar, ...]
    where: Expr
    value_index: int
    dtype: DType

    def rebuild(self, kids: tuple[Expr, ...]) -> Reduce:
        n = len(self.source)
        return Reduce(self.combiner, tuple(kids[:n]), self.axis, kids[n], self.value_index,
                      self.dtype)

    def _print(self, fmt) -> str:
        axes = ", ".join(a.name for a in self.axis)
        src = ", ".join(fmt(s) for s in self.source)
        where = "" if isinstance(self.where, Const) and self.where.value else \
            f", where={fmt(self.where)}"
        return f"{self.combiner.name}({src}, axis=[{axes}]{where})"


# ------------------------------------------------------------------------------ tensors
@dataclass(frozen=True, slots=True, eq=False, repr=False)
class TupleBody(Expr):
    """The body of a compute with several outputs: output j's value at the point is
    `values[j]` (TVM's tuple-valued compute). Not a value itself: it is only ever the whole
    body of a `ComputeOp`, whose statement stores each value into its own tensor."""

    values: tuple[Expr, ...]
    dtype: DType

    def rebuild(self, kids: tuple[Expr, ...]) -> TupleBody:
        return TupleBody(tuple(kids), self.dtype)

    def _print(self, fmt) -> str:
        return f"({', '.join(fmt(v) for v in self.values)})"


class Tensor:
    """The output of an operation: a multi-dimensional array of one dtype. An operation
    with several outputs (a tuple-valued compute) has one tensor per value; `value_index`
    says which (TVM's `Tensor.value_index`)."""

    def __init__(self, op: Operation, shape: tuple[Expr, ...], dtype: DType, name: str,
                 value_index: int = 0):
        self.op = op
        self.shape = shape
        self.dtype = dtype
        self.name = name
        self.value_index = value_index

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __getitem__(self, indices) -> Expr:
        if not isinstance(indices, tuple):
            indices = (indices,)
        if len(indices) != self.ndim:
            raise TensorlangError(
                f"{self.name} has {self.ndim} dimensions but was indexed with {len(indices)}"
            )
        out = []
        for d, ix in enumerate(indices):
            if isinstance(ix, slice):
                raise TensorlangError(f"{self.name}[...]: slices are not supported in tensor "
                                      "expressions; index each element")
            e = to_expr(ix, f"{self.name} index {d}")
            if not e.dtype.is_int:
                raise TensorlangError(
                    f"{self.name} index {d} must be an integer expression, got {e.dtype}"
                )
            ext = self.shape[d]
            if isinstance(e, Const) and (e.value < 0 or (isinstance(ext, Const)
                                                         and e.value >= ext.value)):
                raise TensorlangError(
                    f"{self.name}: constant index {e.value} is out of range for dimension {d} "
                    f"(extent {ext})"
                )
            out.append(e)
        return Load(self, tuple(out))

    def __repr__(self) -> str:
        return f"Tensor({self.name}, shape=({', '.join(map(str, self.shape))}), {self.dtype})"

    def __hash__(self) -> int:
        return id(self)

    def __eq__(self, other) -> bool:
        return self is other

    def __bool__(self) -> bool:
        return True

    def __iter__(self):
        raise TensorlangError(f"tensor {self.name} is not iterable; index it with [...]")

    def __tl_expr__(self) -> Expr:
        """A 0-d tensor in an expression stands for its value (`C[i, j] + bias`, as TVM
        writes a scalar); others must be indexed."""
        return to_expr(self, f"tensor {self.name}")


class Operation:
    name: str
    output: Tensor

    @property
    def outputs(self) -> tuple[Tensor, ...]:
        """Every tensor the operation produces (one, or one per value of a tuple compute)."""
        return (self.output,)

    @property
    def num_outputs(self) -> int:
        return len(self.outputs)

    @property
    def input_tensors(self) -> list[Tensor]:
        return []


class PlaceholderOp(Operation):
    def __init__(self, name: str, shape: tuple[Expr, ...], dtype: DType):
        self.name = name
        self.output = Tensor(self, shape, dtype, name)
        self.axis: tuple[IterVar, ...] = ()
        self.reduce_axis: tuple[IterVar, ...] = ()

    def __repr__(self) -> str:
        return f"placeholder({self.name})"


class ComputeOp(Operation):
    """out[axis] = body, where body may be a Reduce over reduce_axis.

    With several outputs (`dtypes` has one entry per output), the body is a `TupleBody`
    (output j is its value j) or a `Reduce` whose combiner has one value per output (output
    j is the combiner's value j); every output has the shape of the axes and one loop nest
    computes them all."""

    # a scan's recurrence (te/scan.py): the update op whose stage it is, and the computes
    # of its cell that were substituted into it
    scan_update: ComputeOp | None = None
    scan_cell: tuple[ComputeOp, ...] = ()

    def __init__(self, name: str, axis: tuple[IterVar, ...], body: Expr | None, dtype: DType,
                 is_recurrence: bool = False, output: Tensor | None = None,
                 dtypes: tuple[DType, ...] | None = None,
                 outputs: tuple[Tensor, ...] | None = None):
        self.name = name
        self.axis = axis
        self.is_recurrence = is_recurrence
        shape = tuple(a.extent for a in axis)
        # a schedule may rewrite a compute (inlining, caching) while it keeps its tensors
        if outputs is not None:
            self._outputs = outputs
        elif dtypes is not None and len(dtypes) > 1:
            self._outputs = tuple(Tensor(self, shape, d, f"{name}_v{j}", j)
                                  for j, d in enumerate(dtypes))
        else:
            self._outputs = (output if output is not None else
                             Tensor(self, shape, dtype, name),)
        self.output = self._outputs[0]
        self.tag, self.attrs = "", {}     # the user's labels (compute's tag=, attrs=)
        self.set_body(body)

    @property
    def outputs(self) -> tuple[Tensor, ...]:
        return self._outputs

    @property
    def bodies(self) -> tuple[Expr, ...]:
        """The expression of each output: a tuple body's values, or a tuple reduction with
        the value index of each output."""
        b = self.body
        if isinstance(b, TupleBody):
            return b.values
        if isinstance(b, Reduce) and len(self._outputs) > 1:
            return tuple(Reduce(b.combiner, b.source, b.axis, b.where, j, t.dtype)
                         for j, t in enumerate(self._outputs))
        return (b,)

    def with_body(self, body: Expr) -> ComputeOp:
        """The same compute (axes, output tensors) with another body: a schedule's rewrite."""
        op = ComputeOp(self.name, self.axis, body, self.output.dtype, self.is_recurrence,
                       outputs=self._outputs)
        op.tag, op.attrs = self.tag, self.attrs
        op.scan_update, op.scan_cell = self.scan_update, self.scan_cell
        return op

    def set_body(self, body: Expr | None) -> None:
        self.body = body
        self.reduce_axis = body.axis if isinstance(body, Reduce) else ()

    @property
    def input_tensors(self) -> list[Tensor]:
        """Tensors read by the body, not counting a recurrence's reads of itself."""
        seen: dict[int, Tensor] = {}
        for e in walk(self.body):
            if isinstance(e, Load) and isinstance(e.buffer, Tensor) and \
                    all(e.buffer is not t for t in self._outputs):
                seen.setdefault(id(e.buffer), e.buffer)
        return list(seen.values())

    def __repr__(self) -> str:
        return f"compute({self.name})"


# ------------------------------------------------------------------------- constructors
def _check_shape(shape, who: str) -> tuple[Expr, ...]:
    if isinstance(shape, (int, Expr, IterVar)):
        shape = (shape,)
    if not isinstance(shape, (tuple, list)):
        raise TensorlangError(f"{who}: shape must be a tuple of sizes, got {shape!r}")
    out = []
    for d, s in enumerate(shape):
        if isinstance(s, bool) or not isinstance(s, (int, Expr, IterVar)):
            raise TensorlangError(f"{who}: shape[{d}] must be an int or tl.var, got {s!r}")
        e = to_expr(s)
        if not e.dtype.is_int:
            raise TensorlangError(f"{who}: shape[{d}] must be an integer, got {e.dtype}")
        if isinstance(e, Const) and e.value < 0:
            raise TensorlangError(f"{who}: shape[{d}] must be >= 0, got {e.value}")
        out.append(e)
    return tuple(out)


def placeholder(shape, dtype: str | DType = "float32", name: str = "placeholder") -> Tensor:
    """An input tensor of the given shape and dtype."""
    if not isinstance(name, str) or not name.isidentifier():
        raise TensorlangError(f"placeholder: name must be an identifier, got {name!r}")
    return PlaceholderOp(name, _check_shape(shape, f"placeholder {name}"),
                         as_dtype(dtype, f"placeholder {name} dtype")).output


def _axis_names(fcompute, ndim: int, who: str) -> list[str]:
    try:
        params = list(inspect.signature(fcompute).parameters.values())
    except (TypeError, ValueError):
        params = []
    if params and params[0].kind is inspect.Parameter.VAR_POSITIONAL:
        return [f"i{d}" for d in range(ndim)]
    names = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if len(names) != ndim:
        raise TensorlangError(
            f"{who}: fcompute takes {len(names)} index arguments but the shape has {ndim} "
            "dimensions"
        )
    return names


def _spatial_axes(kind: str, name: str, shape, fcompute, skip: int):
    """Check a compute's name, function and shape; its axes named after fcompute's
    parameters (the first `skip` parameters are not indices)."""
    who = f"{kind} {name}"
    if not isinstance(name, str) or not name.isidentifier():
        raise TensorlangError(f"{kind}: name must be an identifier, got {name!r}")
    if not callable(fcompute):
        raise TensorlangError(f"{who}: fcompute must be callable, got {fcompute!r}")
    shape = _check_shape(shape, who)
    names = _axis_names(fcompute, len(shape) + skip, who)[skip:]
    if len(set(names)) != len(names):
        raise TensorlangError(f"{who}: index names must differ, got {names}")
    axis = tuple(IterVar(Var(n, int32), ext, IterVar.SPATIAL) for n, ext in zip(names, shape))
    return who, shape, axis


@deep
def compute(shape, fcompute, name: str = "compute", tag: str = "", attrs=None):
    """A tensor whose element at each index is `fcompute(*index)`. `tag` and `attrs` are
    kept on the operation (`op.tag`, `op.attrs`) for the user's own bookkeeping, as TVM's
    (TOPI's schedules dispatch on them); they do not change the computation.

    When `fcompute` returns a tuple, the result is a tuple of tensors (`name_v0`,
    `name_v1`, ...) computed by one stage: one loop nest stores every value at each point,
    and `B0.op is B1.op` (TVM's tuple outputs). A tuple of reductions must be the values
    of one tuple reducer (`tl.comm_reducer` over a tuple), as TVM's argmax.

    >>> A = placeholder((4,), name="A")
    >>> compute((4,), lambda i: A[i] * 2.0, name="B").op.body
    A[i] * 2.0
    >>> B0, B1 = compute((4,), lambda i: (A[i] + 1.0, A[i] * 3.0), name="B")
    >>> B0.op is B1.op, B1.name
    (True, 'B_v1')
    """
    who, shape, axis = _spatial_axes("compute", name, shape, fcompute, 0)
    body = fcompute(*axis)
    dtypes = None
    if isinstance(body, (tuple, list)):
        body, dtypes = _tuple_body(tuple(body), who)
    else:
        body = to_expr(body, f"{who} body")
    _check_body(body, axis, shape, who)
    if not isinstance(tag, str):
        raise TensorlangError(f"{who}: tag must be a string, got {tag!r}")
    if attrs is not None and not isinstance(attrs, dict):
        raise TensorlangError(f"{who}: attrs must be a dict, got {type(attrs).__name__}")
    op = ComputeOp(name, axis, body, body.dtype, dtypes=dtypes)
    op.tag, op.attrs = tag, dict(attrs or {})
    return op.outputs if dtypes is not None and len(dtypes) > 1 else op.output


def _tuple_body(values: tuple, who: str) -> tuple[Expr, tuple[DType, ...]]:
    """The body of a compute whose fcompute returned a tuple, and its outputs' dtypes."""
    if not values:
        raise TensorlangError(f"{who}: fcompute returned an empty tuple; return at least "
                              "one value")
    vals = tuple(to_expr(v, f"{who} body value {j}") for j, v in enumerate(values))
    if len(vals) == 1:
        return vals[0], (vals[0].dtype,)
    reds = [v for v in vals if isinstance(v, Reduce)]
    if not reds:
        return TupleBody(vals, vals[0].dtype), tuple(v.dtype for v in vals)
    first = reds[0]
    n = len(first.combiner.identity)
    if len(reds) != len(vals) or len(vals) != n or any(
            r.combiner is not first.combiner or r.source is not first.source
            or r.axis != first.axis or r.where is not first.where for r in reds) or \
            [r.value_index for r in reds] != list(range(n)):
        raise TensorlangError(
            f"{who}: a tuple of reductions must be every value of one tuple reducer, in "
            "order (idx, val = compute(..., lambda i: argmax((A0[i, k], A1[i, k]), axis=k))); "
            "compute other reductions in stages of their own")
    return first, tuple(r.dtype for r in reds)


@deep
def recurrence(shape, fcompute, dtype: str | DType = "float32",
               name: str = "recurrence") -> Tensor:
    """A tensor whose elements may read its own earlier elements: `fcompute(self, *index)`.

    Its meaning is sequential: the elements are computed in lexicographic order of the
    indices, so a read of `self` must name an element earlier in that order (checked
    exactly with isl when the schedule is created). Guard boundary reads with
    `tl.if_then_else`: only the arm that is taken reads.

    >>> x = placeholder((8,), name="x")
    >>> y = recurrence((8,), lambda y, i: if_then_else(i > 0, y[i - 1], 0.0) + x[i], name="y")
    """
    who, shape, axis = _spatial_axes("recurrence", name, shape, fcompute, 1)
    names = [a.name for a in axis]
    d = as_dtype(dtype, f"{who} dtype")
    op = ComputeOp(name, axis, None, d, is_recurrence=True)
    body = fcompute(op.output, *axis)
    if isinstance(body, (tuple, list)):
        raise NotImplementedError(f"{who}: recurrences with several outputs are not supported")
    body = to_expr(body, f"{who} body")
    if body.dtype != d:
        if isinstance(body, Reduce):
            raise TensorlangError(f"{who}: the reduction has dtype {body.dtype} but the "
                                  f"recurrence is declared {d}; pass dtype={body.dtype.name!r}")
        body = body.astype(d)
    _check_body(body, axis, shape, who)
    here = tuple(a.var for a in axis)
    for e in walk(body):
        if isinstance(e, Load) and e.buffer is op.output and \
                len(e.indices) == len(here) and all(map(same, e.indices, here)):
            raise TensorlangError(
                f"{who}: reads its own element {name}[{', '.join(names)}], which it is "
                "computing; a recurrence may read only earlier elements"
            )
    op.set_body(body)
    return op.output


def _check_body(body: Expr, axis: tuple[IterVar, ...], shape, who: str) -> None:
    spatial = {a.name for a in axis}
    reduce_names: set[str] = set()
    if isinstance(body, Reduce):
        for r in body.axis:
            if r.name in spatial or r.name in reduce_names:
                raise TensorlangError(
                    f"{who}: axis name {r.name!r} is used twice; give reduce_axis a distinct name"
                )
            reduce_names.add(r.name)
            stray = (free_vars(r.min) | free_vars(r.extent)) & (spatial | reduce_names)
            if stray:
                raise NotImplementedError(
                    f"{who}: reduce_axis {r.name} has bounds depending on {sorted(stray)}; "
                    "non-rectangular reductions are not supported yet (use where=)"
                )
    for e in walk(body):
        if isinstance(e, Reduce) and e is not body:
            raise TensorlangError(
                f"{who}: a reduction (tl.sum, tl.max, ...) must be the whole body of a compute; "
                "compute it in its own stage and combine the stages"
            )
        if isinstance(e, ReduceVar) and e.name not in reduce_names:
            raise TensorlangError(
                f"{who}: reduce axis {e.name} is used outside a reduction over it; wrap the "
                f"body in tl.sum(..., axis={e.name}) or another reducer"
            )
    size_vars: set[str] = set()
    for s in shape:
        size_vars |= free_vars(s)
    clash = spatial & size_vars
    if clash:
        raise TensorlangError(f"{who}: index name(s) {sorted(clash)} clash with a size variable")
