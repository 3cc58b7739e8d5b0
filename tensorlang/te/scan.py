"""TVM's scan (`te.scan`): a state carried along the first axis, written as a recurrence.

`scan(init, update, state)` is the tensor S with S[t, ...] = init[t, ...] for the first
`init.shape[0]` steps and update[t, ...] after, where `update` reads `state` (standing for S
at earlier steps). It is not a second recurrence engine: the result is a `recurrence` whose
body is ``if_then_else(t < init.shape[0], init[t, ...], update's body)`` with the state's
reads turned into reads of S, so its dependences, legality checks and loops are those of
every recurrence. `init` stays a stage of its own (its copy into S's first rows costs one
pass over those rows); the stages between the state and `update` (a "multi-stage scan
cell", whose values at step t depend on step t - 1) are substituted into the body.
"""

from __future__ import annotations

from ..deep import deep
from ..errors import TensorlangError
from ..ir.expr import Load, same, select
from ..ir.visit import map_expr, substitute, walk
from .tensor import ComputeOp, PlaceholderOp, Tensor, _check_body


def _one(value, argname: str, who: str) -> Tensor:
    """A tensor argument, or a list of one (TVM passes lists for several states)."""
    if isinstance(value, (list, tuple)):
        if len(value) != 1:
            raise NotImplementedError(
                f"{who}: a scan over several states ({argname} has {len(value)}) is not "
                "supported yet; scan each state on its own where they do not read each other")
        value = value[0]
    if not isinstance(value, Tensor):
        raise TensorlangError(f"{who}: {argname} must be a tensor, got {value!r}")
    return value


def _reads(op, tensors: set[int]) -> bool:
    return any(isinstance(e, Load) and id(e.buffer) in tensors for e in walk(op.body))


def _cell(update: Tensor, state: Tensor) -> list[ComputeOp]:
    """The computes between `state` and `update` (update's op first): those that read the
    state, directly or through one another."""
    order: list = []
    seen: set[int] = set()

    def visit(op) -> None:
        if id(op) in seen or not isinstance(op, ComputeOp):
            return
        seen.add(id(op))
        for t in op.input_tensors:
            visit(t.op)
        order.append(op)

    visit(update.op)
    readers: set[int] = {id(state)}
    cell = []
    for op in order:              # producers before consumers
        if _reads(op, readers):
            cell.append(op)
            readers |= {id(t) for t in op.outputs}
    return [update.op] + [op for op in reversed(cell) if op is not update.op]


def _inline(body, op: ComputeOp):
    """`body` with loads of `op`'s tensor replaced by its expression at their indices."""
    out = op.output

    def fn(e):
        if isinstance(e, Load) and e.buffer is out:
            return substitute(op.body, {a.name: i for a, i in zip(op.axis, e.indices)})
        return None

    return map_expr(body, fn)


@deep
def scan(init, update, state_placeholder, inputs=None, name: str = "scan") -> Tensor:
    """TVM's `te.scan`: the tensor S of the state's shape with S[t, ...] = init[t, ...] for
    t < init.shape[0] and update[t, ...] after, where `update` reads `state_placeholder`
    at earlier steps (S's earlier rows). `inputs` (TVM's list of the tensors the cell reads)
    is checked for tensors only: the dependences are found from the bodies.

    Scheduling: `s[update]` is the scan's stage (its loops are update's axes, the first the
    sequential step); `s[init]` is init's own stage. Stages between the state and `update`
    are substituted into the scan and have no stage of their own.

    >>> m, n = var("m"), var("n")
    >>> X = placeholder((m, n), name="X")
    >>> s_state = placeholder((m, n))
    >>> s_init = compute((1, n), lambda _, i: X[0, i])
    >>> s_update = compute((m, n), lambda t, i: s_state[t - 1, i] + X[t, i])
    >>> scan(s_init, s_update, s_state, inputs=[X]).op.body    # cumulative sum over axis 0
    select(t < 1, compute[t, i], scan[t - 1, i] + X[t, i])
    """
    if not isinstance(name, str) or not name.isidentifier():
        raise TensorlangError(f"scan: name must be an identifier, got {name!r}")
    who = f"scan {name}"
    init = _one(init, "init", who)
    update = _one(update, "update", who)
    state = _one(state_placeholder, "state_placeholder", who)
    if inputs is not None:
        if isinstance(inputs, Tensor):
            inputs = [inputs]
        if not isinstance(inputs, (list, tuple)) or \
                not all(isinstance(t, Tensor) for t in inputs):
            raise TensorlangError(f"{who}: inputs must be a list of tensors, got {inputs!r}")
    if not isinstance(state.op, PlaceholderOp):
        raise TensorlangError(f"{who}: state_placeholder must be a tl.placeholder standing "
                              f"for the scan's earlier steps, got {state.name}, a compute")
    for arg, t in (("init", init), ("update", update)):
        if not isinstance(t.op, ComputeOp) or t.op.is_recurrence or len(t.op.outputs) > 1:
            raise TensorlangError(f"{who}: {arg} must be a tl.compute of one output, got "
                                  f"{t.name}")
        if t.dtype != state.dtype:
            raise TensorlangError(f"{who}: {arg} has dtype {t.dtype} but the state has "
                                  f"{state.dtype}; make them the same")
        if t.ndim != state.ndim:
            raise TensorlangError(f"{who}: {arg} has {t.ndim} dimensions but the state has "
                                  f"{state.ndim}")
    if state.ndim == 0:
        raise TensorlangError(f"{who}: the state needs a first axis to scan along")
    for d in range(state.ndim):
        if not same(update.shape[d], state.shape[d]):
            raise TensorlangError(f"{who}: update's shape ({', '.join(map(str, update.shape))})"
                                  f" differs from the state's "
                                  f"({', '.join(map(str, state.shape))}) in dimension {d}")
        if d > 0 and not same(init.shape[d], state.shape[d]):
            raise TensorlangError(f"{who}: init's dimension {d} is {init.shape[d]} but the "
                                  f"state's is {state.shape[d]}; they differ only in the "
                                  "first (the steps init gives)")
    cell = _cell(update, state)
    if cell[0].reduce_axis:
        raise NotImplementedError(f"{who}: an update that is a reduction is not supported "
                                  "yet; reduce in a stage the update reads")
    body = cell[0].body
    for op in cell[1:]:
        if op.reduce_axis or op.is_recurrence or len(op.outputs) > 1:
            raise NotImplementedError(
                f"{who}: stage {op.name} of the scan's cell (between the state and the "
                "update) is a reduction, a recurrence or a tuple compute; only elementwise "
                "computes can be part of a scan's cell")
        body = _inline(body, op)
    if any(isinstance(e, Load) and e.buffer is init for e in walk(body)):
        raise TensorlangError(f"{who}: the update reads init {init.name}; read the state "
                              "instead (it holds init's rows)")
    axis = cell[0].axis
    op = ComputeOp(name, axis, None, state.dtype, is_recurrence=True)
    here = tuple(a.var for a in axis)

    def to_self(e):
        if isinstance(e, Load) and e.buffer is state:
            return Load(op.output, e.indices)
        return None

    body = map_expr(body, to_self)
    for e in walk(body):
        if isinstance(e, Load) and e.buffer is op.output and all(map(same, e.indices, here)):
            raise TensorlangError(f"{who}: the update reads the state at its own step "
                                  f"({state.name}[{', '.join(a.name for a in axis)}]); a "
                                  "scan reads only earlier steps, e.g. state[t - 1, ...]")
    first = Load(init, here)
    full = select(here[0] < init.shape[0], first, body)
    _check_body(full, axis, op.output.shape, who)
    op.set_body(full)
    # what `s[update]` and `s[X]` of a cell stage X mean for a schedule of this scan
    op.scan_update = update.op
    op.scan_cell = tuple(cell[1:])
    return op.output
