"""bind: loops as GPU blocks and threads, checked like parallel loops (no GPU needed)."""

import numpy as np
import pytest

import tensorlang as tl

from .helpers import assert_computes, vadd, vadd_cases






def test_bind_tags_loops_and_prints_them():
    A, B = vadd()
    s = tl.create_schedule(B)
    bo, bi = s[B].split(B.op.axis[0], factor=64)
    s[B].bind(bo, tl.thread_axis("blockIdx.x"))
    s[B].bind(bi, "threadIdx.x")
    text = str(tl.lower(s, [A, B]))
    assert "# gpu_block blockIdx.x" in text and "# gpu_thread threadIdx.x" in text
    assert s.trace_text().splitlines()[-1] == 's["B"].bind("i.inner", "threadIdx.x")'
    # the trace replays onto a fresh schedule
    A2, B2 = vadd()
    s2 = s.replay(tl.create_schedule(B2))
    assert str(tl.lower(s2, [A2, B2])) == text


def test_bad_bind_arguments():
    A, B = vadd()
    s = tl.create_schedule(B)
    bo, bi = s[B].split(B.op.axis[0], factor=64)
    with pytest.raises(tl.ScheduleError, match="thread_axis"):
        tl.thread_axis("threadIdx.w")
    with pytest.raises(tl.ScheduleError, match="blockIdx"):
        s[B].bind(bo, "warp")
    s[B].bind(bo, "blockIdx.x")
    with pytest.raises(tl.ScheduleError, match="already binds loop i.outer"):
        s[B].bind(bi, "blockIdx.x")


def test_bound_loop_carrying_a_dependence_is_refused_with_a_witness():
    n = tl.var("n")
    x = tl.placeholder((n,), "float64", name="x")
    y = tl.recurrence((n,), lambda y, i: tl.if_then_else(i > 0, y[i - 1], 0.0) + x[i],
                      dtype="float64", name="y")
    s = tl.create_schedule(y)
    with pytest.raises(tl.IllegalScheduleError, match="bound to a GPU index") as err:
        s[y].bind(y.op.axis[0], tl.thread_axis("threadIdx.x"))
    src, dst = err.value.witness
    assert dst["i"] == src["i"] + 1


def test_reduction_axis_needs_rfactor_on_blocks_and_reduces_across_threads():

    from tensorlang.ir.interp import run_lowered

    n = tl.var("n")
    A = tl.placeholder((n, 64), name="A")
    k = tl.reduce_axis(64, name="k")
    S = tl.compute((n,), lambda i: tl.sum(A[i, k], axis=k), name="S")
    s = tl.create_schedule(S)
    with pytest.raises(tl.IllegalScheduleError, match="rfactor"):
        s[S].bind(k, "blockIdx.x")
    s[S].bind(k, "threadIdx.x")            # a reduction across the threads of a block
    s[S].bind(S.op.axis[0], "blockIdx.x")
    a = np.random.default_rng(0).standard_normal((3, 64)).astype(np.float32)
    out = np.zeros(3, np.float32)
    run_lowered(tl.lower(s, [A, S]), [a, out])
    np.testing.assert_allclose(out, a.sum(1), rtol=1e-5)


def test_cpu_targets_refuse_bound_loops():
    A, B = vadd()
    s = tl.create_schedule(B)
    s[B].bind(B.op.axis[0], "threadIdx.x")
    with pytest.raises(tl.TensorlangError, match="bound to a GPU index"):
        tl.build(s, [A, B])


@pytest.mark.parametrize("threads", [1, 4, 7])
def test_bound_loops_match_numpy_in_the_interpreter(threads):
    A, B = vadd()
    s = tl.create_schedule(B)
    bo, bi = s[B].split(B.op.axis[0], factor=threads)
    s[B].bind(bo, "blockIdx.x")
    s[B].bind(bi, "threadIdx.x")
    assert_computes(s, [A, B], vadd_cases(), llvm=False)    # CPU targets refuse bound loops
