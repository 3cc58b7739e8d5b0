"""Tutorial 06: GPU kernels with bind, shared memory and registers (target="cuda").

The schedules of the Triton lecture's examples, written with tensorlang's primitives:
a vector add over blocks with a tail; the fused softmax, one row per block; then an
SGEMM from one output per thread to shared-memory tiles and register tiles; and a
schedule tensorlang refuses (a missing barrier), with the two threads that would race.

Building needs no GPU: `tl.build(..., target="cuda")` returns CUDA C (`get_source()`). With
pycuda and a GPU each kernel runs there and the SGEMM steps print their TFLOPS; without one,
each kernel runs in the loop-IR interpreter, which executes GPU kernels with CUDA's
semantics (blocks in turn, the threads of a block as coroutines between barriers), so
every result below is still checked against numpy.

Run: python tutorials/06_cuda.py
"""

import time

import numpy as np

import tensorlang as tl
import tensorlang.schedule.gpu as gpu


def has_gpu() -> bool:
    try:
        import pycuda.autoinit  # noqa: F401
        return True
    except Exception:  # noqa: BLE001 (no pycuda, no driver, no device)
        return False


GPU = has_gpu()
print("running on", "the GPU" if GPU else "the interpreter (no GPU here)")


def run(s, args, arrays):
    """Run a GPU schedule on numpy arrays (outputs written in place); seconds per call."""
    if GPU:
        f = tl.build(s, args, target="cuda")
        f(*arrays)                                  # compile and warm up
        t = time.perf_counter()
        f(*arrays)
        return time.perf_counter() - t
    tl.run_lowered(tl.lower(s, args), arrays)
    return float("nan")


# ------------------------------------------------------ 1. vector add: blocks and a tail
n = tl.var("n")
X = tl.placeholder((n,), name="X")
Y = tl.placeholder((n,), name="Y")
Z = tl.compute((n,), lambda i: X[i] + Y[i], name="Z")
s = tl.create_schedule(Z)
bo, bi = s[Z].split(Z.op.axis[0], factor=128)   # BLOCK_SIZE = 128
s[Z].bind(bo, "blockIdx.x")                     # Triton's program_id(0)
s[Z].bind(bi, tl.thread_axis("threadIdx.x"))    # its arange(0, BLOCK_SIZE)
src = tl.build(s, [X, Y, Z], target="cuda").get_source()
print(src[src.index('extern "C"'):])            # the tail is a guard, as Triton's mask
size = 1000                                      # not a multiple of 128
x, y = np.random.rand(size).astype("float32"), np.random.rand(size).astype("float32")
z = np.zeros(size, "float32")
run(s, [X, Y, Z], [x, y, z])
np.testing.assert_allclose(z, x + y)

# ------------------------------------------- 2. fused softmax: one row per block (Triton)
# Triton's fused softmax gives each program one row: it loads the row once, takes its max
# and the sum of exponentials, and writes the quotients. The same kernel here: three stages
# (row max, sum, quotient) scheduled by `gpu.rows` into one kernel, a block per row. The
# block's threads first copy the row to shared memory (16-byte vectors: the row length is
# a constant multiple of 4), then reduce it across the threads (each thread its strided
# part, then a tree in shared memory, warp barriers for the last levels), and finally each
# writes its part of the outputs. Every barrier is one tensorlang inserted and checked.
rows, cols = tl.var("rows"), 1024
S = tl.placeholder((rows, cols), name="S")
kx = tl.reduce_axis((0, cols), name="kx")
M = tl.compute((rows,), lambda r: tl.max(S[r, kx], axis=kx), name="M")
ke = tl.reduce_axis((0, cols), name="ke")
E = tl.compute((rows,), lambda r: tl.sum(tl.exp(S[r, ke] - M[r]), axis=ke), name="E")
P = tl.compute((rows, cols), lambda r, c: tl.exp(S[r, c] - M[r]) / E[r], name="P")
s = tl.create_schedule(P)
gpu.rows(s, P, threads=128)                     # Triton's BLOCK_SIZE: the row's threads
f = tl.build(s, [S, P], target="cuda")
print("softmax:", len(f.cuda.launches), "kernel;", f.get_source().count("__syncthreads"),
      "block barriers,", f.get_source().count("*(const float4 *)"), "float4 load")
sv = np.random.randn(37, cols).astype("float32")
pv = np.zeros_like(sv)
run(s, [S, P], [sv, pv])
e = np.exp(sv - sv.max(1, keepdims=True))
np.testing.assert_allclose(pv, e / e.sum(1, keepdims=True), rtol=1e-5, atol=1e-6)
print("softmax of 37 rows of 1024 matches numpy")   # 2255 GB/s on an H100 at 4096 x 4096
#                                                     (torch 2022): benchmarks/gpu/softmax.py


# --------------------------------------------------------------- 3. SGEMM, step by step
def declare():
    m_, n_, k_ = tl.var("M"), tl.var("N"), tl.var("K")
    A = tl.placeholder((m_, k_), name="A")
    B = tl.placeholder((k_, n_), name="B")
    k = tl.reduce_axis((0, k_), name="k")
    C = tl.compute((m_, n_), lambda i, j: tl.sum(A[i, k] * B[k, j], axis=k), name="C")
    return A, B, C


def naive():
    """16 x 16 threads per block, each one output; every thread reads a row of A and a
    column of B from global memory."""
    A, B, C = declare()
    s = tl.create_schedule(C)
    io, jo, ii, ji = s[C].tile(*C.op.axis, 16, 16)
    for loop, tag in ((io, "blockIdx.y"), (jo, "blockIdx.x"),
                      (ii, "threadIdx.y"), (ji, "threadIdx.x")):
        s[C].bind(loop, tag)
    return s, [A, B, C]


def shared():
    """The block's 16-wide k-slices of A and B copied to shared memory: computed at the k
    loop inside the thread loops, a "shared" stage is the whole block's tile, loaded by all
    its threads (thread t copies elements t, t + 256, ...), between two barriers."""
    s, (A, B, C) = naive()
    AS = s.cache_read(A, "shared", [C])
    BS = s.cache_read(B, "shared", [C])
    ko, ki = s[C].split(C.op.reduce_axis[0], factor=16)
    s[AS].compute_at(s[C], ko)
    s[BS].compute_at(s[C], ko)
    return s, [A, B, C]


def registers():
    """schedule.gpu.matmul: a 128 x 64 tile per block, 8 x 4 outputs per thread kept in
    registers (cache_write "local"), k-slices of 16 in shared memory."""
    A, B, C = declare()
    s = tl.create_schedule(C)
    gpu.matmul(s, C, block=(128, 64), thread=(8, 4), k_tile=16)
    return s, [A, B, C]


print(tl.lower(*shared()))
size = 2048 if GPU else 20                     # the interpreter is slow: a small problem
a = np.random.rand(size, size + 3).astype("float32")
b = np.random.rand(size + 3, size - 5).astype("float32")
for name, make in (("one output per thread", naive), ("+ shared memory", shared),
                   ("+ register tiles", registers)):
    c = np.zeros((size, size - 5), "float32")
    t = run(*make(), [a, b, c])
    np.testing.assert_allclose(c, a @ b, rtol=1e-3, atol=1e-3)
    flops = 2 * a.shape[0] * a.shape[1] * b.shape[1]
    print(f"SGEMM {name:24s}" + (f" {flops / t / 1e12:6.2f} TFLOPS" if GPU else " correct"))

# ------------------------------------------------- 4. a refused schedule: a missing barrier
# no_sync() drops the barriers around a shared copy. Here the next k-slice's copy would
# overwrite the tile while slower threads still read the previous one: tensorlang refuses,
# naming the two threads, the element and the iterations.
s, _ = registers()
A_shared = next(st for st in s.stages if st.id == "A_shared")
try:
    A_shared.no_sync()
except tl.IllegalScheduleError as err:
    print("refused:", err)
    print("witness:", err.witness)
else:
    raise AssertionError("no_sync() should have been refused")
print("OK")
