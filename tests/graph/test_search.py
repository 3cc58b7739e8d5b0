"""Cost-guided search with the generated substitutions (graph/rule_search.py): patterns match
and rebuild graph nodes in both directions, the search finds distributivity under a
deterministic model and under measured kernel times, and the result computes the same."""

import numpy as np

import tensorlang.graph as G
from tensorlang.graph import rule_search as SR
from tensorlang.graph.node import topological_order


def _ops(outs):
    return [n.op for n in topological_order(outs) if n.op not in ("variable", "constant")]


class CountingModel(SR.CostModel):
    """A deterministic model: a matmul costs 10, every other kernel 1."""

    def __init__(self):
        self.times, self.measured, self.path, self.cpu = {}, 0, None, "test"

    def cost(self, outputs):
        return sum(10.0 if op == "matmul" else 1.0 for op in _ops(outputs))

    def save(self):
        pass


def test_patterns_skip_directions_that_invent_inputs():
    pats = SR.patterns([{"domain": "matrix", "lhs": "split0a(concat0(A, B))", "rhs": "A",
                         "how": "sympy"}])
    assert [p.name for p in pats] == ["split0a(concat0(A, B)) => A"]


def test_rewrites_apply_distributivity_and_its_inverse():
    x, a, b = (G.Variable(k, (4, 4)) for k in "xab")
    pats = SR.patterns([{"domain": "matrix", "lhs": "matmul(A, add(B, C))",
                         "rhs": "add(matmul(A, B), matmul(A, C))", "how": "sympy"}])
    out = list(SR.rewrites([x @ a + x @ b], pats))
    assert len(out) == 1 and _ops(out[0][0]) == ["add", "matmul"]
    back = list(SR.rewrites(out[0][0], pats))
    assert sorted(_ops(back[0][0])) == ["add", "matmul", "matmul"]


def test_rules_apply_only_at_their_rank():
    x, a, b = (G.Variable(k, (2, 4, 4)) for k in "xab")      # batched: not a matrix rule
    pats = SR.patterns([{"domain": "matrix", "lhs": "matmul(A, add(B, C))",
                         "rhs": "add(matmul(A, B), matmul(A, C))", "how": "sympy"}])
    assert list(SR.rewrites([x @ a + x @ b], pats)) == []


def test_search_finds_distributivity_under_a_model():
    x, w1, w2 = G.Variable("x", (8, 8)), G.Variable("w1", (8, 8)), G.Variable("w2", (8, 8))
    y = G.relu(x @ w1 + x @ w2)
    r = G.search([y], budget_s=30, model=CountingModel(), max_graphs=30)
    assert _ops(r.outputs).count("matmul") == 1
    assert r.predicted_after < r.predicted_before
    assert any("matmul(A, add(B, C))" in p for p, _ in r.applied)
    rng = np.random.default_rng(0)
    feed = {v: rng.standard_normal((8, 8)).astype("f4") for v in (x, w1, w2)}
    np.testing.assert_allclose(G.Executor(r.outputs).run(feed)[0],
                               G.Executor([y]).run(feed)[0], rtol=1e-4, atol=1e-4)
    assert "matmul(A, add(B, C))" in r.report()


def test_search_with_measured_kernel_times(tmp_path):
    x, w1, w2 = G.Variable("x", (96, 96)), G.Variable("w1", (96, 96)), G.Variable("w2", (96, 96))
    model = SR.CostModel(tmp_path / "times.json")
    r = G.search([x @ w1 + x @ w2], budget_s=20, model=model, max_graphs=5)
    assert r.kernels_measured > 0 and (tmp_path / "times.json").exists()
    assert r.measured_before > 0 and r.measured_after > 0
    again = SR.CostModel(tmp_path / "times.json")            # the cache is reused
    assert again.cost([x @ w1 + x @ w2]) == model.cost([x @ w1 + x @ w2])
    assert again.measured == 0
