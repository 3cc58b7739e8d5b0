# %% [markdown]
# # 02 — Schedules: matrix multiplication from naive to tiled, vectorised and parallel
#
# The algorithm stays the same line of tensor expressions; only the schedule changes. Each
# step prints the loop nest that isl generates and the speed of the compiled kernel. Every
# primitive is checked for legality when it is applied (tutorial 03 shows refusals). Every
# figure is `tl.testing.benchmark`'s: the median round with the slowest and fastest, on the
# CPU named in the first line; the vector width comes from the target, not from this text.

# %%
import os

import numpy as np

import tensorlang as tl

N = int(os.environ.get("TL_TUTORIAL_N", "512"))  # the test suite runs this small
rng = np.random.default_rng(0)
HOST = tl.Target.parse("llvm")
LANES = HOST.vector_lanes("float32")          # 16 with AVX-512, 8 with AVX2, 4 with NEON
print(f"matmul {N}^3 float32 on {HOST.cpu} ({HOST.cores} threads, {LANES} float lanes)",
      flush=True)


def matmul():
    A = tl.placeholder((N, N), "float32", name="A")
    B = tl.placeholder((N, N), "float32", name="B")
    k = tl.reduce_axis((0, N), name="k")
    C = tl.compute((N, N), lambda i, j: tl.sum(A[i, k] * B[k, j], axis=k), name="C")
    return A, B, C


a = rng.standard_normal((N, N), dtype=np.float32)
b = rng.standard_normal((N, N), dtype=np.float32)
expected = a @ b


def evaluate(title, s, args, show=True):
    """Print the loop nest, build, check against numpy and time the kernel."""
    print(f"== {title}")
    if show:
        print(tl.lower(s, args))
    f = tl.build(s, args)
    c = np.zeros((N, N), np.float32)
    f(a, b, c)
    np.testing.assert_allclose(c, expected, rtol=1e-3, atol=1e-3)
    res = tl.testing.benchmark(f, a, b, c, warmup=0, repeat=5)   # the check warmed it up
    print(f"   {title}: {res.rate(2 * N**3)}\n", flush=True)
    return res


# %% [markdown]
# ## 1. The declared order: i, j, then k innermost
# The inner loop walks B down a column: a stride of N floats per iteration.

# %%
A, B, C = matmul()
s = tl.create_schedule(C)
evaluate("naive", s, [A, B, C])

# %% [markdown]
# ## 2. Reorder: k before j
# Now the inner loop walks rows of B and C contiguously. The reduction's initialisation
# moves out of the k loop by itself (the updates of one reduction may be reordered).

# %%
A, B, C = matmul()
s = tl.create_schedule(C)
i, j = C.op.axis
(k,) = C.op.reduce_axis
s[C].reorder(i, k, j)
evaluate("reorder(i, k, j)", s, [A, B, C])

# %% [markdown]
# ## 3. Tile for the cache, vectorise the inner loop
# `tile` splits i and j by 32 and orders the tile loops outside; the extents need not divide
# (isl separates the full tiles from the rest). `vectorize` makes the innermost loop one
# LLVM vector operation per statement, LANES wide (the target's vector width).
#
# Do not expect this step to beat step 2 by much, or at all: step 2's inner loop is already
# a contiguous row that LLVM vectorises by itself, and here k still runs inside the tile
# row (ii, k, ji), so each row of a tile reads 32 columns of all of B, as step 2 reads whole
# rows. What tiling buys is a 32 x 32 block of C that stays in L1; the accumulators still
# go through memory. Keeping them in registers is step 5's register blocking (and
# tutorial 05's register tile, where the figures jump).

# %%
A, B, C = matmul()
s = tl.create_schedule(C)
i, j = C.op.axis
(k,) = C.op.reduce_axis
io, jo, ii, ji = s[C].tile(i, j, 32, 32)
s[C].reorder(io, jo, ii, k, ji)
jio, jii = s[C].split(ji, factor=LANES)
s[C].vectorize(jii)
evaluate(f"tile 32x32, vectorize {LANES}", s, [A, B, C])

# %% [markdown]
# ## 4. Parallel outer tiles
# The i.outer loop carries no dependence (each tile row writes its own part of C), so it may
# run on the thread pool (TL_NUM_THREADS threads).

# %%
s[C].parallel(io)
evaluate("+ parallel(i.outer)", s, [A, B, C], show=False)
print("the schedule, as a replayable trace:")
print(s.trace_text())

# %% [markdown]
# ## 5. Unroll
# Register blocking: with k outside a 4 x 2*LANES block of C, unrolling the 4 rows gives
# the vector units 4 x 2 independent multiply-adds per step of k. Tutorial 05 goes on to
# keep such a block in registers for the whole k loop (cache_write + compute_at).

# %%
A, B, C = matmul()
s = tl.create_schedule(C)
i, j = C.op.axis
(k,) = C.op.reduce_axis
io, jo, ii, ji = s[C].tile(i, j, 16, 2 * LANES)
s[C].reorder(io, jo, k, ii, ji)
iio, iii = s[C].split(ii, factor=4)
jio, jii = s[C].split(ji, factor=LANES)
s[C].reorder(io, jo, k, iio, jio, iii, jii)
s[C].unroll(iii)
s[C].vectorize(jii)
s[C].parallel(io)
evaluate(f"register blocking 4x{LANES}, unrolled", s, [A, B, C], show=False)
print("OK")
