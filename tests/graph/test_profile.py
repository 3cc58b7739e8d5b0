"""`Executor.profile`: each kernel's time and the nodes fused into it."""

import numpy as np
import pytest

import tensorlang.graph as G
from tensorlang.graph.node import GraphError


def test_profile_lists_every_kernel_with_its_fused_nodes_and_shares():
    x, w = G.Variable("x", (64, 96)), G.Variable("w", (96, 32))
    r = G.relu(x @ w)
    y = G.softmax(r, axis=-1)
    ex = G.Executor([y])
    feed = {x: np.ones((64, 96), "f4"), w: np.ones((96, 32), "f4")}
    prof = ex.profile(feed, runs=3)
    assert len(prof) == len(ex._last.steps) >= 1
    assert sum(k.share for k in prof) == pytest.approx(1.0)
    assert all(k.seconds > 0 for k in prof)
    assert [k.seconds for k in prof] == sorted((k.seconds for k in prof), reverse=True)
    fused = [f for k in prof for f in k.fused]
    assert any(f.startswith("matmul") for f in fused) and any(f.startswith("softmax")
                                                              for f in fused)
    assert r.name in str(prof[0]) or y.name in str(prof[0])
    (got,) = ex.run(feed)                       # the plan still runs as before
    np.testing.assert_allclose(got, np.full((64, 32), 1 / 32), rtol=1e-6)


def test_profile_refuses_a_bad_run_count():
    x = G.Variable("x", (4,))
    with pytest.raises(GraphError, match="runs"):
        G.Executor([G.exp(x)]).profile({x: np.ones(4, "f4")}, runs=0)
