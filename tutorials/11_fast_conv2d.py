"""Tutorial 11: a fast conv2d on the CPU, written as a schedule of a dozen lines.

A ResNet layer (64 -> 64 channels, 3x3, 56 x 56, batch 1) in NCHW. Vectors along the
output columns (the direct form) waste lanes when the width is not a multiple of the
vector (56 = 3.5 vectors of 16); vectors along the output channels do not: the output
channels are computed in blocks of LANES (NCHW[LANES]c, the layout of TVM's conv2d_NCHWc
and oneDNN), with the weights packed so that one block's weights for an input channel and
tap are one vector load. A tile of COLS output columns x LANES channels stays in COLS
registers over the whole reduction (c, kh, kw); each step broadcasts one input element per
column (an FMA with a broadcast operand on AVX-512). COLS is the largest divisor of the
width that takes at most half the vector registers (14 of AVX-512's 32 at 56 x 56: 28, all
but four registers, as TVM's reg_n, spilled the input broadcasts LLVM keeps for the next
kw and ran 1.1-1.2x slower on a 2-core Xeon). The tile is then written to the NCHW
output, one vector of channels per column.

The schedule below is what the graph executor uses for such layers
(`graph/cpu_schedules._block_conv_channels`); each step is checked by isl and the result
against numpy. Run: python tutorials/11_fast_conv2d.py   (TL_TUTORIAL_N=28 for a smaller
layer)
"""

import os

import numpy as np

import tensorlang as tl

H = int(os.environ.get("TL_TUTORIAL_N", 56))      # output height = width
C = K = 64                                         # input and output channels
LANES = tl.Target.parse("llvm").vector_lanes("float32")
REGS = tl.Target.parse("llvm").vector_registers
COLS = max(d for d in range(1, min(H, REGS // 2) + 1) if H % d == 0)   # columns per tile


def declare():
    X = tl.placeholder((1, C, H, H), name="X")
    W = tl.placeholder((K, C, 3, 3), name="W")
    P = tl.compute((1, C, H + 2, H + 2), lambda n, c, y, x: tl.if_then_else(
        tl.all(y >= 1, y <= H, x >= 1, x <= H), X[n, c, y - 1, x - 1], 0.0), name="P")
    # the weights by blocks of LANES output channels, the block innermost
    WP = tl.compute((K // LANES, C, 3, 3, LANES),
                    lambda ko, c, p, q, ki: W[ko * LANES + ki, c, p, q], name="WP")
    rc, rp, rq = (tl.reduce_axis((0, C), "rc"), tl.reduce_axis((0, 3), "rp"),
                  tl.reduce_axis((0, 3), "rq"))
    Yb = tl.compute((1, K // LANES, H, H, LANES), lambda n, ko, i, j, ki: tl.sum(
        P[n, rc, i + rp, j + rq] * WP[ko, rc, rp, rq, ki], axis=[rc, rp, rq]), name="Yb")
    Y = tl.compute((1, K, H, H), lambda n, k, i, j: Yb[n, k // LANES, i, j, k % LANES],
                   name="Y")
    return X, W, P, WP, Yb, Y


def schedule():
    X, W, P, WP, Yb, Y = declare()
    s = tl.create_schedule(Y)
    n, k, i, j = s[Y].op.axis
    ko, ki = s[Y].split(k, factor=LANES)               # a block of channels ...
    jo, ji = s[Y].split(j, factor=COLS)                # ... by a tile of columns
    s[Y].reorder(n, ko, i, jo, ji, ki)
    s[Y].vectorize(ki)                                 # written as vectors of channels
    s[Y].parallel(s[Y].fuse(s[Y].fuse(n, ko), i))      # (block, row) pairs in parallel
    s[Yb].compute_at(s[Y], jo)                         # the tile, in registers
    a, b, c, d, e = s[Yb].op.axis
    s[Yb].reorder(a, b, c, *s[Yb].op.reduce_axis, d, e)
    s[Yb].unroll(d)                                    # COLS accumulators ...
    s[Yb].vectorize(e)                                 # ... of LANES channels each
    pa = s[P].op.axis                                  # the padded input and the
    s[P].parallel(s[P].fuse(pa[0], pa[1]))             # packed weights: vectorised
    s[P].vectorize(s[P].split(pa[3], factor=LANES)[1])
    s[WP].vectorize(s[WP].op.axis[4])
    s[WP].parallel(s[WP].op.axis[0])
    return s, [X, W, Y]


def gflops(fn, args):
    """The rate of `fn(*args)` as `tl.testing.benchmark` gives it: the median round, with
    the slowest and fastest (one warm-up call, 5 rounds)."""
    return tl.testing.benchmark(fn, *args, repeat=5).rate(2 * K * C * 9 * H * H)


def main():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, C, H, H)).astype("float32")
    w = (rng.standard_normal((K, C, 3, 3)) * 0.1).astype("float32")
    xp = np.pad(x.astype("f8"), ((0, 0), (0, 0), (1, 1), (1, 1)))
    win = np.lib.stride_tricks.sliding_window_view(xp, (3, 3), axis=(2, 3))
    want = np.einsum("ncijpq,ocpq->noij", win, w.astype("f8"))

    s, args = schedule()
    print(s.trace_text())
    mod = tl.build(s, args, name="conv_nchwc")
    y = np.empty((1, K, H, H), "float32")
    mod(x, w, y)
    np.testing.assert_allclose(y, want, rtol=1e-3, atol=1e-3)
    host = tl.Target.parse("llvm")
    print(f"\n{host.cpu} ({host.cores} threads), {host.vector_bits}-bit vectors: {LANES} "
          f"lanes, tiles of {COLS} columns", flush=True)
    print(f"channel-blocked conv2d: {gflops(mod, (x, w, y))}", flush=True)

    wm = w.reshape(K, -1)

    def im2col(x, w, y):          # numpy: pad + window copy + one OpenBLAS matmul
        cols = np.lib.stride_tricks.sliding_window_view(
            np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1))), (3, 3), axis=(2, 3))
        y[...] = (wm @ cols.transpose(0, 1, 4, 5, 2, 3).reshape(C * 9, H * H)) \
            .reshape(1, K, H, H)
    print(f"numpy im2col + matmul:  {gflops(im2col, (x, w, y))}", flush=True)

    # the inner loop: one vector load of weights, COLS FMAs with broadcast inputs
    asm = mod.get_source("asm")
    fmas = [ln.strip() for ln in asm.splitlines() if "vfmadd" in ln]
    if fmas:
        print(f"\n{len(fmas)} FMAs in the kernel, e.g. {fmas[0]}")
    print("OK")


if __name__ == "__main__":
    main()
