# %% [markdown]
# # 03 — Legality: refused schedules, their witnesses, and a wavefront made parallel by skew
#
# tensorlang checks every primitive exactly, with isl, against the dependences of the
# declared order. A refused primitive raises `tl.IllegalScheduleError` naming one concrete
# pair of iterations whose order it would break (`.witness`), and leaves the schedule as it
# was. Nothing legal is refused: interchanging a recurrence whose dependence distances are
# all non-negative is accepted.

# %%
import os

import numpy as np

import tensorlang as tl

N = int(os.environ.get("TL_TUTORIAL_N", "200"))  # the test suite runs this small
rng = np.random.default_rng(0)


def refused(call):
    try:
        call()
    except tl.IllegalScheduleError as e:
        print("refused:", e)
        print("witness:", dict(source=e.witness.source, sink=e.witness.sink), "\n")
        return e
    raise AssertionError("expected a refusal")


# %% [markdown]
# ## 1. A prefix sum is a recurrence
# `tl.recurrence` declares a tensor whose elements read earlier ones; its meaning is the
# lexicographic order of its indices. Splitting its loop is fine; running the pieces in the
# other order, or in parallel, is not.

# %%
x = tl.placeholder((N,), "float64", name="x")
y = tl.recurrence((N,), lambda y, i: tl.if_then_else(i > 0, y[i - 1], 0.0) + x[i],
                  dtype="float64", name="y")
s = tl.create_schedule(y)
io, ii = s[y].split(y.op.axis[0], factor=8)
refused(lambda: s[y].reorder(ii, io))
refused(lambda: s[y].parallel(ii))
print(tl.lower(s, [x, y]))
f = tl.build(s, [x, y])
xv = rng.standard_normal(N)
yv = np.zeros(N)
f(xv, yv)
np.testing.assert_allclose(yv, np.cumsum(xv))

# %% [markdown]
# ## 2. Reductions commute, but do not run in parallel
# Reordering, splitting and tiling a reduction axis is legal; `parallel(k)` is refused with a
# hint to use rfactor.

# %%
A = tl.placeholder((N, N), "float32", name="A")
k = tl.reduce_axis((0, N), name="k")
S = tl.compute((N,), lambda i: tl.sum(A[i, k], axis=k), name="S")
s = tl.create_schedule(S)
s[S].reorder(k, S.op.axis[0])   # legal: the updates of one sum commute
refused(lambda: s[S].parallel(k))

# %% [markdown]
# ## 3. Edit distance: a wavefront
# `D[i, j]` reads `D[i-1, j]`, `D[i, j-1]` and `D[i-1, j-1]`: distances (1, 0), (0, 1) and
# (1, 1). Neither loop can be parallel, but the interchange is legal (every distance stays
# lexicographically positive). Skewing j by i gives distances (1, 1), (0, 1), (1, 2); after
# putting the skewed j outside, every dependence is carried by the outer loop, and the inner
# loop — one anti-diagonal — runs in parallel.

# %%
M = max(N // 4, 2)
a = tl.placeholder((M,), "int32", name="a")
b = tl.placeholder((M,), "int32", name="b")
D = tl.recurrence((M + 1, M + 1), lambda D, i, j: tl.if_then_else(
    i == 0, j, tl.if_then_else(j == 0, i, tl.minimum(
        tl.minimum(D[i - 1, j] + 1, D[i, j - 1] + 1),
        D[i - 1, j - 1] + (a[i - 1] != b[j - 1]).astype("int32")))), dtype="int32", name="D")
s = tl.create_schedule(D)
i, j = D.op.axis
refused(lambda: s[D].parallel(i))
s[D].skew(i, j)
s[D].reorder(j, i)
s[D].parallel(i)
print(tl.lower(s, [a, b, D]))
f = tl.build(s, [a, b, D])
av = rng.integers(0, 4, M).astype(np.int32)
bv = rng.integers(0, 4, M).astype(np.int32)
dv = np.zeros((M + 1, M + 1), np.int32)
f(av, bv, dv)

ref = np.zeros((M + 1, M + 1), np.int32)
ref[0, :] = np.arange(M + 1)
ref[:, 0] = np.arange(M + 1)
for p in range(1, M + 1):
    for q in range(1, M + 1):
        ref[p, q] = min(ref[p - 1, q] + 1, ref[p, q - 1] + 1,
                        ref[p - 1, q - 1] + (av[p - 1] != bv[q - 1]))
np.testing.assert_array_equal(dv, ref)
print("edit distance:", dv[M, M])

# %% [markdown]
# ## 4. A time-stepped stencil: tiling needs a skew
# `u[t, i]` reads `u[t-1, i-1..i+1]`: the distance (1, -1) forbids tiling t and i directly.
# The error says which skew fixes it; after it, the tiled schedule is accepted.

# %%
T = 6
v = tl.placeholder((N,), "float64", name="v")
u = tl.recurrence((T, N), lambda u, t, i: tl.if_then_else(
    t == 0, v[i], tl.if_then_else((i > 0) & (i < N - 1),
                                  (u[t - 1, i - 1] + u[t - 1, i] + u[t - 1, i + 1]) / 3.0,
                                  u[t - 1, i])), dtype="float64", name="u")
s = tl.create_schedule(u)
t, i = u.op.axis
refused(lambda: s[u].tile(t, i, 2, 16))
s[u].skew(t, i)
s[u].tile(t, i, 2, 16)
f = tl.build(s, [v, u])
vv = rng.standard_normal(N)
uv = np.zeros((T, N))
f(vv, uv)
ref = np.zeros((T, N))
ref[0] = vv
for step in range(1, T):
    ref[step] = ref[step - 1]
    ref[step, 1:-1] = (ref[step - 1, :-2] + ref[step - 1, 1:-1] + ref[step - 1, 2:]) / 3.0
np.testing.assert_allclose(uv, ref)
print("OK")
