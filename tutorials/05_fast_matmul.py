"""Tutorial 05: a fast matmul on the CPU, one schedule primitive at a time.

The lecture's path from the declared loop nest to the speed of a BLAS: tile for the caches,
vectorise the inner loop, keep a tile of C in registers (cache_write + compute_at), read B
in packed panels, run the row tiles in parallel, and multiply B in blocks of panels that
stay in L2 (the last step: the graph executor's own schedule, at TVM's and Halide's speed
in `tensorlang bench`). Each step prints its GFLOPS beside
numpy's (OpenBLAS), measured when the tutorial runs on this machine, and what `tl.analyze`
counts for one step of the k loop: the elements of A and B it reads against the flops it
does — the reuse that each step buys. At the end, the inner loop's machine code: on an
AVX-512 machine, 512-bit FMAs (`vfmadd231ps ... %zmm`) with one operand broadcast from A.

Every step is checked against numpy; every schedule is checked by isl before it runs.
Every figure is `tl.testing.benchmark`'s: the median round, with the slowest and fastest
rounds, on the CPU named in the first line (tutorial 10 times the last step the same way).
Run: python tutorials/05_fast_matmul.py   (TL_TUTORIAL_N=1024 for another size)
"""

import os

import numpy as np

import tensorlang as tl

N = int(os.environ.get("TL_TUTORIAL_N", 512))
HOST = tl.Target.parse("llvm")
LANES = HOST.vector_lanes("float32")      # 16 with AVX-512, 8 with AVX2, 4 with NEON
# the register tile from the target's registers: the most accumulators that fit beside one
# vector of B per column and a broadcast of A, and that do useful work at this N (printed
# in the first lines: it depends on the vector width, the register count and N)
ROWS, VECTORS = HOST.register_tile(N, N, "float32")


def declare():
    A = tl.placeholder((N, N), name="A")
    B = tl.placeholder((N, N), name="B")
    k = tl.reduce_axis((0, N), name="k")
    C = tl.compute((N, N), lambda i, j: tl.sum(A[i, k] * B[k, j], axis=k), name="C")
    return A, B, C


def naive():
    A, B, C = declare()
    return tl.create_schedule(C), [A, B, C]


def tiled():
    """32 x 32 tiles of C; for each, the k loop runs over the tile (A's rows and B's
    columns of the tile stay in cache), with j innermost (B read along its rows)."""
    s, (A, B, C) = naive()
    i, j = C.op.axis
    (k,) = C.op.reduce_axis
    io, jo, ii, ji = s[C].tile(i, j, 32, 32)
    s[C].reorder(io, jo, k, ii, ji)
    return s, [A, B, C]


def vectorized():
    """The same, with the inner j loop as one vector instruction per LANES columns."""
    s, (A, B, C) = tiled()
    ji = s[C].leaf_iter_vars[-1]
    _, jv = s[C].split(ji, factor=LANES)
    s[C].vectorize(jv)
    return s, [A, B, C]


def register_tile(pack=False, parallel=False, rows=ROWS, vectors=VECTORS):
    """A rows x (vectors * LANES) tile of C accumulated in registers over the whole k
    loop: cache_write gives the tile a local buffer, compute_at places it in the tile's
    loop, unroll + vectorize make it rows * vectors vector registers."""
    A, B, C = declare()
    s = tl.create_schedule(C)
    BP = s.pack(B, 1, vectors * LANES) if pack else None   # B_packed[j // w, k, j % w]
    CL = s.cache_write(C, "local")
    i, j = s[C].op.axis
    io, jo, ii, ji = s[C].tile(i, j, rows, vectors * LANES)
    s[C].vectorize(s[C].split(ji, factor=LANES)[1])
    s[CL].compute_at(s[C], jo)
    li, lj = s[CL].op.axis
    (lk,) = s[CL].op.reduce_axis
    ljo, lji = s[CL].split(lj, factor=LANES)
    s[CL].reorder(lk, li, ljo, lji)
    s[CL].unroll(li)
    s[CL].unroll(ljo)
    s[CL].vectorize(lji)
    if pack:
        s[BP].vectorize(s[BP].split(s[BP].op.axis[-1], factor=LANES)[1])
        if parallel:
            s[BP].parallel(s[BP].op.axis[0])
    if parallel:
        s[C].parallel(io)
    return s, [A, B, C]


def blocked(rows=ROWS, vectors=VECTORS):
    """The whole schedule, fifteen primitives a user writes: B's panels in blocks that fit half
    the L2, outermost, each block packed just before its row tiles read it (from L2) and
    the blocks in parallel — the graph executor's own schedule for this matmul where B
    outgrows half the L2 (a test checks that they lower to the same loop nest)."""
    A, B, C = declare()
    w = vectors * LANES                                      # a panel: w columns of B
    per_block = max(1, HOST.cache_bytes[1] // 2 // (N * w * 4))   # panels a block
    s = tl.create_schedule(C)
    BP = s.pack(B, 1, w, readers=[s[C]])
    CL = s.cache_write(C, "local")
    io, jo, ii, ji = s[C].tile(*C.op.axis, rows, w)
    s[C].vectorize(s[C].split(ji, factor=LANES)[1])
    jb, jo = s[C].split(jo, factor=per_block)
    s[C].reorder(jb, io, jo)
    s[CL].compute_at(s[C], jo)
    ljo, lji = s[CL].split(CL.op.axis[1], factor=LANES)
    s[CL].reorder(*CL.op.reduce_axis, CL.op.axis[0], ljo, lji)
    s[CL].unroll(CL.op.axis[0])
    s[CL].unroll(ljo)
    s[CL].vectorize(lji)
    s[C].parallel(jb)
    s[BP].vectorize(s[BP].split(BP.op.axis[-1], factor=LANES)[1])
    s[BP].compute_at(s[C], jb)
    return s, [A, B, C]


STEPS = [
    ("declared loop nest (i, j, k)", naive),
    ("32x32 tiles, k outside the tile", tiled),
    (f"+ inner j vectorised ({LANES} lanes)", vectorized),
    (f"+ {ROWS} x {VECTORS}-vector register tile of C", register_tile),
    ("+ B packed in panels", lambda: register_tile(pack=True)),
    ("+ row tiles in parallel", lambda: register_tile(pack=True, parallel=True)),
    ("+ B in L2-sized blocks of panels", blocked),
]


def k_step(s, args):
    """Elements of A, B and C moved (read or written) by one iteration of the k loop, and
    its flops. C_local is the register tile: not memory."""
    r = tl.analyze(s, args)
    for st in r.stages:
        for lv in st.levels:
            if lv.loop == "k":
                moved = sum(v for t, v in lv.per_iteration.items()
                            if not t.endswith("_local"))
                if st.name == "C":      # the accumulator is read and written
                    moved += lv.per_iteration.get("C", 0)
                flops = st.flops // lv.iterations if lv.iterations else 0
                return int(moved), flops
    return None, None


def main():
    rng = np.random.default_rng(0)
    a = rng.random((N, N), dtype=np.float32)
    b = rng.random((N, N), dtype=np.float32)
    want = a @ b
    flop = 2 * N ** 3
    t_np = tl.testing.benchmark(np.matmul, a, b, repeat=5)
    print(f"matmul {N}^3 float32 on {HOST.cpu} ({HOST.cores} threads), {LANES} float lanes "
          f"per vector; register tile {ROWS} rows x {VECTORS} vectors (Target.register_tile)")
    print(f"{'numpy (OpenBLAS)':40s} {t_np.rate(flop)}", flush=True)
    last = None
    for label, make in STEPS:
        print(f"{label:40s} ", end="", flush=True)     # a step takes seconds: show which
        s, args = make()
        f = tl.build(s, args)
        c = np.zeros((N, N), np.float32)
        f(a, b, c)                                      # also the benchmark's warm-up
        np.testing.assert_allclose(c, want, rtol=1e-4, atol=1e-3)
        res = tl.testing.benchmark(f, a, b, c, warmup=0, repeat=2 if make is naive else 5)
        reads, flops = k_step(s, args)
        per = f"; one k step: {reads} elements moved, {flops} flops" if reads else ""
        print(f"{res.rate(flop)}, {t_np.median / res.median:5.2f} x numpy{per}", flush=True)
        last = f
    asm = last.get_source("asm")
    blocks = asm.split("\n.LBB")
    hot = max(blocks, key=lambda x: x.count("vfmadd"))
    fma = [ln.strip() for ln in hot.splitlines() if "vfmadd" in ln]
    print(f"\nthe innermost loop: {len(fma)} FMAs, e.g. {fma[0] if fma else '(none)'}")
    print("\n".join(ln for ln in hot.splitlines()[1:12]))
    print("OK")


if __name__ == "__main__":
    main()
