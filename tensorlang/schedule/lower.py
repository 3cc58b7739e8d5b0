"""lower(): a schedule and its arguments -> a checked loop nest (LoweredFunc)."""

from __future__ import annotations

from dataclasses import dataclass, field

import islpy as isl

from ..config import debug_print, timed
from ..errors import TensorlangError
from ..ir.dtype import int64
from ..ir.expr import Expr, Load, Var
from ..ir.printer import expr_str, stmt_str
from ..ir.simplify import simplify
from ..ir.stmt import Allocate, Buffer, Stmt
from ..ir.visit import free_vars, map_expr, map_stmt, substitute, walk
from ..polyhedral.model import access_relations
from ..polyhedral import (
    BoundsViolation, accumulator_buffers, check_bounds, generate_loops, stage_statements,
    statement_times,
)
from ..te.tensor import ComputeOp, Tensor
from .schedule import Schedule


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


def _stage_vars(op: ComputeOp) -> set[str]:
    return {a.name for a in op.axis} | {a.name for a in op.reduce_axis}


def program_params(schedule: Schedule) -> tuple[list[str], set[str]]:
    """All scalar variables of the program (first-use order) and those that are sizes."""
    order: dict[str, None] = {}
    sizes: set[str] = set()
    tensors = list(schedule.placeholders) + [st.op.output for st in schedule.stages]
    for t in tensors:
        for s in t.shape:
            for n in free_vars(s):
                order.setdefault(n, None)
                sizes.add(n)
    for st in schedule.stages:
        for a in st.op.reduce_axis:
            for n in free_vars(a.min) | free_vars(a.extent):
                order.setdefault(n, None)
                sizes.add(n)
        own = _stage_vars(st.op)
        for e in walk(st.op.body):
            if isinstance(e, Var) and e.name not in own:
                order.setdefault(e.name, None)
    return list(order), sizes


def isl_params_text(schedule: Schedule) -> str:
    return ", ".join(program_params(schedule)[0])


def _context(params: list[str], sizes: set[str]) -> isl.Set:
    conds = " and ".join(f"{p} >= 0" for p in params if p in sizes) or "1 = 1"
    return isl.Set(f"[{', '.join(params)}] -> {{ : {conds} }}")


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
    known = {id(p) for p in s.placeholders} | {id(st.op.output) for st in s.stages}
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


def lower(s: Schedule, args, name: str = "main") -> LoweredFunc:
    """Check the schedule and generate its loop nest.

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
    with timed("lower"):
        names, sizes = program_params(s)
        ptext = ", ".join(names)
        params = {n: Var(n, int64) for n in names}
        context = _context(names, sizes)

        # one buffer per tensor; intermediate results and extra accumulators are allocated
        used_names: set[str] = set()

        def fresh(n: str) -> str:
            k, out = 1, n
            while out in used_names:
                out, k = f"{n}_{k}", k + 1
            used_names.add(out)
            return out

        def pshape(shape) -> tuple[Expr, ...]:
            return tuple(simplify(substitute(x, params)) for x in shape)

        bufs: dict[int, Buffer] = {}
        arg_bufs: list[Buffer] = []
        for a in args:
            if isinstance(a, Tensor):
                b = Buffer(fresh(a.name), pshape(a.shape), a.dtype)
                bufs[id(a)] = b
                arg_bufs.append(b)
        allocs: list[Buffer] = []
        statements = []
        accs: dict[str, tuple] = {}
        for st in s.stages:
            acc = accumulator_buffers(st.op)
            accs[st.id] = acc
            for t in acc:
                if id(t) not in bufs:
                    b = Buffer(fresh(t.name), pshape(t.shape), t.dtype)
                    bufs[id(t)] = b
                    allocs.append(b)
            statements.extend(stage_statements(st.id, st.op, st.state, acc))
        debug_print(4, "isl domains", "\n".join(f"{x.name}: {x.domain}" for x in statements))

        with timed("accesses and bounds check"):
            shapes = {k: b.shape for k, b in bufs.items()}
            names_of = {k: b.name for k, b in bufs.items()}
            access = access_relations(statements, names_of, shapes, ptext)
            violations = check_bounds(statements, access, context)
        debug_print(4, "isl accesses", f"reads: {access.reads}\nwrites: {access.writes}")

        with timed("isl ast"):
            states = {st.id: st.state for st in s.stages}
            order = [st.id for st in s.stages]
            timed_stmts = statement_times(states, statements, order)
            debug_print(4, "isl schedule", "\n".join(str(t.time) for t in timed_stmts))
            body = generate_loops(timed_stmts, context, params)
        body = _replace_buffers(body, bufs)
        for b in reversed(allocs):
            body = Allocate(b, body)
    scalar_args = [a for a in args if isinstance(a, Var)]
    for a in scalar_args:
        if a.name not in params:
            raise TensorlangError(f"args: the variable {a.name} is not used by the schedule")
    f = LoweredFunc(name, args, arg_bufs, [params[n] for n in names], body, violations, ptext,
                    access.reads, access.writes)
    debug_print(2, "loop nest", f)
    return f

