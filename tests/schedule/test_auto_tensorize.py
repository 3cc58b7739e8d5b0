"""The auto-scheduler places dot-product instructions: its dot-product sketch (operands
packed into the instruction's layout, `dot_products.dot_tile` with drawn sizes, tensorize),
the cost model's term for an instruction, mutations that keep the instruction's loops, and
`tl.auto_schedule` choosing the instruction where the target has it. Candidates are checked
against numpy at sizes that do and do not divide the instruction's block (1, primes)."""

import random

import ml_dtypes
import numpy as np
import pytest

import tensorlang as tl
from tensorlang.autoschedule.cost import estimate
from tensorlang.autoschedule.mutate import mutate
from tensorlang.autoschedule.sample import sample
from tensorlang.schedule import dot_products

VNNI = "llvm -mcpu=znver4"          # AVX512-VNNI and BF16 on any host (built, not run)
PLAIN = "llvm -mcpu=x86-64"         # neither


def _host_has(feature):
    return tl.Target.parse("llvm").has_feature(feature)


def int8_matmul(M, N, K, layout="ik,kj", batch=0):
    """C[(b,) i, j] = sum_k A . B in int32, A uint8 and B int8 in `layout` ("ik,kj",
    "ki,kj": A transposed, "ik,jk": B transposed)."""
    la, lb = layout.split(",")
    shape = {"i": M, "j": N, "k": K}
    pre = (batch,) if batch else ()
    A = tl.placeholder(pre + tuple(shape[c] for c in la), "uint8", name="A")
    B = tl.placeholder(pre + tuple(shape[c] for c in lb), "int8", name="B")
    k = tl.reduce_axis((0, K), name="k")

    def at(T, order, b, i, j):
        idx = tuple({"i": i, "j": j, "k": k}[c] for c in order)
        return T[((b,) if batch else ()) + idx]
    if batch:
        C = tl.compute((batch, M, N), lambda b, i, j: tl.sum(
            at(A, la, b, i, j).astype("int32") * at(B, lb, b, i, j).astype("int32"), axis=k),
            name="C")
    else:
        C = tl.compute((M, N), lambda i, j: tl.sum(
            at(A, la, None, i, j).astype("int32") * at(B, lb, None, i, j).astype("int32"),
            axis=k), name="C")
    return A, B, C


def _arrays(A, B, rng):
    a = rng.integers(0, 256, [int(x.value) for x in A.shape], dtype=np.uint8)
    b = rng.integers(-128, 128, [int(x.value) for x in B.shape], dtype=np.int8)
    return a, b


def _reference(a, b, layout, batch):
    la, lb = layout.split(",")
    spec = f"{'z' if batch else ''}{la},{'z' if batch else ''}{lb}->{'z' if batch else ''}ij"
    return np.einsum(spec, a.astype(np.int64), b.astype(np.int64)).astype(np.int32)


def _tensorized(target, C, seed=0, tries=40):
    """The first sampled candidate that tensorizes (None after `tries`)."""
    rng = random.Random(seed)
    for _ in range(tries):
        s = sample(C, target, rng)
        if "tensorize" in s.trace_text():
            return s
    return None


@pytest.mark.parametrize("M,N,K,layout,batch", [
    (1, 1, 1, "ik,kj", 0), (5, 16, 4, "ik,kj", 0), (17, 37, 65, "ik,kj", 0),
    (13, 33, 29, "ki,kj", 0), (7, 48, 23, "ik,jk", 0),
    pytest.param(64, 96, 40, "ik,kj", 0, marks=pytest.mark.slow),
    pytest.param(9, 20, 12, "ik,kj", 3, marks=pytest.mark.slow)])
def test_sampled_dot_products_use_vnni_and_match_numpy(M, N, K, layout, batch, rng):
    A, B, C = int8_matmul(M, N, K, layout, batch)
    s = _tensorized(VNNI, C)
    assert s is not None, "no candidate of 40 tensorized an int8 dot product on a VNNI target"
    text = s.trace_text()
    assert 'intrin="x86.vnni_u8s8_i32"' in text and text.count("s.pack(") >= 2
    a, b = _arrays(A, B, rng)
    want = _reference(a, b, layout, batch)
    obj = tl.build(s, [A, B, C], target=VNNI)          # builds on any host
    assert ("vpdpbusd" in obj.get_source("asm")) == (N >= 16 and K >= 4)
    if M * N * K * max(batch, 1) <= 30000:
        # the interpreter runs the instruction by its description, on any host
        c = np.zeros(want.shape, np.int32)
        tl.run_lowered(tl.lower(s, [A, B, C]), [a, b, c])
        np.testing.assert_array_equal(c, want)
    if not _host_has("avx512vnni"):
        pytest.skip("this CPU has no AVX512-VNNI: the candidate was built and interpreted")
    c = np.full(want.shape, -1, np.int32)
    tl.build(s, [A, B, C])(a, b, c)
    np.testing.assert_array_equal(c, want)


def test_bf16_dot_products_use_the_bf16_instruction(rng):
    M, N, K = 11, 40, 18
    A = tl.placeholder((M, K), "bfloat16", name="A")
    B = tl.placeholder((K, N), "bfloat16", name="B")
    k = tl.reduce_axis((0, K), name="k")
    C = tl.compute((M, N), lambda i, j: tl.sum(
        A[i, k].astype("float32") * B[k, j].astype("float32"), axis=k), name="C")
    s = _tensorized(VNNI, C)
    assert s is not None and 'intrin="x86.bf16_dot_f32"' in s.trace_text()
    a = rng.standard_normal((M, K)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((K, N)).astype(ml_dtypes.bfloat16)
    want = a.astype(np.float32) @ b.astype(np.float32)
    assert "vdpbf16ps" in tl.build(s, [A, B, C], target=VNNI).get_source("asm")
    if not _host_has("avx512bf16"):
        pytest.skip("this CPU has no AVX512-BF16: the candidate was built, not run")
    c = np.zeros((M, N), np.float32)
    tl.build(s, [A, B, C])(a, b, c)
    # (the instruction flushes subnormal inputs and adds its two products its own way)
    np.testing.assert_allclose(c, want, rtol=1e-5, atol=1e-4)


def test_no_instruction_is_sampled_where_the_target_lacks_it_or_the_types_differ():
    _, _, C = int8_matmul(16, 32, 16)
    rng = random.Random(0)
    assert not any("tensorize" in sample(C, PLAIN, rng).trace_text() for _ in range(6))
    # int8 x uint8 (the operands' types swapped): vpdpbusd multiplies u8 by s8 only
    A = tl.placeholder((16, 16), "int8", name="A")
    B = tl.placeholder((16, 32), "uint8", name="B")
    k = tl.reduce_axis((0, 16), name="k")
    D = tl.compute((16, 32), lambda i, j: tl.sum(
        A[i, k].astype("int32") * B[k, j].astype("int32"), axis=k), name="D")
    assert not any("tensorize" in sample(D, VNNI, rng).trace_text() for _ in range(6))


def test_the_cost_model_counts_an_instruction_as_one():
    """The same packed nest with and without the instruction: the model predicts the
    tensorized one several times faster (vpdpbusd does 64 multiply-adds; the plain nest's
    int32 lanes 16 a vector multiply and add), and within 2x of the plain float32 matmul's
    prediction divided by the instruction's gain."""
    n = 256
    with_vnni = estimate(dot_products.packed_matmul(n, n, n, "uint8", "int8", "int32", 16, 4,
                                                    tl.intrin.x86.vnni_u8s8_i32)[0], VNNI)
    plain = estimate(dot_products.packed_matmul(n, n, n, "uint8", "int8", "int32", 16, 4)[0],
                     VNNI)
    assert plain.seconds > 3 * with_vnni.seconds, (plain.seconds, with_vnni.seconds)
    # 2 n^3 operations at one instruction (128 operations) a cycle per core at most
    cpu = tl.Target.parse(VNNI)
    floor = 2 * n ** 3 / 128 / cpu.cpu_model.clock_hz / cpu.cores
    assert floor <= with_vnni.seconds < 4 * floor, (floor, with_vnni.seconds)


def test_mutations_keep_the_instructions_loops_and_layout():
    _, _, C = int8_matmul(64, 96, 40)
    s = _tensorized(VNNI, C)
    rng = random.Random(1)
    for _ in range(30):
        child = mutate(list(s.trace), rng)
        if child is None:
            continue
        changed = [t for t, u in zip(child, s.trace) if t != u]
        assert len(changed) == 1
        call = changed[0].call
        assert call.prim != "pack", changed
        assert not (call.prim == "split" and call.args[0] in ("j.inner", "k")), changed


@pytest.mark.slow
def test_auto_schedule_by_the_model_places_the_instruction():
    # (at 128^3 the packing and the fork weigh as much as the products: a plain register
    # tile runs as fast, measured and predicted)
    _, _, C = int8_matmul(256, 256, 256)
    s = tl.auto_schedule(C, target=VNNI, budget_s=8, measure_on_host=False, seed=0)
    assert 'intrin="x86.vnni_u8s8_i32"' in s.trace_text()
    s = tl.auto_schedule(C, target=PLAIN, budget_s=4, measure_on_host=False, seed=0)
    assert "tensorize" not in s.trace_text()


@pytest.mark.slow
def test_auto_schedule_measured_on_a_vnni_host_is_tensorized_and_correct(rng):
    if not _host_has("avx512vnni"):
        pytest.skip("this CPU has no AVX512-VNNI")
    A, B, C = int8_matmul(256, 256, 256)
    s = tl.auto_schedule(C, budget_s=20, seed=0)
    assert "tensorize" in s.trace_text()
    a, b = _arrays(A, B, rng)
    c = np.zeros((256, 256), np.int32)
    tl.build(s, [A, B, C])(a, b, c)
    np.testing.assert_array_equal(c, a.astype(np.int32) @ b.astype(np.int32))


def int8_conv(n, c, h, k, ks=3, pad=1, stride=1):
    """Y = conv(X padded by `pad`, W) in int32, X uint8 NCHW and W int8 OIHW, as a user
    writes it: a padded input stage, then the sums over channels and the window."""
    X = tl.placeholder((n, c, h, h), "uint8", name="X")
    W = tl.placeholder((k, c, ks, ks), "int8", name="W")
    hp = h + 2 * pad
    Xpad = tl.compute((n, c, hp, hp), lambda b, ch, y, x: tl.if_then_else(
        tl.all(y >= pad, y < h + pad, x >= pad, x < h + pad), X[b, ch, y - pad, x - pad],
        tl.const(0, "uint8")), name="Xpad")
    oh = (hp - ks) // stride + 1
    rc = tl.reduce_axis((0, c), name="rc")
    ry, rx = tl.reduce_axis((0, ks), name="ry"), tl.reduce_axis((0, ks), name="rx")
    Y = tl.compute((n, k, oh, oh), lambda b, o, y, x: tl.sum(
        Xpad[b, rc, y * stride + ry, x * stride + rx].astype("int32") *
        W[o, rc, ry, rx].astype("int32"), axis=[rc, ry, rx]), name="Y")
    return X, W, Y


@pytest.mark.parametrize("n,c,h,k,ks,pad,stride", [
    (1, 8, 9, 32, 3, 1, 1), (1, 4, 11, 16, 3, 1, 2),
    pytest.param(1, 5, 8, 16, 3, 1, 1, marks=pytest.mark.slow),
    pytest.param(1, 3, 5, 20, 1, 0, 1, marks=pytest.mark.slow),
    # (17 channels and 5 columns: partial tiles everywhere, a 7 s build)
    pytest.param(1, 5, 7, 17, 3, 0, 1, marks=pytest.mark.slow)])
def test_sampled_convolutions_use_vnni_and_match_numpy(n, c, h, k, ks, pad, stride, rng):
    X, W, Y = int8_conv(n, c, h, k, ks, pad, stride)
    s = _tensorized(VNNI, Y)
    assert s is not None, "no candidate of 40 tensorized an int8 conv on a VNNI target"
    text = s.trace_text()
    assert 'intrin="x86.vnni_u8s8_i32"' in text and 'cache_write("Y", "local")' in text
    xv = rng.integers(0, 256, (n, c, h, h), dtype=np.uint8)
    wv = rng.integers(-128, 128, (k, c, ks, ks), dtype=np.int8)
    xp = np.pad(xv.astype(np.int64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    win = np.lib.stride_tricks.sliding_window_view(xp, (ks, ks), axis=(2, 3))
    want = np.einsum("ncijpq,ocpq->noij", win[:, :, ::stride, ::stride],
                     wv.astype(np.int64)).astype(np.int32)
    # (fewer than 4 channels fill no block: plain code throughout)
    asm = tl.build(s, [X, W, Y], target=VNNI).get_source("asm")
    assert ("vpdpbusd" in asm) == (c >= 4)
    if not _host_has("avx512vnni"):
        pytest.skip("this CPU has no AVX512-VNNI: the candidate was built, not run")
    y = np.full(want.shape, -1, np.int32)
    tl.build(s, [X, W, Y])(xv, wv, y)
    np.testing.assert_array_equal(y, want)


@pytest.mark.slow
def test_a_resnet_layer_by_the_model_is_tensorized():
    _, _, Y = int8_conv(1, 64, 56, 64)
    s = tl.auto_schedule(Y, target=VNNI, budget_s=20, measure_on_host=False, seed=0)
    assert 'intrin="x86.vnni_u8s8_i32"' in s.trace_text()


def bf16_conv(n, c, h, k):
    """Y = conv(X padded by 1, W) 3x3 in float32 sums of bfloat16 products."""
    X = tl.placeholder((n, c, h, h), "bfloat16", name="X")
    W = tl.placeholder((k, c, 3, 3), "bfloat16", name="W")
    Xpad = tl.compute((n, c, h + 2, h + 2), lambda b, ch, y, x: tl.if_then_else(
        tl.all(y >= 1, y <= h, x >= 1, x <= h), X[b, ch, y - 1, x - 1],
        tl.const(0, "bfloat16")), name="Xpad")
    rc = tl.reduce_axis((0, c), name="rc")
    ry, rx = tl.reduce_axis((0, 3), name="ry"), tl.reduce_axis((0, 3), name="rx")
    Y = tl.compute((n, k, h, h), lambda b, o, y, x: tl.sum(
        Xpad[b, rc, y + ry, x + rx].astype("float32") * W[o, rc, ry, rx].astype("float32"),
        axis=[rc, ry, rx]), name="Y")
    return X, W, Y


def test_a_tile_of_several_channel_blocks_keeps_its_sums_in_registers(rng):
    """A local tile of 2 blocks of 16 channels x 8 columns, each block a use of the
    instruction at a channel offset that isl writes from the outer loops (`o.outer * 16 -
    32 * (f // 16)`): its loops are rebased so each origin is a constant, and SROA keeps
    the sums in registers — no stack access between the first and the last instruction
    (it was a load and a store around each one, at half the speed)."""
    X, W, Y = bf16_conv(1, 16, 16, 64)
    s = tl.create_schedule(Y)
    Xpad = next(st.op.output for st in s.stages if st.op.name == "Xpad")
    xp = s.pack(Xpad, 1, 2, [s[Y]])
    s[Xpad].compute_inline()
    s[xp].parallel("ax_o")
    wp = s.pack(W, 0, 16, [s[Y]])
    wpp = s.pack(wp, 1, 2, [s[Y]])
    wpp = s[wpp].reorder_storage("ax0", "ax_o", "ax2", "ax3", "ax4", "ax_i")
    s[wp].compute_inline()
    s[wpp].parallel("ax0")
    L = s.cache_write(Y, "local")
    L = s[L].reorder_storage("b", "y", "x", "o")
    s[Y].tile("o", "x", 32, 8)
    s[Y].reorder("b", "o.outer", "y", "x.outer", "x.inner", "o.inner")
    s[Y].vectorize("o.inner")
    s[L].compute_at(s[Y], "x.outer")
    s[L].split("rc", factor=2)
    s[L].split("o", factor=16)
    s[L].reorder("b", "y", "rc.outer", "ry", "rx", "x", "o.outer", "o.inner", "rc.inner")
    s[L].unroll("x")
    s[L].unroll("o.outer")
    s[L].tensorize("o.inner", tl.intrin.x86.bf16_dot_f32)
    s[Y].parallel(s[Y].fuse("b", "o.outer", "y"))
    asm = tl.build(s, [X, W, Y], target=VNNI).get_source("asm").splitlines()
    at = [k for k, ln in enumerate(asm) if "vdpbf16ps" in ln]
    assert len(at) == 16
    assert not [ln for ln in asm[at[0]:at[-1]] if "rsp" in ln]
    if _host_has("avx512bf16"):
        xv = rng.standard_normal((1, 16, 16, 16)).astype(ml_dtypes.bfloat16)
        wv = rng.standard_normal((64, 16, 3, 3)).astype(ml_dtypes.bfloat16)
        y = np.zeros((1, 64, 16, 16), np.float32)
        tl.build(s, [X, W, Y])(xv, wv, y)
        p = np.pad(xv.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
        win = np.lib.stride_tricks.sliding_window_view(p, (3, 3), axis=(2, 3))
        want = np.einsum("ncijpq,ocpq->noij", win, wv.astype(np.float64))
        np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-3)


def test_a_nest_isl_would_generate_incompletely_is_refused_not_wrong():
    """isl's AST generator (every islpy tried: 2025.2.5, 2026.2.1) drops the second
    channel block of this int8 tile (2 x 16 channels, input channels split by 4) computed
    at a fused row loop: the coverage check refuses it instead of emitting a nest that
    leaves half the output unwritten, and the sampler drops such candidates."""
    X, W, Y = int8_conv(1, 32, 16, 64)
    s = tl.create_schedule(Y)
    Xpad = next(st.op.output for st in s.stages if st.op.name == "Xpad")
    s.pack(Xpad, 1, 4, [s[Y]])
    s[Xpad].compute_inline()
    wp = s.pack(W, 0, 16, [s[Y]])
    s.pack(wp, 1, 4, [s[Y]])
    s[wp].compute_inline()
    L = s.cache_write(Y, "local")
    L = s[L].reorder_storage("b", "y", "x", "o")
    s[Y].tile("o", "x", 32, 8)
    s[Y].reorder("b", "o.outer", "y", "x.outer", "x.inner", "o.inner")
    s[L].compute_at(s[Y], "x.outer")
    s[L].split("rc", factor=4)
    s[L].split("o", factor=16)
    s[L].reorder("b", "y", "rc.outer", "ry", "rx", "x", "o.outer", "o.inner", "rc.inner")
    s[L].unroll("o.outer")
    s[Y].parallel(s[Y].fuse("b", "o.outer", "y"))
    try:
        f = tl.build(s, [X, W, Y], target=PLAIN)
    except tl.TensorlangError as e:
        assert "left out statement instances" in str(e) and "refused" in str(e)
        return
    # an isl that generates it whole: then it must be right
    rng = np.random.default_rng(0)
    xv = rng.integers(0, 256, (1, 32, 16, 16), dtype=np.uint8)
    wv = rng.integers(-128, 128, (64, 32, 3, 3), dtype=np.int8)
    y = np.full((1, 64, 16, 16), -1, np.int32)
    f(xv, wv, y)
    p = np.pad(xv.astype(np.int64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    win = np.lib.stride_tricks.sliding_window_view(p, (3, 3), axis=(2, 3))
    np.testing.assert_array_equal(
        y, np.einsum("ncijpq,ocpq->noij", win, wv.astype(np.int64)).astype(np.int32))
