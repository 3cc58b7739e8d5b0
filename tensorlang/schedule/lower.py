"""lower(): a schedule and its arguments -> a checked loop nest (LoweredFunc)."""

from __future__ import annotations

from dataclasses import dataclass, field

import islpy as isl

from ..deep import deep
from ..config import debug_print, timed
from ..errors import ScheduleError, TensorlangError
from ..ir.expr import Const, Expr, Load, Var
from ..ir.printer import expr_str, stmt_str
from ..ir.stmt import Allocate, Buffer, ExternCall, Stmt, Store, TensorCall
from ..ir.visit import map_expr, map_stmt, walk_stmt
from ..ir.gpu_block import has_gpu_loops
from ..ir.gpu_block import prepare as prepare_blocks
from ..polyhedral import BoundsViolation, generate_loops, timed_statements
from ..polyhedral.checks import strip_index_checks
from ..te.tensor import Tensor
from .schedule import Schedule
from .tensorize import expand as expand_tensorized
from .tensorize import plans as tensorize_plans
from .update import atomic_stores


@dataclass
class LoweredFunc:
    """A loop nest ready for a backend; `str()` shows it like Python.

    The C ABI of the built kernel: one pointer per tensor in `args` order, then one int64
    per entry of `params` (sizes and scalars), in that order.
    """

    name: str
    args: list[object]                 # Tensor or Var, as the user gave them
    buffers: list[Buffer]              # one per tensor argument, in order
    params: list[Var]                  # int64 scalars passed after the buffers
    body: Stmt
    violations: list[BoundsViolation] = field(default_factory=list)
    param_text: str = ""
    reads: isl.UnionMap | None = None   # statement instance -> element read (may)
    writes: isl.UnionMap | None = None  # statement instance -> element written
    checks: list = field(default_factory=list)  # CheckSite of each IndexCheck in body
    refuse: Expr | None = None          # sizes under which some read leaves its tensor
    # product parameters of isl's model (`n * m` in a shape or extent): name -> factors;
    # the kernel computes them from their factors, so they are not in `params`
    products: dict = field(default_factory=dict)

    def __str__(self) -> str:
        sig = []
        for b in self.buffers:
            sig.append(f"{b.name}: {b.dtype}[{', '.join(expr_str(s) for s in b.shape)}]")
        for a in self.args:
            if isinstance(a, Var):
                sig.append(f"{a.name}: {a.dtype}")
        head = f"def {self.name}({', '.join(sig)}):"
        return head + "\n" + stmt_str(self.body, 1)

    __repr__ = __str__


def _check_args(s: Schedule, args) -> list[object]:
    if not isinstance(args, (list, tuple)):
        raise TensorlangError(f"args: expected a list of tensors (and size vars), got {args!r}")
    seen: set[int] = set()
    for a in args:
        if not isinstance(a, (Tensor, Var)):
            raise TensorlangError(f"args: expected tensors or tl.var, got {a!r}")
        if id(a) in seen:
            raise TensorlangError(f"args: {a.name} is listed twice")
        seen.add(id(a))
    tensors = {id(a) for a in args if isinstance(a, Tensor)}
    for p in s.placeholders:
        if id(p) not in tensors:
            raise TensorlangError(f"args: the input {p.name} is read but not in args")
    for o in s.outputs:
        if id(o) not in tensors:
            raise TensorlangError(f"args: the output {o.name} is not in args")
    known = {id(p) for p in s.placeholders} | {id(t) for st in s.stages
                                                   for t in st.op.outputs}
    for a in args:
        if isinstance(a, Tensor) and id(a) not in known:
            raise TensorlangError(f"args: {a.name} is not part of this schedule")
    return list(args)


def _replace_buffers(s: Stmt, bufs: dict[int, Buffer]) -> Stmt:
    """Tensors (and accumulators) in loads and stores -> their buffers."""
    def fn(x: Expr) -> Expr | None:
        if isinstance(x, Load) and id(x.buffer) in bufs:
            return Load(bufs[id(x.buffer)], x.indices)
        return None

    return map_stmt(s, lambda e: map_expr(e, fn), lambda b: bufs.get(id(b), b))


def _stored_buffers(body: Stmt) -> set[int]:
    """ids of the tensors (and buffers) that the loop nest stores to (or an extern call
    writes)."""
    out: set[int] = set()
    for x in walk_stmt(body):
        if isinstance(x, Store):
            out.add(id(x.buffer))
        elif isinstance(x, (ExternCall, TensorCall)):
            out.update(id(b) for b in x.outputs)
    return out


def refusal(violations, params: list[Var], products: dict | None = None) -> Expr | None:
    """The condition on the sizes under which some read leaves its tensor (None: never),
    as an IR expression: isl's set of bad sizes, translated where isl lives (a product
    parameter is the product of its factors)."""
    from ..polyhedral.placement import set_expr

    bad = None
    pmap: dict = {p.name: p for p in params}
    for p, fs in (products or {}).items():
        e = pmap[fs[0]]
        for f in fs[1:]:
            e = e * pmap[f]
        pmap[p] = e
    for v in violations:
        cond = set_expr(v.where.params(), {}, pmap, [])
        bad = cond if bad is None else bad | cond
    return bad


@deep
def lower(s: Schedule, args, name: str = "main", checks: bool = True,
          simple_mode: bool = True) -> LoweredFunc:
    """Check the schedule and generate its loop nest. Indices that isl cannot prove in range
    (they read data) are checked when the kernel runs, unless `checks` is False.
    `simple_mode` is TVM's spelling; the result prints as the loop nest either way.

    >>> import tensorlang as tl
    >>> A = tl.placeholder((3,), name="A")
    >>> B = tl.compute((3,), lambda i: A[i] + 1.0, name="B")
    >>> print(tl.lower(tl.create_schedule(B), [A, B]))
    def main(A: float32[3], B: float32[3]):
      for i in range(3):
        B[i] = A[i] + 1.0
    """
    if not isinstance(s, Schedule):
        raise TensorlangError(f"lower: expected a Schedule from tl.create_schedule, got {s!r}")
    if not isinstance(name, str) or not name.isidentifier():
        raise TensorlangError(f"lower: name must be an identifier, got {name!r}")
    args = _check_args(s, args)
    if not isinstance(checks, bool):
        raise TensorlangError(f"lower: checks must be True or False, got {checks!r}")
    if not isinstance(simple_mode, bool):
        raise TensorlangError(f"lower: simple_mode must be True or False, got {simple_mode!r}")
    for st in s.stages:
        if st.state.attach is None and (isinstance(st.state.store, tuple) or st.state.folds):
            what = "store_at" if isinstance(st.state.store, tuple) else "fold_storage"
            raise ScheduleError(f"{what}: stage {st.id} is computed at root; store_at and "
                                "fold_storage apply to a stage computed at a loop "
                                f"(s[{st.id!r}].compute_at(...))")
    with timed("lower"):
        tensorized = tensorize_plans(s)
        prog = s.program
        params = prog.params
        bufs = prog.bufs
        arg_ids = {id(a) for a in args if isinstance(a, Tensor)}
        arg_bufs = [bufs[id(a)] for a in args if isinstance(a, Tensor)]
        inputs = {id(p) for p in s.placeholders}
        violations = prog.violations
        with timed("isl ast"):
            pl = prog.place({st.id: st.state for st in s.stages})
            timed_stmts = timed_statements(pl.entries + pl.barriers)
            debug_print(4, "isl schedule", "\n".join(str(t.time) for t in timed_stmts))
            body = generate_loops(timed_stmts, prog.context, params, pl.locals)
        if tensorized:
            body = expand_tensorized(body, tensorized, pl.locals)
        body = atomic_stores(body, s)
        used = _stored_buffers(body)
        # an update stage and its init share one buffer (two tensors, one Buffer)
        arg_buf_ids = {id(b) for b in arg_bufs}
        allocs = list({id(b): b for k, b in bufs.items()
                       if k not in arg_ids and k not in inputs and k in used
                       and id(b) not in arg_buf_ids}.values())
        body = _replace_buffers(body, bufs)
        if has_gpu_loops(body):     # reductions across threads, a block's phases
            body = prepare_blocks(body)
        if not checks:
            body = map_stmt(body, strip_index_checks)
        for b in reversed(allocs):
            body = Allocate(b, body)
        names = prog.names
        ptext = prog.ptext
        access = prog.access
    scalar_args = [a for a in args if isinstance(a, Var)]
    for a in scalar_args:
        if a.name not in params:
            raise TensorlangError(f"args: the variable {a.name} is not used by the schedule")
    plist = [params[n] for n in names if n not in prog.products]
    f = LoweredFunc(name, args, arg_bufs, plist, body, violations, ptext, access.reads,
                    access.writes, list(prog.sites) if checks else [],
                    refusal(violations, plist, prog.products), dict(prog.products))
    debug_print(2, "loop nest", f)
    return f



def run_lowered(f: LoweredFunc, arrays, sizes: dict[str, int] | None = None,
                parallel_order: str = "forward") -> None:
    """Run `tl.lower(s, args)`'s loop nest in the loop-IR interpreter on numpy arrays, one
    per tensor argument in `args` order (outputs written in place); symbolic sizes come from
    the arrays' shapes (or `sizes`). No compiler and no GPU are needed: a GPU schedule runs
    with CUDA's semantics (blocks in turn, a block's threads as coroutines between
    barriers), so a missing barrier gives a wrong result here too. Slow: for checking small
    cases, not for timing. `parallel_order="reverse"` runs parallel, vector and thread loops
    backwards, which exposes a loop that carries a dependence.

    >>> n = tl.var("n"); X = tl.placeholder((n,), name="X")
    >>> Y = tl.compute((n,), lambda i: X[i] * 2, name="Y"); s = tl.create_schedule(Y)
    >>> x, y = np.arange(3, dtype="float32"), np.zeros(3, "float32")
    >>> tl.run_lowered(tl.lower(s, [X, Y]), [x, y]); y
    array([0., 2., 4.], dtype=float32)
    """
    import numpy as np

    from ..ir.interp import run_lowered as interpret

    if not isinstance(f, LoweredFunc):
        raise TensorlangError(f"run_lowered: f must be a LoweredFunc (tl.lower(s, args)), got "
                              f"{type(f).__name__}")
    if not isinstance(arrays, (list, tuple)) or len(arrays) != len(f.buffers):
        names = ", ".join(b.name for b in f.buffers)
        raise TensorlangError(f"run_lowered: arrays must be a list of {len(f.buffers)} numpy "
                              f"arrays, one per tensor argument ({names}), got {arrays!r:.80}")
    if parallel_order not in ("forward", "reverse"):
        raise TensorlangError(f"run_lowered: parallel_order must be 'forward' or 'reverse', "
                              f"got {parallel_order!r}")
    for b, a in zip(f.buffers, arrays):
        if not isinstance(a, np.ndarray):
            raise TensorlangError(f"run_lowered: argument {b.name} must be a numpy array, got "
                                  f"{type(a).__name__}")
        if a.ndim != len(b.shape) or a.dtype != b.dtype.np:
            raise TensorlangError(f"run_lowered: argument {b.name} must be a {len(b.shape)}-d "
                                  f"{b.dtype} array, got {a.ndim}-d {a.dtype}")
        for d, (ext, got) in enumerate(zip(b.shape, a.shape)):
            if isinstance(ext, Const) and int(ext.value) != got:
                raise TensorlangError(f"run_lowered: argument {b.name}: dimension {d} must be "
                                      f"{int(ext.value)}, got {got}")
    if any(isinstance(x, TensorCall) for x in walk_stmt(f.body)):
        # a backend's instruction runs as its description computes it
        from dataclasses import replace as _replace

        from ..ir.visit import map_children
        from .tensorize import described

        def go(x):
            return described(x) if isinstance(x, TensorCall) else map_children(x, go)
        f = _replace(f, body=go(f.body))
    interpret(f, list(arrays), sizes, parallel_order)
