"""A concat along an outer axis (SqueezeNet's fire modules: two convs' outputs along the
channels) is scheduled with that axis outside and the rest as one contiguous vector loop
(`cpu_schedules._pieces_elementwise`), and its reads and writes are vector loads and
stores, not gathers: a fused loop's row and column flatten back to one offset that moves
by one per lane (`ir.simplify.rule_div_mod_pair`, `backends.llvm.vector`)."""

import numpy as np
import pytest

import tensorlang as tl
import tensorlang.graph as G
from tensorlang.graph import cpu_schedules as CS
from tensorlang.graph import executor as E
from tensorlang.ir.dtype import int64
from tensorlang.ir.expr import Add, Const, FloorDiv, FloorMod, Mul, Sub, Var
from tensorlang.ir.simplify import FLAT_OFFSET, SIMPLIFY, simplify
from tensorlang.ir.visit import walk

LANES = CS._lanes("float32")


def _loop_kinds(s: tl.Schedule) -> list[str]:
    (st,) = [st for st in s.stages if st.op.axis and not st.inlined]
    return [lp.kind.name for lp in st.state.loops]


def _concat(batch, channels, h, w):
    xs = [G.Variable(f"x{k}", (batch, c, h, w), "float32") for k, c in enumerate(channels)]
    return xs, G.concat(xs, axis=1)


@pytest.mark.parametrize("batch,channels,h,w", [
    (1, (64, 64), 55, 55), (1, (128, 128), 27, 27), (1, (3, 5), 13, 13), (2, (7, 1, 2), 7, 5),
    (1, (1, 1), 1, 1), (1, (2, 3), 1, 17), (3, (16, 32), 4, 4)])
def test_concat_along_channels_matches_numpy(batch, channels, h, w, rng):
    xs, node = _concat(batch, channels, h, w)
    arrays = [rng.standard_normal(x.shape).astype("float32") for x in xs]
    got = E.Executor([node]).run(dict(zip(xs, arrays)))[0]
    np.testing.assert_array_equal(got, np.concatenate(arrays, axis=1))


@pytest.mark.parametrize("batch,h,w", [(1, 55, 55), (1, 27, 27), (1, 13, 13), (2, 7, 5)])
def test_concat_gets_the_outer_axis_outside_and_contiguous_vectors(batch, h, w):
    """The channel axis (and the batch) fused outside, parallel where the work is large;
    the rows and columns fused inside in vectors; the kernel has no gather or scatter."""
    _, node = _concat(batch, (16, 48), h, w)
    ((group, s),) = [g for g in E.default_schedules([node], schedules="hand")
                     if g[0][-1].op == "concat"]
    kinds = _loop_kinds(s)
    assert kinds[-1] == "VECTORIZED" and "VECTORIZED" not in kinds[:-2], kinds
    assert ("PARALLEL" in kinds) == (batch * 64 * h * w >= 1 << 16), kinds
    shapes = ((batch, 16, h, w), (batch, 48, h, w))
    mod, _ = E.compile_group((("concat", (("axis", 1),), (("in", 0), ("in", 1))),),
                             shapes, ("float32",) * 2, "llvm", "hand")
    src = mod.get_source()
    assert "masked.gather" not in src and "masked.scatter" not in src


def test_a_concat_along_the_last_axis_keeps_the_fused_schedule(rng):
    """A condition on the last axis: no outer axis to take outside (the lanes of one
    vector take different inputs): the elementwise schedule, all axes in one loop."""
    x = G.Variable("x", (4, 40), "float32")
    y = G.Variable("y", (4, 24), "float32")
    node = G.concat([x, y], axis=1)
    ((group, s),) = [g for g in E.default_schedules([node], schedules="hand")
                     if g[0][-1].op == "concat"]
    assert _loop_kinds(s) == ["SERIAL", "VECTORIZED"]
    a, b = rng.standard_normal((4, 40)).astype("f4"), rng.standard_normal((4, 24)).astype("f4")
    got = E.Executor([node]).run({x: a, y: b})[0]
    np.testing.assert_array_equal(got, np.concatenate([a, b], 1))


def _eval(e, env):
    if isinstance(e, Const):
        return int(e.value)
    if isinstance(e, Var):
        return env[e.name]
    a, b = _eval(e.a, env), _eval(e.b, env)
    ops = {Add: int.__add__, Sub: int.__sub__, Mul: int.__mul__, FloorDiv: int.__floordiv__,
           FloorMod: int.__mod__}
    return ops[type(e)](a, b)


def test_div_mod_pair_recombines_exactly():
    """isl's form of a fused loop's row and column, flattened: 27 * (o - (11o - i + 26)
    // 27) + 26 - (26 - 16o - i) % 27 == 16o + i, for negative values too; the default
    rules leave it, FLAT_OFFSET folds it to a sum without a quotient or remainder."""
    o, i = Var("o", _int()), Var("i", _int())
    d = o.dtype

    def c(v):
        return Const(v, d)
    row = Sub(o, FloorDiv(Add(Sub(Mul(o, c(11), d), i, d), c(26), d), c(27), d), d)
    col = Sub(c(26), FloorMod(Sub(Sub(c(26), Mul(o, c(16), d), d), i, d), c(27), d), d)
    flat = Add(Mul(row, c(27), d), col, d)
    folded = simplify(flat, FLAT_OFFSET)
    kinds = {type(x) for x in _walk(folded)}
    assert FloorDiv not in kinds and FloorMod not in kinds, folded
    assert FloorDiv in {type(x) for x in _walk(simplify(flat, SIMPLIFY))}
    for ov in range(-5, 50):
        for iv in range(-3, 17):
            env = {"o": ov, "i": iv}
            assert _eval(folded, env) == _eval(flat, env) == 16 * ov + iv


def test_div_mod_pair_is_left_where_the_coefficients_do_not_match():
    """x // 7 * 6 + x % 7 is not x: nothing is recombined."""
    x = Var("x", _int())
    d = x.dtype
    e = Add(Mul(FloorDiv(x, Const(7, d), d), Const(6, d), d), FloorMod(x, Const(7, d), d), d)
    out = simplify(e, FLAT_OFFSET)
    for v in range(-20, 20):
        assert _eval(out, {"x": v}) == (v // 7) * 6 + v % 7


def _int():
    return int64


def _walk(e):
    return walk(e)


@pytest.mark.parametrize("shape", [(5, 27, 27), (3, 13, 7), (2, 1, 17), (1, 55, 55)])
def test_a_fused_copy_in_vectors_reads_and_writes_contiguously(shape, rng):
    """A 3-d copy with its axes fused and split into vectors: its row and column per lane
    are a quotient and a remainder of the fused index, yet its offset moves by one per lane:
    vector loads and stores (masked in the tail), not gathers, and the right values."""
    a = tl.placeholder(shape, name="a")
    b = tl.compute(shape, lambda i, j, k: a[i, j, k] * 2.0, name="b")
    s = tl.create_schedule(b)
    st = s[b]
    f = st.fuse(st.fuse(*st.op.axis[:2]), st.op.axis[2])
    st.vectorize(st.split(f, factor=LANES)[1])
    mod = tl.build(s, [a, b])
    src = mod.get_source()
    assert "masked.gather" not in src and "masked.scatter" not in src
    x = rng.standard_normal(shape).astype("float32")
    out = np.empty(shape, "float32")
    mod(x, out)
    np.testing.assert_array_equal(out, x * 2)
