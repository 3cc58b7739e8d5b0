"""Scalar expressions, dtypes and loop statements: what te builds on and backends read."""

from .dtype import DType, as_dtype, promote  # noqa: F401
from .expr import *  # noqa: F401,F403
from .printer import expr_str, stmt_str  # noqa: F401
from .simplify import simplify, simplify_stmt  # noqa: F401
from .stmt import Allocate, Buffer, For, If, Let, LoopKind, Seq, Stmt, Store, seq  # noqa: F401
from .visit import free_vars, map_expr, map_stmt, rebuild, substitute, walk, walk_stmt  # noqa: F401
