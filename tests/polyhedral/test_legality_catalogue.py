"""A catalogue of illegal schedules (refused, each witness checked to be a real dependence
that the new order breaks) and legal ones (accepted and equal to the reference)."""

import numpy as np
import pytest

import tensorlang as tl
from tensorlang.ir.expr import Load
from tensorlang.ir.interp import Interpreter
from tensorlang.ir.visit import walk
from tensorlang.polyhedral.model import statement_reads, statement_writes

from . import kernels as K


ILLEGAL = {
    "prefix: reorder split loops": (K.prefix_sum, [("split", "i", {"factor": 4}),
                                                   ("reorder", "i.inner", "i.outer")]),
    "prefix: parallel": (K.prefix_sum, [("parallel", "i")]),
    "prefix: vectorize inner": (K.prefix_sum, [("split", "i", {"factor": 4}),
                                               ("vectorize", "i.inner")]),
    "prefix: parallel outer tiles": (K.prefix_sum, [("split", "i", {"factor": 3}),
                                                    ("parallel", "i.outer")]),
    "prefix: nparts then reorder": (K.prefix_sum, [("split", "i", {"nparts": 3}),
                                                   ("reorder", "i.inner", "i.outer")]),
    "iir: parallel inner": (K.iir, [("split", "i", {"factor": 5}), ("parallel", "i.inner")]),
    "iir: vectorize": (K.iir, [("vectorize", "i")]),
    "grid: parallel i": (K.grid, [("parallel", "i")]),
    "grid: parallel j": (K.grid, [("parallel", "j")]),
    "grid: skew, parallel j": (K.grid, [("skew", "i", "j"), ("parallel", "j")]),
    "grid: wavefront, parallel outer": (K.grid, [("skew", "i", "j"), ("reorder", "j", "i"),
                                                 ("parallel", "j")]),
    "anti: interchange": (K.anti, [("reorder", "j", "i")]),
    "anti: tile": (K.anti, [("tile", "i", "j", 2, 2)]),
    "stencil: interchange": (K.stencil, [("reorder", "i", "s")]),
    "stencil: tile": (K.stencil, [("tile", "s", "i", 2, 4)]),
    "stencil: parallel time": (K.stencil, [("parallel", "s")]),
    "edit: parallel i": (K.edit_distance, [("parallel", "i")]),
    "edit: parallel j": (K.edit_distance, [("parallel", "j")]),
    "gauss-seidel: time inside": (K.gauss_seidel, [("reorder", "i", "s")]),
    "gauss-seidel: parallel i": (K.gauss_seidel, [("parallel", "i")]),
    "gauss-seidel: parallel j": (K.gauss_seidel, [("parallel", "j")]),
    "matmul: parallel k": (K.matmul, [("parallel", "k")]),
    "matmul: vectorize k": (K.matmul, [("vectorize", "k")]),
    "row sum: parallel k outside": (K.row_sum, [("reorder", "k", "i"), ("parallel", "k")]),
    "row prefix: parallel j": (K.row_prefix, [("parallel", "j")]),
    "row prefix: fuse, parallel": (K.row_prefix, [("fuse", "i", "j"),
                                                  ("parallel", "i.j.fused")]),
    "argmax: parallel k": (K.argmax_rows, [("split", "k", {"factor": 4}),
                                           ("parallel", "k.inner")]),
}

LEGAL = {
    "prefix: split": (K.prefix_sum, [("split", "i", {"factor": 5})]),
    "prefix: split, unroll": (K.prefix_sum, [("split", "i", {"factor": 4}),
                                             ("unroll", "i.inner")]),
    "iir: split 3, unroll": (K.iir, [("split", "i", {"factor": 3}), ("unroll", "i.inner")]),
    "grid: interchange": (K.grid, [("reorder", "j", "i")]),
    "grid: tile": (K.grid, [("tile", "i", "j", 3, 2)]),
    "grid: fuse": (K.grid, [("fuse", "i", "j")]),
    "grid: wavefront parallel": (K.grid, [("skew", "i", "j"), ("reorder", "j", "i"),
                                          ("parallel", "i")]),
    "stencil: parallel space": (K.stencil, [("parallel", "i")]),
    "stencil: skew then tile": (K.stencil, [("skew", "s", "i"), ("tile", "s", "i", 2, 4)]),
    "stencil: vectorize space": (K.stencil, [("split", "i", {"factor": 4}),
                                             ("vectorize", "i.inner")]),
    "edit: interchange": (K.edit_distance, [("reorder", "j", "i")]),
    "edit: tile": (K.edit_distance, [("tile", "i", "j", 4, 3)]),
    "edit: wavefront parallel": (K.edit_distance, [("skew", "i", "j"), ("reorder", "j", "i"),
                                                   ("parallel", "i")]),
    "anti: parallel inner": (K.anti, [("parallel", "j")]),
    "anti: skew then interchange": (K.anti, [("skew", "i", "j"), ("reorder", "j", "i")]),
    "gauss-seidel: split j": (K.gauss_seidel, [("split", "j", {"factor": 2})]),
    "gauss-seidel: skew, interchange": (K.gauss_seidel, [("skew", "s", "i", {"factor": 1}),
                                                         ("reorder", "i", "s")]),
    "matmul: k outermost": (K.matmul, [("reorder", "k", "i")]),
    "matmul: tiled": (K.matmul, [("tile", "i", "j", 4, 4), ("split", "k", {"factor": 2}),
                                 ("reorder", "i.outer", "j.outer", "k.outer", "i.inner",
                                  "k.inner", "j.inner")]),
    "matmul: parallel, vectorize": (K.matmul, [("split", "j", {"factor": 4}),
                                               ("reorder", "k", "j.inner"),
                                               ("parallel", "i"), ("vectorize", "j.inner")]),
    "matmul: unroll k": (K.matmul, [("split", "k", {"factor": 2}), ("unroll", "k.inner")]),
    "row sum: k outside, parallel i": (K.row_sum, [("reorder", "k", "i"),
                                                   ("parallel", "i")]),
    "row prefix: parallel i": (K.row_prefix, [("parallel", "i")]),
    "row prefix: interchange": (K.row_prefix, [("reorder", "j", "i")]),
    "argmax: split k, reorder": (K.argmax_rows, [("split", "k", {"factor": 4}),
                                                 ("reorder", "k.inner", "k.outer")]),
}


def apply(s, T, steps):
    st = s[T]
    for step in steps:
        prim, *args = step
        kw = args.pop() if args and isinstance(args[-1], dict) else {}
        getattr(st, prim)(*args, **kw)


def test_catalogue_sizes():
    assert len(ILLEGAL) >= 20 and len(LEGAL) >= 20


def _elements(s, stmt_name, point, sizes, kind):
    """Elements a statement instance reads ("r") or writes ("w"), by evaluation."""
    prog = s.program
    st = next(x for x in prog.statements if x.name == stmt_name)
    env = {d: np.int64(v) for d, v in {**point, **sizes}.items()}
    it = Interpreter({}, env)
    out = set()
    if kind == "w":
        for buf, idx in statement_writes(st):
            out.add((buf.name, tuple(int(it.expr(i)) for i in idx)))
    else:
        for acc in statement_reads(st):
            # a guard that reads data may hold: the analysis assumes it does
            if all(any(isinstance(x, Load) for x in walk(g)) or bool(it.expr(g))
                   for g in acc.guard):
                out.add((acc.buffer.name, tuple(int(it.expr(i)) for i in acc.indices)))
    return out


@pytest.mark.parametrize("case", sorted(ILLEGAL))
def test_illegal_is_refused_with_a_real_witness(case):
    kernel, steps = ILLEGAL[case]
    ins, T, _ = kernel()
    s = tl.create_schedule(T)
    apply(s, T, steps[:-1])
    before = s[T].loops
    with pytest.raises(tl.IllegalScheduleError) as info:
        apply(s, T, steps[-1:])
    assert s[T].loops == before  # the refused primitive left the schedule alone
    err = info.value
    w = err.witness
    src, dst = w
    msg = str(err)
    assert steps[-1][0] in msg and f"stage {T.name}" in msg and f"({w.kind})" in msg
    # the pair really depends: a common element, written/read as the kind says
    a = "r" if w.kind == "WAR" else "w"
    b = "w" if w.kind in ("WAR", "WAW") else "r"
    common = _elements(s, w.source_statement, src, w.sizes, a) & \
        _elements(s, w.sink_statement, dst, w.sizes, b)
    assert common, (case, w)
    # the declared order runs the source first
    if w.source_statement == w.sink_statement:
        assert tuple(src.values()) < tuple(dst.values())
    # and the new schedule does not
    ls, ld = tuple(w.source_loops.values()), tuple(w.sink_loops.values())
    if "parallel" in msg.split(" on stage")[0] or "vectorize" in msg.split(" on stage")[0]:
        assert ls != ld
    else:
        assert ld <= ls


@pytest.mark.parametrize("case", sorted(LEGAL))
def test_legal_is_accepted_and_correct(case):
    kernel, steps = LEGAL[case]
    ins, T, ref = kernel()
    s = tl.create_schedule(T)
    apply(s, T, steps)
    f = tl.build(s, ins + [T])
    rng = np.random.default_rng(1)
    for _ in range(2):
        vals = K.inputs(ins, rng)
        out = np.zeros(tuple(int(x.value) for x in T.shape), T.dtype.np)
        f(*vals, out)
        np.testing.assert_allclose(out, ref(*vals)[0], rtol=1e-12)


def test_message_reads_like_the_example():
    ins, y, _ = K.prefix_sum(12)
    s = tl.create_schedule(y)
    s[y].split("i", factor=4)
    with pytest.raises(tl.IllegalScheduleError) as info:
        s[y].reorder("i.inner", "i.outer")
    msg = str(info.value)
    assert msg.startswith("reorder(i.inner, i.outer) on stage y: y[i=4] reads y[3] written by "
                          "y[i=3] (RAW), but the new order runs y[i=4] (loops i.inner=0, "
                          "i.outer=1) no later than y[i=3] (loops i.inner=3, i.outer=0)")


def test_symbolic_sizes_get_small_values():
    n = tl.var("n")
    x = tl.placeholder((n,), name="x")
    y = tl.recurrence((n,), lambda y, i: tl.if_then_else(i > 1, y[i - 2], 0.0) + x[i], name="y")
    s = tl.create_schedule(y)
    with pytest.raises(tl.IllegalScheduleError) as info:
        s[y].parallel("i")
    w = info.value.witness
    assert w.sizes == {"n": 3} and w.source == {"i": 0} and w.sink == {"i": 2}
    assert "(with n=3)" in str(info.value)


def test_hints():
    ins, y, _ = K.anti()
    s = tl.create_schedule(y)
    with pytest.raises(tl.IllegalScheduleError, match=r"skew\(i, j, factor=1\)"):
        s[y].reorder("j", "i")
    ins, C, _ = K.matmul()
    s = tl.create_schedule(C)
    with pytest.raises(tl.IllegalScheduleError, match=r"rfactor\(C, k\)"):
        s[C].parallel("k")


def test_recurrence_must_read_earlier_elements():
    x = tl.placeholder((8,), name="x")
    with pytest.raises(tl.TensorlangError, match=r"y\[i=0\] reads y\[1\].*not computed yet"):
        y = tl.recurrence((8,), lambda y, i: tl.if_then_else(i < 7, y[i + 1], 0.0) + x[i],
                          name="y")
        tl.create_schedule(y)
    with pytest.raises(tl.TensorlangError, match="its own element"):
        tl.recurrence((8,), lambda y, i: y[i] + x[i], name="y")
