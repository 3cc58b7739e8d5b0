"""Computes with several outputs (TVM's tuple outputs): one stage, one loop nest, a store
per output at each point; tuple reductions (a comm_reducer over a tuple); the primitives on
the shared stage, checked against numpy, the interpreter and the LLVM kernel."""

import shutil
import subprocess

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tensorlang as tl
from tensorlang.ir.interp import run_lowered

from .cuda.test_cuda import GPU
from .schedule.primitives.helpers import assert_refused_with_witness

RNG = np.random.default_rng(46)
SIZES = ((1, 1), (7, 13), (33, 70))     # 1, primes, larger (not multiples of the factors)


def pair():
    m, n = tl.var("m"), tl.var("n")
    A0 = tl.placeholder((m, n), name="A0")
    A1 = tl.placeholder((m, n), name="A1")
    B0, B1 = tl.compute((m, n), lambda i, j: (A0[i, j] + 2.0, A1[i, j] * 3.0), name="B")
    return A0, A1, B0, B1


def check(s, args, fn, n_in, sizes=SIZES, interpreter=True):
    """The built kernel (and the interpreter on the lowered nest) give `fn(*inputs)` for
    every output at each size; outputs start as NaN, so an unwritten element fails."""
    runs = [("llvm", tl.build(s, args))]
    if interpreter:
        low = tl.lower(s, args)
        runs.append(("interpreter", lambda *a: run_lowered(low, list(a))))
    for shape in sizes:
        ins = [RNG.standard_normal(shape).astype(np.float32) for _ in range(n_in)]
        want = fn(*ins)
        for name, run in runs:
            outs = [np.full(w.shape, np.nan, w.dtype) for w in want]
            run(*ins, *outs)
            for o, w in zip(outs, want):
                np.testing.assert_allclose(o, w, rtol=1e-5, err_msg=f"{name} at {shape}")


def test_tuple_compute_is_one_stage_with_one_nest():
    A0, A1, B0, B1 = pair()
    assert B0.op is B1.op and (B0.name, B1.name) == ("B_v0", "B_v1")
    assert (B0.value_index, B1.value_index) == (0, 1)
    assert B0.op.outputs == (B0, B1) and B0.op.num_outputs == 2
    s = tl.create_schedule(B0.op)
    assert s[B0] is s[B1] and len(s.stages) == 1
    text = str(tl.lower(s, [A0, A1, B0, B1]))
    assert text.count("for ") == 2, text
    assert "      B_v0[i, j] = A0[i, j] + 2.0\n      B_v1[i, j] = A1[i, j] * 3.0" in text
    check(s, [A0, A1, B0, B1], lambda a0, a1: (a0 + 2, a1 * 3), 2)


def test_one_value_tuple_is_a_plain_tensor():
    A = tl.placeholder((5,), name="A")
    B = tl.compute((5,), lambda i: (A[i] + 1.0,), name="B")
    assert isinstance(B, tl.Tensor) and B.name == "B"


def test_primitives_apply_to_the_shared_stage():
    A0, A1, B0, B1 = pair()
    s = tl.create_schedule(B0.op)
    i, j = B0.op.axis
    jo, ji = s[B1].split(j, factor=8)         # through either tensor: the same stage
    s[B0].reorder(jo, i, ji)
    s[B1].vectorize(ji)
    s[B0].parallel(jo)
    text = str(tl.lower(s, [A0, A1, B0, B1]))
    assert "# parallel" in text and "# vectorized" in text
    check(s, [A0, A1, B0, B1], lambda a0, a1: (a0 + 2, a1 * 3), 2)
    # the trace names the stage; it replays on a fresh copy
    fresh = pair()
    t = s.replay(tl.create_schedule(fresh[2].op))
    assert str(tl.lower(t, list(fresh))) == text


def test_producer_computed_at_the_tuple_stage():
    m, n = tl.var("m"), tl.var("n")
    A = tl.placeholder((m, n), name="A")
    P = tl.compute((m, n), lambda i, j: A[i, j] * 2.0, name="P")
    B0, B1 = tl.compute((m, n), lambda i, j: (P[i, j] + 1.0, P[i, j] - A[i, j]), name="B")
    s = tl.create_schedule(B0.op)
    jo, ji = s[B0].split(B0.op.axis[1], factor=4)
    s[P].compute_at(s[B1], jo)
    text = str(tl.lower(s, [A, B0, B1]))
    assert "P = allocate(float32, [1, 4], 'local')" in text, text
    check(s, [A, B0, B1], lambda a: (a * 2 + 1, a), 1)


def test_tuple_stage_computed_at_a_reader_of_both_outputs():
    A0, A1, B0, B1 = pair()
    C = tl.compute(B0.shape, lambda i, j: B0[i, j] * B1[i, j], name="C")
    s = tl.create_schedule(C)
    jo, ji = s[C].split(C.op.axis[1], factor=5)
    s[B1].compute_at(s[C], jo)
    text = str(tl.lower(s, [A0, A1, C]))
    assert "B_v0 = allocate(float32, [1, 5], 'local')" in text
    assert "B_v1 = allocate(float32, [1, 5], 'local')" in text
    check(s, [A0, A1, C], lambda a0, a1: ((a0 + 2) * (a1 * 3),), 2)


def test_compute_at_refused_when_another_stage_reads_the_other_output_outside():
    A0, A1, B0, B1 = pair()
    C = tl.compute(B0.shape, lambda i, j: B0[i, j] + 1.0, name="C")
    D = tl.compute(B0.shape, lambda i, j: B1[i, j] + C[i, j], name="D")
    s = tl.create_schedule(D)
    w = assert_refused_with_witness(s, lambda: s[B0].compute_at(s[C], C.op.axis[0]),
                                    "compute_at", "B")
    assert set(w.sink) == {"i", "j"}


def argmax_reducer():
    # TVM's tuple_inputs tutorial: index and value reduced together
    def fcombine(x, y):
        lhs = tl.if_then_else(x[1] >= y[1], x[0], y[0])
        rhs = tl.if_then_else(x[1] >= y[1], x[1], y[1])
        return lhs, rhs

    return tl.comm_reducer(fcombine, lambda t0, t1: (tl.const(-1, t0), tl.min_value(t1)),
                           name="argmax")


def test_tuple_reduction_argmax():
    m, n = tl.var("m"), tl.var("n")
    idx = tl.placeholder((m, n), name="idx", dtype="int32")
    val = tl.placeholder((m, n), name="val", dtype="float32")
    k = tl.reduce_axis((0, n), "k")
    T0, T1 = tl.compute((m,), lambda i: argmax_reducer()((idx[i, k], val[i, k]), axis=k),
                        name="T")
    assert (T0.dtype, T1.dtype) == ("int32", "float32") and T0.op is T1.op
    s = tl.create_schedule(T0.op)
    io, ii = s[T0].split(T0.op.axis[0], factor=4)
    s[T1].parallel(io)
    f = tl.build(s, [idx, val, T0, T1])
    low = tl.lower(s, [idx, val, T0, T1])
    for mm, nn in SIZES:
        v = RNG.integers(0, 4, (mm, nn)).astype(np.float32)    # ties: the first wins
        ix = np.tile(np.arange(nn, dtype=np.int32), (mm, 1))
        for run in (f, lambda *a: run_lowered(low, list(a))):
            t0, t1 = np.full(mm, -7, np.int32), np.full(mm, np.nan, np.float32)
            run(ix, v, t0, t1)
            np.testing.assert_array_equal(t0, v.argmax(axis=1))
            np.testing.assert_array_equal(t1, v.max(axis=1))


def test_tuple_reduction_refuses_a_parallel_reduce_axis_with_a_witness():
    m, n = tl.var("m"), tl.var("n")
    A0, A1 = tl.placeholder((m, n), name="A0"), tl.placeholder((m, n), name="A1")
    k = tl.reduce_axis((0, n), "k")
    r = tl.comm_reducer(lambda x, y: (x[0] + y[0], tl.maximum(x[1], y[1])),
                        lambda t0, t1: (0.0, tl.min_value(t1)), name="sum_max")
    T0, T1 = tl.compute((m,), lambda i: r((A0[i, k], A1[i, k]), axis=k), name="T")
    s = tl.create_schedule(T0.op)
    w = assert_refused_with_witness(s, lambda: s[T1].parallel(k), "parallel", "T")
    assert w.sink["k"] != w.source["k"] and w.sink["i"] == w.source["i"]
    check(s, [A0, A1, T0, T1], lambda a0, a1: (a0.sum(axis=1), a1.max(axis=1)), 2,
          sizes=((1, 1), (7, 13)))


def test_tuple_outputs_are_read_by_later_stages():
    A0, A1, B0, B1 = pair()
    C = tl.compute(B0.shape, lambda i, j: B1[i, j] - B0[i, j], name="C")
    s = tl.create_schedule(C)
    # only C is an output: both of B's tensors are intermediate buffers
    check(s, [A0, A1, C], lambda a0, a1: (a1 * 3 - (a0 + 2),), 2)
    s = tl.create_schedule([C, B1])
    check(s, [A0, A1, B1, C], lambda a0, a1: (a1 * 3, a1 * 3 - (a0 + 2)), 2,
          interpreter=False)


def test_misuse_names_the_argument():
    m = tl.var("m")
    A = tl.placeholder((m,), name="A")
    k = tl.reduce_axis((0, m), "k")
    with pytest.raises(tl.TensorlangError, match="tuple of reductions must be every value"):
        tl.compute((m,), lambda i: (tl.sum(A[k], axis=k), A[i]), name="X")
    with pytest.raises(tl.TensorlangError, match="empty tuple"):
        tl.compute((m,), lambda i: (), name="X")
    with pytest.raises(tl.TensorlangError, match="fcombine must return a tuple of 2"):
        tl.comm_reducer(lambda x, y: x[0] + y[0], lambda a, b: (0.0, 0.0))((A[k], A[k]),
                                                                           axis=k)
    with pytest.raises(tl.TensorlangError, match="fidentity must give a tuple of 2"):
        tl.comm_reducer(lambda x, y: (x[0], y[1]), lambda a, b: 0.0)((A[k], A[k]), axis=k)
    A0, A1, B0, B1 = pair()
    C = tl.compute(B0.shape, lambda i, j: B0[i, j] * 2.0, name="C")
    s = tl.create_schedule(C)
    with pytest.raises(tl.ScheduleError, match="several outputs in one stage"):
        s[B0].compute_inline()
    with pytest.raises(NotImplementedError, match="cache_write: B computes several"):
        s.cache_write(B1, "local")
    with pytest.raises(tl.TensorlangError, match="the output B_v1 is not in args"):
        tl.lower(tl.create_schedule(B0.op), [A0, A1, B0])


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
def test_cuda_source_of_a_tuple_stage_compiles(tmp_path):
    A0, A1, B0, B1 = pair()
    s = tl.create_schedule(B0.op)
    jo, ji = s[B0].split(B0.op.axis[1], factor=64)
    s[B0].bind(B0.op.axis[0], "blockIdx.y")
    s[B0].bind(jo, "blockIdx.x")
    s[B1].bind(ji, "threadIdx.x")
    src = tl.build(s, [A0, A1, B0, B1], target="cuda").get_source()
    assert "B_v0[" in src and "B_v1[" in src
    (tmp_path / "k.cu").write_text(src)
    r = subprocess.run(["nvcc", "-ptx", "-arch=sm_90", "-std=c++17", "-o",
                        str(tmp_path / "k.ptx"), str(tmp_path / "k.cu")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


@GPU
@pytest.mark.gpu
def test_tuple_stage_and_tuple_reduction_on_the_gpu():
    A0, A1, B0, B1 = pair()
    s = tl.create_schedule(B0.op)
    jo, ji = s[B0].split(B0.op.axis[1], factor=64)
    s[B0].bind(B0.op.axis[0], "blockIdx.y")
    s[B0].bind(jo, "blockIdx.x")
    s[B1].bind(ji, "threadIdx.x")
    f = tl.build(s, [A0, A1, B0, B1], target="cuda")
    a0, a1 = (RNG.standard_normal((33, 70)).astype(np.float32) for _ in range(2))
    b0, b1 = np.zeros_like(a0), np.zeros_like(a0)
    f(a0, a1, b0, b1)
    np.testing.assert_allclose(b0, a0 + 2, rtol=1e-6)
    np.testing.assert_allclose(b1, a1 * 3, rtol=1e-6)
    m, n = tl.var("m"), tl.var("n")
    idx = tl.placeholder((m, n), name="idx", dtype="int32")
    val = tl.placeholder((m, n), name="val", dtype="float32")
    k = tl.reduce_axis((0, n), "k")
    T0, T1 = tl.compute((m,), lambda i: argmax_reducer()((idx[i, k], val[i, k]), axis=k),
                        name="T")
    s = tl.create_schedule(T0.op)
    io, ii = s[T0].split(T0.op.axis[0], factor=32)
    s[T0].bind(io, "blockIdx.x")
    s[T1].bind(ii, "threadIdx.x")
    f = tl.build(s, [idx, val, T0, T1], target="cuda")
    v = RNG.integers(0, 4, (37, 11)).astype(np.float32)
    ix = np.tile(np.arange(11, dtype=np.int32), (37, 1))
    t0, t1 = np.zeros(37, np.int32), np.zeros(37, np.float32)
    f(ix, v, t0, t1)
    np.testing.assert_array_equal(t0, v.argmax(axis=1))
    np.testing.assert_array_equal(t1, v.max(axis=1))


# --------------------------------------------------- property: random elementwise bodies
def _exprs(depth):
    leaf = st.sampled_from(["a0", "a1", "c"])
    if depth == 0:
        return leaf
    sub = _exprs(depth - 1)
    return st.one_of(leaf, st.tuples(st.sampled_from(["+", "-", "*", "max"]), sub, sub))


def _build(tree, a0, a1, c, maximum):
    if isinstance(tree, str):
        return {"a0": a0, "a1": a1, "c": c}[tree]
    op, x, y = tree
    x, y = _build(x, a0, a1, c, maximum), _build(y, a0, a1, c, maximum)
    return maximum(x, y) if op == "max" else {"+": x + y, "-": x - y, "*": x * y}[op]


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trees=st.lists(_exprs(3), min_size=2, max_size=3), split=st.integers(1, 5),
       vector=st.booleans())
def test_random_tuple_bodies_match_numpy(trees, split, vector):
    trees = trees + [("-", "a0", "a1")]     # every input is read (an unread one is no arg)
    m, n = tl.var("m"), tl.var("n")
    A0, A1 = tl.placeholder((m, n), name="A0"), tl.placeholder((m, n), name="A1")
    outs = tl.compute((m, n), lambda i, j: tuple(
        _build(t, A0[i, j], A1[i, j], 0.5, tl.maximum) for t in trees), name="B")
    s = tl.create_schedule(outs[0].op)
    jo, ji = s[outs[-1]].split(outs[0].op.axis[1], factor=split)
    if vector:
        s[outs[0]].vectorize(ji)
    check(s, [A0, A1, *outs],
          lambda a0, a1: tuple(np.broadcast_to(_build(t, a0, a1, np.float32(0.5), np.maximum),
                                               a0.shape) for t in trees),
          2, sizes=((1, 1), (3, 7)))
