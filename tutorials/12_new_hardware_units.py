"""Tutorial 12: new hardware units — int8 and bfloat16 matmuls on the CPU's dot-product
instructions, and an instruction of your own.

Today's CPUs multiply low-precision numbers in dedicated instructions: AVX512-VNNI's
`vpdpbusd` adds 16 dot products of 4 bytes each to 16 int32 sums in one instruction, and
AVX512-BF16's `vdpbf16ps` does the same with pairs of bfloat16s into float32 sums. A
schedule reaches them with `tensorize`: the loop nest below a loop becomes one use of a
declared instruction (`tl.TensorIntrin`: what it computes, as a tiny `tl.compute`, and how it
runs). isl checks that the nest computes exactly that; when it does not, it says at which
iteration and which element differ.

Steps, each timed beside the float32 matmul of the graph executor:
1. int8 in plain loops (int32 arithmetic, vectorized);
2. int8 on VNNI: B packed in blocks of 16 columns x 4 rows, 4 rows x 4 vectors of sums in
   registers, `tensorize` on the 16 x 4 block;
3. bfloat16 on BF16 the same way (blocks of 2 rows);
4. an instruction of your own: a "4-wide dot" in plain IR, refused on a transposed operand,
   accepted once the operand is packed;
5. the auto-scheduler finds step 2 on its own: the int8 matmul written as plain loops,
   `tl.auto_schedule` packs B, tiles and tensorizes (its cost model counts the instruction).

On a CPU without VNNI or BF16 the kernels are built (for a CPU that has them) but not run.

Run: python tutorials/12_new_hardware_units.py
"""

import os

import ml_dtypes
import numpy as np

import tensorlang as tl
import tensorlang.graph as G
from tensorlang.schedule import dot_products

N = int(os.environ.get("TL_TUTORIAL_N", "1024"))
HOST = tl.Target.parse("llvm")


def rate(fn, args, unit="GOPS"):
    """The median of 5 rounds of calls, with the slowest and fastest (`tl.testing`)."""
    return tl.testing.benchmark(fn, *args, repeat=5).rate(2.0 * N * N * N, unit)


def packed_matmul(a_dt, b_dt, acc, lanes, depth, intrin=None, rows=4, vecs=4):
    """C[i, j] = sum_k A[i, k] * B[k, j] in `acc`, with B packed as
    Bp[j // lanes, k // depth, j % lanes, k % depth] (zeros past the edges): each block of
    lanes x depth is one 64-byte run, as the instruction reads it. Register tiles of `rows`
    rows x `vecs` vectors of sums; the block below them tensorized with `intrin` (without
    one, the lanes vectorized); B's column panels in blocks of half the L2, so that every
    row tile reads them from there. The schedule is
    `tl.schedule.dot_products.packed_matmul`'s: its primitives are printed below
    (`trace_text`)."""
    half_l2 = tl.Target.parse("llvm").cache_bytes[1] // 2
    return dot_products.packed_matmul(N, N, N, a_dt, b_dt, acc, lanes, depth, intrin, rows,
                                      vecs, block_bytes=half_l2)


def plain_int8():
    """The int8 matmul in plain loops: int32 sums, 16 lanes vectorized."""
    return packed_matmul("uint8", "int8", "int32", 16, 4)


def run_or_build(name, sched, args, arrays, feature, check):
    """Build for the host and run, where the CPU has `feature`; else build for a CPU that
    has it (znver4) and show the instruction in its assembly."""
    if HOST.has_feature(feature):
        mod = tl.build(sched, args, name=name)
        mod(*arrays)
        check(arrays[-1])
        return mod
    mod = tl.build(sched, args, name=name, target="llvm -mcpu=znver4")
    print(f"  this CPU ({HOST.cpu}) has no {feature}: built for znver4, not run")
    return None


def main():
    rng = np.random.default_rng(0)
    print(f"{HOST.cpu}, {HOST.cores} threads; {N}x{N}x{N}")

    # float32 beside it: the graph executor's matmul
    x, y = G.Variable("x", (N, N), "float32"), G.Variable("y", (N, N), "float32")
    ex = G.Executor([G.matmul(x, y)])
    xf, yf = rng.standard_normal((N, N)).astype("f4"), rng.standard_normal((N, N)).astype("f4")
    out = np.empty((N, N), "f4")
    f32 = rate(lambda: ex.run({x: xf, y: yf}, out=[out]), (), "GFLOPS")
    print(f"float32 (graph executor): {f32}")

    # 1-2. int8: plain loops, then VNNI
    a = rng.integers(0, 256, (N, N), dtype=np.uint8)
    b = rng.integers(-128, 128, (N, N), dtype=np.int8)
    want = a.astype(np.int64) @ b.astype(np.int64)

    def exact(c):
        np.testing.assert_array_equal(c, want.astype(np.int32))

    c = np.zeros((N, N), np.int32)
    plain = tl.build(*plain_int8(), name="mm_int8")
    plain(a, b, c)
    exact(c)
    print(f"int8, plain loops:        {rate(plain, (a, b, c))}")

    s, args = packed_matmul("uint8", "int8", "int32", 16, 4, tl.intrin.x86.vnni_u8s8_i32)
    print(s.trace_text())
    vnni = run_or_build("mm_vnni", s, args, [a, b, np.zeros((N, N), np.int32)], "avx512vnni",
                        exact)
    asm = (vnni or tl.build(s, args, target="llvm -mcpu=znver4")).get_source("asm")
    print(f"  inner loop: {sum('vpdpbusd' in ln for ln in asm.splitlines())} vpdpbusd")
    if vnni is not None:
        print(f"int8, VNNI:               {rate(vnni, (a, b, c))}")

    # 3. bfloat16 on BF16
    ab = rng.standard_normal((N, N)).astype(ml_dtypes.bfloat16)
    bb = rng.standard_normal((N, N)).astype(ml_dtypes.bfloat16)
    want_bf = ab.astype(np.float32) @ bb.astype(np.float32)

    def close(c):
        np.testing.assert_allclose(c, want_bf, rtol=1e-3, atol=1e-3 * np.sqrt(N))

    s, args = packed_matmul("bfloat16", "bfloat16", "float32", 16, 2, "x86.bf16_dot_f32")
    cf = np.zeros((N, N), np.float32)
    bf = run_or_build("mm_bf16", s, args, [ab, bb, cf], "avx512bf16", close)
    if bf is not None:
        print(f"bfloat16, BF16:           {rate(bf, (ab, bb, cf), 'GFLOPS')}")

    # 4. an instruction of your own: c[0] += a . b over 4 floats, written in plain IR
    da = tl.placeholder((4,), "float32", name="a")
    db = tl.placeholder((4,), "float32", name="b")
    q = tl.reduce_axis((0, 4), name="q")
    dc = tl.compute((1,), lambda _: tl.sum(da[q] * db[q], axis=q), name="c")

    def dot4_impl(ra, rb, rc):
        return rc.store((0,), rc[0] + sum(ra[t] * rb[t] for t in range(4)))
    dot4 = tl.TensorIntrin(dc, dot4_impl, name="dot4")

    M = 8
    X = tl.placeholder((M, M), name="X")
    Yt = tl.placeholder((M, M), name="Yt")            # Y stored transposed: Yt[k, j]
    r = tl.reduce_axis((0, M), name="r")
    Z = tl.compute((M, M), lambda i, j: tl.sum(X[i, r] * Yt[r, j], axis=r), name="Z")
    s = tl.create_schedule(Z)
    _, ri = s[Z].split(r, factor=4)
    try:
        s[Z].tensorize(ri, dot4)
    except tl.ScheduleError as e:
        print(f"refused: {e}")
    Yp = tl.compute((M, M), lambda j, t: Yt[t, j], name="Yp")   # pack: rows of Y
    Z = tl.compute((M, M), lambda i, j: tl.sum(X[i, r] * Yp[j, r], axis=r), name="Z")
    s = tl.create_schedule(Z)
    _, ri = s[Z].split(r, factor=4)
    s[Z].tensorize(ri, dot4)
    print(tl.lower(s, [X, Yt, Z]))
    xs, ys = rng.standard_normal((M, M)).astype("f4"), rng.standard_normal((M, M)).astype("f4")
    zs = np.zeros((M, M), "f4")
    tl.build(s, [X, Yt, Z])(xs, ys, zs)
    np.testing.assert_allclose(zs, xs @ ys, rtol=1e-5, atol=1e-5)

    # 5. the auto-scheduler places the instruction itself: a plain int8 matmul, searched by
    # the cost model alone for a VNNI CPU (the host where it has VNNI)
    A8 = tl.placeholder((N, N), "uint8", name="A")
    B8 = tl.placeholder((N, N), "int8", name="B")
    kk = tl.reduce_axis((0, N), name="k")
    C8 = tl.compute((N, N), lambda i, j: tl.sum(
        A8[i, kk].astype("int32") * B8[kk, j].astype("int32"), axis=kk), name="C")
    target = "llvm" if HOST.has_feature("avx512vnni") else "llvm -mcpu=znver4"
    s = tl.auto_schedule(C8, target=target, budget_s=10, measure_on_host=False)
    print("auto_schedule's choice:")
    print("\n".join(ln for ln in s.trace_text().splitlines()
                    if "pack" in ln or "tensorize" in ln))
    auto = run_or_build("mm_auto", s, [A8, B8, C8], [a, b, np.zeros((N, N), np.int32)],
                        "avx512vnni", exact)
    if auto is not None:
        print(f"int8, auto_schedule:      {rate(auto, (a, b, c))}")
    print("OK")


if __name__ == "__main__":
    main()
