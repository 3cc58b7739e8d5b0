"""A pure-Python interpreter of the loop IR: the reference that schedules are tested against.

Slow and simple on purpose. Values are numpy scalars of each expression's dtype (so integer
wrap-around and float rounding match compiled code for the basic operations); buffers are
numpy arrays. `parallel_order="reverse"` runs parallel and vectorized loops backwards, which
exposes a schedule whose parallel loop carries a dependence.

GPU kernels run with CUDA's semantics: the blocks one after the other, and in each block its
threads (the nest of threadIdx loops) as coroutines that stop at every barrier; between two
barriers the threads run one at a time, in index order or (`"reverse"`) backwards. Each
thread has its own variables and registers ("local" buffers); a "shared" buffer is one per
block. A schedule that lacks a barrier gives a wrong result in one of the two orders; a
block whose threads do not all meet a barrier is an error.
"""

from __future__ import annotations

import math
from collections import ChainMap

import numpy as np

from ..errors import IndexBoundsError, TensorlangError
from .expr import (
    EQ, GE, GT, LE, LT, NE, Add, And, Call, Cast, Const, Div, Expr, FloorDiv, FloorMod, Load,
    IndexCheck, Max, Min, Mul, Not, Or, Select, Sub, Var,
)
from .stmt import Allocate, Barrier, Buffer, ExternCall, For, If, Let, LoopKind, Seq, Stmt, Store

_CMP = {LT: np.less, LE: np.less_equal, GT: np.greater, GE: np.greater_equal, EQ: np.equal,
        NE: np.not_equal}
_CALLS = {"exp": np.exp, "log": np.log, "sqrt": np.sqrt, "sin": np.sin, "cos": np.cos,
          "tanh": np.tanh, "floor": np.floor, "roundeven": np.rint, "ceil": np.ceil,
          "fabs": np.abs, "pow": np.power,
          "isnan": np.isnan, "fmax": np.fmax, "fmin": np.fmin,
          "fmax_any": np.fmax}


def ieee_minmax(a, b, smaller: bool):
    """numpy's minimum/maximum (NaN wins), with -0.0 below +0.0 as IEEE 754-2019 (and the
    compiled code) order them; numpy leaves the sign of a zero result unspecified."""
    out = np.minimum(a, b) if smaller else np.maximum(a, b)
    if np.asarray(out).dtype.kind == "f":
        zeros = (np.asarray(a) == 0) & (np.asarray(b) == 0)
        if np.any(zeros):
            neg = np.signbit(a) | np.signbit(b) if smaller else np.signbit(a) & np.signbit(b)
            out = np.where(zeros, np.where(neg, -0.0, 0.0).astype(np.asarray(out).dtype), out)
            out = out[()] if np.ndim(out) == 0 else out
    return out


def _scalar(v, dtype):
    return dtype.np.type(v)


class Interpreter:
    def __init__(self, buffers: dict[int, np.ndarray], env: dict[str, int],
                 parallel_order: str = "forward"):
        self.mem = dict(buffers)
        self.env: dict[str, object] = dict(env)
        self.reverse = parallel_order == "reverse"
        self.shared: dict[int, np.ndarray] | None = None   # the running block's shared tiles
        self._has_barrier: dict[int, bool] = {}

    def flat(self, buf: Buffer, indices) -> int:
        arr = self.mem.get(id(buf))
        if arr is None:
            raise TensorlangError(f"interp: buffer {buf.name} is not bound")
        idx = tuple(int(self.expr(i)) for i in indices)
        for d, (i, n) in enumerate(zip(idx, arr.shape)):
            if not 0 <= i < n:
                raise IndexError(f"interp: {buf.name} index {d} = {i} is out of [0, {n})")
        return idx

    def expr(self, e: Expr):
        with np.errstate(all="ignore"):
            return self._expr(e)

    def _expr(self, e: Expr):
        if isinstance(e, Var):
            return self.env[e.name]
        if isinstance(e, Const):
            return _scalar(e.value, e.dtype)
        if isinstance(e, Load):
            return self.mem[id(e.buffer)][self.flat(e.buffer, e.indices)]
        if isinstance(e, IndexCheck):
            v, n = self._expr(e.index), self._expr(e.extent)
            if not 0 <= int(v) < int(n):
                point = tuple(int(self._expr(p)) for p in e.point)
                raise IndexBoundsError(f"interp: index check {e.site} failed: index {int(v)} "
                                       f"outside [0, {int(n)}) at {point}", None, "",
                                       int(v), 0, int(n))
            return v
        if isinstance(e, Select):  # only the taken arm is evaluated, as in compiled code
            return self._expr(e.true_value) if self._expr(e.cond) else self._expr(e.false_value)
        if isinstance(e, Cast):
            v = self._expr(e.value)
            if e.dtype.is_int and e.value.dtype.is_float:
                info = np.iinfo(e.dtype.np)
                f = float(v)
                v = 0 if math.isnan(f) else min(max(math.trunc(f), info.min), info.max)
            return _scalar(v, e.dtype) if not e.dtype.is_bool else np.bool_(v)
        if isinstance(e, (And, Or)):
            a, b = bool(self._expr(e.a)), bool(self._expr(e.b))
            return np.bool_(a and b) if isinstance(e, And) else np.bool_(a or b)
        if isinstance(e, Not):
            return np.bool_(not self._expr(e.a))
        if type(e) in _CMP:
            return np.bool_(_CMP[type(e)](self._expr(e.a), self._expr(e.b)))
        if isinstance(e, Call):
            args = [self._expr(a) for a in e.args]
            if e.name == "erf":
                return _scalar(math.erf(float(args[0])), e.dtype)
            return _scalar(_CALLS[e.name](*args), e.dtype)
        a, b = _scalar(self._expr(e.a), e.dtype), _scalar(self._expr(e.b), e.dtype)
        if isinstance(e, Add):
            return a + b
        if isinstance(e, Sub):
            return a - b
        if isinstance(e, Mul):
            return a * b
        if isinstance(e, Div):
            return a / b
        if isinstance(e, Min):
            return ieee_minmax(a, b, True)
        if isinstance(e, Max):
            return ieee_minmax(a, b, False)
        if isinstance(e, (FloorDiv, FloorMod)):
            if e.dtype.is_int and b == 0:
                return _scalar(0, e.dtype)
            return a // b if isinstance(e, FloorDiv) else a % b
        raise TensorlangError(f"interp: unsupported expression {type(e).__name__}")

    def stmt(self, s: Stmt) -> None:
        if isinstance(s, Seq):
            for x in s.stmts:
                self.stmt(x)
        elif isinstance(s, Store):
            v = self.expr(s.value)
            mem, at = self.mem[id(s.buffer)], self.flat(s.buffer, s.indices)
            if s.atomic == "add":
                v = mem[at] + v
            elif s.atomic:
                v = ieee_minmax(mem[at], v, s.atomic == "min")
            mem[at] = v
        elif isinstance(s, For) and s.kind is LoopKind.GPU_THREAD and self.shared is None:
            self.block(s)
        elif isinstance(s, For):
            lo, n = int(self.expr(s.min)), int(self.expr(s.extent))
            its = range(lo, lo + n)
            if self.reverse and s.kind in (LoopKind.PARALLEL, LoopKind.VECTORIZED):
                its = reversed(its)
            saved = self.env.get(s.var.name)
            for i in its:
                self.env[s.var.name] = np.int64(i)
                self.stmt(s.body)
            self.env[s.var.name] = saved
        elif isinstance(s, If):
            if self.expr(s.cond):
                self.stmt(s.then_body)
            elif s.else_body is not None:
                self.stmt(s.else_body)
        elif isinstance(s, Let):
            saved = self.env.get(s.var.name)
            self.env[s.var.name] = _scalar(self.expr(s.value), s.var.dtype)
            self.stmt(s.body)
            self.env[s.var.name] = saved
        elif isinstance(s, Allocate) and s.buffer.scope == "shared" and self.shared is not None:
            self.allocate_shared(s.buffer)
            self.stmt(s.body)
        elif isinstance(s, Allocate):
            shape = tuple(int(self.expr(x)) for x in s.buffer.shape)
            outer = self.mem.get(id(s.buffer))  # an allocation of the same buffer inside
            self.mem[id(s.buffer)] = np.zeros(shape, s.buffer.dtype.np)   # another one
            self.stmt(s.body)
            if outer is None:
                del self.mem[id(s.buffer)]
            else:
                self.mem[id(s.buffer)] = outer
        elif isinstance(s, ExternCall):
            self.extern(s)
        elif isinstance(s, Barrier):
            raise TensorlangError("interp: a GPU barrier outside the thread loops of a block")
        else:
            raise TensorlangError(f"interp: unsupported statement {type(s).__name__}")

    def extern(self, s: ExternCall) -> None:
        """An extern stage: its Python function on the buffers' arrays (inputs read-only)."""
        if isinstance(s.fn, str):
            raise NotImplementedError(
                f"interp: extern stage {s.stage} calls the C symbol {s.fn!r}; the interpreter "
                "runs Python extern functions only (tl.build runs C symbols)")
        arrays = []
        for k, buf in enumerate(s.buffers):
            arr = self.mem.get(id(buf))
            if arr is None:
                raise TensorlangError(f"interp: buffer {buf.name} is not bound")
            if k < len(s.inputs):
                arr = arr.view()
                arr.flags.writeable = False
            arrays.append(arr)
        s.fn(*arrays)

    # ------------------------------------------------------------------ GPU blocks
    def allocate_shared(self, buf: Buffer) -> None:
        if id(buf) not in self.shared:
            shape = tuple(int(self.expr(x)) for x in buf.shape)
            self.shared[id(buf)] = np.zeros(shape, buf.dtype.np)

    def barrier_inside(self, s: Stmt) -> bool:
        from .visit import walk_stmt

        k = id(s)
        if k not in self._has_barrier:
            self._has_barrier[k] = any(isinstance(x, Barrier) for x in walk_stmt(s))
        return self._has_barrier[k]

    def block(self, s: For) -> None:
        """One block: every thread of the threadIdx nest starting at `s` as a coroutine."""
        loops, allocs, body = [], [], s
        while (isinstance(body, For) and body.kind is LoopKind.GPU_THREAD) or \
                isinstance(body, Allocate):
            if isinstance(body, For):
                loops.append(body)
            else:
                allocs.append(body.buffer)    # per-thread storage between thread loops
            body = body.body
        for b in reversed(allocs):
            body = Allocate(b, body)
        points = [dict()]
        for lp in loops:   # (thread loop extents may use outer thread loops' values)
            nxt = []
            for pt in points:
                self.env.update(pt)
                lo, n = int(self.expr(lp.min)), int(self.expr(lp.extent))
                nxt.extend({**pt, lp.var.name: np.int64(i)} for i in range(lo, lo + n))
            points = nxt
        outer_env, outer_mem = self.env, self.mem
        self.shared = {}
        threads = []
        for pt in points:
            env = {**outer_env, **pt}
            mem = ChainMap({}, self.shared, outer_mem)
            threads.append((env, mem, self.run_thread(body)))
        try:
            live = list(threads)
            while live:
                order = reversed(live) if self.reverse else live
                waiting, done = [], 0
                for env, mem, gen in order:
                    self.env, self.mem = env, mem
                    try:
                        next(gen)
                        waiting.append((env, mem, gen))
                    except StopIteration:
                        done += 1
                if waiting and done:
                    raise TensorlangError(
                        f"interp: {done} threads of a block finished while {len(waiting)} "
                        "wait at a barrier (a barrier in code that not all threads run)")
                live = [t for t in threads if any(t[2] is w[2] for w in waiting)]
        finally:
            self.env, self.mem, self.shared = outer_env, outer_mem, None

    def run_thread(self, s: Stmt):
        """A generator running `s` in the current thread, stopping at each barrier."""
        if not self.barrier_inside(s):
            self.stmt(s)
            return
        if isinstance(s, Barrier):
            yield
        elif isinstance(s, Seq):
            for x in s.stmts:
                yield from self.run_thread(x)
        elif isinstance(s, For):
            lo, n = int(self.expr(s.min)), int(self.expr(s.extent))
            for i in range(lo, lo + n):
                self.env[s.var.name] = np.int64(i)
                yield from self.run_thread(s.body)
        elif isinstance(s, If):
            if self.expr(s.cond):
                yield from self.run_thread(s.then_body)
            elif s.else_body is not None:
                yield from self.run_thread(s.else_body)
        elif isinstance(s, Let):
            self.env[s.var.name] = _scalar(self.expr(s.value), s.var.dtype)
            yield from self.run_thread(s.body)
        elif isinstance(s, Allocate):
            if s.buffer.scope == "shared":
                self.allocate_shared(s.buffer)
            else:
                shape = tuple(int(self.expr(x)) for x in s.buffer.shape)
                self.mem[id(s.buffer)] = np.zeros(shape, s.buffer.dtype.np)
            yield from self.run_thread(s.body)
        else:
            raise TensorlangError(f"interp: unsupported statement {type(s).__name__}")


def run_lowered(f, arrays: list[np.ndarray], sizes: dict[str, int] | None = None,
                parallel_order: str = "forward") -> None:
    """Run a LoweredFunc on numpy arrays (outputs written in place), sizes from the shapes."""
    env: dict[str, object] = {k: np.int64(v) for k, v in (sizes or {}).items()}
    for buf, arr in zip(f.buffers, arrays):
        for ext, n in zip(buf.shape, arr.shape):
            if isinstance(ext, Var):
                env.setdefault(ext.name, np.int64(n))
    mem = {id(b): a for b, a in zip(f.buffers, arrays)}
    Interpreter(mem, env, parallel_order).stmt(f.body)
