"""isl's AST must run every statement instance: a fused, split producer computed at its
consumer's column loop (its fused loop strided, the offset a floor of the consumer's
column) against numpy, and the coverage check that turns an AST with missing instances
(islpy 2026.2.2's isl) into an error instead of a wrong loop nest."""

import islpy as isl
import numpy as np
import pytest

import tensorlang as tl
from tensorlang.errors import TensorlangError
from tensorlang.polyhedral.astgen import _check_coverage


@pytest.mark.parametrize("n,split", [(8, 4), (8, 2), (12, 8), (16, 8), (7, 3), (1, 4), (13, 4)])
@pytest.mark.parametrize("at", ["j", "i"])
def test_fused_split_producer_at_its_consumers_loop_matches_numpy(n, split, at):
    X = tl.placeholder((n + 2, n + 2), "float32", name="X")
    bx = tl.compute((n + 2, n), lambda i, j: X[i, j] + X[i, j + 1], name="bx")
    by = tl.compute((n, n), lambda i, j: bx[i, j] + bx[i + 1, j], name="by")
    s = tl.create_schedule(by)
    jo, _ = s[bx].split(bx.op.axis[1], factor=split)
    s[bx].fuse(bx.op.axis[0], jo)
    s[bx].compute_at(s[by], by.op.axis[1] if at == "j" else by.op.axis[0])
    f = tl.build(s, [X, by])
    x = np.random.default_rng(n).standard_normal((n + 2, n + 2)).astype("f4")
    y = np.full((n, n), np.nan, "f4")
    f(x, y)
    b = x[:, :-2] + x[:, 1:-1]
    np.testing.assert_allclose(y, b[:n] + b[1:n + 1], rtol=1e-6)


def test_an_ast_that_leaves_out_instances_is_an_error():
    want = isl.UnionSet("{ S[p, i] : 0 <= p <= 7 and 0 <= i <= 1 }")
    _check_coverage(want, [isl.UnionSet("{ S[p, i] : 0 <= p <= 7 and 0 <= i <= 1 }")])
    _check_coverage(want, [isl.UnionSet("{ S[p, 0] : 0 <= p <= 7 }"),
                           isl.UnionSet("{ S[p, 1] : 0 <= p <= 7 }")])
    with pytest.raises(TensorlangError, match="left out statement instances"):
        _check_coverage(want, [isl.UnionSet("{ S[p, 0] : 0 <= p <= 7 }")])


def test_this_isl_builds_the_strided_loop_with_a_floor_offset_completely():
    """The smallest case of islpy 2026.2.2's bug: this installation must not have it."""
    got = []

    def leaf(node, build):
        got.append(build.get_schedule().domain())
        return node
    build, _keep = isl.AstBuild.from_context(isl.Set("{:}")).set_at_each_domain(leaf)
    sched = isl.UnionMap("{ S[p, i] -> [p, 2i + floor(p/4)] : 0 <= p <= 7 and 0 <= i <= 1 }")
    build.node_from_schedule_map(sched)
    _check_coverage(sched.domain(), got)
