"""A light-zoo CNN (random weights) statically quantized by onnxruntime's own
`quantize_static` (QOperator format: QLinearConv between QuantizeLinear / DequantizeLinear),
the same model file run by tensorlang.onnx and by onnxruntime (2 intra-op threads), in turn
in one process; then tensorlang's slowest kernels (`Executor.profile`).

    python benchmarks/onnx_quantized.py [--model squeezenet] [--rounds 3] [--calls 20]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections import Counter

import numpy as np


def _timed(fn, calls: int) -> tuple[float, float]:
    """(best, median) seconds of single calls (`tl.testing.benchmark`)."""
    import tensorlang as tl

    r = tl.testing.benchmark(fn, number=1, repeat=calls)
    return r.min, r.median


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="squeezenet")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--calls", type=int, default=20)
    args = p.parse_args(argv)
    import onnx
    import onnxruntime as ort
    from onnxruntime.quantization import (
        CalibrationDataReader, QuantFormat, QuantType, quantize_static,
    )

    import tensorlang as tl
    import tensorlang.graph as G
    import tensorlang.onnx as TO
    from tensorlang.onnx.zoo import light_model_path, logits, model_input, with_random_weights

    m = logits(with_random_weights(onnx.load(light_model_path(args.model))))
    m.ir_version = 8
    inp, x = model_input(m)

    class Calibration(CalibrationDataReader):
        def __init__(self):
            self.data = iter([{inp: model_input(m, seed=k)[1]} for k in range(4)])

        def get_next(self):
            return next(self.data, None)
    with tempfile.TemporaryDirectory() as tmp:
        src, dst = os.path.join(tmp, "f.onnx"), os.path.join(tmp, "q.onnx")
        onnx.save(m, src)
        quantize_static(src, dst, Calibration(), quant_format=QuantFormat.QOperator,
                        op_types_to_quantize=["Conv"], activation_type=QuantType.QUInt8,
                        weight_type=QuantType.QInt8)
        q = onnx.load(dst)
    q.ir_version = 8
    print(f"{args.model}, quantized: {dict(Counter(n.op_type for n in q.graph.node))}")
    t0 = time.time()
    rep = TO.Backend.prepare(q)
    got = rep.run([x])[0]
    print(f"tensorlang: {time.time() - t0:.1f} s from the model to a first result")
    so = ort.SessionOptions()
    so.intra_op_num_threads = 2
    so.inter_op_num_threads = 1
    sess = ort.InferenceSession(q.SerializeToString(), so, providers=["CPUExecutionProvider"])
    want = sess.run(None, {inp: x})[0]
    print(f"max |tensorlang - onnxruntime| {np.abs(got - want).max():.3g} (logits up to "
          f"{np.abs(want).max():.3g}); same class: {np.argmax(got) == np.argmax(want)}")
    res = {"tensorlang.onnx": [], "onnxruntime": []}
    for _ in range(args.rounds):
        time.sleep(0.3)
        res["tensorlang.onnx"].append(_timed(lambda: rep.run([x]), args.calls))
        time.sleep(0.3)     # onnxruntime's pool spins after a run
        res["onnxruntime"].append(_timed(lambda: sess.run(None, {inp: x}), args.calls))
    host = tl.Target.parse("llvm")
    print(f"\n{host.cpu}, {args.rounds} rounds of {args.calls} calls, systems in turn")
    best = {k: min(a for a, _ in v) for k, v in res.items()}
    med = {k: statistics.median(b for _, b in v) for k, v in res.items()}
    for k in res:
        print(f"{k:18s} best {1e3 * best[k]:7.2f} ms   median {1e3 * med[k]:7.2f} ms")
    tln = "tensorlang.onnx"
    print(f"{tln} / onnxruntime (speed): {best['onnxruntime'] / best[tln]:.2f} best, "
          f"{med['onnxruntime'] / med[tln]:.2f} median")
    outs, ins = TO.from_onnx(q)
    print("\ntensorlang's slowest kernels:")
    for kt in G.Executor(outs).profile({ins[0]: x}, runs=10)[:6]:
        print(kt)


if __name__ == "__main__":
    main()
