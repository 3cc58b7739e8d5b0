"""Tutorial 04: where values live — compute_at, caches, packing, rfactor, and exact counts.

Placing a producer inside its consumer's loop trades recomputation for locality. tensorlang
computes the producer's region at each iteration exactly (isl's image of the reads), sizes
its local buffer to that region's bounding box, and `tl.analyze` counts what every choice
costs: iterations, flops, elements moved at each loop level, arithmetic intensity.

Run: python tutorials/04_memory.py
"""

import numpy as np

import tensorlang as tl

# ---------------------------------------------------------------- 1. a blur, three ways
n = tl.var("n")
A = tl.placeholder((n + 2, n), name="A")
B = tl.compute((n + 2, n), lambda y, x: A[y, x] * 2.0, name="B")          # producer
C = tl.compute((n, n), lambda y, x: B[y, x] + B[y + 1, x] + B[y + 2, x], name="C")


def blur_schedule(level: str):
    s = tl.create_schedule(C)
    yo, xo, yi, xi = s[C].tile(*C.op.axis, 16, 32)
    if level == "tile":
        s[B].compute_at(s[C], xo)      # an 18 x 32 block of B per 16 x 32 tile
    elif level == "row":
        s[B].compute_at(s[C], yi)      # 3 rows of 32 per output row of the tile
    return s


for level in ("root", "tile", "row"):
    s = blur_schedule(level)
    r = tl.analyze(s, [A, C], sizes={"n": 256})
    print(f"--- B computed at {level}: B runs {r.stage('B').iterations} times "
          f"(C has {256 * 256} points)")
    if level == "tile":
        print(tl.lower(s, [A, C]))
    f = tl.build(s, [A, C])
    a = np.random.rand(258, 256).astype("float32")
    c = np.zeros((256, 256), "float32")
    f(a, c)
    b = 2 * a
    np.testing.assert_allclose(c, b[:-2] + b[1:-1] + b[2:], rtol=1e-5)

# ------------------------------------- 2. matmul: cache_write, cache_read, packing, counts
N = 64
Am = tl.placeholder((N, N), name="A")
Bm = tl.placeholder((N, N), name="B")
k = tl.reduce_axis((0, N), name="k")
Cm = tl.compute((N, N), lambda i, j: tl.sum(Am[i, k] * Bm[k, j], axis=k), name="C")
s = tl.create_schedule(Cm)
CC = s.cache_write(Cm, "local")              # accumulate a tile in a local buffer
BP = s.pack(Bm, 1, 16)                       # B[k][j] -> B_packed[j/16][k][j%16]
io, jo, ii, ji = s[Cm].tile(*s[Cm].op.axis, 8, 16)
s[CC].compute_at(s[Cm], jo)
ci, cj = s[CC].op.axis
(ck,) = s[CC].op.reduce_axis
s[CC].reorder(ck, ci, cj)
s[CC].vectorize(cj)
print(s.trace_text())
print(tl.lower(s, [Am, Bm, Cm]))
f = tl.build(s, [Am, Bm, Cm])
a, b = np.random.rand(N, N).astype("float32"), np.random.rand(N, N).astype("float32")
c = np.zeros((N, N), "float32")
f(a, b, c)
np.testing.assert_allclose(c, a @ b, rtol=1e-4)

# the lecture's data movement: C = A.B^T tiled v1 x v2 x v3, A and B cached at the k tile
v1, v2, v3 = 4, 8, 2
kk = tl.reduce_axis((0, n), name="k")
A2 = tl.placeholder((n, n), name="A")
B2 = tl.placeholder((n, n), name="B")
C2 = tl.compute((n, n), lambda i, j: tl.sum(A2[i, kk] * B2[j, kk], axis=kk), name="C")
s = tl.create_schedule(C2)
i, j = C2.op.axis
io, ii = s[C2].split(i, factor=v1)
jo, ji = s[C2].split(j, factor=v2)
ko, ki = s[C2].split(kk, factor=v3)
s[C2].reorder(io, jo, ko, ii, ji, ki)
for T in (A2, B2):
    s[s.cache_read(T, "local", [C2])].compute_at(s[C2], ko)
r = tl.analyze(s, [A2, B2, C2], sizes={"n": 64})
print(r)
print(f"A moved to local: {r.stage('A_local').iterations} = n^3/v2 = {64 ** 3 // v2}; "
      f"B: {r.stage('B_local').iterations} = n^3/v1 = {64 ** 3 // v1}")

# ------------------------------------------------------ 3. fusion and arithmetic intensity
X = [tl.placeholder((n,), name=ch) for ch in "ABCD"]
T = tl.compute((n,), lambda i: X[0][i] + X[1][i], name="T")
E = tl.compute((n,), lambda i: X[3][i] + T[i] * X[2][i], name="E")
s = tl.create_schedule(E)
print("T = A + B alone:", tl.analyze(s, X + [E], sizes={"n": 1000}).stage("T").intensity)
s[T].compute_inline()
print("E = D + (A + B) * C fused:", tl.analyze(s, X + [E], sizes={"n": 1000}).intensity)

# --------------------------------------------------------------- 4. rfactor a long sum
V = tl.placeholder((1027,), name="V")
r_ = tl.reduce_axis((0, 1027), name="r")
S = tl.compute((), lambda: tl.sum(V[r_], axis=r_), name="S")
s = tl.create_schedule(S)
ro, ri = s[S].split(r_, nparts=4)
SR = s.rfactor(S, ro)                  # S_rf[r_outer] = partial sums, a data-parallel axis
s[SR].parallel(SR.op.axis[0])
print(tl.lower(s, [V, S]))
f = tl.build(s, [V, S])
v = np.random.rand(1027).astype("float32")
out = np.zeros((), "float32")
f(v, out)
np.testing.assert_allclose(out, v.sum(), rtol=1e-5)
print("rfactor sum ok:", float(out))
print("OK")
