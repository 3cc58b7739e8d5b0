"""bfloat16 in the graph: variables, constants and casts as `ml_dtypes` has them, elementwise
ops computed in float32 and rounded, sums and matmuls accumulated in float32 and rounded once
(the matmul on AVX512-BF16's `vdpbf16ps` where the target has it), at sizes that do and do
not divide the instruction's blocks, on the host and the baseline x86-64."""

import ml_dtypes
import numpy as np
import pytest

import tensorlang as tl
import tensorlang.graph as G
from tensorlang.graph.executor import schedule_group

BF16 = ml_dtypes.bfloat16
ULP = 2.0 ** -7                 # bfloat16's relative spacing: 8 significant bits


def _bf(rng, shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(BF16)


def _close(got, want, scale):
    """Equal within one bfloat16 step (float32 sums in another order can round the other
    way once rounded to bfloat16)."""
    assert got.dtype == BF16
    np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32),
                               rtol=ULP, atol=ULP * scale)


def test_variables_constants_and_casts_keep_bfloat16(rng):
    x = G.Variable("x", (3, 5), "bfloat16")
    assert x.dtype == "bfloat16"
    c = G.constant(np.arange(15, dtype=np.float32).reshape(3, 5).astype(BF16))
    assert c.dtype == "bfloat16"
    xv = _bf(rng, (3, 5), 100.0)
    f = rng.standard_normal((3, 5)).astype(np.float32) * 1000
    y = G.Variable("y", (3, 5), "float32")
    got = G.Executor([x + c, G.cast(y, "bfloat16"), G.cast(x, "float32")]).run(
        {x: xv, y: f})
    want = (xv.astype(np.float32) + np.arange(15).reshape(3, 5)).astype(BF16)
    np.testing.assert_array_equal(got[0].view(np.uint16), want.view(np.uint16))
    # float32 -> bfloat16 rounds to nearest even, bit for bit as ml_dtypes
    np.testing.assert_array_equal(got[1].view(np.uint16), f.astype(BF16).view(np.uint16))
    np.testing.assert_array_equal(got[2], xv.astype(np.float32))


@pytest.mark.parametrize("op", ["add", "mul", "relu", "exp", "tanh"])
def test_elementwise_ops_are_computed_in_float32_and_rounded(op, rng):
    x = G.Variable("x", (7, 33), "bfloat16")
    y = G.Variable("y", (7, 33), "bfloat16")
    xv, yv = _bf(rng, (7, 33)), _bf(rng, (7, 33))
    node = {"add": x + y, "mul": x * y, "relu": G.relu(x), "exp": G.exp(x),
            "tanh": G.tanh(x)}[op]
    fx, fy = xv.astype(np.float32), yv.astype(np.float32)
    want = {"add": fx + fy, "mul": fx * fy, "relu": np.maximum(fx, 0), "exp": np.exp(fx),
            "tanh": np.tanh(fx)}[op].astype(BF16)
    (got,) = G.Executor([node]).run({x: xv, y: yv})
    _close(got, want, 0.0)


def test_sums_and_means_accumulate_in_float32():
    # summed in bfloat16 the ones would stop at 256 (256 + 1 rounds back to 256)
    x = G.Variable("x", (4, 1000), "bfloat16")
    xv = np.ones((4, 1000), BF16)
    got_sum, got_mean = G.Executor([G.sum(x, axis=1), G.mean(x)]).run({x: xv})
    assert got_sum.dtype == BF16 and got_mean.dtype == BF16
    np.testing.assert_array_equal(got_sum.astype(np.float32), [1000.0] * 4)
    assert float(got_mean) == 1.0


@pytest.mark.parametrize("m,k,n,target", [
    (1, 1, 1, "llvm"), (5, 7, 3, "llvm"), (17, 37, 65, "llvm"), (64, 128, 96, "llvm"),
    (17, 37, 65, "llvm -mcpu=x86-64"),
    pytest.param(64, 128, 96, "llvm -mcpu=x86-64", marks=pytest.mark.slow)])
def test_matmul_sums_in_float32_and_rounds_once(m, k, n, target, rng):
    x = G.Variable("x", (m, k), "bfloat16")
    y = G.Variable("y", (k, n), "bfloat16")
    xv, yv = _bf(rng, (m, k)), _bf(rng, (k, n))
    want = (xv.astype(np.float32) @ yv.astype(np.float32)).astype(BF16)
    (got,) = G.Executor([G.matmul(x, y)], target=target).run({x: xv, y: yv})
    _close(got, want, np.sqrt(k))


def test_batched_and_transposed_matmuls(rng):
    x = G.Variable("x", (3, 9, 20), "bfloat16")
    y = G.Variable("y", (20, 33), "bfloat16")
    xv, yv = _bf(rng, (3, 9, 20)), _bf(rng, (20, 33))
    fx, fy = xv.astype(np.float32), yv.astype(np.float32)
    got = G.Executor([G.matmul(x, y), G.matmul(G.transpose(y), G.transpose(x, (0, 2, 1)))]
                     ).run({x: xv, y: yv})
    _close(got[0], (fx @ fy).astype(BF16), 5.0)
    _close(got[1], (fy.T @ fx.transpose(0, 2, 1)).astype(BF16), 5.0)


def _matmul_trace(target: str) -> str:
    members = (("matmul", (("ta", False), ("tb", False)), (("in", 0), ("in", 1))),)
    s, _, _ = schedule_group(members, ((64, 96), (96, 80)), ("bfloat16", "bfloat16"),
                             target, "default")
    return s.trace_text()


def test_the_kernel_uses_the_bf16_instruction_where_the_target_has_it(monkeypatch, capsys):
    assert 'intrin="x86.bf16_dot_f32"' in _matmul_trace("llvm -mcpu=znver4")
    monkeypatch.setenv("TL_DEBUG", "1")
    assert "tensorize" not in _matmul_trace("llvm -mcpu=x86-64")
    assert "has no AVX512-BF16" in capsys.readouterr().err


def test_gradients_of_bfloat16_are_refused_by_name():
    x = G.Variable("x", (2, 3), "bfloat16")
    with pytest.raises(tl.TensorlangError, match="derivatives need float32 or float64"):
        G.gradients(G.sum(x * x), [x])


def test_convolutions_and_softmax_of_bfloat16_sum_in_float32(rng):
    x = G.Variable("x", (1, 3, 9, 9), "bfloat16")
    w = G.Variable("w", (4, 3, 3, 3), "bfloat16")
    xv, wv = _bf(rng, (1, 3, 9, 9)), _bf(rng, (4, 3, 3, 3))
    conv, sm = G.Executor([G.conv2d(x, w, padding=1), G.softmax(x)]).run({x: xv, w: wv})
    fx, fw = xv.astype(np.float64), wv.astype(np.float64)
    p = np.pad(fx, ((0, 0), (0, 0), (1, 1), (1, 1)))
    win = np.lib.stride_tricks.sliding_window_view(p, (3, 3), axis=(2, 3))
    want = np.einsum("ncijpq,ocpq->noij", win, fw)
    _close(conv, want.astype(BF16), 5.0)
    e = np.exp(fx - fx.max(-1, keepdims=True))
    _close(sm, (e / e.sum(-1, keepdims=True)).astype(BF16), 0.0)


@pytest.mark.parametrize("n,c,h,k,ks,stride,pad,target", [
    (1, 1, 1, 1, 1, 1, 0, "llvm"), (1, 3, 9, 5, 3, 1, 1, "llvm"),
    (2, 7, 13, 17, 3, 2, 1, "llvm"), (1, 3, 9, 5, 3, 1, 1, "llvm -mcpu=x86-64"),
    pytest.param(1, 16, 16, 32, 3, 1, 1, "llvm", marks=pytest.mark.slow),
    pytest.param(2, 7, 13, 17, 3, 2, 1, "llvm -mcpu=x86-64", marks=pytest.mark.slow)])
def test_conv2d_sums_in_float32_on_bf16_blocks(n, c, h, k, ks, stride, pad, target, rng):
    x = G.Variable("x", (n, c, h, h), "bfloat16")
    xv, wv = _bf(rng, (n, c, h, h)), _bf(rng, (k, c, ks, ks))
    fx, fw = xv.astype(np.float64), wv.astype(np.float64)
    p = np.pad(fx, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    win = np.lib.stride_tricks.sliding_window_view(p, (ks, ks), axis=(2, 3))
    want = np.einsum("ncijpq,ocpq->noij", win[:, :, ::stride, ::stride], fw)
    for w in (G.Variable("w", wv.shape, "bfloat16"), G.constant(wv)):
        y = G.conv2d(x, w, stride=stride, padding=pad)
        assert y.dtype == "bfloat16"
        feed = {x: xv} if w.op == "constant" else {x: xv, w: wv}
        (got,) = G.Executor([y], target=target).run(feed)
        _close(got, want.astype(BF16), np.sqrt(c * ks * ks))


def test_the_conv_uses_the_bf16_instruction_where_the_target_has_it():
    members = (("conv2d", (("padding", 1), ("stride", 1)), (("in", 0), ("in", 1))),)
    shapes, dtypes = ((1, 16, 14, 14), (32, 16, 3, 3)), ("bfloat16", "bfloat16")
    s, _, _ = schedule_group(members, shapes, dtypes, "llvm -mcpu=znver4", "default")
    assert 'intrin="x86.bf16_dot_f32"' in s.trace_text()
    s, _, _ = schedule_group(members, shapes, dtypes, "llvm -mcpu=x86-64", "default")
    assert "tensorize" not in s.trace_text()


def test_mixed_bfloat16_and_float32_promote_as_numpy(rng):
    x = G.Variable("x", (4, 6), "bfloat16")
    y = G.Variable("y", (6, 3), "float32")
    xv, yv = _bf(rng, (4, 6)), rng.standard_normal((6, 3)).astype(np.float32)
    node = G.matmul(x, y)
    assert node.dtype == "float32"
    (got,) = G.Executor([node]).run({x: xv, y: yv})
    np.testing.assert_allclose(got, xv.astype(np.float32) @ yv, rtol=1e-5, atol=1e-5)
