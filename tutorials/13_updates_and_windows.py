"""Tutorial 13: updates and windows — a histogram, a prefix sum, a sliding window, an extern.

Four things Halide and TVM users write every day, each checked against numpy:

1. a histogram (Halide lesson 09: `hist(im(r.x, r.y)) += 1`) as `tl.update` with an index
   read from data; its parallel loop refused with the two iterations that race, then
   accepted as `parallel(r, atomic=True)`;
2. a prefix sum and a running maximum as updates over a reduce axis, whose parallel loop is
   refused with the pair `r -> r + 1`;
3. Halide lesson 08's sliding window: a 3-row blur whose producer is stored at root and
   computed per output row (`store_root` + `compute_at`), then folded to the 3 rows in
   flight (`fold_storage`) — with `tl.analyze` counting the producer's evaluations and the
   buffer's shape, and isl's smallest correct fold;
4. an extern stage: a Python callable, and TVM's `call_packed` form, between compiled
   stages.

Run: python tutorials/13_updates_and_windows.py
"""

# %%
import numpy as np

import tensorlang as tl

rng = np.random.default_rng(13)

# %% ------------------------------------------------------------ 1. a histogram
# hist(x) = 0; hist(im(r.x, r.y)) += 1 — the write's index is a value of the image.
H, W, BINS = 120, 90, 16
im = tl.placeholder((H, W), dtype="int32", name="im")
zero = tl.compute((BINS,), lambda i: 0, name="zero")          # the pure definition
rx, ry = tl.reduce_axis(H, "rx"), tl.reduce_axis(W, "ry")     # the RDom
hist = tl.update(zero, [rx, ry], index=lambda x, y: im[x, y],
                 value=lambda old, x, y: old + 1, name="hist")
s = tl.create_schedule(hist)
print("--- the histogram, serial (init and update share hist's buffer):")
print(tl.lower(s, [im, hist]))
a = rng.integers(0, BINS, (H, W), dtype="int32")
want = np.bincount(a.ravel(), minlength=BINS).astype("int32")
out = np.zeros(BINS, "int32")
tl.build(s, [im, hist])(a, out)
np.testing.assert_array_equal(out, want)
print("serial histogram == np.bincount:", out.tolist())

# Any two pixels may fall in the same bin: isl models the write as a may-write of any
# element, so a parallel loop over rx is refused, with two iterations that may collide.
try:
    s[hist].parallel(rx)
    raise AssertionError("a racing parallel histogram was accepted")
except tl.IllegalScheduleError as e:
    src, dst = e.witness
    print("\n--- parallel(rx) refused:", str(e).split(". ")[0] + ".")
    print("   ", str(e).split(". ")[-2] + ".")
    print(f"    witness: iteration {src} and iteration {dst} may write the same bin")
    assert src["rx"] != dst["rx"]

# `old + 1` is associative and commutative: declared so, each increment is one atomic
# read-modify-write and the rows run on the thread pool.
s = tl.create_schedule(hist)
s[hist].parallel(rx, atomic=True)
atomic_line = next(ln for ln in str(tl.lower(s, [im, hist])).splitlines() if "atomic" in ln)
print("\n--- parallel(rx, atomic=True), the update's store:", atomic_line.strip())
f_atomic = tl.build(s, [im, hist])
for _ in range(5):                                  # threads, every time the same counts
    a = rng.integers(0, BINS, (H, W), dtype="int32")
    out = np.zeros(BINS, "int32")
    f_atomic(a, out)
    np.testing.assert_array_equal(out, np.bincount(a.ravel(), minlength=BINS))
print("atomic parallel histogram == np.bincount (5 random images)")

# %% ---------------------------------------------- 2. a prefix sum, a running maximum
# p(x) = X(x); p(r) = p(r) + p(r - 1) for r in [1, n): inside `value`, reads of p are the
# updated tensor's current values, as in Halide.
n = tl.var("n")
X = tl.placeholder((n,), dtype="float64", name="X")
p = tl.compute((n,), lambda i: X[i], name="p")
r = tl.reduce_axis((1, n), "r")
P = tl.update(p, [r], index=lambda r: r, value=lambda old, r: old + p[r - 1], name="P")
M = tl.update(p, [r], index=lambda r: r, value=lambda old, r: tl.maximum(old, p[r - 1]),
              name="M")
s = tl.create_schedule(P)
print("\n--- a prefix sum as an update:")
print(tl.lower(s, [X, P]))
f_sum = tl.build(s, [X, P])
f_max = tl.build(tl.create_schedule(M), [X, M])
for size in (1, 7, 1000):
    x = rng.integers(-50, 50, size).astype("float64")
    got = np.zeros(size)
    f_sum(x, got)
    np.testing.assert_array_equal(got, np.cumsum(x))
    f_max(x, got)
    np.testing.assert_array_equal(got, np.maximum.accumulate(x))
print("prefix sum == np.cumsum, running max == np.maximum.accumulate (n = 1, 7, 1000)")
try:
    s[P].parallel(r)
    raise AssertionError("a parallel prefix sum was accepted")
except tl.IllegalScheduleError as e:
    src, dst = e.witness
    print(f"parallel(r) refused: iteration {src} writes what {dst} reads")
    assert dst["r"] == src["r"] + 1

# %% ----------------------------------------------------- 3. the sliding window
# Halide lesson 08: blur_x averages three columns, out averages three rows of blur_x.
# Four placements of blur_x: at root (all of it, before out), compute_at out's row loop
# (3 rows per output row: each row computed 3 times), store_root + compute_at (stored
# whole, computed once: each iteration computes only the row the earlier ones did not),
# and that folded to 3 rows. `tl.analyze(...).buffer("blur_x")` gives the buffer's shape,
# the positions written in it and isl's smallest correct fold of each dimension.
h, w = tl.var("h"), tl.var("w")
inp = tl.placeholder((h + 2, w + 2), name="input")
blur_x = tl.compute((h + 2, w), lambda y, x: (inp[y, x] + inp[y, x + 1] + inp[y, x + 2]) / 3.0,
                    name="blur_x")
blur = tl.compute((h, w), lambda y, x: (blur_x[y, x] + blur_x[y + 1, x] + blur_x[y + 2, x])
                  / 3.0, name="out")
HS, WS = 64, 48                                     # the sizes tl.analyze counts at
sizes = {"h": HS, "w": WS}


def window(kind: str):
    s = tl.create_schedule(blur)
    y = blur.op.axis[0]
    if kind == "compute_at":                        # 3 rows per output row, each recomputed
        s[blur_x].compute_at(s[blur], y)
    elif kind in ("store_root", "folded"):          # stored at root: each row computed once
        s[blur_x].store_root()
        s[blur_x].compute_at(s[blur], y)
    if kind == "folded":                            # only the rows in flight, row y at y % 3
        s[blur_x].fold_storage(blur_x.op.axis[0], 3)
    return s


img = rng.random((HS + 2, WS + 2), dtype=np.float32)
bx = (img[:, :-2] + img[:, 1:-1] + img[:, 2:]) / 3
want = (bx[:-2] + bx[1:-1] + bx[2:]) / 3
print(f"\n--- the 3-row blur at h = {HS}, w = {WS} ({HS * WS} output points):")
print(f"{'schedule':<12}{'blur_x evaluations':>20}{'blur_x buffer':>16}{'elements held':>15}"
      f"{'smallest fold':>22}")
rows = {}
for kind in ("root", "compute_at", "store_root", "folded"):
    s = window(kind)
    rep = tl.analyze(s, [inp, blur], sizes=sizes)
    evals = rep.stage("blur_x").iterations
    if kind == "root":                              # a global buffer, the whole of blur_x
        buf = None
        print(f"{kind:<12}{evals:>20}{f'{HS + 2} x {WS}':>16}{(HS + 2) * WS:>15}{'-':>22}")
    else:                                           # a buffer local to the kernel
        buf = rep.buffer("blur_x")
        shape = " x ".join(f"({d})" if " " in str(d) else str(d) for d in buf.shape)
        held = buf.footprint // buf.store_iterations     # positions written per allocation
        print(f"{kind:<12}{evals:>20}{shape:>16}{held:>15}"
              f"{str(buf.smallest_fold or '-'):>22}")
    rows[kind] = (evals, buf)
    got = np.zeros((HS, WS), "float32")
    tl.build(s, [inp, blur])(img, got)
    np.testing.assert_allclose(got, want, rtol=1e-5)

evals_root, full = rows["store_root"]
evals_ca, _ = rows["compute_at"]
evals_fold, folded = rows["folded"]
assert evals_root == evals_fold == (HS + 2) * WS and evals_ca == 3 * HS * WS
assert folded.shape == (3, "w") and full.smallest_fold["y"] == 3
print(f"store_root + compute_at: {evals_fold} evaluations of blur_x instead of {evals_ca} "
      f"(each row once)")
print(f"fold_storage(y, 3): {folded.footprint} elements of blur_x live instead of "
      f"{full.footprint} ({100 * (1 - folded.footprint / full.footprint):.0f}% of the "
      f"memory saved), same evaluations")
print(tl.lower(window("folded"), [inp, blur]))

# A fold smaller than isl's smallest is refused with two values that would share a slot.
s = window("store_root")
try:
    s[blur_x].fold_storage("y", 2)
    raise AssertionError("a fold of 2 rows was accepted")
except tl.IllegalScheduleError as e:
    live, written = e.witness
    def at(pt):
        return "blur_x[" + ", ".join(f"{k}={v}" for k, v in pt.items()) + "]"
    print(f"fold_storage(y, 2) refused: {at(written)} would overwrite {at(live)} (the same "
          f"slot, row y % 2) while it is still to be read")
    assert live["x"] == written["x"] and (live["y"] - written["y"]) % 2 == 0

# %% ------------------------------------------------------------- 4. an extern stage
# A stage computed by your function `fn(*inputs, out)` on numpy views of the kernel's
# buffers: here numpy's sort of each row, between two compiled stages. Its reads and
# writes (whole tensors) are what the dependence analysis sees, so the compiled stages
# around it still parallelise.
m = tl.var("m")
A = tl.placeholder((m, 8), name="A")
sq = tl.compute((m, 8), lambda i, j: A[i, j] * A[i, j], name="sq")
srt = tl.extern((m, 8), [sq], lambda x, out: np.copyto(out, np.sort(x, axis=1)),
                name="sorted")
top = tl.compute((m,), lambda i: srt[i, 7] - srt[i, 0], name="spread")
s = tl.create_schedule(top)
s[sq].parallel(sq.op.axis[0])
s[top].parallel(top.op.axis[0])
print("\n--- an extern stage (a Python callable) between two compiled ones:")
print(tl.lower(s, [A, top]))
f = tl.build(s, [A, top])
a = rng.standard_normal((100, 8)).astype("float32")
got = np.zeros(100, "float32")
f(a, got)
np.testing.assert_allclose(got, (a * a).max(1) - (a * a).min(1), rtol=1e-6)
print("square -> np.sort (extern) -> max - min == numpy")

# TVM's form: a registered packed function, here the built-in cblas matmul (numpy's BLAS).
Am = tl.placeholder((32, 24), name="Am")
Bm = tl.placeholder((24, 16), name="Bm")
Cm = tl.extern((32, 16), [Am, Bm], lambda ins, outs: tl.call_packed(
    "tvm.contrib.cblas.matmul", ins[0], ins[1], outs[0], False, False), name="Cm")
Dm = tl.compute((32, 16), lambda i, j: tl.maximum(Cm[i, j], 0.0), name="relu")
f = tl.build(tl.create_schedule(Dm), [Am, Bm, Dm])
a, b = rng.standard_normal((32, 24)).astype("float32"), rng.standard_normal((24, 16)).astype(
    "float32")
got = np.zeros((32, 16), "float32")
f(a, b, got)
np.testing.assert_allclose(got, np.maximum(a @ b, 0), rtol=1e-5, atol=1e-5)
print("call_packed('tvm.contrib.cblas.matmul') -> relu == numpy")

print("\nOK")
