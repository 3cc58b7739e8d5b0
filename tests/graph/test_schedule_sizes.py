"""The graph executor's default CPU schedules are smooth in n: for every op kind, at sizes
from 1 to 4096, each group gets its intended schedule (vectorised, register-blocked,
parallel where the work is large), never the declared loop nest that a refused primitive
used to fall back to (TL_STRICT=1, set in conftest, makes that fallback an error).
Only scheduling is checked here (no build): `executor.default_schedules`."""

import math
import re

import numpy as np
import pytest

import tensorlang as tl
import tensorlang.graph as G
from tensorlang.graph import cpu_schedules as CS
from tensorlang.graph import executor as E
from tests.conftest import set_host_caches

SIZES = (1, 2, 3, 7, 17, 64, 127, 1000, 1025, 4096)
LANES = CS._lanes("float32")
BIG = 1 << 16            # the executor's "large work" threshold (parallel loops)


def _kinds(s: tl.Schedule) -> set[str]:
    return {lp.kind.name for st in s.stages for lp in st.state.loops} - {"SERIAL"}


def _cases(n):
    """(name, nodes, the loop kinds each group must have) at size n."""
    x = G.Variable("x", (n, n), "float32")
    y = G.Variable("y", (n, n), "float32")
    r = G.Variable("r", (n,), "float32")
    work = n * n
    vec = {"VECTORIZED"} if work >= 2 * LANES else set()
    par = {"PARALLEL"} if work >= BIG else set()
    for name, node in (("add", x + y), ("broadcast", G.relu(x + r)),
                       ("exp_tanh", G.tanh(G.exp(x)) * y), ("transpose", G.transpose(x))):
        yield name, [node], vec | par
    row = ({"VECTORIZED"} if n >= 2 * LANES else set()) | par
    yield "sum_rows", [G.sum(x, axis=-1)], row
    yield "softmax", [G.softmax(x, axis=-1)], row
    yield "log_softmax", [G.log_softmax(x, axis=-1)], row
    yield "total_mean", [G.mean(x)], {"VECTORIZED"} if n >= 2 * LANES else set()
    yield "sum_columns", [G.sum(x, axis=0)], ({"VECTORIZED"} if n >= LANES else set()) | par
    yield "max_rows", [G.max(x, axis=-1)], par   # LLVM vectorises a max well by itself
    mm = {"UNROLLED", "VECTORIZED"} | ({"PARALLEL"} if n ** 3 >= BIG else set())
    yield "matmul", [G.matmul(x, y)], mm
    yield "matmul_bias_relu", [G.relu(G.matmul(x, y) + r)], mm
    yield "matmul_tb", [G.make("matmul", (x, y), ta=False, tb=True)], mm
    yield "matmul_ta", [G.make("matmul", (x, y), ta=True, tb=False)], mm
    m = min(n, 256)
    img = G.Variable("img", (1, 8, m, m), "float32")
    w = G.Variable("w", (8, 8, 3, 3), "float32")
    big = 8 * m * m * 8 * 9 >= BIG
    if m >= 3:
        yield "conv2d", [G.conv2d(img, w, padding=1)], \
            {"UNROLLED", "VECTORIZED"} | ({"PARALLEL"} if big else set())
    if m >= 2:
        pooled = m // 2
        yield "max_pool", [G.max_pool2d(img, 2)], \
            ({"VECTORIZED"} if pooled >= 2 * LANES else set()) | \
            ({"PARALLEL"} if 8 * pooled * pooled * 4 >= BIG else set())


@pytest.mark.parametrize("n", SIZES)
def test_every_op_kind_gets_its_intended_schedule(n):
    for name, nodes, want in _cases(n):
        groups = E.default_schedules(nodes, schedules="hand")
        got = set().union(*(_kinds(s) for _, s in groups))
        assert want <= got, f"{name} at n={n}: loops {sorted(got)}, expected {sorted(want)}"


def test_conv2d_gradients_are_scheduled_too():
    img = G.Variable("img", (1, 8, 40, 40), "float32")
    w = G.Variable("w", (8, 8, 3, 3), "float32")
    gx, gw = G.gradients(G.sum(G.conv2d(img, w, padding=1)), [img, w])
    for group, s in E.default_schedules([gx, gw], schedules="hand"):
        if group[-1].op in ("conv2d_bx", "conv2d_bw"):
            assert "VECTORIZED" in _kinds(s), group[-1].op


def test_a_refused_default_schedule_is_an_error_under_tl_strict(monkeypatch, capsys):
    def refuse(*args, **kwargs):
        raise tl.ScheduleError("refused on purpose")
    monkeypatch.setattr(CS, "_block_matmul", refuse)
    E._KERNELS.clear()
    a, b = G.Variable("a", (5, 3), "float32"), G.Variable("b", (3, 4), "float32")
    with pytest.raises(tl.ScheduleError, match="TL_STRICT"):
        E.default_schedules([a @ b], schedules="hand")
    # without TL_STRICT the declared loop nest runs (correct), and TL_DEBUG=1 says so
    monkeypatch.setenv("TL_STRICT", "0")
    monkeypatch.setenv("TL_DEBUG", "1")
    av = np.arange(15, dtype="f4").reshape(5, 3)
    bv = np.arange(12, dtype="f4").reshape(3, 4)
    (got,) = G.Executor([a @ b]).run({a: av, b: bv})
    np.testing.assert_allclose(got, av @ bv)
    assert "was refused (refused on purpose); running the declared loop nest" in \
        capsys.readouterr().err
    E._KERNELS.clear()


@pytest.mark.parametrize("n,c,k", [(5, 3, 4), (23, 8, 5), (56, 16, 16)])
@pytest.mark.parametrize("stride,padding", [(1, 1), (2, 0), (1, 0)])
def test_blocked_conv2d_matches_numpy(n, c, k, stride, padding, rng):
    """The register-blocked conv2d (channel tiles x vectors of columns, padded rows of the
    register tile) at widths below, at and above the vector tile, with strides."""
    from tensorlang.graph.nnops import conv2d_ref

    x = G.Variable("x", (2, c, n, n), "float32")
    w = G.Variable("w", (k, c, 3, 3), "float32")
    xv = rng.standard_normal((2, c, n, n)).astype("f4")
    wv = rng.standard_normal((k, c, 3, 3)).astype("f4")
    (got,) = G.Executor([G.conv2d(x, w, stride=stride, padding=padding)]).run({x: xv, w: wv})
    want = conv2d_ref(xv.astype("f8"), wv.astype("f8"), stride, padding)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * math.sqrt(c * 9))


@pytest.mark.parametrize("preset", ["llvm", "llvm -mcpu=x86-64", "llvm -mcpu=x86-64-v3",
                                    "aarch64", "riscv64"])
@pytest.mark.parametrize("m,n", [(1024, 1024), (100, 10), (3, 5), (1024, 20), (1, 1)])
def test_register_tiles_come_from_the_targets_registers(preset, m, n):
    """Accumulators, one vector of B per column and A's broadcast fit in the target's
    vector registers (no spills); AVX2 gets BLIS's 6 x 2-vector tile, AVX-512 6 x 4 at 1024."""
    t = tl.Target.parse(preset)
    mr, nv = E.register_tile(m, n, "float32", t)
    assert 1 <= mr <= m and nv >= 1
    assert mr * nv + nv + 1 <= t.vector_registers
    assert nv <= max(1, -(-n // t.vector_lanes("float32")))
    if preset == "llvm -mcpu=x86-64-v3" and (m, n) == (1024, 1024):
        assert (mr, nv) == (6, 2)
    if t.vector_registers == 32 and t.vector_lanes("float32") == 16 and (m, n) == (1024, 1024):
        assert (mr, nv) == (6, 4)          # 64 columns divide 1024; 8 x 3's 48 do not


@pytest.mark.parametrize("m,n,tile", [(512, 512, (6, 4)), (2048, 2048, (6, 4)),
                                      (1000, 1000, (8, 3)), (768, 768, (8, 3)),
                                      (127, 253, (6, 4)), (64, 56, (6, 4))])
def test_register_tile_prefers_the_tile_that_overhangs_the_output_least(m, n, tile):
    """On AVX-512 (32 registers of 16 floats) the 24-accumulator tiles 8 x 3 and 6 x 4 both
    fit; the one whose rows and columns waste the fewest lanes at this size is taken."""
    t = tl.Target.parse("llvm -mcpu=znver4")
    assert E.register_tile(m, n, "float32", t) == tile


@pytest.mark.parametrize("shape", [((130, 70), (70, 90)), ((7, 3), (3, 33))])
def test_executor_matmul_built_for_avx2_uses_its_tile_and_matches_numpy(shape, monkeypatch,
                                                                          rng):
    target = "llvm -mcpu=x86-64-v3"
    if not tl.Target.parse(target).is_host:
        pytest.skip("this machine cannot run AVX2 code")
    monkeypatch.setattr(CS, "_host", lambda: tl.Target.parse(target))
    members = (("matmul", (("ta", False), ("tb", False)), (("in", 0), ("in", 1))),)
    mod, _ = E.compile_group(members, shape, ("float32", "float32"), target, "hand")
    a = rng.standard_normal(shape[0]).astype("f4")
    b = rng.standard_normal(shape[1]).astype("f4")
    c = np.zeros((shape[0][0], shape[1][1]), "f4")
    mod(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)
    assert "<8 x float>" in mod.get_source("ll") and "<16 x float>" not in mod.get_source("ll")


def _small_caches(monkeypatch, last_level: int):

    set_host_caches(monkeypatch, 32 << 10, min(1 << 20, last_level), last_level)
    E._KERNELS.clear()


def _first_loop(groups) -> tuple[str, str]:
    """The output stage's outermost loop: 'rows', 'columns' or 'column blocks' (its tile
    loops, or blocks of the column tiles), and kind."""
    (_, s), = groups
    out = next(st for st in s.stages if any(st.op.output is o for o in s.outputs))
    lp = out.state.loops[0]
    rows, cols = (a.var.name for a in out.op.axis[-2:])
    which = {f"{rows}.outer": "rows", f"{cols}.outer": "columns",
             f"{cols}.outer.outer": "column blocks"}.get(lp.name, lp.name)
    return which, lp.kind.name


def _loop_kinds(st) -> dict[str, str]:
    return {lp.name: lp.kind.name for lp in st.state.loops}


def test_a_matmul_whose_b_overflows_half_the_l2_goes_in_blocks_of_b_panels(monkeypatch):
    """A packed B larger than half the L2 is multiplied a block of its panels at a time
    (the block fits half the L2), the blocks outermost: each block is packed inside the
    block loop, just before the row tiles (in parallel) read it from L2. With the row
    tiles outermost, every row tile read all of B from the last-level cache (1024^3 on a
    2-core Xeon VM: 70-120 against 300 GFLOPS). A B that fits half the L2 keeps the row
    tiles outermost. The blocks run in parallel (each thread packs the panels it reads)
    when A has few row tiles or when whole panels share evenly among the threads; else
    the row tiles do. (On 2 cores with a 2 MiB L2, whatever this machine has: "few" row
    tiles is fewer than 2 per core.)"""

    monkeypatch.setenv("TL_NUM_THREADS", "2")
    set_host_caches(monkeypatch, 48 << 10, 2 << 20, 32 << 20)
    E._KERNELS.clear()
    l2 = tl.Target.parse("llvm").cache_bytes[1]
    for (m, k, n), first in (((1024, 1024, 1024), ("column blocks", "PARALLEL")),
                             ((1000, 1000, 1000), ("column blocks", "SERIAL")),
                             ((127, 4100, 4100), ("column blocks", "SERIAL")),
                             ((8, 4096, 4096), ("column blocks", "PARALLEL")),
                             ((64, 64, 64), ("rows", "PARALLEL"))):
        x, y = G.Variable("x", (m, k), "float32"), G.Variable("y", (k, n), "float32")
        groups = E.default_schedules([x @ y], schedules="hand")
        assert _first_loop(groups) == first, (m, k, n)
        (_, s), = groups
        out = next(st for st in s.stages if any(st.op.output is o for o in s.outputs))
        packed = [st for st in s.stages if st.op.name.endswith("_packed")]
        if first[0] == "rows":
            assert not any(st.state.attach is not None for st in packed)
            continue
        (packed,) = packed
        assert packed.state.attach is not None                  # packed per block
        cols = out.op.axis[-1].var.name
        assert _loop_kinds(out)[f"{cols}.outer.inner"] == "SERIAL"
        if first[1] == "SERIAL":
            assert _loop_kinds(out)[f"{out.op.axis[-2].var.name}.outer"] == "PARALLEL"
        # a block of panels fits half the L2
        mr, nv = E.register_tile(m, n, "float32")
        (per_block,) = [dict(t.call.kwargs)["factor"] for t in s.trace
                        if t.call.prim == "split" and t.call.args == (f"{cols}.outer",)]
        assert per_block * k * nv * 64 <= max(l2 // 2, k * nv * 64)
    E._KERNELS.clear()


@pytest.mark.parametrize("m,k,n", [(100, 96, 160), (7, 33, 64), (64, 64, 4100 // 41 * 16),
                                   (37, 50, 100), (9, 20, 1000 // 8 + 3), (100, 96, 384),
                                   (61, 400, 192)])
def test_b_panels_outermost_match_numpy(monkeypatch, m, k, n, rng):
    _small_caches(monkeypatch, 16 << 10)        # every B "overflows": blocks of panels
    x, y = G.Variable("x", (m, k), "float32"), G.Variable("y", (k, n), "float32")
    xv = rng.standard_normal((m, k)).astype("f4")
    yv = rng.standard_normal((k, n)).astype("f4")
    if m * k * n >= CS.PACK_MIN_FLOPS:
        assert _first_loop(E.default_schedules([x @ y], schedules="hand"))[0] == "column blocks"
    (got,) = G.Executor([x @ y]).run({x: xv, y: yv})
    np.testing.assert_allclose(got, xv @ yv, rtol=1e-4, atol=1e-4 * math.sqrt(k))
    E._KERNELS.clear()


@pytest.mark.parametrize("m,k,n", [(127, 24, 4100), (127, 24, 4096), (50, 50, 50),
                                   pytest.param(127, 781, 253, marks=pytest.mark.slow),
                                   (1, 40, 33)])
@pytest.mark.parametrize("panels_outer", [False, True])
def test_the_matmul_tile_stays_in_registers_at_awkward_sizes(monkeypatch, m, k, n,
                                                            panels_outer, rng):
    """A partial row tile and a partial last vector at once gave the tile four copies
    (full/partial rows x full/partial vectors, hoisted out of k): too much unrolled code
    for the register budget, so the accumulators were stored to the stack after every FMA
    (127x4100x4100: 77 GFLOPS with two threads, 173 with the tile in registers). The
    executor's tile must leave no local array in the optimised IR. With the panels outer on
    16 cores, 127 rows are few row tiles: the blocks of panels run in parallel and the tile
    is allocated outside the row-tile loop (on a 16-core host it stayed in memory until the
    codegen sized it with its loops rebased); on 2 cores the row tiles run in parallel."""
    monkeypatch.setenv("TL_NUM_THREADS", "16" if panels_outer else "2")
    if panels_outer:
        _small_caches(monkeypatch, 16 << 10)
    x, y = G.Variable("x", (m, k), "float32"), G.Variable("y", (k, n), "float32")
    (group, s), = E.default_schedules([x @ y], schedules="hand")
    f = tl.build(s, [*s.placeholders, *s.outputs])
    assert not re.search(r"%\"?\w*_local[\w.]*\"? = alloca", f.get_source("ll"))
    xv = rng.standard_normal((m, k)).astype("f4")
    yv = rng.standard_normal((k, n)).astype("f4")
    out = np.zeros((m, n), "f4")
    f(xv, yv, out)
    np.testing.assert_allclose(out, xv @ yv, rtol=1e-4, atol=1e-4 * math.sqrt(k))
    E._KERNELS.clear()


AVX512 = tl.Target.parse("llvm -mcpu=x86-64-v4")
AVX2 = tl.Target.parse("llvm -mcpu=x86-64-v3")
ZEN4 = tl.Target.parse("llvm -mcpu=znver4")
ZEN5 = tl.Target.parse("llvm -mcpu=znver5")
SPR = tl.Target.parse("llvm -mcpu=sapphirerapids")


@pytest.mark.parametrize("target,out_shape,w_shape,want", [
    (AVX512, (1, 64, 56, 56), (64, 64, 3, 3), (16, 14)),     # ResNet-18 conv2_x
    (AVX512, (1, 128, 28, 28), (128, 128, 3, 3), (16, 14)),
    (AVX512, (1, 256, 14, 14), (256, 256, 3, 3), (16, 14)),
    (AVX512, (1, 512, 7, 7), (512, 512, 3, 3), (16, 7)),
    (AVX512, (1, 64, 224, 224), (64, 3, 3, 3), None),        # 27 MACs per output: scatter
    (AVX512, (1, 64, 112, 112), (64, 64, 3, 3), None),       # planes too far apart
    (AVX512, (1, 40, 56, 56), (40, 64, 3, 3), None),         # channels not whole vectors
    (AVX512, (1, 64, 57, 57), (64, 64, 3, 3), None),         # 19 columns: LLVM spills
    (AVX2, (1, 64, 56, 56), (64, 64, 3, 3), (8, 8)),
    # one 512-bit FMA a cycle (two 256-bit halves): 28 columns where they divide the width
    (ZEN4, (1, 64, 56, 56), (64, 64, 3, 3), (16, 28)),
    (ZEN4, (1, 128, 28, 28), (128, 128, 3, 3), (16, 28)),
    (ZEN4, (1, 256, 14, 14), (256, 256, 3, 3), (16, 14)),
    (ZEN4, (1, 512, 28, 28), (512, 128, 1, 1), None),        # 128 MACs per output: direct
    (ZEN4, (1, 256, 56, 56), (256, 64, 1, 1), None),         # 64 MACs per output: direct
    (ZEN5, (1, 64, 56, 56), (64, 64, 3, 3), (16, 14)),       # two 512-bit FMA pipes
    (SPR, (1, 64, 56, 56), (64, 64, 3, 3), (16, 14)),
])
def test_conv_block_takes_the_channel_blocked_form_where_it_measured_faster(
        target, out_shape, w_shape, want):
    assert CS.conv_block(out_shape, w_shape, "float32", target) == want


def _conv_case(batch, n, c, k, epilogue, stride=1, padding=1):
    """A conv2d (and, with `epilogue`, bias + relu) node and its Variables."""
    x = G.Variable("x", (batch, c, n, n), "float32")
    w = G.Variable("w", (k, c, 3, 3), "float32")
    b = G.Variable("b", (k, 1, 1), "float32")
    node = G.conv2d(x, w, stride=stride, padding=padding)
    if epilogue:
        node = G.relu(node + b)
    return node, (x, w, b)


def _check_conv_case(node, variables, epilogue, rng, stride=1, padding=1):
    """Run `_conv_case`'s node on random inputs against numpy's conv2d."""
    from tensorlang.graph.nnops import conv2d_ref

    x, w, b = variables
    xv = rng.standard_normal(x.shape).astype("f4")
    wv = rng.standard_normal(w.shape).astype("f4")
    bv = rng.standard_normal(b.shape).astype("f4")
    feed = {x: xv, w: wv, b: bv} if epilogue else {x: xv, w: wv}
    (got,) = G.Executor([node]).run(feed)
    want = conv2d_ref(xv.astype("f8"), wv.astype("f8"), stride, padding)
    if epilogue:
        want = np.maximum(want + bv, 0)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * math.sqrt(x.shape[1] * 9))


@pytest.mark.parametrize("n,c,k,stride,padding,epilogue", [
    (14, 32, 32, 1, 1, False), (14, 32, 32, 1, 1, True), (16, 32, 48, 2, 1, True),
    (7, 48, 16, 1, 0, False), (28, 32, 16, 1, 1, True)])
def test_channel_blocked_conv2d_matches_numpy(n, c, k, stride, padding, epilogue, rng):
    """The executor's NCHW[x]c conv (weights packed by vectors of output channels, a tile
    of columns x channels in registers, bias + relu applied on the way out) against numpy,
    in a batch of 2; the schedule is the blocked one whenever conv_block chooses it."""
    node, variables = _conv_case(2, n, c, k, epilogue, stride, padding)
    oh = (n + 2 * padding - 3) // stride + 1
    blocked = CS.conv_block((2, k, oh, oh), (k, c, 3, 3), "float32") is not None
    (group, s), = [g for g in E.default_schedules([node], schedules="hand")
                   if g[0][-1].op != "variable"]
    assert blocked == any(st.op.name == "conv_blocked" for st in s.stages)
    if LANES == 16:     # AVX-512: each of these sizes takes the blocked form
        assert blocked
    _check_conv_case(node, variables, epilogue, rng, stride, padding)


@pytest.mark.parametrize("wide", [False, True])
@pytest.mark.parametrize("n,c,k,epilogue", [(28, 32, 32, True), (56, 32, 16, False),
                                            (29, 32, 16, False)])
def test_channel_blocked_conv2d_with_the_wide_tile_matches_numpy(
        monkeypatch, wide, n, c, k, epilogue, rng):
    """The 28-column tile (a core with one FMA a cycle at the width, `conv_columns`), on
    any host: one tile per row (28), two (56), and a width it does not divide (29: the
    usual rule's tile)."""
    monkeypatch.setattr(CS, "_one_fma_a_cycle", lambda t, dtype: wide)
    monkeypatch.setattr(E, "_KERNELS", type(E._KERNELS)())
    node, variables = _conv_case(1, n, c, k, epilogue)
    regs = CS._host().vector_registers
    want_cols = 28 if wide and n % 28 == 0 and regs >= 32 else None
    if want_cols is not None and LANES == 16:
        assert CS.conv_block((1, k, n, n), (k, c, 3, 3), "float32") == (16, 28)
    _check_conv_case(node, variables, epilogue, rng)


@pytest.mark.parametrize("n,c,k,epilogue", [(14, 32, 32, True), (28, 32, 16, False),
                                            (7, 64, 64, True)])
@pytest.mark.parametrize("l2", [1 << 20, 4 << 10])
def test_channel_blocked_conv2d_runs_rows_first_while_its_weights_fit_half_the_l2(
        monkeypatch, n, c, k, epilogue, l2, rng):
    """The blocked conv's parallel loop is (batch, output rows, channel blocks), and the
    padded input is made in parallel over (batch, rows), so each thread reads the rows it
    padded itself — while all the packed weights fit half the L2; else (batch, channel
    blocks, rows) keeps a block's weights in the L2 across the rows. Both against numpy."""
    import tensorlang.target as T

    monkeypatch.setenv("TL_NUM_THREADS", "2")
    # an AVX-512 target whatever the host (znver4 is not the host on a Zen 5, so its caches
    # are the architecture's defaults, not /sys's): the L2 is set on the class
    monkeypatch.setattr(T.Target, "cache_bytes", property(lambda t: (32 << 10, l2, 32 << 20)))
    monkeypatch.setattr(CS, "_host", lambda: tl.Target.parse("llvm -mcpu=znver4"))
    E._KERNELS.clear()
    node, variables = _conv_case(2, n, c, k, epilogue)
    (group, s), = [g for g in E.default_schedules([node], schedules="hand")
                   if g[0][-1].op != "variable"]
    out = next(st for st in s.stages if any(st.op.output is o for o in s.outputs))
    xpad = next(st for st in s.stages if st.op.name == "xpad")
    nb, _, rows, _ = (a.var.name for a in out.op.axis)
    first = out.state.loops[0]
    assert first.kind.name == "PARALLEL"
    rows_first = k * c * 9 * 4 <= l2 // 2
    want = f"{nb}.{rows}.fused" if rows_first else f"{nb}.{out.op.axis[1].var.name}.outer"
    assert first.name.startswith(want), (first.name, want)
    pad_axes = [a.var.name for a in xpad.op.axis]
    pad_first = xpad.state.loops[0]
    assert pad_first.kind.name == "PARALLEL"
    assert pad_first.name.startswith(f"{pad_axes[0]}.{pad_axes[2] if rows_first else pad_axes[1]}")
    _check_conv_case(node, variables, epilogue, rng)
    E._KERNELS.clear()
