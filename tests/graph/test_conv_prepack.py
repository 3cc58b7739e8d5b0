"""A conv2d whose weights are a graph constant gets them packed once per plan (the
executor's `conv2d_nchwc`), not in every call: the results are those of the same conv fed
its weights as a Variable, bit for bit, at sizes that do and do not fill the register
tiles, with an epilogue, from several threads at once, and a constant read by two convs
is packed once."""

import math
import threading

import numpy as np
import pytest

import tensorlang.graph as G
from tensorlang.graph import cpu_schedules as CS
from tensorlang.graph.nnops import conv2d_ref, pack_conv_weights, unpack_conv_weights


def _blocked(batch, n, c, k, stride=1, padding=1):
    oh = (n + 2 * padding - 3) // stride + 1
    return CS.conv_block((batch, k, oh, oh), (k, c, 3, 3), "float32") is not None


@pytest.mark.parametrize("k,block", [(16, 16), (20, 16), (5, 8), (48, 16)])
def test_packing_round_trips_with_zeros_past_the_channels(k, block, rng):
    w = rng.standard_normal((k, 3, 3, 3)).astype("f4")
    wp = pack_conv_weights(w, block)
    assert wp.shape == (-(-k // block), 3, 3, 3, block) and wp.flags.c_contiguous
    np.testing.assert_array_equal(unpack_conv_weights(wp, k), w)
    tail = wp[-1, ..., (k - 1) % block + 1:]
    assert not tail.any()                     # the channels past K are zero


@pytest.mark.parametrize("batch,n,c,k,stride,padding,epilogue", [
    (1, 14, 32, 32, 1, 1, True), (2, 13, 16, 48, 1, 1, False), (1, 7, 64, 64, 1, 0, True),
    (1, 1, 16, 16, 1, 1, False), (1, 28, 32, 24, 1, 1, False),
    # (the large and the strided cases: about 2.5 s each)
    pytest.param(2, 17, 32, 16, 2, 1, True, marks=pytest.mark.slow),
    pytest.param(1, 56, 64, 64, 1, 1, True, marks=pytest.mark.slow)])
def test_constant_weights_give_the_variable_weights_result(
        batch, n, c, k, stride, padding, epilogue, rng, monkeypatch, capsys):
    monkeypatch.setenv("TL_DEBUG", "1")
    xv = rng.standard_normal((batch, c, n, n)).astype("f4")
    wv = rng.standard_normal((k, c, 3, 3)).astype("f4")
    bv = rng.standard_normal((k, 1, 1)).astype("f4")
    x = G.Variable("x", xv.shape, "float32")
    w = G.Variable("w", wv.shape, "float32")

    def net(weights):
        y = G.conv2d(x, weights, stride=stride, padding=padding)
        return G.relu(y + G.constant(bv)) if epilogue else y
    (got,) = G.Executor([net(G.constant(wv, name="wconst"))]).run({x: xv})
    packed = "constant weights wconst packed once per plan" in capsys.readouterr().err
    assert packed == _blocked(batch, n, c, k, stride, padding)
    (same,) = G.Executor([net(w)]).run({x: xv, w: wv})
    np.testing.assert_array_equal(got, same)
    want = conv2d_ref(xv.astype("f8"), wv.astype("f8"), stride, padding)
    if epilogue:
        want = np.maximum(want + bv, 0)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * math.sqrt(c * 9))


def test_a_constant_read_by_two_convs_is_packed_once_and_threads_share_it(rng):
    c, k, n = 32, 32, 14
    assert _blocked(1, n, c, k)
    wv = rng.standard_normal((k, c, 3, 3)).astype("f4")
    wc = G.constant(wv)
    x = G.Variable("x", (1, c, n, n), "float32")
    h = G.relu(G.conv2d(x, wc, padding=1))
    out = G.conv2d(h, wc, padding=1)
    ex = G.Executor([out])
    xs = [rng.standard_normal((1, c, n, n)).astype("f4") for _ in range(4)]

    def want(xv):
        h = np.maximum(conv2d_ref(xv.astype("f8"), wv.astype("f8"), 1, 1), 0)
        return conv2d_ref(h, wv.astype("f8"), 1, 1)
    ex.run({x: xs[0]})
    assert len(ex._last.constant_slots_extra) == 1
    got, errors = [None] * len(xs), []
    start = threading.Barrier(len(xs))

    def worker(i):
        try:
            start.wait()
            for _ in range(3):
                (got[i],) = ex.run({x: xs[i]})
        except Exception as e:     # noqa: BLE001 (reported below)
            errors.append(e)
    threads = [threading.Thread(target=worker, args=(i,)) for i in range(len(xs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for xv, g in zip(xs, got):
        np.testing.assert_allclose(g, want(xv), rtol=1e-3, atol=1e-3 * c * 9)


def test_a_gradient_through_a_conv_with_constant_weights_matches_variable_weights(rng):
    """Gradients are taken of the graph (conv2d); the packed op exists only in plans: the
    forward conv inside the gradient of sum(conv(x, W)^2) is packed, with the same result."""
    c, k, n = 32, 32, 14
    wv = rng.standard_normal((k, c, 3, 3)).astype("f4")
    xv = rng.standard_normal((1, c, n, n)).astype("f4")
    x = G.Variable("x", xv.shape, "float32")
    w = G.Variable("w", wv.shape, "float32")

    def grad_x(weights):
        y = G.conv2d(x, weights, padding=1)
        (gx,) = G.gradients(G.sum(y * y), [x])
        return gx
    (got,) = G.Executor([grad_x(G.constant(wv))]).run({x: xv})
    (same,) = G.Executor([grad_x(w)]).run({x: xv, w: wv})
    np.testing.assert_array_equal(got, same)
    with pytest.raises(G.GraphError, match="conv2d_nchwc exists only inside"):
        from tensorlang.graph.registry import OPS

        OPS["conv2d_nchwc"].grad(None, None)


def test_default_schedules_show_the_packed_conv_the_plan_runs(rng):
    """`G.default_schedules` schedules the groups as the plan builds them: with a constant
    filter, no packing stage in the kernel; with a Variable one, the `wpack` stage."""
    c, k, n = 32, 32, 14
    assert _blocked(1, n, c, k)
    x = G.Variable("x", (1, c, n, n), "float32")
    w = G.Variable("w", (k, c, 3, 3), "float32")
    wc = G.constant(rng.standard_normal((k, c, 3, 3)).astype("f4"))

    def stages(node):
        (_, s), = [g for g in G.default_schedules([node], schedules="hand")]
        return {st.op.name for st in s.stages}
    const, var = stages(G.conv2d(x, wc, padding=1)), stages(G.conv2d(x, w, padding=1))
    assert "conv_blocked" in const and "wpack" not in const
    assert {"conv_blocked", "wpack"} <= var
