# %% [markdown]
# # 09 — Graph optimization: rewrites that keep every bit
#
# `G.optimize(nodes)` rewrites a graph with rules (`tensorlang/graph/rewrite.py`): constant
# folding, algebraic identities, common-subexpression elimination, and — by construction —
# dead-code elimination (only what the outputs need is rebuilt). Every default rule is exact
# in IEEE arithmetic: the optimized graph gives the same bits for every input, ±0, ±inf and
# NaN included (a hypothesis test checks it on random graphs). Rules that change rounding
# are opt-in. `TL_DEBUG=1` prints each rule as it fires.
#
# Then the passes that are not bit-exact (opt-in): merged QKV and conv + batch-norm folding;
# fusion, the pass the executor runs on every plan (`graph/fusion.py`); and substitutions
# generated and verified as TASO does, applied by a search over measured kernel times.
#
# Run: python tutorials/09_graph_optimization.py

# %%
import os

import numpy as np

import tensorlang.graph as G

N = int(os.environ.get("TL_TUTORIAL_N", 256))


def ops(outputs):
    return sum(n.op not in ("variable", "constant") for n in G.topological_order(outputs))


# %% [markdown]
# ## 1. The lecture's CSE and DCE example
# `d = exp(a) * b; e = exp(a) + c; unused = sin(a)`: exp(a) is computed once, and `unused`,
# which no output reads, is never rebuilt.

# %%
a, b, c = (G.Variable(x, (N,)) for x in "abc")
d = G.exp(a) * b
e = G.exp(a) + c
unused = G.sin(a)  # noqa: F841  (dead: not an output)
outs, fired = G.rewrite([d, e])
print("before:", ops([d, e]), "ops; after:", ops(outs), "ops")
for f in fired:
    print("  fired", f)
print(G.Graph(outs))

# %% [markdown]
# ## 2. Constants fold; identities go — where they are exact
# `x * 1`, `x / 1`, `x - 0.0`, `x + (-0.0)` are x. But `x + 0.0` is not (−0.0 + 0.0 is +0.0)
# and `x * 0` is not 0 (inf · 0 and NaN · 0 are NaN): those stay.

# %%
x = G.Variable("x", (4,))
one = G.constant(2.0, "float32") * G.constant(0.5, "float32")     # folds to 1.0
graphs = {"x * (2 * 0.5)": x * one, "x + 0.0": x + 0.0, "x + (-0.0)": x + (-0.0),
          "x * 0.0": x * 0.0, "(x + x) + x": (x + x) + x}
feed = np.array([-0.0, np.inf, np.nan, 1.5], np.float32)
for label, g in graphs.items():
    (opt,) = G.optimize([g])
    before = G.Executor([g]).run({x: feed})[0]
    after = G.Executor([opt]).run({x: feed})[0]
    same = np.array_equal(np.signbit(before), np.signbit(after)) and \
        np.array_equal(before, after, equal_nan=True)
    print(f"{label:14s} {ops([g])} -> {ops([opt])} ops; {opt.op:9s} same bits: {same}")
    assert same

# %% [markdown]
# ## 3. Constant propagation is opt-in
# The lecture's `Add(c1, Add(x, c2)) ⇒ Add(x, c1 + c2)` reassociates a floating-point sum:
# `2^24 + (x + 1)` is 2^24 + 2 for x = 1 in float32, `x + (2^24 + 1)` is 2^24. It is the
# `reassociate` pass, applied only when asked for.

# %%
y = G.Variable("y", (1,))
g = G.constant(2.0 ** 24, "float32") + (y + G.constant(1.0, "float32"))
(exact,) = G.optimize([g])
(fast,) = G.optimize([g], ["fold", "reassociate"])
v = np.array([1.0], np.float32)
r_exact, r_fast = G.Executor([exact]).run({y: v})[0], G.Executor([fast]).run({y: v})[0]
print(f"default: {ops([exact])} ops -> {r_exact[0]:.0f}; reassociated: {ops([fast])} op -> "
      f"{r_fast[0]:.0f}")
assert r_exact[0] == 2.0 ** 24 + 2 and r_fast[0] == 2.0 ** 24

# %% [markdown]
# ## 4. Transposes fold into the matmul
# `matmul(transpose(a), b)` reads `a` transposed (the kernel's `ta=True`) instead of
# materialising the transpose; two transposes cancel.

# %%
A, B = G.Variable("A", (N, 64)), G.Variable("B", (N, 32))
g = G.matmul(G.transpose(G.transpose(G.transpose(A))), B)
(opt,) = G.optimize([g])
print(f"{ops([g])} ops -> {ops([opt])}: {opt.op}(ta={opt.attr('ta')})")
rng = np.random.default_rng(0)
av, bv = rng.standard_normal((N, 64), "float32"), rng.standard_normal((N, 32), "float32")
got = G.Executor([opt]).run({A: av, B: bv})[0]
np.testing.assert_allclose(got, av.T @ bv, rtol=1e-4, atol=1e-4)

# %% [markdown]
# ## 5. Merged QKV
# Attention projects one input three times. `merge_matmul` (opt-in) makes it one matmul on
# the concatenated weights — one pass over x instead of three — and three slices. Each
# output is the same k-sum in the same order (up to 1 ulp where a multiply-add is fused in
# one kernel and not in the other: opt-in for that reason). Today
# each slice is a copy kernel of its own; fusion as a graph pass (issue 14) would fold the
# slices into their readers.

# %%
X = G.Variable("X", (4, N // 4, 64))
W = [G.constant(rng.standard_normal((64, 64)).astype("float32")) for _ in range(3)]
q, k, v = (G.matmul(X, w) for w in W)
merged = G.optimize([q, k, v], ["merge_matmul", "fold", "algebra", "cse"])
print("matmuls:", sum(n.op == "matmul" for n in G.topological_order([q, k, v])), "->",
      sum(n.op == "matmul" for n in G.topological_order(merged)))
xv = rng.standard_normal((4, N // 4, 64)).astype("float32")
ex0, ex1 = G.Executor([q, k, v]), G.Executor(merged)
r0, r1 = ex0.run({X: xv}), ex1.run({X: xv})
for a0, a1 in zip(r0, r1):
    np.testing.assert_allclose(a1, a0, rtol=1e-5, atol=1e-6)
same = all(np.array_equal(a, b) for a, b in zip(r0, r1))
# more kernels, not fewer: the merged graph runs one matmul, then one copy kernel per slice
print(f"kernels: {len(ex0.kernels)} -> {len(ex1.kernels)} (one matmul over x, then "
      f"{len(ex1.kernels) - 1} slice copies: "
      f"{', '.join(str(k) for k in ex1.kernels)}); same bits here: {same}")

# %% [markdown]
# ## 6. Conv + batch norm (inference)
# With constant weights and statistics, `(conv(x, W) - mean) * gamma / sqrt(var + eps) +
# beta` is `conv(x, W * s) + t` per output channel. The `conv_bn` pass folds it; the
# executor then runs the conv with its bias and relu as one kernel's epilogue.

# %%
C_IN, HW = 8, max(8, N // 16)
xi = G.Variable("img", (1, C_IN, HW, HW))
Wc = G.constant((rng.standard_normal((16, C_IN, 3, 3)) * 0.2).astype("float32"))
bn = [G.constant(v.astype("float32")) for v in (rng.uniform(0.5, 2, 16),
                                                rng.standard_normal(16),
                                                rng.standard_normal(16),
                                                rng.uniform(0.5, 2, 16))]
net = G.relu(G.batch_norm(G.conv2d(xi, Wc, padding=1), *bn))
(folded,) = G.optimize([net], ["fold", "algebra", "cse", "conv_bn"])
img = rng.standard_normal((1, C_IN, HW, HW)).astype("float32")
e0, e1 = G.Executor([net]), G.Executor([folded])
np.testing.assert_allclose(e1.run({xi: img})[0], e0.run({xi: img})[0], rtol=1e-4, atol=1e-4)
print(f"conv + bn + relu: {ops([net])} ops in {len(e0.kernels)} kernels -> "
      f"{ops([folded])} ops in {len(e1.kernels)} kernel: {e1.kernels[0]}")

# %% [markdown]
# ## 7. Fusion: what one kernel computes
# The executor partitions every graph into kernels (`graph/fusion.py`): elementwise chains
# inline into one compute, a reduction takes its elementwise producer, a matmul or conv its
# epilogue, and a row's statistics (mean, max, sum over the last axis) join what reads
# them — layer norm and a softmax written out by hand each become one kernel that reads a
# row once. `Executor(..., fuse=False)` runs one kernel per node, for comparison. The times
# are `tl.testing.benchmark`'s, with their spread: at these sizes a run takes tens of
# microseconds, much of it the executor's own work per run (feeding and binding the
# arrays) rather than the kernels, so the fused plan's gain can be within the spread; it
# grows with the data (TL_TUTORIAL_N=2048).

# %%
import tensorlang as tl  # noqa: E402


def per_run(ex, feed):
    """The median ms of a run, with the fastest and slowest rounds."""
    res = tl.testing.benchmark(ex.run, feed, repeat=7)
    return f"{1e3 * res.median:7.3f} ms ({1e3 * res.min:.3f}-{1e3 * res.max:.3f})"


rows = G.Variable("rows", (N, 512))
D_, A_, B_, C_ = (G.Variable(k, (N * 64,)) for k in "DABC")
cases = {"E = D + (A+B)*C": ([D_ + (A_ + B_) * C_],
                             {v: rng.standard_normal(N * 64).astype("f4")
                              for v in (D_, A_, B_, C_)}),
         "layer norm": ([G.layer_norm(rows)],
                        {rows: rng.standard_normal((N, 512)).astype("f4")}),
         "softmax by hand": ([G.exp(rows - G.max(rows, -1, keepdims=True))
                              / G.sum(G.exp(rows - G.max(rows, -1, keepdims=True)), -1,
                                      keepdims=True)],
                             {rows: rng.standard_normal((N, 512)).astype("f4")})}
HOST = tl.Target.parse("llvm")
print(f"per run on {HOST.cpu} ({HOST.cores} threads): the median of 7 rounds (fastest-slowest)")
for label, (outs_, feed_) in cases.items():
    fused, plain = G.Executor(G.optimize(outs_)), G.Executor(outs_, fuse=False)
    np.testing.assert_allclose(fused.run(feed_)[0], plain.run(feed_)[0], rtol=1e-5,
                               atol=1e-6)
    print(f"{label:18s} {len(plain.kernels):2d} kernels {per_run(plain, feed_)} -> "
          f"{len(fused.kernels)} kernel {per_run(fused, feed_)}")
    assert len(fused.kernels) == 1

# %% [markdown]
# ## 8. Generated substitutions and the search
# `tensorlang gen-rules` enumerates every graph of up to 3 operators over matrices
# (add, mul, matmul, transpose, relu, concat, split) and convolutions, fingerprints them on
# integer inputs, verifies each candidate pair with sympy (or 64 random float inputs where
# relu makes it non-polynomial), and prunes renamings and rules that a smaller one implies
# in a context. Among the rules: distributivity, merged matmuls via concat, the transpose
# of a product, convolutions with concatenated kernels. Integer fingerprints can collide
# where real numbers differ — `relu(a + a·a) = a + a·a` holds for every integer — and the
# verifier refuses those. `G.search` then rewrites a graph with the rules, guided by
# measured kernel times.

# %%
import json  # noqa: E402
import tempfile  # noqa: E402

from tensorlang.graph import substitutions  # noqa: E402

stats = json.loads(substitutions.RULES_PATH.read_text())["stats"]
print("generator:", ", ".join(f"{k} {v}" for k, v in stats.items()))
wrong = substitutions.verify(substitutions.parse("relu(add(A, mul(A, A)))"),
                             substitutions.parse("add(A, mul(A, A))"), "matrix")
print("refused:", wrong.witness)
xs_, w1_, w2_ = (G.Variable(k, (128, 128)) for k in ("xs", "w1", "w2"))
print("searching rewrites of relu(xs @ w1 + xs @ w2) (budget 10 s)...", flush=True)
with tempfile.TemporaryDirectory() as tmp:
    model = G.CostModel(f"{tmp}/times.json")
    found = G.search([G.relu(xs_ @ w1_ + xs_ @ w2_)], budget_s=10, max_graphs=4, model=model)
print(found.report())
print("OK")
