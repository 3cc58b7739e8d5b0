"""The general convolution's CPU form (`model_ops.conv_grouped_te`, scheduled by
`cpu_schedules._block_conv_groups`): grouped and depthwise convs, strides, asymmetric pads
and dilations against numpy, at sizes that do and do not divide the register tile and the
vector width; and the check that the register tiles are the schedule these shapes get (no
fallback to the declared loop nest: TL_STRICT=1, set in conftest, makes a refused
primitive an error)."""

import math

import numpy as np
import pytest

import tensorlang.graph as G
from tensorlang.graph import executor as E
from tensorlang.graph import model_ops as M


def _case(n, c, k, h, w, kernel, groups, strides, pads, dilations, epilogue):
    x = G.Variable("x", (n, c, h, w), "float32")
    wt = G.Variable("w", (k, c // groups, *kernel), "float32")
    b = G.Variable("b", (1, k, 1, 1), "float32")
    y = M.conv(x, wt, strides, pads, dilations, groups)
    if epilogue:
        y = G.relu(y + b)
    return y, (x, wt, b)


def _check(node, variables, strides, pads, dilations, groups, epilogue, rng):
    x, w, b = variables
    xv = rng.standard_normal(x.shape).astype("f4")
    wv = rng.standard_normal(w.shape).astype("f4")
    bv = rng.standard_normal(b.shape).astype("f4")
    feed = {x: xv, w: wv, b: bv} if epilogue else {x: xv, w: wv}
    (got,) = G.Executor([node]).run(feed)
    want = M._conv_ref(xv.astype("f8"), wv.astype("f8"), strides, pads, dilations, groups)
    if epilogue:
        want = np.maximum(want + bv, 0)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-4,
                               atol=1e-4 * math.sqrt(int(np.prod(w.shape[1:]))))


# (batch, C, K, H, W, kernel, groups, strides, pads (top, left, bottom, right), dilations)
DEPTHWISE = [
    (1, 16, 16, 14, 14, (3, 3), 16, (1, 1), (1, 1, 1, 1), (1, 1)),
    (1, 13, 13, 7, 7, (3, 3), 13, (2, 2), (1, 1, 1, 1), (1, 1)),
    (2, 7, 7, 13, 17, (3, 3), 7, (1, 1), (1, 1, 1, 1), (1, 1)),
    (1, 20, 20, 29, 29, (3, 3), 20, (2, 2), (0, 0, 1, 1), (1, 1)),   # pads at the end
    (1, 3, 3, 1, 1, (3, 3), 3, (1, 1), (1, 1, 1, 1), (1, 1)),        # one output pixel
    (1, 5, 5, 11, 11, (5, 5), 5, (1, 2), (2, 1, 2, 3), (1, 1)),      # 5x5, asymmetric
    (1, 8, 8, 12, 12, (3, 3), 8, (1, 1), (2, 2, 2, 2), (2, 2)),      # dilated
    (1, 6, 12, 9, 9, (3, 3), 6, (2, 2), (1, 1, 1, 1), (1, 1)),       # channel multiplier 2
]
GROUPED = [
    (1, 24, 56, 14, 14, (1, 1), 4, (1, 1), (0, 0, 0, 0), (1, 1)),    # ShuffleNet's 1x1
    (1, 12, 9, 7, 7, (1, 1), 3, (1, 1), (0, 0, 0, 0), (1, 1)),
    (2, 12, 26, 13, 13, (3, 3), 2, (2, 2), (1, 1, 1, 1), (1, 1)),    # 13 channels a group
    (1, 16, 16, 17, 17, (3, 3), 8, (1, 1), (1, 1, 1, 1), (2, 2)),
    (1, 6, 4, 10, 10, (3, 1), 2, (2, 1), (1, 0, 0, 0), (1, 1)),      # 3x1, unequal strides
    (1, 9, 18, 20, 36, (1, 1), 3, (1, 1), (0, 0, 0, 0), (1, 1)),     # 36 = 2.25 vectors
    (1, 4, 8, 9, 9, (3, 3), 1, (1, 1), (0, 1, 1, 0), (1, 1)),        # one group, asymmetric
    (1, 3, 8, 23, 23, (7, 7), 1, (2, 2), (3, 3, 3, 3), (1, 1)),      # 7x7 stride 2, one group
]


@pytest.mark.parametrize("n,c,k,h,w,kernel,groups,strides,pads,dilations,epilogue",
                         [(*a, False) for a in DEPTHWISE + GROUPED] +
                         [(*DEPTHWISE[1], True), (*GROUPED[2], True)])
def test_general_conv_matches_numpy(n, c, k, h, w, kernel, groups, strides, pads, dilations,
                                    epilogue, rng):
    """Bias and relu (an epilogue the tile passes through on its way out) on two shapes."""
    node, variables = _case(n, c, k, h, w, kernel, groups, strides, pads, dilations, epilogue)
    _check(node, variables, strides, pads, dilations, groups, epilogue, rng)


def _conv_stage(node):
    (group, s), = [g for g in E.default_schedules([node], schedules="hand")
                   if g[0][-1].op != "variable"]
    return s


@pytest.mark.parametrize("n,c,k,h,w,kernel,groups,strides,pads,dilations",
                         [DEPTHWISE[0], DEPTHWISE[3], GROUPED[0], GROUPED[2],
                          GROUPED[7],         # conv2d, strided: the same form
                          (1, 136, 136, 28, 28, (3, 3), 136, (1, 1), (1, 1, 1, 1), (1, 1)),
                          (1, 272, 272, 14, 14, (1, 1), 4, (1, 1), (0, 0, 0, 0), (1, 1))])
def test_general_conv_takes_the_register_tiles_per_group(n, c, k, h, w, kernel, groups,
                                                         strides, pads, dilations):
    """The grouped form's accumulators: computed at the output's column tile, the
    reduction outside the unrolled rows (channels, or output rows where a group has one
    output channel) and the vectorised columns; the output's loops in parallel."""
    node, _ = _case(n, c, k, h, w, kernel, groups, strides, pads, dilations, True)
    s = _conv_stage(node)
    st = {x.op.name: x for x in s.stages}
    tile = st["conv_grouped"]
    kinds = [lp.kind.name for lp in tile.state.loops]
    assert tile.state.attach is not None
    assert kinds[-1] == "VECTORIZED" and kinds[-2] == kinds[-3] == "UNROLLED"
    names = [lp.name for lp in tile.state.loops]
    assert names.index("rq") < names.index("j.outer")
    oh, ow = (int(e.value) for e in tile.op.output.shape[3:])
    work = n * k * oh * ow * c // groups * kernel[0] * kernel[1]
    parallel = "PARALLEL" in {lp.kind.name for x in s.stages for lp in x.state.loops}
    assert parallel == (work >= 1 << 16)
    if strides[1] > 1:      # the columns dealt by phase: a tap reads a vector, no gather
        assert st["xpad"].op.output.shape[3].value == strides[1]


def test_general_conv_says_which_form_it_takes(capsys, monkeypatch):
    monkeypatch.setenv("TL_DEBUG", "1")
    node, _ = _case(*GROUPED[1], False)
    _conv_stage(node)
    assert "takes the general conv's register tiles per group" in capsys.readouterr().err
