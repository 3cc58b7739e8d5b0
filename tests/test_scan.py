"""tl.scan (TVM's te.scan): a recurrence over the update's axes whose first steps are
init's; checked against numpy, the interpreter and the LLVM kernel, with its schedules,
its refusals and the CUDA source of the tutorial's GPU schedule."""

import shutil
import subprocess

import numpy as np
import pytest

import tensorlang as tl
from tensorlang.ir.interp import run_lowered

from .cuda.test_cuda import GPU
from .schedule.primitives.helpers import assert_refused_with_witness

RNG = np.random.default_rng(42)
SIZES = ((1, 1), (7, 13), (40, 33))


def cumsum_scan():
    m, n = tl.var("m"), tl.var("n")
    X = tl.placeholder((m, n), name="X")
    s_state = tl.placeholder((m, n))
    s_init = tl.compute((1, n), lambda _, i: X[0, i], name="init")
    s_update = tl.compute((m, n), lambda t, i: s_state[t - 1, i] + X[t, i], name="update")
    return X, s_init, s_update, tl.scan(s_init, s_update, s_state, inputs=[X])


def check(s, args, fn, sizes=SIZES):
    low = tl.lower(s, args)
    runs = [("llvm", tl.build(s, args)),
            ("interpreter", lambda *a: run_lowered(low, list(a)))]
    for shape in sizes:
        x = RNG.standard_normal(shape).astype(np.float32)
        for name, run in runs:
            out = np.full(shape, np.nan, np.float32)
            run(x, out)
            np.testing.assert_allclose(out, fn(x), rtol=1e-5, atol=1e-5,
                                       err_msg=f"{name} at {shape}")


def test_scan_is_the_cumulative_sum():
    X, s_init, s_update, s_scan = cumsum_scan()
    assert str(s_scan.op.body) == "select(t < 1, init[t, i], scan[t - 1, i] + X[t, i])"
    assert s_scan.shape == s_update.shape and s_scan.op.is_recurrence
    s = tl.create_schedule(s_scan.op)
    assert s[s_update] is s[s_scan] and s[s_init] is not s[s_scan]
    text = str(tl.lower(s, [X, s_scan]))
    assert "  for t in range(m):\n    for i in range(n):\n      scan[t, i] = " in text, text
    check(s, [X, s_scan], lambda x: np.cumsum(x, axis=0))


def test_update_stage_schedules():
    X, s_init, s_update, s_scan = cumsum_scan()
    s = tl.create_schedule(s_scan.op)
    t, i = s_update.op.axis
    io, ii = s[s_update].split(i, factor=8)
    s[s_update].vectorize(ii)
    s[s_update].reorder(io, t, ii)            # columns carry no dependence: legal
    s[s_init].compute_inline()                # the first row read straight from X
    text = str(tl.lower(s, [X, s_scan]))
    assert "init" not in text and "# vectorized" in text
    check(s, [X, s_scan], lambda x: np.cumsum(x, axis=0))


def test_parallel_steps_refused_with_the_witness():
    X, s_init, s_update, s_scan = cumsum_scan()
    s = tl.create_schedule(s_scan.op)
    w = assert_refused_with_witness(s, lambda: s[s_update].parallel(s_update.op.axis[0]),
                                    "parallel", "scan")
    assert w.sink["t"] == w.source["t"] + 1 and w.sink["i"] == w.source["i"]
    s[s_update].parallel(s_update.op.axis[1])  # across columns: legal
    check(s, [X, s_scan], lambda x: np.cumsum(x, axis=0), sizes=((7, 13),))


def test_longer_init_and_a_multi_stage_cell():
    m, n = tl.var("m"), tl.var("n")
    X = tl.placeholder((m, n), name="X")
    state = tl.placeholder((m, n), name="state")
    init = tl.compute((2, n), lambda s0, i: X[s0, i] * 1.0, name="init")
    s1 = tl.compute((m, n), lambda t, i: state[t - 1, i] * 0.5 + state[t - 2, i], name="s1")
    s2 = tl.compute((m, n), lambda t, i: s1[t, i] + X[t, i], name="s2")
    res = tl.scan(init, s2, state, name="fib")
    s = tl.create_schedule(res)
    with pytest.raises(tl.ScheduleError, match="s1 is part of scan fib's cell"):
        s[s1].compute_at(s[s2], s2.op.axis[0])

    def ref(x):
        y = x.copy()
        for t in range(2, len(x)):
            y[t] = y[t - 1] * 0.5 + y[t - 2] + x[t]
        return y

    check(s, [X, res], ref, sizes=((2, 1), (3, 5), (11, 7)))   # init reads rows 0 and 1


def test_misuse_names_the_argument():
    m, n = tl.var("m"), tl.var("n")
    X = tl.placeholder((m, n), name="X")
    state = tl.placeholder((m, n), name="state")
    init = tl.compute((1, n), lambda _, i: X[0, i], name="init")
    upd = tl.compute((m, n), lambda t, i: state[t - 1, i] + X[t, i], name="upd")
    with pytest.raises(tl.TensorlangError, match="state_placeholder must be a tl.placeholder"):
        tl.scan(init, upd, upd)
    with pytest.raises(tl.TensorlangError, match="init's dimension 1 is 3"):
        tl.scan(tl.compute((1, 3), lambda _, i: X[0, i]), upd, state)
    with pytest.raises(tl.TensorlangError, match="update has dtype float64"):
        tl.scan(init, tl.compute((m, n), lambda t, i: X[t, i].astype("float64")), state)
    with pytest.raises(tl.TensorlangError, match="reads the state at its own step"):
        tl.scan(init, tl.compute((m, n), lambda t, i: state[t, i] + 1.0), state)
    with pytest.raises(tl.TensorlangError, match="inputs must be a list of tensors"):
        tl.scan(init, upd, state, inputs=[1])
    with pytest.raises(NotImplementedError, match="several states"):
        tl.scan([init, init], [upd, upd], [state, state])


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
def test_tutorial_gpu_schedule_compiles_once_the_step_loop_is_inside(tmp_path):
    X, s_init, s_update, s_scan = cumsum_scan()
    s = tl.create_schedule(s_scan.op)
    xo, xi = s[s_init].split(s_init.op.axis[1], factor=256)
    s[s_init].bind(xo, "blockIdx.x")
    s[s_init].bind(xi, "threadIdx.x")
    xo, xi = s[s_update].split(s_update.op.axis[1], factor=256)
    s[s_update].bind(xo, "blockIdx.x")
    s[s_update].bind(xi, "threadIdx.x")
    # TVM runs the step loop inside the kernel; here the bound loops must be outermost
    with pytest.raises(tl.ScheduleError, match="bound to blockIdx.x but is not among the "
                                               "outermost"):
        tl.build(s, [X, s_scan], "cuda")
    s[s_update].reorder(xo, xi, s_update.op.axis[0])
    src = tl.build(s, [X, s_scan], "cuda").get_source()
    assert "for (tl_idx t = 0;" in src
    (tmp_path / "k.cu").write_text(src)
    r = subprocess.run(["nvcc", "-ptx", "-arch=sm_90", "-std=c++17", "-o",
                        str(tmp_path / "k.ptx"), str(tmp_path / "k.cu")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


@GPU
@pytest.mark.gpu
def test_scan_on_the_gpu():
    X, s_init, s_update, s_scan = cumsum_scan()
    s = tl.create_schedule(s_scan.op)
    xo, xi = s[s_init].split(s_init.op.axis[1], factor=256)
    s[s_init].bind(xo, "blockIdx.x")
    s[s_init].bind(xi, "threadIdx.x")
    t, i = s_update.op.axis
    xo, xi = s[s_update].split(i, factor=256)
    s[s_update].reorder(xo, xi, t)
    s[s_update].bind(xo, "blockIdx.x")
    s[s_update].bind(xi, "threadIdx.x")
    f = tl.build(s, [X, s_scan], "cuda")
    for shape in ((1, 1), (10, 1024), (13, 300)):
        a = RNG.uniform(size=shape).astype(np.float32)
        b = np.zeros_like(a)
        f(a, b)
        np.testing.assert_allclose(b, np.cumsum(a, axis=0), rtol=1e-5)
