"""int8 and bfloat16 matmuls on the CPU's dot-product instructions (tutorial 12's kernels)
beside onnxruntime's MatMulInteger (MLAS, VNNI where the CPU has it) and tensorlang's float32
matmul, in one process, the systems taken in turn each round.

    python benchmarks/tensorize.py [--n 1024] [--rounds 5]

Prints the CPU, each system's best and median round (GOPS: 2*n^3 multiply-adds counted as
two operations each), and the ratios the tensorize issue asks for: int8 / onnxruntime,
int8 / float32, bf16 / float32. Peers that are not installed are left out, saying so.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import runpy
import statistics
import time

import ml_dtypes
import numpy as np

import tensorlang as tl
import tensorlang.graph as G


def _time(fn, calls: int) -> float:
    fn()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - t0) / calls


def _ort_matmul_integer(a, b, threads):
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper

    m, k = a.shape
    n = b.shape[1]
    node = helper.make_node("MatMulInteger", ["A", "B"], ["C"])
    graph = helper.make_graph(
        [node], "mmi", [helper.make_tensor_value_info("A", TensorProto.UINT8, [m, k]),
                        helper.make_tensor_value_info("B", TensorProto.INT8, [k, n])],
        [helper.make_tensor_value_info("C", TensorProto.INT32, [m, n])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), so,
                                providers=["CPUExecutionProvider"])
    feed = {"A": a, "B": b}
    onnx.checker.check_model(model)
    return lambda: sess.run(None, feed)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=1024)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--calls", type=int, default=40)
    args = p.parse_args(argv)
    n = args.n
    host = tl.Target.parse("llvm")
    threads = host.cores
    os.environ["TL_TUTORIAL_N"] = str(n)          # the tutorial's size
    t12 = runpy.run_path(str(pathlib.Path(__file__).parent.parent / "tutorials" /
                             "12_new_hardware_units.py"))
    packed = t12["packed_matmul"]
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
    x, y = G.Variable("x", (n, n), "float32"), G.Variable("y", (n, n), "float32")
    ex = G.Executor([G.matmul(x, y)])
    xf, yf = a.astype("f4"), b.astype("f4")
    out = np.empty((n, n), "f4")
    systems["tensorlang float32"] = lambda: ex.run({x: xf, y: yf}, out=[out])
    rounds = {k: [] for k in systems}
    for _ in range(args.rounds):
        for name, fn in systems.items():
            # onnxruntime's pool spins for a while after a run: a pause keeps its threads
            # off the cores while the next system is timed
            time.sleep(0.3)
            rounds[name].append(2.0 * n ** 3 / _time(fn, args.calls) / 1e9)
    print(f"\n{host.cpu} ({host.cores} threads, vectors of {host.vector_bits} bits), {n}^3, "
          f"{args.rounds} rounds "
          f"of {args.calls} calls, systems in turn")
    print(f"{'system':28s} {'best':>8s} {'median':>8s}  (GOPS)")
    for name, r in rounds.items():
        print(f"{name:28s} {max(r):8.1f} {statistics.median(r):8.1f}")

    def ratio(x, y):
        if x in rounds and y in rounds:
            print(f"{x} / {y}: {max(rounds[x]) / max(rounds[y]):.2f} best, "
                  f"{statistics.median(rounds[x]) / statistics.median(rounds[y]):.2f} median")
    ratio("tensorlang int8 (VNNI)", "onnxruntime MatMulInteger")
    ratio("tensorlang int8 (VNNI)", "tensorlang float32")
    ratio("tensorlang bf16 (BF16)", "tensorlang float32")


if __name__ == "__main__":
    main()
