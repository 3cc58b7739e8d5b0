"""Grouped, depthwise and strided convolutions, one op at a time, paired in one process:
tensorlang's register tiles per group (`model_ops.conv_grouped_te`), the schedule the op had
before them ("before": the general conv's window schedule; a strided conv2d's direct form),
and onnxruntime on a one-node model of the same op. Each op is conv + bias + relu (a batch
norm folded into the conv, as in ShuffleNet and ResNet-50); the three take turns,
`--rounds` rounds of `--calls` calls each, and the median of the rounds is reported.

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
    """name -> a function that runs the op once, for tensorlang, its schedule before the
    grouped form (`old`) and onnxruntime; also checks that they agree."""
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
    if old:
        if groups == 1:     # conv2d, strided: its direct form (vectors gathered per tap)
            from tensorlang.graph.nnops import conv2d_te

            def before(args, shapes, o, strides, pads, dilations, groups):
                return conv2d_te(args, shapes, o, stride=strides[0], padding=pads[0])
        else:               # the general conv's window schedule: its TE, kind "conv" (the
            # bias and relu fused into it here, where they were a kernel of their own)
            def before(args, shapes, o, **kw):
                return M._conv_te(args, shapes, o, **kw)[0], "conv"
        grouped, E.conv_grouped_te = E.conv_grouped_te, before
        E._KERNELS.clear()
        try:
            out["before"] = executor()
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
            # onnxruntime's pool spins a while after a call: let it stop before the next
            # system's turn, which it would otherwise slow down by taking a core
            time.sleep(0.05)
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
    print("| op | system | us per call | onnxruntime's time / this |")
    print("|---|---|---|---|")
    for case in cases:
        if a.only and a.only not in case[0]:
            continue
        t = paired(systems(case, a.threads), a.rounds, a.calls,
                   time.process_time if a.cpu_time else time.perf_counter)
        for name, sec in t.items():
            print(f"| {case[0]} | {name} | {1e6 * sec:.1f} | {t['onnxruntime'] / sec:.2f} |",
                  flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
