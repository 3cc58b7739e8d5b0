"""Differential fuzzing of the whole pipeline: random programs, random schedules, three judges.

A hypothesis strategy draws a tensor-expression program — inputs of any dtype, an
elementwise expression tree over + - * // % / maximum minimum, casts, comparisons, & |,
if_then_else, floor/ceil/abs/sqrt/exp and weak Python constants, optionally a producer
stage the final stage reads and optionally a reduction (sum/max/min) over the last axis,
with a symbolic number of rows — and a random sequence of schedule primitives (split, tile,
reorder, fuse, unroll, vectorize, parallel, compute_inline, compute_at); a primitive that is
refused leaves the schedule as it was, as in real use. The kernel is then built for the host
and for baseline x86-64 (SSE2: no AVX, no F16C) and compared with numpy evaluating the same
program, and with the loop-IR interpreter running the lowered nest; every 25th example is
also built for AArch64 and run under qemu-user.

Floats are compared exactly (NaN equal to NaN) unless the program has a transcendental
function or a float reduction (libm vs numpy; summation order); those programs never feed a
float back into a comparison or an integer, so their tolerance cannot hide a wrong branch.
fma contraction is off here (TL_FP_CONTRACT=0): the exactness is the point.

Examples: 1,000 in CI; `pytest tests/test_fuzz_pipeline.py --fuzz-examples=20000` runs more.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tensorlang as tl
from tensorlang.ir.interp import ieee_minmax, run_lowered

FLOATS = ("float16", "float32", "float64")
INTS = ("int8", "int16", "int32", "int64", "uint8")
DTYPES = FLOATS + INTS + ("bool",)
ROWS = (1, 2, 3, 5, 7, 13, 16, 17, 33)
COLS = (1, 3, 4, 8, 9)


# ------------------------------------------------------------------ programs as data
# node: ("in", k) | ("stage",) | ("const", value) | ("bin", op, a, b) | ("un", op, a)
#     | ("cast", dtype, a) | ("cmp", op, a, b) | ("logic", op, a, b) | ("select", c, a, b)
# Each node's dtype and exactness (no transcendental below it) are tracked as it is drawn.

BIN = ("add", "sub", "mul", "maximum", "minimum", "floordiv", "mod", "truediv")
CMP = ("lt", "le", "eq", "ne")


@st.composite
def expressions(draw, leaves, depth):
    """(node, dtype, exact): leaves are (node, dtype) pairs."""
    if depth == 0 or draw(st.integers(0, 3)) == 0:
        if draw(st.integers(0, 5)) == 0:
            v = draw(st.sampled_from([0, 1, 2, -3, 0.5, -1.25, 2.0]))
            return ("const", v), None, True          # dtype None: a weak Python scalar
        node, dt = draw(st.sampled_from(leaves))
        return node, dt, True
    kind = draw(st.sampled_from(["bin", "bin", "un", "cast", "cmp", "select", "logic"]))
    a, da, ea = draw(expressions(leaves, depth - 1))
    if kind in ("bin", "cmp", "logic", "select"):
        b, db, eb = draw(expressions(leaves, depth - 1))
    if kind == "bin":
        op = draw(st.sampled_from(BIN))
        if da is None and db is None:
            return a, da, ea
        ta, tb = da or db, db or da
        if "bool" in (ta, tb) and op in ("sub", "floordiv", "mod", "truediv"):
            op = "add"
        if (op in ("floordiv", "mod") and (np.dtype(ta).kind == "f" or
                                            np.dtype(tb).kind == "f")):
            op = "mul"
        dt = str(_result_type(op, (a, da), (b, db)))
        if dt == "bool" and op in ("add", "mul"):
            op = "maximum"
        return ("bin", op, a, b), dt, ea and eb
    if da is None:
        return a, da, ea
    if kind == "un":
        choices = ["abs", "neg"] if da != "bool" else ["abs"]
        if np.dtype(da).kind == "f":
            choices += ["floor", "ceil", "sqrt", "exp"]
        op = draw(st.sampled_from(choices))
        exact = ea and op != "exp"   # sqrt is correctly rounded everywhere; exp is not
        return ("un", op, a), da, exact
    if kind == "cast":
        dt = draw(st.sampled_from(DTYPES))
        if np.dtype(da).kind == "f" and np.dtype(dt).kind in "iub":
            if not ea:
                return a, da, ea
            if np.dtype(dt).kind in "iu":
                # float -> int is only defined (in numpy) in range: floor into a small range
                # (unsigned: from 0; numpy's negative float -> uint8 is undefined)
                clip = "clipu" if np.dtype(dt).kind == "u" else "clip"
                a = ("un", clip, ("un", "floor", a))
        return ("cast", dt, a), dt, ea
    if kind == "cmp":
        if db is None or not (ea and eb):
            return a, da, ea
        return ("cmp", draw(st.sampled_from(CMP)), a, b), "bool", True
    if kind == "logic":
        if da != "bool" or db != "bool":
            return a, da, ea
        return ("logic", draw(st.sampled_from(["and", "or"])), a, b), "bool", True
    # select: the condition must be exact
    c, dc, ec = draw(expressions(leaves, depth - 1))
    if dc != "bool" or not ec or db is None:
        return a, da, ea
    return ("select", c, a, b), str(np.result_type(np.dtype(da), np.dtype(db))), \
        ea and eb


def _result_type(op, a, b):
    (na, da), (nb, db) = a, b
    va = np.zeros(1, da) if da else na[1]
    vb = np.zeros(1, db) if db else nb[1]
    if op == "truediv":
        with np.errstate(all="ignore"):
            return np.true_divide(va, vb).dtype
    return np.result_type(va, vb)


def tl_expr(node, ins, idx, stage):
    k = node[0]
    if k == "in":
        return ins[node[1]][idx]
    if k == "stage":
        return stage[idx]
    if k == "const":
        return node[1]
    if k == "bin":
        a, b = tl_expr(node[2], ins, idx, stage), tl_expr(node[3], ins, idx, stage)
        return {"add": lambda: a + b, "sub": lambda: a - b, "mul": lambda: a * b,
                "maximum": lambda: tl.maximum(a, b), "minimum": lambda: tl.minimum(a, b),
                "floordiv": lambda: a // b, "mod": lambda: a % b,
                "truediv": lambda: a / b}[node[1]]()
    if k == "un":
        a = tl_expr(node[2], ins, idx, stage)
        op = node[1]
        if op == "neg":
            return -a
        if op in ("clip", "clipu"):  # NaN -> 0, then [-100 or 0, 100]: where numpy's
            lo = 0.0 if op == "clipu" else -100.0  # float -> int conversion is defined
            return tl.if_then_else(a != a, 0.0, tl.minimum(tl.maximum(a, lo), 100.0))
        return {"abs": tl.abs, "floor": tl.floor, "ceil": tl.ceil, "sqrt": tl.sqrt,
                "exp": tl.exp}[op](a)
    if k == "cast":
        return tl_expr(node[2], ins, idx, stage).astype(node[1])
    if k == "cmp":
        a, b = tl_expr(node[2], ins, idx, stage), tl_expr(node[3], ins, idx, stage)
        return {"lt": a < b, "le": a <= b, "eq": a == b, "ne": a != b}[node[1]]
    if k == "logic":
        a, b = tl_expr(node[2], ins, idx, stage), tl_expr(node[3], ins, idx, stage)
        return a & b if node[1] == "and" else a | b
    c = tl_expr(node[1], ins, idx, stage)
    return tl.if_then_else(c, tl_expr(node[2], ins, idx, stage),
                           tl_expr(node[3], ins, idx, stage))


def np_expr(node, arrays, stage):
    k = node[0]
    if k == "in":
        return arrays[node[1]]
    if k == "stage":
        return stage
    if k == "const":
        return node[1]
    if k == "bin":
        a, b = np_expr(node[2], arrays, stage), np_expr(node[3], arrays, stage)
        return {"add": np.add, "sub": np.subtract, "mul": np.multiply,
                "maximum": lambda x, y: ieee_minmax(x, y, False),
                "minimum": lambda x, y: ieee_minmax(x, y, True), "floordiv": np.floor_divide,
                "mod": np.mod, "truediv": np.true_divide}[node[1]](a, b)
    if k == "un":
        a = np_expr(node[2], arrays, stage)
        op = node[1]
        if op == "neg":
            return np.negative(a)
        if op in ("clip", "clipu"):
            lo = 0.0 if op == "clipu" else -100.0
            return np.where(a != a, 0.0, np.minimum(np.maximum(a, lo), 100.0))
        return {"abs": np.abs, "floor": np.floor, "ceil": np.ceil, "sqrt": np.sqrt,
                "exp": np.exp}[op](a)
    if k == "cast":
        return np.asarray(np_expr(node[2], arrays, stage)).astype(node[1])
    if k == "cmp":
        a, b = np_expr(node[2], arrays, stage), np_expr(node[3], arrays, stage)
        return {"lt": np.less, "le": np.less_equal, "eq": np.equal,
                "ne": np.not_equal}[node[1]](a, b)
    if k == "logic":
        a, b = np_expr(node[2], arrays, stage), np_expr(node[3], arrays, stage)
        return np.logical_and(a, b) if node[1] == "and" else np.logical_or(a, b)
    c = np_expr(node[1], arrays, stage)
    return np.where(c, np_expr(node[2], arrays, stage), np_expr(node[3], arrays, stage))


@st.composite
def programs(draw):
    nin = draw(st.integers(1, 3))
    dts = [draw(st.sampled_from(DTYPES)) for _ in range(nin)]
    leaves = [(("in", k), dt) for k, dt in enumerate(dts)]
    two_d = draw(st.booleans())
    producer = None
    if draw(st.booleans()):
        producer = draw(expressions(leaves, 2))
        if producer[1] is None:
            producer = None
        else:
            leaves = leaves + [(("stage",), producer[1])]
    body = draw(expressions(leaves, 3))
    if body[1] is None:
        body = (leaves[-1][0], leaves[-1][1], True)
    reduce = None
    if two_d and draw(st.booleans()):
        reduce = draw(st.sampled_from(["sum", "max", "min"]))
        if body[1] == "bool" or (reduce == "sum" and body[1] in ("float16",)):
            reduce = None
    return dict(dtypes=dts, two_d=two_d, producer=producer, body=body, reduce=reduce,
                rows=draw(st.sampled_from(ROWS)), cols=draw(st.sampled_from(COLS)),
                seed=draw(st.integers(0, 2**16)))


def declare(p):
    n = tl.var("n")
    cols = p["cols"]
    shape = (n, cols) if p["two_d"] else (n,)
    ins = [tl.placeholder(shape, dt, name=f"in{k}") for k, dt in enumerate(p["dtypes"])]
    stage = None
    if p["producer"] is not None:
        node = p["producer"][0]
        stage = tl.compute(shape, lambda *i: _expr_or_const(tl_expr(node, ins, i, None),
                                                            p["producer"][1]), name="P")
    node = p["body"][0]
    if p["reduce"] is None:
        out = tl.compute(shape, lambda *i: _expr_or_const(tl_expr(node, ins, i, stage),
                                                          p["body"][1]), name="C")
    else:
        k = tl.reduce_axis(cols, name="k")
        red = {"sum": tl.sum, "max": tl.max, "min": tl.min}[p["reduce"]]
        out = tl.compute((n,), lambda i: red(tl_expr(node, ins, (i, k), stage), axis=k),
                         name="C")
    return ins, stage, out


def _expr_or_const(e, dt):
    return e if not isinstance(e, (int, float)) else tl.const(e, dt)


def reference(p, arrays):
    with np.errstate(all="ignore"):
        stage = None
        if p["producer"] is not None:
            stage = np.asarray(np_expr(p["producer"][0], arrays, None))
            stage = np.broadcast_to(stage, arrays[0].shape).astype(p["producer"][1])
        v = np.broadcast_to(np.asarray(np_expr(p["body"][0], arrays, stage)),
                            arrays[0].shape)
        v = v.astype(p["body"][1])
        if p["reduce"] is not None:
            v = {"sum": np.sum, "max": np.max, "min": np.min}[p["reduce"]](v, axis=1)
            v = v.astype(p["body"][1])
    return np.ascontiguousarray(v)


def random_inputs(p, rng):
    shape = (p["rows"], p["cols"]) if p["two_d"] else (p["rows"],)
    out = []
    for dt in p["dtypes"]:
        if dt == "bool":
            a = rng.random(shape) < 0.5
        elif np.dtype(dt).kind in "iu":
            info = np.iinfo(dt)
            a = rng.integers(max(info.min, -50), min(info.max, 50) + 1, shape).astype(dt)
        else:
            a = (rng.standard_normal(shape) * 4).astype(dt)
            specials = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1.0], dt)
            mask = rng.random(shape) < 0.1
            a[mask] = rng.choice(specials, size=int(mask.sum()))
        out.append(np.ascontiguousarray(a))
    return out


# ------------------------------------------------------------------ schedules as data
PRIMS = ("split", "tile", "reorder", "fuse", "unroll", "vectorize", "parallel", "inline",
         "compute_at")


def apply_schedule(s, out, stage, steps, draw_int):
    for prim in steps:
        st_ = s[out]
        loops = [lp for lp in st_.loops]
        try:
            if prim == "split":
                lp = loops[draw_int(len(loops))]
                st_.split(lp, factor=1 + draw_int(8))
            elif prim == "tile" and len(out.op.axis) == 2:
                st_.tile(out.op.axis[0], out.op.axis[1], 1 + draw_int(4), 1 + draw_int(4))
            elif prim == "reorder" and len(loops) >= 2:
                perm = list(loops)
                a, b = draw_int(len(perm)), draw_int(len(perm))
                perm[a], perm[b] = perm[b], perm[a]
                st_.reorder(*perm)
            elif prim == "fuse" and len(loops) >= 2:
                k = draw_int(len(loops) - 1)
                st_.fuse(loops[k], loops[k + 1])
            elif prim == "unroll":
                st_.unroll(loops[-1])
            elif prim == "vectorize":
                inner = loops[-1]
                o, i = st_.split(inner, factor=(2, 4, 8, 16)[draw_int(4)])
                st_.vectorize(i)
            elif prim == "parallel":
                st_.parallel(loops[draw_int(len(loops))])
            elif prim == "inline" and stage is not None:
                s[stage].compute_inline()
            elif prim == "compute_at" and stage is not None:
                s[stage].compute_at(st_, loops[draw_int(len(loops))])
        except (tl.ScheduleError, NotImplementedError):
            pass  # refused (illegal or unsupported): the schedule is unchanged


TOL = {"float16": 2e-2, "float32": 2e-5, "float64": 1e-12}


def _floats_in(p) -> set[str]:
    """Every float dtype a value of the program takes (inputs, stages, casts)."""
    out = {d for d in p["dtypes"]}
    stack = [p["body"][0]] + ([p["producer"][0]] if p["producer"] else [])
    out.add(p["body"][1])
    if p["producer"]:
        out.add(p["producer"][1])
    while stack:
        node = stack.pop()
        if node[0] == "cast":
            out.add(node[1])
        stack.extend(x for x in node[1:] if isinstance(x, tuple))
    return {d for d in out if d in TOL}


def _same(got, ref, exact, dtype, floats=()):
    if exact or np.dtype(dtype).kind in "iub":
        np.testing.assert_array_equal(got, ref)
        return
    # the coarsest float the program went through bounds the error
    tol = max(TOL[d] for d in {dtype, *floats})
    scale = np.nanmax(np.abs(ref[np.isfinite(ref)]), initial=1.0)
    np.testing.assert_allclose(got.astype(np.float64), ref.astype(np.float64), rtol=tol,
                               atol=tol * scale, equal_nan=True)


def _examples(request) -> int:
    return request.config.getoption("--fuzz-examples")


@pytest.fixture(autouse=True)
def _no_contraction(monkeypatch):
    monkeypatch.setenv("TL_FP_CONTRACT", "0")


COUNTER = {"n": 0}


def check_program(p, steps, picks):
    it = iter(picks)

    def draw_int(k):
        return next(it, 0) % max(k, 1)

    try:
        with np.errstate(all="ignore"):
            ref_or_error = reference(p, random_inputs(p, np.random.default_rng(0)))
    except OverflowError:  # a Python int that does not fit: both refuse it
        ref_or_error = None
    if ref_or_error is None:
        with pytest.raises(tl.TensorlangError, match="does not fit"):
            declare(p)
        return
    ins, stage, out = declare(p)
    s = tl.create_schedule(out)
    apply_schedule(s, out, stage, steps, draw_int)
    rng = np.random.default_rng(p["seed"])
    arrays = random_inputs(p, rng)
    ref = reference(p, arrays)
    read = {id(t) for t in s.placeholders}
    args = [t for t in ins if id(t) in read] + [out]
    arrays = [a for t, a in zip(ins, arrays) if id(t) in read]
    exact = p["body"][2] and (p["producer"] is None or p["producer"][2]) and not (
        p["reduce"] == "sum" and np.dtype(p["body"][1]).kind == "f")
    dt = str(out.dtype)
    assert ref.dtype == np.dtype(dt), (ref.dtype, dt)
    low = tl.lower(s, args)
    got_i = np.zeros(ref.shape, dt)
    run_lowered(low, [*arrays, got_i])
    _same(got_i, ref, exact, dt, _floats_in(p))
    targets = ["llvm", "llvm -mcpu=x86-64"]
    for t in targets:
        f = tl.build(s, args, target=t)
        got = np.zeros(ref.shape, dt)
        f(*arrays, got)
        _same(got, ref, exact, dt, _floats_in(p))
    COUNTER["n"] += 1
    if COUNTER["n"] % 25 == 0 and os.environ.get("TL_FUZZ_QEMU", "1") != "0":
        from tensorlang.aot import ToolchainMissing, run_emulated

        g = tl.build(s, args, target="aarch64", name="fuzz")
        got = np.zeros(ref.shape, dt)
        try:
            run_emulated(g, *arrays, got)
        except ToolchainMissing:
            return
        _same(got, ref, exact, dt, _floats_in(p))


@pytest.mark.slow
def test_fuzz_pipeline_against_numpy_and_interpreter(request):
    n = _examples(request)

    @settings(max_examples=n, deadline=None, print_blob=True,
              derandomize=not request.config.getoption("--fuzz-random"),
              suppress_health_check=list(HealthCheck))
    @given(programs(), st.lists(st.sampled_from(PRIMS), max_size=5),
           st.lists(st.integers(0, 1000), max_size=12))
    def run(p, steps, picks):
        check_program(p, steps, picks)

    run()


def test_fuzz_found_quasi_affine_extent():
    """fuse, split, reorder, fuse on a 1x3 float16 copy: the fused loop's extent is a
    quasi-affine piece with a rational coefficient, whose max isl's PwAff.max_val refused
    (an isl.Error from deep inside fuse)."""
    p = {"dtypes": ["float16"], "two_d": True, "producer": None,
         "body": (("in", 0), "float16", True), "reduce": None, "rows": 1, "cols": 3, "seed": 0}
    check_program(p, ["fuse", "split", "reorder", "fuse"], [0, 0, 1, 1])
