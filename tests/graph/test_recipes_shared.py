"""The schedule recipes (`schedule/recipes.py`) are one: the executor's default schedules
(`graph/cpu_schedules.py`, fixed sizes) and the auto-scheduler's sampler
(`autoschedule/sample.py`, drawn sizes) build the same schedule from the same sizes, and a
recipe applied strictly (the executor) or leniently (the sampler) gives the same trace
where nothing is refused. Only scheduling is checked here (no build)."""

import random

import pytest

import tensorlang as tl
import tensorlang.graph as G
from tensorlang.autoschedule import sample as S
from tensorlang.graph import cpu_schedules as CS
from tensorlang.graph import executor as E
from tensorlang.schedule import recipes as R


class Drawn(random.Random):
    """A sampler's random source that draws the given choices in order and answers every
    `random()` with 0.99 (each optional step of a sketch not taken)."""

    def __init__(self, picks):
        super().__init__(0)
        self.picks = list(picks)

    def random(self):
        return 0.99

    def choice(self, seq):
        v = self.picks.pop(0)
        assert v in seq, f"{v} is not among the sampler's choices {list(seq)}"
        return v


def _matmul_schedule(m, k, n):
    a, b = G.Variable("a", (m, k), "float32"), G.Variable("b", (k, n), "float32")
    ((_, s),) = E.default_schedules([G.matmul(a, b)], schedules="hand")
    return s


@pytest.mark.parametrize("m,k,n", [(64, 56, 56), (48, 20, 100), (30, 40, 64)])
def test_the_sampler_with_the_executors_sizes_gives_the_executors_matmul(m, k, n):
    """The sampler's register tile with the executor's tile (rows, vectors) drawn, the
    rows on the output's rows and no optional step, is the executor's matmul schedule,
    primitive for primitive (a matmul too small to pack B: the executor's tile, its
    accumulators, its parallel row tiles)."""
    hand = _matmul_schedule(m, k, n)
    out = hand.outputs[0]
    tgt = CS._host()
    lanes = tgt.vector_lanes("float32")
    mr, nv = CS.register_tile(m, n, "float32")
    sampled = tl.create_schedule(out)
    try:
        S._register_tile(sampled, sampled[out], tgt, lanes, Drawn([nv, mr]))
    except AssertionError as e:             # this target's tile is not among the draws
        pytest.skip(str(e))
    assert "cache_write" in hand.trace_text() and "pack" not in hand.trace_text()
    assert sampled.trace_text() == hand.trace_text()


@pytest.mark.parametrize("registers", [16, 32])
def test_the_conv_columns_rule_is_the_sampled_columns_largest(registers):
    """The executor's conv tile columns (`conv_columns`, narrow form) are the largest of
    the column counts the sampler draws from (`recipes.tile_columns`)."""
    for width in range(1, 120):
        fits = R.tile_columns(width, registers)
        assert CS.conv_columns(width, registers) == (fits[-1] if fits else None)
        assert all(width % r == 0 and 4 <= r <= registers // 2 for r in fits)


def test_a_recipe_applied_strictly_or_leniently_gives_one_trace():
    a = tl.placeholder((40, 24), name="A")
    b = tl.placeholder((24, 72), name="B")
    kk = tl.reduce_axis((0, 24), name="k")
    traces = []
    for apply in (R.apply_or_raise, R.apply_or_skip):
        C = tl.compute((40, 72), lambda i, j: tl.sum(a[i, kk] * b[kk, j], axis=kk), name="C")
        s = tl.create_schedule(C)
        local = s.cache_write(C, "local")
        tiled = R.vector_tile(s[C], "i", "j", 4, 2, 8, apply=apply)
        assert tiled is not None
        assert R.accumulate_in_registers(s, local, s[C], tiled[1], 0, 8, apply=apply)
        traces.append(s.trace_text())
    assert traces[0] == traces[1]
    assert 's["C_local"].reorder("k", "i", "j.outer", "j.inner")' in traces[0]
    assert 's["C"].vectorize("j.inner.inner")' in traces[0]


def test_a_refused_step_raises_strictly_and_is_left_out_leniently():
    a = tl.placeholder((16, 16), name="A")
    kk = tl.reduce_axis((0, 16), name="k")
    C = tl.compute((16,), lambda i: tl.sum(a[i, kk], axis=kk), name="C")
    s = tl.create_schedule(C)
    local = s.cache_write(C, "local")
    before = s.trace_text()
    assert not R.accumulate_in_registers(s, local, s[C], "nope", 0, 8, apply=R.apply_or_skip)
    assert s.trace_text() == before
    with pytest.raises(tl.ScheduleError, match="nope"):
        R.accumulate_in_registers(s, local, s[C], "nope", 0, 8)
