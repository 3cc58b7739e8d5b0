"""Parallel loops: a loop body outlined into a function the thread pool runs.

`emit_parallel_loop` turns `for i in range(lo, lo + n): body  # parallel` into
`i32 fn(i64 task, closure*)`, task t of T running iterations [lo + t*n/T, lo + (t+1)*n/T)
(T = min(n, TASKS_PER_THREAD x the pool's threads): a few contiguous chunks per thread,
which the pool's threads take in turn), and a call of the runtime's launcher with a
closure that holds the bounds and every value and buffer the body uses. An object file's
runtime starts a thread per task, so there T = min(n, its threads).
"""

from __future__ import annotations

import llvmlite.ir as ir

from ...ir.expr import Load, Var
from ...ir.stmt import Buffer, For, Store, TensorCall
from ...ir.visit import stmt_exprs, walk, walk_stmt
from ..abi import AOT_LAUNCH, AOT_THREAD_COUNT, AOT_THREADS, PARALLEL_LAUNCH
from .checks import RECORD_VAR
from .types import I32, I64

# Tasks of a parallel loop on the JIT's pool per thread. The pool's threads take tasks from
# a counter, so a thread that runs slower (its core shared with another process, or a
# worker woken late) takes fewer; the launching thread waits only for the task a worker
# holds, a quarter of a thread's share instead of all of it.
TASKS_PER_THREAD = 4


def emit_parallel_loop(cg, s: For, lo: ir.Value) -> None:
    """Outline the loop into `i32 fn(i64 task, closure*)` and run it on the thread pool.

    Task t of T runs iterations [lo + t*n/T, lo + (t+1)*n/T): TASKS_PER_THREAD contiguous
    chunks per thread of the pool (one per thread of an object file's runtime). The
    closure holds the bounds and every value and buffer the body uses.
    """
    b = cg.builder
    ext = cg.to_i64(cg.expr(s.extent), s.extent.dtype)
    used_vars: set[str] = set()
    used_bufs: dict[int, Buffer] = {}
    for st in walk_stmt(s.body):
        for e in stmt_exprs(st):
            for x in walk(e):
                if isinstance(x, Var):
                    used_vars.add(x.name)
                elif isinstance(x, Load):
                    used_bufs.setdefault(id(x.buffer), x.buffer)
        if isinstance(st, Store):
            used_bufs.setdefault(id(st.buffer), st.buffer)
        elif isinstance(st, TensorCall):
            for buf in st.buffers:
                used_bufs.setdefault(id(buf), buf)
    for buf in used_bufs.values():
        for x in buf.shape:
            used_vars.update(v.name for v in walk(x) if isinstance(v, Var))
    names = sorted(n for n in used_vars if n in cg.env and n != s.var.name)
    if RECORD_VAR in cg.env:        # the caller's error record: the body's checks write it
        names.append(RECORD_VAR)
    bufs = [buf for k, buf in used_bufs.items() if k in cg.ptrs]
    fields = [I64, I64, I64] + [cg.env[n].type for n in names] + \
        [cg.ptrs[id(x)].type for x in bufs]
    st_t = ir.LiteralStructType(fields)
    with b.goto_block(cg.entry):
        clo = b.alloca(st_t, name="closure")
    if cg.threads == AOT_THREADS:  # an object file: its runtime starts a thread per task
        nthreads = b.call(cg._declare(AOT_THREAD_COUNT, I64, []), [])
    else:
        nthreads = ir.Constant(I64, cg.threads * TASKS_PER_THREAD)
    ntasks = b.select(b.icmp_signed("<", ext, nthreads), ext, nthreads)
    values = [lo, ext, ntasks] + [cg.env[n] for n in names] + \
        [cg.ptrs[id(x)] for x in bufs]
    for k, v in enumerate(values):
        b.store(v, b.gep(clo, [ir.Constant(I32, 0), ir.Constant(I32, k)]))
    fname = cg.module.get_unique_name(f"{cg.fn.name}.parallel")
    fn = ir.Function(cg.module, ir.FunctionType(I32, [I64, st_t.as_pointer()]), fname)
    fn.linkage = "internal"
    sub = type(cg).__new__(type(cg))
    sub.module, sub.threads, sub.in_parallel, sub.vec = cg.module, cg.threads, True, None
    sub.fp_flags, sub.half_native, sub.fast = cg.fp_flags, cg.half_native, cg.fast
    sub.target, sub.avx512 = cg.target, cg.avx512
    sub.kernel, sub.check_guard = cg.kernel, None
    sub.registers = list(cg.registers)
    sub.padded = set(cg.padded)
    sub.row_shape = dict(cg.row_shape)
    sub.streamed, sub.streams = cg.streamed, False
    sub.scopes = cg.scopes
    sub.carried, sub.carry_store, sub.carry_value = {}, None, None
    sub.fn, sub.ptrs, sub.env, sub.heap = fn, {}, {}, []
    sub.entry = fn.append_basic_block("entry")
    sub.builder = ir.IRBuilder(fn.append_basic_block("body"))
    sb = sub.builder
    task, arg = fn.args
    got = [sb.load(sb.gep(arg, [ir.Constant(I32, 0), ir.Constant(I32, k)]))
           for k in range(len(fields))]
    for n, v in zip(names, got[3:]):
        sub.env[n] = v
    for x, v in zip(bufs, got[3 + len(names):]):
        sub.ptrs[id(x)] = v
    c_lo, c_ext, c_n = got[:3]
    start = sb.add(c_lo, sb.sdiv(sb.mul(task, c_ext), c_n))
    stop = sb.add(c_lo, sb.sdiv(sb.mul(sb.add(task, ir.Constant(I64, 1)), c_ext), c_n))
    sub.serial_loop(s.var.name, start, stop, s.body)
    sub.finish()
    i8p = ir.IntType(8).as_pointer()
    launcher = AOT_LAUNCH if cg.threads == AOT_THREADS else PARALLEL_LAUNCH
    launch = cg._declare(launcher, I32, [i8p, i8p, I64])
    r = b.call(launch, [b.bitcast(fn, i8p), b.bitcast(clo, i8p), ntasks])
    with b.if_then(b.icmp_signed("!=", r, ir.Constant(I32, 0)), likely=False):
        b.ret(r)
