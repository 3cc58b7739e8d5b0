"""int8 and bfloat16 matmuls on the CPU's dot-product instructions (tutorial 12's kernels,
`tensorlang.schedule.dot_products`) beside onnxruntime's MatMulInteger (MLAS, VNNI where the
CPU has it), torch's bfloat16 matmul (oneDNN) and tensorlang's float32 matmul; an int8
ResNet 3x3 conv (64 -> 64 channels at 56x56) on VNNI beside onnxruntime's ConvInteger and
QLinearConv; the graph executor's `G.matmul_integer`, `G.conv_integer` and a bfloat16
`G.matmul`; a transformer's feed-forward block quantized by onnxruntime's `quantize_dynamic`,
run by `tensorlang.onnx` and by onnxruntime. In one process, the systems taken in turn each
round.

    python benchmarks/tensorize.py [--n 1024] [--rounds 5] [--calls 40] [--auto 20]

Prints the CPU, each system's best and median round (GOPS: a multiply-add counted as two
operations), and the ratios the tensorize issue asks for: int8 / onnxruntime, int8 /
float32, bf16 / float32, bf16 / torch, conv / onnxruntime. Peers that are not installed
are left out, saying so (torch's CPU wheel beside the project: PYTHONPATH=<its folder>).
"""

from __future__ import annotations

import argparse
import statistics
import time

import ml_dtypes
import numpy as np

import tensorlang as tl
import tensorlang.graph as G
from tensorlang.schedule import dot_products


def _time(fn, calls: int) -> float:
    fn()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - t0) / calls


def _ort_session(graph, threads):
    """An onnxruntime session of one graph, `threads` intra-op threads."""
    import onnxruntime as ort
    from onnx import helper

    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), so,
                                providers=["CPUExecutionProvider"])


def _ort_matmul_integer(a, b, threads):
    from onnx import TensorProto, helper

    m, k = a.shape
    n = b.shape[1]
    node = helper.make_node("MatMulInteger", ["A", "B"], ["C"])
    graph = helper.make_graph(
        [node], "mmi", [helper.make_tensor_value_info("A", TensorProto.UINT8, [m, k]),
                        helper.make_tensor_value_info("B", TensorProto.INT8, [k, n])],
        [helper.make_tensor_value_info("C", TensorProto.INT32, [m, n])])
    sess = _ort_session(graph, threads)
    feed = {"A": a, "B": b}
    return lambda: sess.run(None, feed)


def _ort_conv(x, w, threads, quantized: bool):
    from onnx import TensorProto, helper, numpy_helper

    n, c, h, _ = x.shape
    k = w.shape[0]
    if quantized:       # requantised to uint8: the scales and zero points as MLAS takes them
        consts = [("xs", np.float32(0.02)), ("xz", np.uint8(0)), ("w", w),
                  ("ws", np.float32(0.01)), ("wz", np.int8(0)), ("ys", np.float32(50.0)),
                  ("yz", np.uint8(128))]
        inits = [numpy_helper.from_array(np.asarray(v), nm) for nm, v in consts]
        node = helper.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"],
                                ["y"], pads=[1, 1, 1, 1])
        ins = [helper.make_tensor_value_info("x", TensorProto.UINT8, [n, c, h, h])]
        out_t = TensorProto.UINT8
    else:
        inits = [numpy_helper.from_array(w, "w")]
        node = helper.make_node("ConvInteger", ["x", "w"], ["y"], pads=[1, 1, 1, 1])
        ins = [helper.make_tensor_value_info("x", TensorProto.UINT8, [n, c, h, h])]
        out_t = TensorProto.INT32
    graph = helper.make_graph([node], "conv", ins,
                              [helper.make_tensor_value_info("y", out_t, [n, k, h, h])],
                              initializer=inits)
    sess = _ort_session(graph, threads)
    feed = {"x": x}
    return lambda: sess.run(None, feed)


def _rounds(systems: dict, work: float, rounds: int, calls: int) -> dict:
    out = {k: [] for k in systems}
    for _ in range(rounds):
        for name, fn in systems.items():
            # onnxruntime's pool spins for a while after a run: a pause keeps its threads
            # off the cores while the next system is timed
            time.sleep(0.3)
            out[name].append(work / _time(fn, calls) / 1e9)
    return out


def _table(title: str, rounds: dict) -> None:
    print(f"\n{title}")
    print(f"{'system':32s} {'best':>8s} {'median':>8s}  (GOPS)")
    for name, r in rounds.items():
        print(f"{name:32s} {max(r):8.1f} {statistics.median(r):8.1f}")


def _ratio(rounds: dict, x: str, y: str) -> None:
    if x in rounds and y in rounds:
        print(f"{x} / {y}: {max(rounds[x]) / max(rounds[y]):.2f} best, "
              f"{statistics.median(rounds[x]) / statistics.median(rounds[y]):.2f} median")


def _report(title: str, systems: dict, work: float, args, *ratios) -> None:
    """Time `systems` in turn (`_rounds`), print their table and each (x, y) ratio."""
    rounds = _rounds(systems, work, args.rounds, args.calls)
    _table(title, rounds)
    for x, y in ratios:
        _ratio(rounds, x, y)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=1024)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--calls", type=int, default=40)
    p.add_argument("--auto", type=float, default=0.0, metavar="BUDGET_S",
                   help="also time the int8 matmul and conv as `tl.auto_schedule` finds "
                        "them from plain loops, by its cost model alone in BUDGET_S seconds")
    args = p.parse_args(argv)
    n = args.n
    host = tl.Target.parse("llvm")
    threads = host.cores

    def packed(*a):
        return dot_products.packed_matmul(n, n, n, *a, block_bytes=host.cache_bytes[1] // 2)
    rng = np.random.default_rng(0)
    a = rng.integers(0, 256, (n, n), dtype=np.uint8)
    b = rng.integers(-128, 128, (n, n), dtype=np.int8)
    c = np.zeros((n, n), np.int32)
    systems = {}
    if host.has_feature("avx512vnni"):
        f = tl.build(*packed("uint8", "int8", "int32", 16, 4, tl.intrin.x86.vnni_u8s8_i32),
                     name="mm_vnni")
        f(a, b, c)
        np.testing.assert_array_equal(c, a.astype(np.int32) @ b.astype(np.int32))
        systems["tensorlang int8 (VNNI)"] = lambda: f(a, b, c)
    else:
        print(f"{host.cpu} has no AVX512-VNNI: the int8 kernel is not run")
    try:
        ort_fn = _ort_matmul_integer(a, b, threads)
        np.testing.assert_array_equal(ort_fn()[0], a.astype(np.int32) @ b.astype(np.int32))
        systems["onnxruntime MatMulInteger"] = ort_fn
    except ImportError as e:
        print(f"onnxruntime is not installed ({e}): left out")
    ab = rng.standard_normal((n, n)).astype(ml_dtypes.bfloat16)
    bb = rng.standard_normal((n, n)).astype(ml_dtypes.bfloat16)
    cf = np.zeros((n, n), np.float32)
    if host.has_feature("avx512bf16"):
        g = tl.build(*packed("bfloat16", "bfloat16", "float32", 16, 2, "x86.bf16_dot_f32"),
                     name="mm_bf16")
        systems["tensorlang bf16 (BF16)"] = lambda: g(ab, bb, cf)
    else:
        print(f"{host.cpu} has no AVX512-BF16: the bfloat16 kernel is not run")
    try:
        import torch

        torch.set_num_threads(threads)
        ta, tb = (torch.from_numpy(v.view(np.int16)).view(torch.bfloat16) for v in (ab, bb))
        got = torch.matmul(ta, tb).float().numpy()
        want = ab.astype("f4") @ bb.astype("f4")
        assert np.abs(got - want).max() <= 0.02 * np.abs(want).max(), "torch's bf16 matmul"
        systems["torch bf16 matmul"] = lambda: torch.matmul(ta, tb)
    except ImportError as e:
        print(f"torch is not installed ({e}): its bf16 matmul is left out")
    ga, gb = G.Variable("ga", (n, n), "bfloat16"), G.Variable("gb", (n, n), "bfloat16")
    gbf = G.Executor([G.matmul(ga, gb)])
    gout = np.empty((n, n), ml_dtypes.bfloat16)
    systems["tensorlang G.matmul bf16"] = lambda: gbf.run({ga: ab, gb: bb}, out=[gout])
    qa, qb = G.Variable("qa", (n, n), "uint8"), G.Variable("qb", (n, n), "int8")
    qex = G.Executor([G.matmul_integer(qa, qb)])
    (qc,) = qex.run({qa: a, qb: b})
    np.testing.assert_array_equal(qc, a.astype(np.int32) @ b.astype(np.int32))
    systems["tensorlang G.matmul_integer"] = lambda: qex.run({qa: a, qb: b}, out=[c])
    if args.auto:
        A8, B8 = tl.placeholder((n, n), "uint8", name="A"), tl.placeholder((n, n), "int8", name="B")
        r = tl.reduce_axis((0, n), name="k")
        C8 = tl.compute((n, n), lambda i, j: tl.sum(
            A8[i, r].astype("int32") * B8[r, j].astype("int32"), axis=r), name="C")
        fa = _auto(C8, [A8, B8, C8], args.auto)
        ca = np.zeros((n, n), np.int32)
        fa(a, b, ca)
        np.testing.assert_array_equal(ca, a.astype(np.int32) @ b.astype(np.int32))
        systems["tensorlang auto_schedule int8"] = lambda: fa(a, b, ca)
    x, y = G.Variable("x", (n, n), "float32"), G.Variable("y", (n, n), "float32")
    ex = G.Executor([G.matmul(x, y)])
    xf, yf = a.astype("f4"), b.astype("f4")
    out = np.empty((n, n), "f4")
    systems["tensorlang float32"] = lambda: ex.run({x: xf, y: yf}, out=[out])
    _report(f"{host.cpu} ({host.cores} threads, vectors of {host.vector_bits} bits), matmul "
            f"{n}^3, {args.rounds} rounds of {args.calls} calls, systems in turn",
            systems, 2.0 * n ** 3, args,
            ("tensorlang int8 (VNNI)", "onnxruntime MatMulInteger"),
            ("tensorlang G.matmul_integer", "onnxruntime MatMulInteger"),
            ("tensorlang auto_schedule int8", "onnxruntime MatMulInteger"),
            ("tensorlang int8 (VNNI)", "tensorlang float32"),
            ("tensorlang bf16 (BF16)", "tensorlang float32"),
            ("tensorlang bf16 (BF16)", "torch bf16 matmul"),
            ("tensorlang G.matmul bf16", "torch bf16 matmul"))

    # the int8 conv: a ResNet layer
    nb, c, h, k = 1, 64, 56, 64
    x8 = rng.integers(0, 256, (nb, c, h, h), dtype=np.uint8)
    w8 = rng.integers(-128, 128, (k, c, 3, 3), dtype=np.int8)
    xp = np.pad(x8.astype(np.int64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    win = np.lib.stride_tricks.sliding_window_view(xp, (3, 3), axis=(2, 3))
    want = np.einsum("ncijpq,ocpq->noij", win, w8.astype(np.int64)).astype(np.int32)
    convs = {}
    y8 = np.zeros((nb, k, h, h), np.int32)
    if host.has_feature("avx512vnni"):
        cf_ = tl.build(*dot_products.blocked_conv2d(nb, c, h, k, 14, tl.intrin.x86.vnni_u8s8_i32),
                       name="conv_vnni")
        cf_(x8, w8, y8)
        np.testing.assert_array_equal(y8, want)
        convs["tensorlang int8 conv (VNNI)"] = lambda: cf_(x8, w8, y8)
    gx = G.Variable("gx", x8.shape, "uint8")
    gex = G.Executor([G.conv_integer(gx, G.constant(w8), pads=(1, 1, 1, 1))])
    (gy,) = gex.run({gx: x8})
    np.testing.assert_array_equal(gy, want)
    convs["tensorlang G.conv_integer"] = lambda: gex.run({gx: x8}, out=[y8])
    if args.auto:
        X = tl.placeholder((nb, c, h, h), "uint8", name="X")
        W = tl.placeholder((k, c, 3, 3), "int8", name="W")
        Xpad = tl.compute((nb, c, h + 2, h + 2), lambda b_, ch, y, x: tl.if_then_else(
            tl.all(y >= 1, y <= h, x >= 1, x <= h), X[b_, ch, y - 1, x - 1],
            tl.const(0, "uint8")), name="Xpad")
        rc, ry, rx = (tl.reduce_axis((0, e), name=nm) for e, nm in ((c, "rc"), (3, "ry"),
                                                                    (3, "rx")))
        Y = tl.compute((nb, k, h, h), lambda b_, o, y, x: tl.sum(
            Xpad[b_, rc, y + ry, x + rx].astype("int32") * W[o, rc, ry, rx].astype("int32"),
            axis=[rc, ry, rx]), name="Y")
        fy = _auto(Y, [X, W, Y], args.auto)
        ya = np.zeros((nb, k, h, h), np.int32)
        fy(x8, w8, ya)
        np.testing.assert_array_equal(ya, want)
        convs["tensorlang auto_schedule int8 conv"] = lambda: fy(x8, w8, ya)
    try:
        ci_ = _ort_conv(x8, w8, threads, False)
        np.testing.assert_array_equal(ci_()[0], want)
        convs["onnxruntime ConvInteger"] = ci_
        convs["onnxruntime QLinearConv"] = _ort_conv(x8, w8, threads, True)
    except ImportError as e:
        print(f"onnxruntime is not installed ({e}): left out")
    _report(f"int8 conv2d 3x3 {nb}x{c}x{h}x{h} -> {k}, pad 1", convs,
            2.0 * nb * k * c * 9 * h * h, args,
            ("tensorlang int8 conv (VNNI)", "onnxruntime ConvInteger"),
            ("tensorlang int8 conv (VNNI)", "onnxruntime QLinearConv"),
            ("tensorlang G.conv_integer", "onnxruntime QLinearConv"),
            ("tensorlang auto_schedule int8 conv", "onnxruntime QLinearConv"))
    _bf16_conv(rng, nb, c, h, k, args)
    _quantized_ffn(rng, threads, args)


def _auto(out, args, budget: float):
    """The kernel `tl.auto_schedule` finds for `out` by its cost model alone (no
    measurement), built for the host; prints how long the search took."""
    t0 = time.perf_counter()
    s = tl.auto_schedule(out, budget_s=budget, measure_on_host=False)
    print(f"auto_schedule {out.name}: {time.perf_counter() - t0:.1f} s, "
          f"{'tensorized' if 'tensorize' in s.trace_text() else 'not tensorized'}")
    return tl.build(s, args, name=f"auto_{out.name}")


def _bf16_conv(rng, nb: int, c: int, h: int, k: int, args) -> None:
    """The same ResNet layer in bfloat16 (float32 sums): the graph executor's `G.conv2d`
    (on AVX512-BF16 where the CPU has it), its float32 conv, and torch's bfloat16 conv2d."""
    xv = rng.standard_normal((nb, c, h, h)).astype(ml_dtypes.bfloat16)
    wv = rng.standard_normal((k, c, 3, 3)).astype(ml_dtypes.bfloat16)
    x, xf = G.Variable("x", xv.shape, "bfloat16"), G.Variable("xf", xv.shape, "float32")
    ex = G.Executor([G.conv2d(x, G.constant(wv), padding=1)])
    exf = G.Executor([G.conv2d(xf, G.constant(wv.astype("f4")), padding=1)])
    out, outf, xfv = np.empty((nb, k, h, h), xv.dtype), np.empty((nb, k, h, h), "f4"), \
        xv.astype("f4")
    ex.run({x: xv}, out=[out])
    exf.run({xf: xfv}, out=[outf])
    np.testing.assert_allclose(out.astype("f4"), outf, rtol=2 ** -7, atol=0.1)
    systems = {"tensorlang G.conv2d bf16": lambda: ex.run({x: xv}, out=[out]),
               "tensorlang G.conv2d float32": lambda: exf.run({xf: xfv}, out=[outf])}
    try:
        import torch
        import torch.nn.functional as F

        tx, tw = (torch.from_numpy(v.view(np.int16)).view(torch.bfloat16) for v in (xv, wv))
        systems["torch bf16 conv2d"] = lambda: F.conv2d(tx, tw, padding=1)
    except ImportError as e:
        print(f"torch is not installed ({e}): its bf16 conv2d is left out")
    _report(f"bfloat16 conv2d 3x3 {nb}x{c}x{h}x{h} -> {k}, pad 1 (float32 sums)", systems,
            2.0 * nb * k * c * 9 * h * h, args,
            ("tensorlang G.conv2d bf16", "torch bf16 conv2d"),
            ("tensorlang G.conv2d bf16", "tensorlang G.conv2d float32"))


def _quantized_ffn(rng, threads: int, args) -> None:
    """A transformer's feed-forward block (128 tokens, 768 -> 3072 -> GELU-free Relu -> 768)
    quantized by onnxruntime's own `quantize_dynamic` (DynamicQuantizeLinear, MatMulInteger
    with int8 weights), the same model file run by tensorlang.onnx and by onnxruntime."""
    try:
        import onnx
        import onnxruntime as ort
        from onnx import TensorProto, helper, numpy_helper
        from onnxruntime.quantization import QuantType, quantize_dynamic
    except ImportError as e:
        print(f"onnx / onnxruntime's quantizer is not installed ({e}): the model is left out")
        return
    import os
    import tempfile

    import tensorlang.onnx as TO

    t, d, h = 128, 768, 3072
    init = [numpy_helper.from_array(v, name) for name, v in (
        ("w1", rng.standard_normal((d, h)).astype("f4") * 0.03),
        ("b1", rng.standard_normal(h).astype("f4") * 0.1),
        ("w2", rng.standard_normal((h, d)).astype("f4") * 0.02),
        ("b2", rng.standard_normal(d).astype("f4") * 0.1))]
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["a"]),
             helper.make_node("Add", ["a", "b1"], ["ab"]), helper.make_node("Relu", ["ab"], ["r"]),
             helper.make_node("MatMul", ["r", "w2"], ["o"]),
             helper.make_node("Add", ["o", "b2"], ["y"])]
    graph = helper.make_graph(nodes, "ffn", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [t, d])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, [t, d])], init)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    with tempfile.TemporaryDirectory() as tmp:
        src, dst = os.path.join(tmp, "ffn.onnx"), os.path.join(tmp, "ffn_q.onnx")
        onnx.save(model, src)
        quantize_dynamic(src, dst, weight_type=QuantType.QInt8)
        q = onnx.load(dst)
    q.ir_version = 8
    x = rng.standard_normal((t, d)).astype("f4")
    rep = TO.Backend.prepare(q)
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    sess = ort.InferenceSession(q.SerializeToString(), so, providers=["CPUExecutionProvider"])
    got, want = rep.run([x])[0], sess.run(None, {"x": x})[0]
    print(f"\nquantized FFN {t}x{d}->{h}->{d} (onnxruntime's quantize_dynamic, int8 weights): "
          f"max |tensorlang - onnxruntime| = {np.abs(got - want).max():.3g} "
          f"(output scale {np.abs(want).max():.3g})")
    _report("quantized FFN, the whole model",
            {"tensorlang.onnx": lambda: rep.run([x]),
             "onnxruntime": lambda: sess.run(None, {"x": x})},
            2.0 * t * d * h * 2, args, ("tensorlang.onnx", "onnxruntime"))


if __name__ == "__main__":
    main()
