"""isl's expressions as loop IR: the translation of an isl AST expression (shared by the
AST translator, astgen.py, and the placement of buffers), and IR expressions for isl's
piecewise quasi-affine functions and sets."""

from __future__ import annotations

import islpy as isl

from ..errors import TensorlangError
from ..ir.dtype import bool_, int64
from ..ir.expr import (
    EQ, GE, GT, LE, LT, NE, Add, And, Const, Expr, FloorDiv, FloorMod, Max, Min, Mul, Or, Sub,
    Var, binary, compare, select,
)
from ..ir.simplify import simplify

_OPS = {
    isl.ast_expr_op_type.add: Add, isl.ast_expr_op_type.sub: Sub, isl.ast_expr_op_type.mul: Mul,
    isl.ast_expr_op_type.fdiv_q: FloorDiv, isl.ast_expr_op_type.pdiv_q: FloorDiv,
    isl.ast_expr_op_type.div: FloorDiv, isl.ast_expr_op_type.pdiv_r: FloorMod,
    isl.ast_expr_op_type.zdiv_r: FloorMod, isl.ast_expr_op_type.min: Min,
    isl.ast_expr_op_type.max: Max,
}
_CMPS = {isl.ast_expr_op_type.eq: EQ, isl.ast_expr_op_type.le: LE, isl.ast_expr_op_type.lt: LT,
         isl.ast_expr_op_type.ge: GE, isl.ast_expr_op_type.gt: GT}
_LOGIC = {isl.ast_expr_op_type.and_: And, isl.ast_expr_op_type.and_then: And,
          isl.ast_expr_op_type.or_: Or, isl.ast_expr_op_type.or_else: Or}


def truth(e: Expr) -> Expr:
    """A condition from isl's AST as a bool expression: isl writes `true` as the integer
    1 (`x >= y + 1288 || 1` after a fuse), which the code generators cannot `or`."""
    if e.dtype.is_bool:
        return e
    if isinstance(e, Const):
        return Const(bool(e.value), bool_)
    return compare(NE, e, Const(0, e.dtype))


def ast_expr(e: isl.AstExpr, env: dict[str, Expr], params: dict[str, Var]) -> Expr:
    """The IR expression of isl AST expression `e`; `env` names its iterators, `params`
    its parameters."""
    t = e.get_type()
    if t == isl.ast_expr_type.int:
        return Const(e.get_val().to_python(), int64)
    if t == isl.ast_expr_type.id:
        name = e.get_id().get_name()
        if name in env:
            return env[name]
        if name in params:
            return params[name]
        raise TensorlangError(f"internal: unknown isl identifier {name}")
    op = e.get_op_type()
    args = [ast_expr(e.get_op_arg(i), env, params) for i in range(e.get_op_n_arg())]
    if op in _OPS:
        out = args[0]
        for a in args[1:]:
            out = binary(_OPS[op], out, a)
        return out
    if op == isl.ast_expr_op_type.minus:
        return binary(Sub, Const(0, int64), args[0])
    if op in _CMPS:
        return compare(_CMPS[op], args[0], args[1])
    if op in _LOGIC:
        return _LOGIC[op](truth(args[0]), truth(args[1]))
    if op in (isl.ast_expr_op_type.select, isl.ast_expr_op_type.cond):
        return select(truth(args[0]), args[1], args[2])
    raise TensorlangError(f"internal: unsupported isl AST operation {op}")


def _as_params(obj, names: list[str]):
    """`obj` (a PwAff or Set) with its dimensions moved to parameters of the given names."""
    kind = isl.dim_type.in_ if isinstance(obj, isl.PwAff) else isl.dim_type.set
    n = obj.dim(kind)
    npar = obj.dim(isl.dim_type.param)
    q = obj.move_dims(isl.dim_type.param, npar, kind, 0, n)
    for d, nm in enumerate(names):
        q = q.set_dim_id(isl.dim_type.param, npar + d, isl.Id(nm))
    return q


def _ast_expr(ast: isl.AstExpr, dims: dict[str, Expr], params: dict[str, Var]) -> Expr:
    return simplify(ast_expr(ast, dict(dims), params))


def pw_aff_expr(pa: isl.PwAff, dims: dict[str, Expr], params: dict[str, Var],
                names: list[str] | None = None) -> Expr:
    """An IR expression for a piecewise quasi-affine function of named dimensions (`names`
    overrides the names of pa's input dimensions)."""
    if names is None:
        names = [pa.get_dim_name(isl.dim_type.in_, d) for d in range(pa.dim(isl.dim_type.in_))]
    q = _as_params(pa, names)
    build = isl.AstBuild.from_context(isl.Set.universe(q.get_domain_space()))
    return _ast_expr(build.expr_from_pw_aff(q), dims, params)


def set_expr(s: isl.Set, dims: dict[str, Expr], params: dict[str, Var],
             names: list[str]) -> Expr:
    """An IR condition that holds exactly at the points of `s` (dimensions named `names`)."""
    q = _as_params(s, names)
    build = isl.AstBuild.from_context(isl.Set.universe(q.get_space()))
    return _ast_expr(build.expr_from_set(q), dims, params)
