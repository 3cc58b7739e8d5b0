"""Grouped and depthwise convolutions, one op at a time, paired in one process: tensorlang's
register-blocked forms (`model_ops.conv_grouped_te`, `conv_depthwise_te`), the window
schedule the general conv had before them, and onnxruntime on a one-node model of the same
op. Each op is conv + bias + relu (a batch norm folded into the conv, as in ShuffleNet);
the three run in turn, `--rounds` rounds of `--calls` calls each, and the median per call
is reported.

Usage: python benchmarks/grouped_conv.py [--shapes shufflenet|resnet_stem|all] [--rounds 7]
       [--calls 50] [--threads 2] [--cpu-time] [--only NAME]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np

# (name, C in, K out, H = W, kernel, stride, groups)
SHUFFLENET = [
    ("dw3x3 s1 136@28", 136, 136, 28, 3, 1, 136),
    ("dw3x3 s2 136@28", 136, 136, 28, 3, 2, 136),
    ("dw3x3 s1 272@14", 272, 272, 14, 3, 1, 272),
    ("dw3x3 s2 272@14", 272, 272, 14, 3, 2, 272),
    ("dw3x3 s1 544@7", 544, 544, 7, 3, 1, 544),
    ("dw3x3 s2 112@56", 112, 112, 56, 3, 2, 112),
    ("g4 1x1 24->112@56", 24, 112, 56, 1, 1, 4),
    ("g4 1x1 136@28", 136, 136, 28, 1, 1, 4),
    ("g4 1x1 272@14", 272, 272, 14, 1, 1, 4),
    ("g4 1x1 544@7", 544, 544, 7, 1, 1, 4),
]
RESNET_STEM = [("7x7 s2 3->64@224", 3, 64, 224, 7, 2, 1)]


def _onnx_model(c, k, h, kh, stride, groups, w, b):
    from onnx import TensorProto, helper as oh, numpy_helper

    pad = kh // 2
    nodes = [oh.make_node("Conv", ["x", "w", "b"], ["c"], pads=[pad] * 4,
                          strides=[stride] * 2, group=groups),
             oh.make_node("Relu", ["c"], ["y"])]
    oh_ = (h + 2 * pad - kh) // stride + 1
    g = oh.make_graph(nodes, "conv", [oh.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                [1, c, h, h])],
                      [oh.make_tensor_value_info("y", TensorProto.FLOAT, [1, k, oh_, oh_])],
                      [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    return oh.make_model(g, opset_imports=[oh.make_opsetid("", 13)])


def systems(case, threads: int, old: bool = True):
    """name -> a function that runs the op once, for tensorlang (new), the window schedule
    (old, where the op is a general conv) and onnxruntime; also checks they agree."""
    import onnxruntime as ort

    import tensorlang.graph as G
    from tensorlang.graph import executor as E
    from tensorlang.graph import model_ops as M

    _, c, k, h, kh, stride, groups = case
    rng = np.random.default_rng(0)
    xv = rng.standard_normal((1, c, h, h)).astype("f4")
    wv = (rng.standard_normal((k, c // groups, kh, kh)) / np.sqrt(c // groups * kh * kh)
          ).astype("f4")
    bv = rng.standard_normal(k).astype("f4")
    pad = kh // 2
    x = G.Variable("x", xv.shape, "float32")

    def executor():
        y = G.relu(M.conv(x, G.constant(wv), (stride,) * 2, (pad,) * 4, (1, 1), groups) +
                   G.reshape(G.constant(bv), (1, k, 1, 1)))
        ex = G.Executor([y])
        ex.run({x: xv})
        return lambda: ex.run({x: xv})[0]
    out = {"tensorlang": executor()}
    if old and not (groups == 1 and stride == 1):
        grouped = E.conv_grouped_te
        # the window schedule of the general conv as it was: its TE, kind "conv" (the
        # bias and relu fused into it here, where they were a kernel of their own)
        E.conv_grouped_te = lambda args, shapes, o, **kw: (M._conv_te(args, shapes, o, **kw)[0],
                                                            "conv")
        E._KERNELS.clear()
        try:
            out["window (before)"] = executor()
        finally:
            E.conv_grouped_te = grouped
            E._KERNELS.clear()
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    sess = ort.InferenceSession(_onnx_model(c, k, h, kh, stride, groups, wv, bv)
                                .SerializeToString(), opts, providers=["CPUExecutionProvider"])
    out["onnxruntime"] = lambda: sess.run(None, {"x": xv})[0]
    want = out["onnxruntime"]()
    for name, fn in out.items():
        np.testing.assert_allclose(fn(), want, rtol=1e-4, atol=1e-4, err_msg=name)
    return out


def paired(fns: dict, rounds: int, calls: int, clock=time.perf_counter) -> dict:
    """The median seconds per call of each function, the functions taking turns."""
    times = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            fn()
            t = clock()
            for _ in range(calls):
                fn()
            times[name].append((clock() - t) / calls)
    return {name: statistics.median(ts) for name, ts in times.items()}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shapes", default="shufflenet",
                   choices=("shufflenet", "resnet_stem", "all"))
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--calls", type=int, default=50)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--only", default=None, help="run the cases whose name contains this")
    p.add_argument("--cpu-time", action="store_true",
                   help="the process's CPU time, not the wall clock: on a busy machine with "
                        "--threads 1, the time the op ran rather than waited")
    a = p.parse_args(argv)
    os.environ.setdefault("TL_NUM_THREADS", str(a.threads))
    cases = {"shufflenet": SHUFFLENET, "resnet_stem": RESNET_STEM,
             "all": SHUFFLENET + RESNET_STEM}[a.shapes]
    print("| op | tensorlang us | window (before) us | onnxruntime us | tensorlang speed / "
          "onnxruntime's | / window's |")
    print("|---|---|---|---|---|---|")
    for case in cases:
        if a.only and a.only not in case[0]:
            continue
        t = paired(systems(case, a.threads), a.rounds, a.calls,
                   time.process_time if a.cpu_time else time.perf_counter)
        new, ort_, old = t["tensorlang"], t["onnxruntime"], t.get("window (before)")
        print(f"| {case[0]} | {1e6 * new:.1f} | "
              f"{'-' if old is None else f'{1e6 * old:.1f}'} | {1e6 * ort_:.1f} | "
              f"{ort_ / new:.2f} | {'-' if old is None else f'{old / new:.1f}'} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
