# %% [markdown]
# # 08 — Automatic differentiation: the lecture's trace, both modes, then an MLP
#
# The graph layer builds a dataflow graph of operators. `G.gradients(y, xs)` builds the
# backward graph symbolically, visiting nodes in reverse topological order and summing the
# partial adjoints each node receives; `G.jvp` pushes tangents forwards. Both return graph
# nodes, so gradients of gradients work, and `G.Executor` runs every node as a tensorlang
# kernel.
#
# Run: python tutorials/08_autodiff.py

# %%
import math
import os
import pathlib
import runpy


import tensorlang.graph as G

# %% [markdown]
# ## 1. The trace y = ln(x1) + x1·x2 − sin(x2) at (2, 5)

# %%
x1, x2 = G.Variable("x1", dtype="float64"), G.Variable("x2", dtype="float64")
v3 = G.log(x1)          # v1 = x1, v2 = x2
v4 = x1 * x2
v5 = G.sin(x2)
v6 = v3 + v4
y = v6 - v5             # v7
ex = G.Executor([v3, v4, v5, v6, y])
vals = ex.run({x1: 2.0, x2: 5.0})
for name, v in zip(["v3 = ln v1", "v4 = v1*v2", "v5 = sin v2", "v6 = v3+v4", "y = v6-v5"], vals):
    print(f"{name:12} {float(v):8.3f}")
assert math.isclose(float(vals[-1]), 11.652, abs_tol=1e-3)

# %% [markdown]
# ## 2. Forward mode: tangents with dx1 = 1, dx2 = 0

# %%
(tangent,) = G.jvp(y, [x1, x2], [1.0, 0.0])
(dy,) = G.Executor([tangent]).run({x1: 2.0, x2: 5.0})
print(f"forward mode: dy/dx1 = {float(dy):.3f}")
assert math.isclose(float(dy), 5.5)

# %% [markdown]
# ## 3. Reverse mode: adjoints, and the backward graph

# %%
g1, g2 = G.gradients(y, [x1, x2])
a1, a2 = G.Executor([g1, g2]).run({x1: 2.0, x2: 5.0})
print(f"reverse mode: v̄1 = {float(a1):.3f}, v̄2 = {float(a2):.3f}")
assert math.isclose(float(a1), 5.5) and math.isclose(float(a2), 1.716, abs_tol=1e-3)
print("the backward graph (the forward nodes it uses come first):")
print(G.Graph([g1, g2]))

# %% [markdown]
# ## 4. Gradients of gradients: y = x2² + x2·x3 at (6, 0)

# %%
a, b = G.Variable("a", dtype="float64"), G.Variable("b", dtype="float64")
f = a * a + a * b
ga, gb = G.gradients(f, [a, b])
gaa, gab = G.gradients(ga, [a, b])
got = [float(v) for v in G.Executor([f, ga, gb, gaa, gab]).run({a: 6.0, b: 0.0})]
print("y, dy/dx2, dy/dx3, d²y/dx2², d²y/dx2dx3 =", got)
assert got == [36.0, 12.0, 6.0, 2.0, 1.0]

# %% [markdown]
# ## 5. The MLP: relu(x·W1)·W2 with softmax cross-entropy, trained by SGD on digits

# %%
root = pathlib.Path(__file__).resolve().parent.parent
train = runpy.run_path(str(root / "examples" / "train_mlp_digits.py"))["train"]
epochs = 3 if os.environ.get("TL_TUTORIAL_N") else 15
try:
    acc = train(epochs=epochs)
    assert acc > 0.85
except ImportError:
    print("(scikit-learn is not installed: pip install -e '.[test]')")
print("OK")
