"""Quantized integers in the graph: narrow integer dtypes, `G.round`, `quantize_linear`,
`dequantize_linear` and `matmul_integer` (on AVX512-VNNI where the target has it, the plain
packed nest elsewhere), against numpy at sizes that do and do not divide the 4 x 64 tile and
the instruction's 16 x 4 block."""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import tensorlang as tl
import tensorlang.graph as G

HOST = tl.Target.parse("llvm")
VNNI = HOST.has_feature("avx512vnni")
RANGE = {"uint8": (0, 256), "int8": (-128, 128)}


def _q(rng, shape, dtype):
    return rng.integers(*RANGE[dtype], shape).astype(dtype)


def _ref(a, b, za=0, zb=0):
    za = np.asarray(za, np.int64)
    za = za.reshape(-1, 1) if za.ndim else za
    return ((a.astype(np.int64) - za) @ (b.astype(np.int64) - np.asarray(zb, np.int64))
            ).astype(np.int32)


def _run(outs, feed, target="llvm"):
    ex = G.Executor(outs, target=target)
    return ex, ex.run(feed)


# ----------------------------------------------------------------- narrow integers
def test_narrow_integers_follow_numpys_rules(rng):
    a, b = _q(rng, (7, 19), "uint8"), _q(rng, (7, 19), "int8")
    A, B = G.Variable("a", a.shape, "uint8"), G.Variable("b", b.shape, "int8")
    cases = [(A + A, a + a), (A + B, a + b), (A * 3, a * np.uint8(3)),
             (G.sum(A, axis=1), a.sum(axis=1)), (G.sum(B), b.sum()), (G.mean(B), b.mean()),
             (G.max(B, axis=0), b.max(axis=0)), (G.cast(B, "uint8"), b.astype(np.uint8)),
             (G.cast(A, "int32") - 300, a.astype(np.int32) - 300)]
    _, got = _run([c for c, _ in cases], {A: a, B: b})
    for (node, want), g in zip(cases, got):
        want = np.asarray(want)
        assert node.dtype == g.dtype.name
        assert g.dtype == want.dtype or (want.dtype == np.uint64 and g.dtype == np.int64)
        if want.dtype.kind == "f":
            np.testing.assert_allclose(g, want, rtol=1e-15)     # the mean's sum order
        else:
            np.testing.assert_array_equal(g, want)


def test_an_unsupported_dtype_is_named():
    with pytest.raises(G.GraphError, match="dtype must be float32.*uint8, got float16"):
        G.Variable("x", (2,), "float16")
    with pytest.raises(G.GraphError, match="dtype must be.*got complex64"):
        G.constant(np.zeros(2, np.complex64), dtype="complex64")


def test_round_takes_halves_to_even(rng):
    x = np.concatenate([np.arange(-5, 5.5, 0.5, dtype=np.float32),
                        rng.standard_normal(37).astype(np.float32) * 100])
    X = G.Variable("x", x.shape)
    _, (got,) = _run([G.round(X)], {X: x})
    np.testing.assert_array_equal(got, np.round(x))
    assert got[np.where(x == 2.5)[0][0]] == 2.0 and got[np.where(x == -0.5)[0][0]] == 0.0


@pytest.mark.parametrize("target", ["llvm", "llvm -mcpu=x86-64"])
def test_tl_round_on_every_cpu_level(target):
    A = tl.placeholder((37,), "float32", name="A")
    B = tl.compute((37,), lambda i: tl.round(A[i]), name="B")
    s = tl.create_schedule(B)
    s[B].vectorize(s[B].split(B.op.axis[0], factor=16)[1])
    f = tl.build(s, [A, B], target=target)
    a = (np.arange(37, dtype=np.float32) - 18) * 0.5
    b = np.empty_like(a)
    f(a, b)
    np.testing.assert_array_equal(b, np.round(a))


# ------------------------------------------------------------ quantize, dequantize
def _quantize_ref(x, scale, zp, dtype):
    info = np.iinfo(dtype)
    return np.clip(np.rint(x / scale) + zp, info.min, info.max).astype(dtype)


@pytest.mark.parametrize("dtype,zp", [("uint8", 128), ("uint8", 0), ("int8", 0), ("int8", -5)])
def test_quantize_and_dequantize_match_onnxs_formulas(dtype, zp, rng):
    x = np.concatenate([rng.standard_normal(101).astype(np.float32) * 4,
                        np.float32([0.5, 1.5, -2.5, 1e9, -1e9]) * 0.1]).astype(np.float32)
    X = G.Variable("x", x.shape)
    q = G.quantize_linear(X, np.float32(0.05), zp, dtype)
    d = G.dequantize_linear(q, np.float32(0.05), zp)
    _, (gq, gd) = _run([q, d], {X: x})
    want = _quantize_ref(x, np.float32(0.05), zp, dtype)
    assert gq.dtype == dtype
    np.testing.assert_array_equal(gq, want)
    np.testing.assert_array_equal(gd, (want.astype(np.float32) - np.float32(zp)) *
                                  np.float32(0.05))


def test_quantize_linear_refuses_a_wide_type():
    with pytest.raises(G.GraphError, match="dtype must be uint8 or int8, got int32"):
        G.quantize_linear(G.Variable("x", (3,)), 0.1, 0, "int32")


# ----------------------------------------------------------------- matmul_integer
SIZES = [(1, 1, 1), (5, 7, 3), (4, 4, 16), (17, 37, 65), (64, 128, 64), (31, 260, 130)]
TYPES = [("uint8", "int8"), ("int8", "int8"), ("uint8", "uint8"), ("int8", "uint8")]


def _zero_points(rng, kind, ad, bd, m, n):
    if kind == "none":
        return None, None
    if kind == "scalar":
        return _q(rng, (), ad), _q(rng, (), bd)
    return _q(rng, (m,), ad), _q(rng, (n,), bd)         # per row of A, per column of B


def _check(m, k, n, ad, bd, zps, target, rng, constant_b=False):
    a, b = _q(rng, (m, k), ad), _q(rng, (k, n), bd)
    za, zb = _zero_points(rng, zps, ad, bd, m, n)
    A = G.Variable("a", a.shape, ad)
    B = G.constant(b) if constant_b else G.Variable("b", b.shape, bd)
    C = G.matmul_integer(A, B, za, zb)
    assert C.dtype == "int32"
    _, (got,) = _run([C], {A: a} if constant_b else {A: a, B: b}, target)
    np.testing.assert_array_equal(got, _ref(a, b, 0 if za is None else za,
                                            0 if zb is None else zb))


ZPS = ("none", "scalar", "vector")
# every size with every pair of types, the zero points' kinds in turn
CASES = [(*size, *types, ZPS[(i + j) % 3])
         for i, size in enumerate(SIZES) for j, types in enumerate(TYPES)]


@pytest.mark.parametrize("m,k,n,ad,bd,zps", CASES[::2])
def test_matmul_integer_matches_numpy(m, k, n, ad, bd, zps, rng):
    _check(m, k, n, ad, bd, zps, "llvm", rng)


@pytest.mark.parametrize("m,k,n,ad,bd,zps", CASES[1::6])
def test_matmul_integer_matches_numpy_built_for_baseline_x86_64(m, k, n, ad, bd, zps, rng):
    _check(m, k, n, ad, bd, zps, "llvm -mcpu=x86-64", rng)


@pytest.mark.parametrize("m,k,n,ad,bd,zps", CASES[1::4])
def test_matmul_integer_of_constant_weights_packed_once(m, k, n, ad, bd, zps, rng):
    _check(m, k, n, ad, bd, zps, "llvm", rng, constant_b=True)


def test_constant_weights_are_packed_at_graph_construction(rng):
    from tensorlang.graph.quantized import _unpacked, pack_b

    for bd, shift in (("int8", 0), ("uint8", 128)):
        b = _q(rng, (37, 21), bd)
        np.testing.assert_array_equal(_unpacked(pack_b(b), (37, 21, shift)), b)
    A = G.Variable("a", (5, 37), "int8")
    C = G.matmul_integer(A, G.constant(_q(rng, (37, 21), "uint8"), name="w"))
    names = [i.name for i in C.inputs]
    assert names[1:] == ["w_packed", "w_colsums"]      # int8 A: the column sums correct it
    assert C.inputs[1].shape == (2, 10, 16, 4) and C.inputs[1].dtype == "int8"


@pytest.mark.slow
@pytest.mark.parametrize("m,k,n", SIZES)
@pytest.mark.parametrize("ad,bd", TYPES)
@pytest.mark.parametrize("zps", ZPS)
@pytest.mark.parametrize("target,constant_b", [("llvm", False), ("llvm", True),
                                               ("llvm -mcpu=x86-64", False)])
def test_matmul_integer_every_case(m, k, n, ad, bd, zps, target, constant_b, rng):
    _check(m, k, n, ad, bd, zps, target, rng, constant_b)


def test_matmul_integer_of_a_batched_a(rng):
    a, b = _q(rng, (2, 3, 5, 40), "uint8"), _q(rng, (40, 33), "int8")
    A, B = G.Variable("a", a.shape, "uint8"), G.Variable("b", b.shape, "int8")
    _, (got,) = _run([G.matmul_integer(A, B, np.uint8(9), None)], {A: a, B: b})
    assert got.shape == (2, 3, 5, 33)
    np.testing.assert_array_equal(got, _ref(a.reshape(-1, 40), b, 9).reshape(got.shape))


def test_the_int32_sums_wrap_as_the_instructions_do():
    k = 70000                       # 255 * 127 * k passes 2**31
    a, b = np.full((1, k), 255, np.uint8), np.full((k, 16), 127, np.int8)
    A, B = G.Variable("a", a.shape, "uint8"), G.Variable("b", b.shape, "int8")
    _, (got,) = _run([G.matmul_integer(A, B)], {A: a, B: b})
    np.testing.assert_array_equal(got, _ref(a, b))
    assert got[0, 0] < 0


@pytest.mark.slow
@settings(max_examples=12, deadline=None)
@given(m=st.integers(1, 20), k=st.integers(1, 40), n=st.integers(1, 40),
       types=st.sampled_from(TYPES), seed=st.integers(0, 2**16), zp=st.booleans())
def test_matmul_integer_property(m, k, n, types, seed, zp):
    rng = np.random.default_rng(seed)
    ad, bd = types
    a, b = _q(rng, (m, k), ad), _q(rng, (k, n), bd)
    za, zb = (_q(rng, (), ad), _q(rng, (n,), bd)) if zp else (None, None)
    A, B = G.Variable("a", a.shape, ad), G.Variable("b", b.shape, bd)
    _, (got,) = _run([G.matmul_integer(A, B, za, zb)], {A: a, B: b})
    np.testing.assert_array_equal(got, _ref(a, b, 0 if za is None else za,
                                            0 if zb is None else zb))


@pytest.mark.skipif(not VNNI, reason=f"the host ({HOST.cpu}) has no AVX512-VNNI")
def test_matmul_integer_runs_on_vnni_where_the_target_has_it(rng):
    a, b = _q(rng, (64, 256), "uint8"), _q(rng, (256, 64), "int8")
    A, B = G.Variable("a", a.shape, "uint8"), G.Variable("b", b.shape, "int8")
    ex, _ = _run([G.matmul_integer(A, B, np.uint8(3), np.int8(-2))], {A: a, B: b})
    (kernel,) = [k for k in ex.kernels if any(n.op == "matmul_integer" for n in k.nodes)]
    assert "vpdpbusd" in kernel.module.get_source("asm")


def test_matmul_integer_says_when_the_target_has_no_instruction(rng, monkeypatch, capsys):
    monkeypatch.setenv("TL_DEBUG", "1")
    a, b = _q(rng, (8, 16), "uint8"), _q(rng, (16, 8), "int8")
    A, B = G.Variable("a", a.shape, "uint8"), G.Variable("b", b.shape, "int8")
    ex, (got,) = _run([G.matmul_integer(A, B)], {A: a, B: b}, "llvm -mcpu=x86-64")
    np.testing.assert_array_equal(got, _ref(a, b))
    err = capsys.readouterr().err
    assert "has no AVX512-VNNI; the packed nest runs with its lanes vectorized" in err
    assert "keeps its hand schedule: its kernel is written in a dot-product" in err
    assert "vpdpbusd" not in ex.kernels[0].module.get_source("asm")


@pytest.mark.parametrize("bad,match", [
    (lambda A, B: G.matmul_integer(G.cast(A, "int32"), B), "a must be uint8 or int8, got int32"),
    (lambda A, B: G.matmul_integer(A, G.Variable("c", (5, 4), "int8")),
     r"do not match: \(3, 4\) and \(5, 4\)"),
    (lambda A, B: G.matmul_integer(A, B, np.zeros(2, np.uint8)),
     r"a_zero_point must be a scalar or of shape \(3,\), got \(2,\)"),
    (lambda A, B: G.matmul_integer(A, B, None, G.constant(np.int32(1))),
     "b_zero_point must be int8 .*got int32"),
    (lambda A, B: G.matmul_integer(A, B, 300), r"a_zero_point must hold uint8 values, got "
                                               r"int64 300"),
    (lambda A, B: G.matmul_integer(A, G.Variable("c", (2, 4, 4), "int8")), "b must be 2-D"),
])
def test_matmul_integer_refusals_name_the_argument(bad, match):
    A, B = G.Variable("a", (3, 4), "uint8"), G.Variable("b", (4, 4), "int8")
    with pytest.raises((G.GraphError, NotImplementedError), match=match):
        bad(A, B)


# ------------------------------------------------------------------- conv_integer
def _conv_ref(x, w, zx=0, zw=0, pads=(0, 0, 0, 0), stride=1, groups=1):
    xs = x.astype(np.int64) - zx
    ws = w.astype(np.int64) - np.asarray(zw, np.int64).reshape(-1, 1, 1, 1)
    xp = np.pad(xs, ((0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])))
    kh, kw = w.shape[2:]
    win = np.lib.stride_tricks.sliding_window_view(xp, (kh, kw), axis=(2, 3))
    win = win[:, :, ::stride, ::stride]
    cg, kg = x.shape[1] // groups, w.shape[0] // groups
    return np.concatenate([np.einsum("ncijpq,ocpq->noij", win[:, g * cg:(g + 1) * cg],
                                     ws[g * kg:(g + 1) * kg]) for g in range(groups)],
                          axis=1).astype(np.int32)


CONVS = [  # n, c, h, w, k, kh, kw, pads, stride, x dtype, x zero point
    (1, 4, 5, 5, 16, 3, 3, (1, 1, 1, 1), 1, "uint8", 0),
    (2, 3, 7, 9, 5, 3, 3, (1, 1, 1, 1), 1, "uint8", 7),
    (1, 8, 11, 13, 20, 1, 1, (0, 0, 0, 0), 1, "int8", -3),
    (1, 16, 10, 10, 32, 3, 3, (0, 1, 2, 1), 1, "uint8", 100),
    (1, 5, 1, 1, 17, 1, 1, (0, 0, 0, 0), 1, "int8", 0),
    (1, 32, 17, 17, 48, 3, 3, (1, 1, 1, 1), 1, "uint8", 128),
    (1, 3, 23, 21, 64, 3, 3, (0, 0, 0, 0), 2, "uint8", 3),      # SqueezeNet's first
    (2, 8, 9, 12, 16, 1, 1, (0, 0, 0, 0), 2, "int8", 5),
    (1, 4, 15, 15, 16, 7, 7, (3, 3, 3, 3), 2, "uint8", 0)]      # ResNet's first


def _conv_case(n, c, h, w, k, kh, kw, pads, stride, xd, zx, target, rng):
    x, wv = _q(rng, (n, c, h, w), xd), _q(rng, (k, c, kh, kw), "int8")
    X = G.Variable("x", x.shape, xd)
    Y = G.conv_integer(X, G.constant(wv), np.array(zx, xd) if zx else None,
                       strides=(stride, stride), pads=pads)
    assert Y.op == "conv_integer" and Y.dtype == "int32"
    _, (got,) = _run([Y], {X: x}, target)
    np.testing.assert_array_equal(got, _conv_ref(x, wv, zx, pads=pads, stride=stride))


@pytest.mark.parametrize("n,c,h,w,k,kh,kw,pads,stride,xd,zx", CONVS)
def test_conv_integer_matches_numpy(n, c, h, w, k, kh, kw, pads, stride, xd, zx, rng):
    _conv_case(n, c, h, w, k, kh, kw, pads, stride, xd, zx, "llvm", rng)


@pytest.mark.parametrize("n,c,h,w,k,kh,kw,pads,stride,xd,zx", CONVS[1::3])
def test_conv_integer_built_for_baseline_x86_64(n, c, h, w, k, kh, kw, pads, stride, xd, zx,
                                                 rng):
    _conv_case(n, c, h, w, k, kh, kw, pads, stride, xd, zx, "llvm -mcpu=x86-64", rng)


@pytest.mark.skipif(not VNNI, reason=f"the host ({HOST.cpu}) has no AVX512-VNNI")
def test_conv_integer_runs_on_vnni(rng):
    x, wv = _q(rng, (1, 16, 14, 14), "uint8"), _q(rng, (32, 16, 3, 3), "int8")
    X = G.Variable("x", x.shape, "uint8")
    ex, (got,) = _run([G.conv_integer(X, G.constant(wv), np.uint8(5), pads=(1, 1, 1, 1))],
                      {X: x})
    np.testing.assert_array_equal(got, _conv_ref(x, wv, 5, pads=(1, 1, 1, 1)))
    assert "vpdpbusd" in ex.kernels[-1].module.get_source("asm")


@pytest.mark.parametrize("case", ["dilation", "groups", "weight zero point",
                                  "variable weights", "uint8 weights"])
def test_conv_integer_other_forms_run_as_the_int32_conv(case, rng, monkeypatch, capsys):
    monkeypatch.setenv("TL_DEBUG", "1")
    x, wv = _q(rng, (1, 4, 9, 9), "uint8"), _q(rng, (6, 4, 3, 3), "int8")
    zw, dilation, groups = None, 1, 1
    if case == "dilation":
        dilation = 2
    elif case == "groups":
        groups, wv = 2, wv[:, :2].copy()
    elif case == "weight zero point":
        zw = _q(rng, (6,), "int8")
    elif case == "uint8 weights":
        wv = _q(rng, (6, 4, 3, 3), "uint8")
    X = G.Variable("x", x.shape, "uint8")
    W = G.Variable("w", wv.shape, str(wv.dtype)) if case == "variable weights" else \
        G.constant(wv)
    Y = G.conv_integer(X, W, np.uint8(9), zw, pads=(1, 1, 1, 1),
                       dilations=(dilation, dilation), groups=groups)
    assert Y.op != "conv_integer"
    _, (got,) = _run([Y], {X: x, W: wv} if case == "variable weights" else {X: x})
    want = _conv_ref(x, wv, 9, 0 if zw is None else zw, (1, 1, 1, 1), 1, groups) \
        if dilation == 1 else None
    if dilation == 2:           # the 3x3 window with its taps 2 apart: a 5x5 with zeros
        w5 = np.zeros((6, 4, 5, 5), wv.dtype)
        w5[:, :, ::2, ::2] = wv
        want = _conv_ref(x, w5, 9, 0, (1, 1, 1, 1))
    np.testing.assert_array_equal(got, want)
    assert "the int32 convolution of the centred operands" in capsys.readouterr().err
