"""G.concat of many inputs: a tree of concat nodes of bounded fan-in, each kernel's element
expression a balanced tree of selects (a chain of hundreds overflowed the IR visitors)."""

import subprocess
import sys
import textwrap

import numpy as np
import pytest

import tensorlang.graph as G
from tensorlang.graph.api import CONCAT_FANIN


def _depth(n: G.Node) -> int:
    return 1 + max((_depth(i) for i in n.inputs if i.op == "concat"), default=0)


@pytest.mark.parametrize("count, depth", [(1, 1), (CONCAT_FANIN, 1), (CONCAT_FANIN + 1, 2),
                                          (CONCAT_FANIN ** 2 + 1, 3)])
def test_fan_in_is_bounded(count, depth):
    xs = [G.Variable(f"x{k}", shape=(1, 2)) for k in range(count)]
    y = G.concat(xs, axis=0)
    assert y.shape == (count, 2)
    assert _depth(y) == depth

    def check(n):
        if n.op == "concat":
            assert len(n.inputs) <= CONCAT_FANIN
            for i in n.inputs:
                check(i)
    check(y)


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_many_inputs_match_numpy_and_gradients(axis):
    count = 3 * CONCAT_FANIN + 5
    ax = axis % 2
    shape = [(k % 3 + 1, 2) if ax == 0 else (2, k % 3 + 1) for k in range(count)]
    xs = [G.Variable(f"x{k}", shape=s) for k, s in enumerate(shape)]
    y = G.concat(xs, axis=axis)
    w = G.Variable("w", shape=y.shape)
    grads = G.gradients(G.sum(y * w), xs[:3] + xs[-2:])
    rng = np.random.default_rng(1)
    feed = {x: rng.standard_normal(s).astype(np.float32) for x, s in zip(xs, shape)}
    wv = rng.standard_normal(y.shape).astype(np.float32)
    feed[w] = wv
    out, *gs = G.Executor([y] + grads).run(feed_dict=feed)
    np.testing.assert_array_equal(out, np.concatenate([feed[x] for x in xs], axis=axis))
    parts = np.split(wv, np.cumsum([s[ax] for s in shape])[:-1], axis=ax)
    for g, p in zip(gs, parts[:3] + parts[-2:]):
        np.testing.assert_array_equal(g, p)


@pytest.mark.slow
def test_fifteen_hundred_variables_in_a_subprocess():
    # used to end in RecursionError (500 inputs and more); a crash or a hang must not take
    # the test run with it
    code = textwrap.dedent("""
        import numpy as np
        import tensorlang.graph as G
        xs = [G.Variable(f"v{k}", shape=(2,)) for k in range(1500)]
        feed = {x: np.full(2, k, np.float32) for k, x in enumerate(xs)}
        (r,) = G.Executor([G.concat(xs)]).run(feed_dict=feed)
        assert (r == np.repeat(np.arange(1500, dtype=np.float32), 2)).all()
        print("ok")
    """)
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr[-3000:]
    assert p.stdout.strip() == "ok"
