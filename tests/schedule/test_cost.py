"""The auto-scheduler's cost model (autoschedule/cost.py): its isl counts against tl.analyze's
exact ones and against brute-force enumeration, and the rankings it must get right (each
measured on the host in benchmarks/autoschedule.py; here only the model runs)."""

import itertools

import islpy as isl
from hypothesis import given, settings
from hypothesis import strategies as st
import numpy as np
import pytest

import tensorlang as tl
from tensorlang.graph import cpu_schedules as CS
from tensorlang.ir.stmt import LoopKind
from tensorlang.autoschedule import compute, cost, parallel, placed, traffic
from tests.conftest import set_host_caches


def _matmul(m, k, n):
    A = tl.placeholder((m, k), "float32", name="A")
    B = tl.placeholder((k, n), "float32", name="B")
    r = tl.reduce_axis((0, k), name="r")
    C = tl.compute((m, n), lambda i, j: tl.sum(A[i, r] * B[r, j], axis=r), name="C")
    return A, B, C


def _statements(s):
    return {st.e.orig: st for st in cost.placed_statements(s)}


def _tiled_matmul(m, k, n, ti, tj, tk):
    A, B, C = _matmul(m, k, n)
    s = tl.create_schedule(C)
    st = s[C]
    io, jo, ii, ji = st.tile("i", "j", ti, tj)
    ro, ri = st.split("r", factor=tk)
    st.reorder(io, jo, ro, ii, ri, ji)
    return s, (A, B, C)


def test_footprints_times_iterations_are_analyzes_exact_data_movement():
    """With full tiles, a loop level's footprint (a bounding box from isl) times the loop's
    iterations is tl.analyze's exact count of (iteration, element) pairs, per tensor."""
    s, args = _tiled_matmul(12, 10, 16, 4, 8, 5)
    st = _statements(s)["C_update"]
    rep = tl.analyze(s, list(args)).stage("C")
    iters = list(itertools.accumulate(st.trips, lambda a, b: a * b))
    for d, level in enumerate(rep.levels):
        for name, moved in level.moved.items():
            m = next(a[3] for a in st.accesses if a[0] == name and not a[1])
            box = st.footprint(m, d)
            assert int(np.prod(box)) * iters[d] == moved, (level.loop, name)


def test_trip_counts_and_footprints_match_brute_force_enumeration():
    """Tiles that do not divide the sizes: the first iteration's trip counts and
    footprints, from isl's bounding boxes, against every instance enumerated."""
    s, args = _tiled_matmul(7, 5, 9, 3, 4, 2)
    st = _statements(s)["C_update"]
    points = []
    st.dom.foreach_point(points.append)
    rows = []
    for p in points:
        inst = isl.Set.from_point(p)
        loops = st.e.lmap.intersect_domain(inst).range()
        (lv,) = [[x.get_coordinate_val(isl.dim_type.set, k).to_python()
                  for k in range(st.n)] for x in _points(loops)]
        elems = {a[0]: tuple(x.get_coordinate_val(isl.dim_type.set, k).to_python()
                             for k in range(x.get_space().dim(isl.dim_type.set)))
                 for a in st.accesses if not a[1]
                 for x in _points(a[3].intersect_domain(inst).range())}
        rows.append((lv, elems))
    first = min(r[0] for r in rows)
    for d in range(st.n):
        inside = [r for r in rows if r[0][:d] == first[:d]]
        assert st.trips[d] == len({r[0][d] for r in inside}), d
        one = [r for r in rows if r[0][:d + 1] == first[:d + 1]]
        for name, m, _ in ((a[0], a[3], 0) for a in st.accesses if not a[1]):
            got = st.footprint(m, d)
            touched = [r[1][name] for r in one]
            want = [max(x[k] for x in touched) - min(x[k] for x in touched) + 1
                    for k in range(len(touched[0]))]
            assert got == want, (d, name)


def _points(s):
    out = []
    s.foreach_point(out.append)
    return out


def test_the_representative_iteration_of_a_fused_loop_is_a_full_tile():
    """Batch and row tiles fused (f = 11 b + t over 6-row tiles of 61 rows): the middle of
    f, 10, is the last tile, one row. The representative iteration is the first one
    instead, a full tile of 6 rows — the model had costed a batched matmul's 6-row tiles
    as rows of 2 (0.15 ms predicted, 0.075 measured)."""
    A = tl.placeholder((2, 61, 32), "float32", name="A")
    B = tl.compute((2, 61, 32), lambda b, i, j: A[b, i, j] * 2.0, name="B")
    s = tl.create_schedule(B)
    s[B].split("i", factor=6)
    s[B].fuse("b", "i.outer")
    (st,) = cost.placed_statements(s)
    assert st.trips == [22, 6, 32]
    assert st.point[0] == 0


def test_an_interval_condition_in_a_vector_loop_costs_its_true_arm():
    """A select on `i >= 1 and i <= n - 2` inside explicit vectors is a branch on each
    vector's first and last lanes; the interior's vectors run the true arm unmasked
    (backends/llvm: the heat stencil 0.030 -> 0.020 ms). The model counts the true arm
    alone — the same instructions as the stencil without the select — where a condition
    that is no interval (`i % 3 == 0`) keeps both arms and the mask logic."""
    n = 4096

    def block(body, size):
        X = tl.placeholder((size,), "float32", name="X")
        Y = tl.compute((n,), lambda i: body(X, i), name="Y")
        s = tl.create_schedule(Y)
        s[Y].vectorize(s[Y].split("i", factor=16)[1])
        (c,) = cost.estimate(s, "llvm").statements
        return c.block_parts[:3]        # arithmetic, loads, stores: cycles a block

    plain = block(lambda X, i: X[i + 15] + X[i + 17], n + 17)   # (the same lines: -1, +1)
    interval = block(lambda X, i: tl.if_then_else(tl.all(i >= 1, i <= n - 2),
                                                  X[i - 1] + X[i + 1], X[i]), n)
    other = block(lambda X, i: tl.if_then_else(i % 3 == 0, X[i - 1] + X[i + 1], X[i]), n)
    assert interval == plain
    assert other[0] > interval[0]


def test_one_core_draws_a_share_of_the_dram_bandwidth():
    """A copy from DRAM (64 MiB) on one core of a 4-core target is predicted at twice its
    time on all four: one core does not draw the machine's bandwidth (a transposed copy
    ran 25.6 ms on one Zen 5 core, 12.3 on two)."""
    tgt = tl.Target.parse("llvm -mtriple=aarch64-unknown-linux-gnu")
    assert tgt.cores == 4 and not tgt.is_host
    A = tl.placeholder((4096, 4096), "float32", name="A")
    B = tl.compute((4096, 4096), lambda i, j: A[i, j] + 1.0, name="B")
    serial = tl.create_schedule(B)
    par = tl.create_schedule(B)
    par[B].parallel("i")
    one, four = (cost.estimate(s, tgt).statements[0] for s in (serial, par))
    assert one.bound == four.bound == "DRAM"
    assert one.memory_s[2] == pytest.approx(2 * four.memory_s[2])


def test_the_model_ranks_the_matmul_schedules():
    """Declared > vectorised > register-tiled (the executor's), on the host's description
    and on a cross target's."""
    A, B, C = _matmul(256, 256, 256)
    declared = tl.create_schedule(C)
    vec = tl.create_schedule(C)
    i, j = vec[C].op.axis
    (r,) = vec[C].op.reduce_axis
    jo, ji = vec[C].split(j, factor=16)
    vec[C].reorder(i, jo, r, ji)
    vec[C].vectorize(ji)
    tiled = tl.create_schedule(C)
    CS._block_matmul(tiled, C, C, True)
    for target in ("llvm", "aarch64", "x86-64-v3"):
        t = [cost.estimate(s, target).seconds for s in (declared, vec, tiled)]
        assert t[0] > t[1] > t[2], (target, t)


def test_parallel_loops_divide_the_time_by_the_cores():
    X = tl.placeholder((512, 512), "float32", name="X")
    Y = tl.compute((512, 512), lambda i, j: tl.exp(X[i, j]) * 2.0, name="Y")
    serial = tl.create_schedule(Y)
    par = tl.create_schedule(Y)
    par[Y].parallel(par[Y].op.axis[0])
    a, b = (cost.estimate(s, "aarch64") for s in (serial, par))     # 4 cores
    assert b.statements[0].cores == 4 and a.statements[0].cores == 1
    assert b.seconds < a.seconds / 2


def test_a_recurrence_along_the_inner_loop_is_a_latency_chain():
    """Y[i, j] = X[i, j] + Y[i, j - 1] / 2 with j innermost waits for each element; with a
    tile of rows innermost the rows' chains overlap (isl's dependence deltas say which
    loop carries the recurrence)."""
    X = tl.placeholder((256, 256), "float32", name="X")
    Y = tl.recurrence((256, 256), lambda y, i, j: X[i, j] + tl.if_then_else(
        j >= 1, 0.5 * y[i, j - 1], 0.0), dtype="float32", name="Y")
    along = tl.create_schedule(Y)                   # rows outer, j inner: a chain
    rows = tl.create_schedule(Y)                    # a tile of 4 rows inside j
    io, ii = rows[Y].split("i", factor=4)
    rows[Y].reorder(io, "j", ii)
    st = _statements(along)["Y"]
    assert placed.carries_recurrence(st, 1) and not placed.carries_recurrence(st, 0)
    st = _statements(rows)["Y"]
    assert placed.carries_recurrence(st, 1) and not placed.carries_recurrence(st, 2)
    assert cost.estimate(along, "llvm").seconds > 2 * cost.estimate(rows, "llvm").seconds


def test_a_store_with_lanes_4k_apart_is_expensive():
    """A rfactor whose vector lanes are the outermost axis of its partial sums (row-major
    [16, rows]: lanes 4 KiB apart) thrashes one L1 set; kept per row it does not."""
    X = tl.placeholder((1024, 1024), "float32", name="X")
    k = tl.reduce_axis((0, 1024), name="k")
    Y = tl.compute((1024,), lambda i: tl.sum(X[i, k], axis=k), name="Y")

    def rf(per_row):
        s = tl.create_schedule(Y)
        ko, ki = s[Y].split(s[Y].op.reduce_axis[0], factor=16)
        R = s.rfactor(Y, ki)
        kk, *rest = s[R].op.axis
        s[R].reorder(*rest, *s[R].op.reduce_axis, kk)
        s[R].vectorize(kk)
        if per_row:
            s[R].compute_at(s[Y], s[Y].op.axis[0])
        return cost.estimate(s, "llvm").seconds
    assert rf(False) > 3 * rf(True)


def test_b_beyond_the_last_level_cache_streams_from_dram_unless_its_panels_are_outer(
        monkeypatch):
    """B's panels outermost when B overflows the last-level cache (32 MiB here, whatever
    this machine has): the model's DRAM traffic falls by more than 4x."""
    set_host_caches(monkeypatch, 32 << 10, 1 << 20, 32 << 20)
    A, B, C = _matmul(4096, 4096, 4096)

    def dram(panels_outer):
        s = tl.create_schedule(C)
        st = s[C]
        io, jo, ii, ji = st.tile("i", "j", 4, 64)
        if panels_outer:
            st.reorder(jo, io)
        return sum(c.traffic[2] for c in cost.estimate(s, "x86-64-v4").statements)
    assert dram(False) > 4 * dram(True)


def test_the_report_names_each_statement_and_its_bound():
    A, B, C = _matmul(64, 64, 64)
    rep = cost.estimate(tl.create_schedule(C), "llvm")
    text = str(rep)
    assert "C_update" in text and "blocks x" in text and "total" in text
    # statements sharing their outer loop overlap: at most the sum, at least the largest
    assert max(c.seconds for c in rep.statements) <= rep.seconds <= \
        sum(c.seconds for c in rep.statements) * (1 + 1e-9)
    assert {c.bound for c in rep.statements} <= {"compute", "L1", "L2", "DRAM"}


def _softmax_rows(per_row: bool):
    """Softmax's stages (max, exp, sum, out) each vectorised; per row (all at the output's
    row loop, as the executor schedules it) or each a pass of its own over the matrix."""
    X = tl.placeholder((512, 1024), "float32", name="X")
    r1, r2 = tl.reduce_axis((0, 1024), name="r1"), tl.reduce_axis((0, 1024), name="r2")
    m = tl.compute((512,), lambda i: tl.max(X[i, r1], axis=r1), name="m")
    e = tl.compute((512, 1024), lambda i, j: tl.exp(X[i, j] - m[i]), name="e")
    z = tl.compute((512,), lambda i: tl.sum(e[i, r2], axis=r2), name="z")
    Y = tl.compute((512, 1024), lambda i, j: e[i, j] / z[i], name="Y")
    s = tl.create_schedule(Y)
    for t in (e, Y):
        s[t].vectorize(s[t].split(t.op.axis[1], factor=16)[1])
    if per_row:
        for t in (z, e, m):
            s[t].compute_at(s[Y], Y.op.axis[0])
    return s


def test_a_row_that_an_earlier_statement_read_is_found_in_the_cache():
    """Per row, the exponentials read the row of X that the maximum has just read (4 KiB,
    in L1): no traffic into L1 for it. As separate passes each reads X from L2."""
    def exp_traffic(per_row):
        rep = cost.estimate(_softmax_rows(per_row), "llvm")
        return next(c for c in rep.statements if c.name == "e").traffic
    assert exp_traffic(True)[0] == 0 and exp_traffic(True)[1] == 0
    assert exp_traffic(False)[0] >= 512 * 1024 * 4


def test_a_stencil_sweep_loads_the_rows_it_shares_once():
    """A 3-row stencil computed row by row: consecutive rows share two input rows, so a
    sweep moves each input row into L2 about once, not three times."""
    X = tl.placeholder((1026, 1024), "float32", name="X")
    Y = tl.compute((1024, 1024), lambda i, j: X[i, j] + X[i + 1, j] + X[i + 2, j], name="Y")
    s = tl.create_schedule(Y)
    s[Y].vectorize(s[Y].split(Y.op.axis[1], factor=16)[1])
    (c,) = cost.estimate(s, "llvm").statements
    out_bytes = 1024 * 1024 * 4
    assert c.traffic[1] < 1.2 * (out_bytes + 2 * out_bytes)    # X once, Y written back


def test_a_recurrence_under_a_fused_loop_goes_through_memory():
    """Y[i, j] from Y[i, j - 1]: with i and j fused, the indices are divisions of the fused
    counter and LLVM keeps the previous element in memory, not in a register (measured
    3.7 against 1.1 ms at 1024^2): the model's chain is longer."""
    X = tl.placeholder((256, 256), "float32", name="X")
    Y = tl.recurrence((256, 256), lambda y, i, j: X[i, j] + tl.if_then_else(
        j >= 1, 0.5 * y[i, j - 1], 0.0), dtype="float32", name="Y")
    plain = tl.create_schedule(Y)
    fused = tl.create_schedule(Y)
    fused[Y].fuse("i", "j")
    assert cost.estimate(fused, "llvm").seconds > 1.5 * cost.estimate(plain, "llvm").seconds


def _wavefront(n):
    X = tl.placeholder((n, n), "float32", name="X")
    return X, tl.recurrence((n, n), lambda u, i, j: X[i, j] + 0.5 * (
        tl.if_then_else(i >= 1, u[i - 1, j], 0.0) +
        tl.if_then_else(j >= 1, u[i, j - 1], 0.0)), dtype="float32", name="U")


def _skewed(U, ti, tj):
    s = tl.create_schedule(U)
    io, jo, ii, ji = s[U].tile("i", "j", ti, tj)
    s[U].skew(io, jo, factor=1)
    s[U].reorder(jo, io)
    s[U].parallel(io)
    return s


def test_a_wavefronts_launches_and_rounds_are_counted_exactly():
    """Tiles of a skewed 2-D recurrence in parallel along anti-diagonals: the middle
    diagonal (the representative iteration) has the most tiles; the model enumerates the
    diagonals (isl) for the true tile count, the launches and the rounds of 2 cores —
    against the same counted here by hand."""
    X, U = _wavefront(256)
    s = _skewed(U, 16, 16)
    (st,) = cost.placed_statements(s)
    p = 1
    rep = st.trips[0] * st.trips[1]
    scale, imbalance, forks, used = parallel._exact_rounds(st, p, rep, 2)
    tiles = [min(d, 30 - d) + 1 for d in range(31)]          # 16 x 16 tiles per diagonal
    assert forks == 31 and used == 2
    assert scale * rep == sum(tiles) == 256
    assert imbalance == sum(-(-t // 2) for t in tiles) * 2 / 256
    square = tl.create_schedule(U)                            # rectangular: nothing to fix
    (st,) = cost.placed_statements(square)
    assert parallel._exact_rounds(st, 0, st.trips[0], 2) is None


def test_narrow_wavefront_tiles_overlap_their_rows_chains():
    """Row i + 1 of a tile runs one element behind row i; rows of 16 elements fit the
    out-of-order window several at once, rows of 128 do not (measured 1.0 against 1.8 ms
    at 1024^2 on a 2-core Xeon). The chain per element is two dependent instructions (the
    sum of the neighbours, then the multiply-add)."""
    X, U = _wavefront(1024)
    narrow, wide = _skewed(U, 64, 16), _skewed(U, 64, 128)
    (st,) = cost.placed_statements(narrow)
    assert compute._chain_ops(st) == 2
    a, b = (cost.estimate(s, "llvm").seconds for s in (narrow, wide))
    assert b > 1.15 * a


def test_a_fused_loop_outside_the_parallel_loop_keeps_the_chain_in_registers():
    """IIR rows: (row blocks, column blocks) fused and serial, the rows of a block in
    parallel: inside a task the fused counter is a constant, so the recurrence stays in a
    register (measured the fastest of 16 sampled schedules, 0.66 ms at 1024^2)."""
    X = tl.placeholder((1024, 1024), "float32", name="X")
    Y = tl.recurrence((1024, 1024), lambda y, i, j: X[i, j] + tl.if_then_else(
        j >= 1, 0.5 * y[i, j - 1], 0.0), dtype="float32", name="Y")

    def sched(fuse):
        s = tl.create_schedule(Y)
        jo, ji = s[Y].split("j", factor=64)
        io, ii = s[Y].split("i", factor=32)
        s[Y].reorder(io, jo, ii, ji)
        if fuse:
            s[Y].fuse(io, jo)
        s[Y].parallel(ii)
        return s
    (st,) = cost.placed_statements(sched(True))
    assert compute._chain_ops(st) == 1
    fused, plain = (cost.estimate(sched(f), "llvm").seconds for f in (True, False))
    assert fused < 1.1 * plain


@pytest.mark.parametrize("cpu, victim", [("znver5", True), ("znver4", True),
                                         ("sapphirerapids", False)])
def test_a_written_line_costs_the_l2s_bandwidth_once_where_the_l3_takes_victims(cpu, victim):
    """A copy of 4 MiB to 4 MiB (in the last level, past the L2s): AMD Zen's L3 takes the
    lines its L2s let go beside the misses, so an output line costs the path into the L2
    once (its read for ownership; Zen 5: a copy, a fill and an add, L3-resident, ran at
    ~33 bytes a cycle a core counting each written line once); elsewhere its write-back
    goes over the same path, twice. From DRAM a written line is read and written back."""
    tgt = tl.Target.parse(f"llvm -mtriple=x86_64-unknown-linux-gnu -mcpu={cpu}")
    assert tgt.victim_llc == victim

    def traffic(n):
        A = tl.placeholder((n, 1024), "float32", name="A")
        B = tl.compute((n, 1024), lambda i, j: A[i, j] * 2.0, name="B")
        s = tl.create_schedule(B)
        s[B].parallel("i")
        return cost.estimate(s, tgt).statements[0].traffic

    size = 1024 * 1024 * 4
    l1, l2, dram = traffic(1024)
    assert dram == 0 and l2 == size * (2 if victim else 3)
    l1, l2, dram = traffic(16384)                  # 64 MiB each: past the L3
    assert dram == 16 * size * 3


def test_data_that_fits_the_l2_stays_there_between_calls(monkeypatch):
    """A heat stencil of 64 steps over 4096 points (1 MiB) fits a 2 MiB L2: called again,
    it finds its data there (measured 0.05 ms serial, the model said 0.10 before, as if
    it came from L3); over 16384 points (4 MiB) it does not."""
    set_host_caches(monkeypatch, 48 << 10, 2 << 20, 32 << 20)

    def l2_traffic(n):
        X = tl.placeholder((n,), "float32", name="X")
        U = tl.recurrence((64, n), lambda u, t, i: tl.if_then_else(
            t == 0, X[i], tl.if_then_else(tl.all(i >= 1, i <= n - 2),
                                          (u[t - 1, i - 1] + u[t - 1, i] + u[t - 1, i + 1])
                                          * (1.0 / 3.0), u[t - 1, i])),
            dtype="float32", name="U")
        (c,) = cost.estimate(tl.create_schedule(U), "llvm").statements
        return c.traffic[1]
    assert l2_traffic(4096) == 0
    assert l2_traffic(16384) > 4 * 16384 * 64


def test_a_vector_load_off_a_line_boundary_counts_as_two():
    """A line-wide vector load that starts mid-line (a stencil's X[i, j + 1], or any row of
    a tensor whose rows are not a whole number of lines apart) reads two lines: the block
    counts two loads for it. Aligned reads of a tensor with 64-byte rows count one."""
    def block_loads(width, shift):
        X = tl.placeholder((8, width), "float32", name="X")
        Y = tl.compute((8, 1024), lambda i, j: X[i, j + shift] * 2.0, name="Y")
        s = tl.create_schedule(Y)
        s[Y].vectorize(s[Y].split(Y.op.axis[1], factor=16)[1])
        (c,) = cost.estimate(s, "llvm -mcpu=znver4").statements
        return float(c.block.split("loads ")[1].split(",")[0])
    assert block_loads(1024, 0) == 1
    assert block_loads(1040, 1) == 2          # shifted by one element
    assert block_loads(1040, 16) == 1         # shifted by a whole line
    assert block_loads(1026, 0) == 2          # rows 4104 bytes apart: most start mid-line


def _blur_at_fused_loop():
    """A 3x3 blur whose horizontal pass is computed inside the vertical pass's fused
    (row, column tile) loop: per output tile, 3 rows of 16 columns of bx."""
    X = tl.placeholder((1026, 1026), "float32", name="X")
    bx = tl.compute((1026, 1024), lambda i, j: X[i, j] + X[i, j + 1] + X[i, j + 2], name="bx")
    by = tl.compute((1024, 1024), lambda i, j: bx[i, j] + bx[i + 1, j] + bx[i + 2, j],
                    name="by")
    s = tl.create_schedule(by)
    jo, ji = s[by].split("j", factor=16)
    s[by].vectorize(ji)
    f = s[by].fuse("i", jo)
    s[by].parallel(f)
    bjo, bji = s[bx].split("j", factor=64)
    s[bx].vectorize(s[bx].split(bji, factor=16)[1])
    s[bx].fuse("i", bjo)
    s[bx].compute_at(s[by], f)
    return s, (X, bx, by)


def test_a_stage_at_a_fused_loop_counts_the_values_its_loops_take():
    """bx's own fused loop takes 3 values per tile of by (rows i, i + 1, i + 2: 16 apart
    in the fused numbering), not the 33 of their bounding box; what one value touches is
    one row of 18 elements of X (isl's minimum of that image, split into pieces with an
    empty one, came back 0: a box of 513 rows). Against enumeration of the placed
    iterations, and the prediction within 2x of the two passes' own cost."""
    s, (X, bx, by) = _blur_at_fused_loop()
    st = _statements(s)["bx"]
    assert st.trips[:2] == [1024 * 64, 3]
    pts = []
    st.prefix[1].range().fix_val(isl.dim_type.set, 0, isl.Val(str(st.point[0]))).foreach_point(
        lambda p: pts.append(p.get_coordinate_val(isl.dim_type.set, 1).to_python()))
    assert len(set(pts)) == st.trips[1]
    (m,) = [m for name, w, _, m, _ in st.accesses if name == "X"]
    assert st.footprint(m, 1)[0] == 1 and 16 <= st.footprint(m, 1)[1] <= 18
    rep = cost.estimate(s, "llvm")
    assert rep.seconds < 1e-3, rep       # 12 s before: 33 values of 513 rows each


def _conv(c, h, padded_input: bool):
    """conv2d 3x3 (pad 1) over c channels of h x h, with the padding as a stage (inlined
    by the schedules below) or the input already padded."""
    if padded_input:
        X = tl.placeholder((1, c, h + 2, h + 2), "float32", name="X")
        pad = X
    else:
        X = tl.placeholder((1, c, h, h), "float32", name="X")
        pad = tl.compute((1, c, h + 2, h + 2), lambda n, k, y, x: tl.if_then_else(
            tl.all(y >= 1, y < h + 1, x >= 1, x < h + 1), X[n, k, y - 1, x - 1], 0.0),
            name="xpad")
    W = tl.placeholder((c, c, 3, 3), "float32", name="W")
    rc, rp, rq = (tl.reduce_axis((0, e), name=nm) for e, nm in ((c, "rc"), (3, "rp"), (3, "rq")))
    out = tl.compute((1, c, h, h), lambda n, o, i, j: tl.sum(
        pad[n, rc, i + rp, j + rq] * W[o, rc, rp, rq], axis=[rc, rp, rq]), name="out")
    s = tl.create_schedule(out)
    if not padded_input:
        s[pad].compute_inline()
    st = s[out]
    local = s.cache_write(out, "local")
    n, o, i, j = st.op.axis
    oo, jo, oi, ji = st.tile(o, j, 8, 32)
    jio, jii = st.split(ji, factor=16)
    st.vectorize(jii)
    st.reorder(n, oo, i, jo, oi, jio, jii)
    s[local].compute_at(st, jo)
    lt = s[local]
    ln, lo, li, lj = lt.op.axis
    ljo, lji = lt.split(lj, factor=16)
    lt.reorder(ln, li, *lt.op.reduce_axis, lo, ljo, lji)
    lt.unroll(lo)
    lt.unroll(ljo)
    lt.vectorize(lji)
    st.parallel(st.fuse(n, oo))
    return s


def test_a_padding_test_on_vectors_outside_the_channel_loop_is_computed_once():
    """The padding stage inlined into a conv whose register block runs over input
    channels, with vectors along the columns: its bounds test depends on rows and columns
    only, so LLVM makes the masks once outside the channel loop — the block costs what the
    conv on an already padded input costs (measured 0.37 ms on a Zen 4; predicted 1.6 ms
    when the test counted in every step), not 4x."""
    inlined = cost.estimate(_conv(64, 28, False), "llvm").seconds
    padded = cost.estimate(_conv(64, 28, True), "llvm").seconds
    assert inlined < 1.3 * padded, (inlined, padded)


def _register_tile(mr: int, width: int, n: int = 256):
    A = tl.placeholder((n, n), "float32", name="A")
    B = tl.placeholder((n, n), "float32", name="B")
    k = tl.reduce_axis((0, n), name="k")
    C = tl.compute((n, n), lambda i, j: tl.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = tl.create_schedule(C)
    local = s.cache_write(C, "local")
    s[C].tile("i", "j", mr, width)
    s[C].split("j.inner", factor=16)
    s[C].vectorize("j.inner.inner")
    s[local].compute_at(s[C], "j.outer")
    s[local].split("j", factor=16)
    s[local].reorder("k", "i", "j.outer", "j.inner")
    s[local].unroll("i")
    s[local].unroll("j.outer")
    s[local].vectorize("j.inner")
    return s


def test_a_register_tile_larger_than_the_registers_spills():
    """A local tile of 64 x 4 vectors (256 accumulators, 32 registers) keeps none of them
    in registers: every update is a load and a store (measured: a 128 x 8-vector tile of
    matmul 127x781x253 ran at 1.06 ms where the model said 0.14, a 12 x 2 one at 0.15).
    The model predicts it slower than the 6 x 4 tile that fits (1.8x here: a store an
    update), its chain through memory."""
    tgt = tl.Target.parse("llvm -mtriple=x86_64-unknown-linux-gnu -mcpu=skylake-avx512")
    fits = cost.estimate(_register_tile(6, 64), tgt)
    spills = cost.estimate(_register_tile(64, 64), tgt)
    assert spills.seconds > 1.5 * fits.seconds, (str(spills), str(fits))
    update = [c for c in spills.statements if c.name.endswith("update")][0]
    assert "chain 7.0" in update.block, update.block        # through memory


def _blur_inlined(rows: int | None, n: int = 1024):
    X = tl.placeholder((n + 2, n + 2), "float32", name="X")
    bx = tl.compute((n + 2, n), lambda i, j: X[i, j] + X[i, j + 1] + X[i, j + 2], name="bx")
    by = tl.compute((n, n), lambda i, j: bx[i, j] + bx[i + 1, j] + bx[i + 2, j], name="by")
    s = tl.create_schedule(by)
    s[bx].compute_inline()
    jo, ji = s[by].split(by.op.axis[1], factor=16)
    if rows is not None:                  # tiles of `rows` rows x 16 columns
        io, ii = s[by].split(by.op.axis[0], factor=rows)
        s[by].reorder(io, jo, ii, ji)
    s[by].vectorize(ji)
    return s


ZEN5 = "llvm -mtriple=x86_64-unknown-linux-gnu -mcpu=znver5"
ZEN4 = "llvm -mtriple=x86_64-unknown-linux-gnu -mcpu=znver4"
ZEN4_CPU = tl.Target.parse(ZEN4).cpu_model


def test_a_tile_with_more_rows_4k_apart_than_the_l1_has_ways_loses_its_edge_lines():
    """The 3x3 blur inlined, 1024-float output rows (4 KiB apart: one L1 set for a column of
    lines, of the input's rows and the output's together), in tiles of R rows x 16
    columns: 2R + 2 lines to a set of 12 ways on Zen 5, whose lines at the tile's edges
    (numpy's arrays start 16 bytes past a line) are gone when the next tile comes.
    Measured on Zen 5 (2 cores): rows of vectors 0.092 ms, R = 8 0.100, R = 16 0.13-0.16,
    R = 32 0.16-0.33 (the placement of the arrays' pages moves it)."""
    tgt = tl.Target.parse(ZEN5)
    assert tgt.l1_ways == 12
    rows = cost.estimate(_blur_inlined(None), tgt).seconds
    by_rows = [cost.estimate(_blur_inlined(r), tgt).seconds for r in (4, 8, 16, 32)]
    assert by_rows[0] < 1.03 * rows, (by_rows, rows)            # 10 lines a set: no loss
    assert rows < by_rows[1] < 1.3 * rows, (by_rows, rows)
    assert by_rows[1] < by_rows[2] < by_rows[3], by_rows
    assert by_rows[3] > 1.6 * rows, (by_rows, rows)
    # rows 1030 floats apart spread over the sets: no conflict at 32 rows either
    spread = cost.estimate(_blur_inlined(32, n=1030), tgt).seconds
    assert spread < 1.1 * cost.estimate(_blur_inlined(None, n=1030), tgt).seconds


def _copy_tiles(rows: int, cols: int, n: int = 1024, transposed: bool = False):
    X = tl.placeholder((n, n), "float32", name="X")
    Y = tl.compute((n, n), (lambda i, j: X[j, i] * 2.0) if transposed else
                   (lambda i, j: X[i, j] * 2.0), name="Y")
    s = tl.create_schedule(Y)
    i, j = Y.op.axis
    if rows == 1:
        jo, ji = s[Y].split(j, factor=cols)
        s[Y].vectorize(s[Y].split(ji, factor=16)[1])
        return s
    io, jo, ii, ji = s[Y].tile(i, j, rows, cols)
    s[Y].vectorize(s[Y].split(ji, factor=16)[1])
    return s


def test_a_tiles_tensors_share_the_l1_sets_of_its_rows():
    """A copy in tiles of R rows x 32 columns puts the R rows of its input and the R of its
    output in the same L1 sets (both arrays start 16 bytes into a page, their rows 4 KiB
    apart): at R = 8, 16 lines a set, over the 12 ways of Zen 5 though each tensor alone
    fits them. Measured on Zen 5 (1024^2 floats, 2 cores): R = 1 / 4 0.046 ms, R = 8 0.050,
    R = 16 0.092, R = 32 0.19; tiles of 256 columns 0.043 at every R."""
    tgt = tl.Target.parse(ZEN5)
    lost = {}
    for rows, cols in ((1, 32), (4, 32), (8, 32), (16, 32), (32, 32)):
        (st,) = cost.placed_statements(_copy_tiles(rows, cols))
        iters = [1]
        for t in st.trips:
            iters.append(iters[-1] * t)
        r = st.n - 2 if rows == 1 else 2
        lost[rows] = traffic.tile_conflicts(st, r, iters, tgt)
    assert lost[1] == lost[4] == 0, lost
    assert 0 < lost[8] < lost[16] < lost[32], lost
    t = {rows: cost.estimate(_copy_tiles(rows, 32), tgt).seconds for rows in (1, 8, 16, 32)}
    assert t[1] < t[8] < 1.25 * t[1] and t[16] > 1.4 * t[1] and t[32] > 2.5 * t[1], t


def test_a_transposed_read_counts_its_conflicts_apart_from_a_tiles_rows():
    """A transposed read walks across memory, a line an element: it is no row piece of a
    tile (`_tile_conflicts` leaves it to `_set_conflict_lines`, where its column of lines
    has always counted): the written rows alone, 16 to a set, lose less than a plain
    copy's tile, whose read rows add 16 more."""
    tgt = tl.Target.parse(ZEN5)
    (st,) = cost.placed_statements(_copy_tiles(16, 32, transposed=True))
    iters = [1]
    for t in st.trips:
        iters.append(iters[-1] * t)
    alone = traffic.tile_conflicts(st, 2, iters, tgt)
    (plain,) = cost.placed_statements(_copy_tiles(16, 32))
    assert alone < traffic.tile_conflicts(plain, 2, iters, tgt)


def test_a_block_waiting_on_its_chain_overlaps_its_tiles_lost_lines(monkeypatch):
    """A wavefront's tiles of 64 rows x 16 columns put 64 lines in a set, but the block
    waits on its recurrence: the lines come back under the chain (the fastest of its
    random sample on Zen 5, 0.39 ms) — counted as L1 traffic, not as the core's wait. A
    copy's tile, bound by its loads and stores, waits for them."""
    tgt = tl.Target.parse(ZEN5)
    X, U = _wavefront(1024)
    cases = {"wavefront": _skewed(U, 64, 16), "copy": _copy_tiles(16, 32)}
    with_lost = {k: cost.estimate(s, tgt).statements[0] for k, s in cases.items()}
    monkeypatch.setattr(cost, "tile_conflicts", lambda *a: 0.0)
    without = {k: cost.estimate(s, tgt).statements[0] for k, s in cases.items()}
    w, w0 = with_lost["wavefront"], without["wavefront"]
    assert w.compute_s == w0.compute_s and w.memory_s[0] > w0.memory_s[0]
    c, c0 = with_lost["copy"], without["copy"]
    assert c.compute_s > c0.compute_s and c.memory_s[0] == c0.memory_s[0]


def test_each_run_of_a_loop_outside_the_block_ends_in_its_exit_branch():
    """A loop outside the register block costs a mispredicted exit a run when its trip
    count varies (the CPU model's mispredict_cycles) and a cycle when it is short and constant (the
    predictor learns it): a row's vector loop split into runs of eight vectors costs a
    cycle a run, into runs of seven (64 vectors a row: the last run one) a misprediction
    a run. Where the count varies, the blocks are isl's
    count of the nest, not the middle iteration's trips times the outer loops'."""
    def rows(factor, unroll=False):
        X = tl.placeholder((512, 1024), "float32", name="X")
        Y = tl.compute((512, 1024), lambda i, j: X[i, j] * 2.0, name="Y")
        s = tl.create_schedule(Y)
        jo, ji = s[Y].split(Y.op.axis[1], factor=16)
        s[Y].vectorize(ji)
        if factor:
            a, b = s[Y].split(jo, factor=factor)
            if unroll:
                s[Y].unroll(b)
        return cost.estimate(s, ZEN4).statements[0].compute_s * ZEN4_CPU.clock_hz
    plain = rows(None)               # the 64-vector loop: one mispredicted exit a row
    runs = 512 * 8
    assert rows(8) - plain == pytest.approx(512 + runs - 512 * ZEN4_CPU.mispredict_cycles)
    # runs of 7, 7, ..., 7, 1: 10 runs a row, each exit mispredicted; the middle run's 7
    # vectors times 10 would be 70 a row where isl counts 64: the blocks are scaled to 64
    exits7 = 512 * 1 + 512 * 10 * ZEN4_CPU.mispredict_cycles
    assert rows(7) - rows(8) == pytest.approx(64 / 70 * exits7 - (512 + runs))
    assert rows(8, unroll=True) <= rows(8)


def test_a_nan_ignoring_max_chains_at_the_fma_latency():
    """A row maximum that ignores NaN (tl.nanmax: one vmaxps a step) is predicted faster
    than max (NaN and signed-zero rules: a compare and blends each step), same schedule."""
    def row_max(red):
        X = tl.placeholder((256, 1024), "float32", name="X")
        r = tl.reduce_axis((0, 1024), name="r")
        M = tl.compute((256,), lambda i: red(X[i, r], axis=r), name="M")
        s = tl.create_schedule(M)
        _, ri = s[M].split(r, factor=16)
        rf = s.rfactor(M, ri)
        kk, *rest = s[rf].op.axis
        s[rf].reorder(*rest, *s[rf].op.reduce_axis, kk)
        s[rf].vectorize(kk)
        s[rf].compute_at(s[M], s[M].op.axis[0])
        return cost.estimate(s, "llvm -mcpu=znver4").seconds
    assert row_max(tl.nanmax) < 0.9 * row_max(tl.max)


def _blur_program(n):
    """The blur's two stages over an n x n output: (X, bx, by)."""
    X = tl.placeholder((n + 2, n + 2), "float32", name="X")
    bx = tl.compute((n + 2, n), lambda i, j: X[i, j] + X[i, j + 1] + X[i, j + 2], name="bx")
    by = tl.compute((n, n), lambda i, j: bx[i, j] + bx[i + 1, j] + bx[i + 2, j], name="by")
    return X, bx, by


def _blur_at_tile(rows, cols, n=128):
    X, bx, by = _blur_program(n)
    s = tl.create_schedule(by)
    io, jo, ii, ji = s[by].tile(by.op.axis[0], by.op.axis[1], rows, cols)
    if cols > 16:
        ji = s[by].split(ji, factor=16)[1]
    s[by].vectorize(ji)
    s[bx].vectorize(s[bx].split(s[bx].op.axis[1], factor=16)[1])
    s[bx].compute_at(s[by], jo)
    return s, [X, by]


def test_a_small_local_buffer_of_unrolled_accesses_lives_in_registers():
    """The blur's first stage computed at each 4 x 16 tile of the second: a 6 x 16 buffer
    whose every access LLVM unrolls to a constant index, so SROA keeps it in registers —
    no stack access in the assembly, and the model counts no load or store of it and
    unrolls the loops that index it; at
    16 x 64 tiles the buffer (72 vectors) stays in memory, and is counted."""
    import re

    from tensorlang.autoschedule.placed import placed_statements

    tgt = tl.Target.parse("llvm -mtriple=x86_64-unknown-linux-gnu -mcpu=skylake-avx512")
    small, args = _blur_at_tile(4, 16)
    big, big_args = _blur_at_tile(16, 64)
    assert cost._promoted(placed_statements(small), tgt) == {"bx"}
    assert cost._promoted(placed_statements(big), tgt) == set()
    asm = tl.build(small, args, target=str(tgt), name="small").get_source("asm")
    assert not re.search(r"vmovups\s+\S+,\s*-?\d*\(%rsp\)|vmovups\s+-?\d*\(%rsp\)", asm)
    report = {c.name: c for c in cost.estimate(small, tgt).statements}
    assert "loads 0" in report["by"].block, report["by"].block
    # bx's six rows a tile are unrolled (how its indices became constants): one block a
    # tile, 32 x 8 tiles
    assert report["bx"].block.startswith("256 blocks"), report["bx"].block


def test_a_tile_of_varying_rows_up_to_the_bounded_unroll_is_kept_in_registers():
    """Tiles of 6 rows of 128 (the last one 2): LLVM unrolls a loop of a varying count up
    to FULL_UNROLL with an exit test after each copy, so the 8 x 16 buffer of the blur's
    first stage is still values (no stack access; measured 0.055 ms at 1024^2 on Zen 5
    where the model had predicted it 2.4x slower than at 4-row tiles); at more rows than
    that bound it is memory."""
    import re

    from tensorlang.autoschedule.placed import placed_statements

    tgt = tl.Target.parse("llvm -mtriple=x86_64-unknown-linux-gnu -mcpu=skylake-avx512")
    six, args = _blur_at_tile(6, 16)
    st = {s.e.orig: s for s in placed_statements(six)}
    assert not all(st["bx"].constant)                 # the clipped last tile
    assert cost._promoted(placed_statements(six), tgt) == {"bx"}
    asm = tl.build(six, args, target=str(tgt), name="six").get_source("asm")
    assert not re.search(r"vmovups\s+\S+,\s*-?\d*\(%rsp\)|vmovups\s+-?\d*\(%rsp\)", asm)
    tall, _ = _blur_at_tile(cost.FULL_UNROLL + 3, 16)
    assert cost._promoted(placed_statements(tall), tgt) == set()


def test_statements_sharing_one_unrolled_block_share_its_issue_slots(monkeypatch):
    """The blur's first stage at each 4 x 16 tile of the second, in registers: both
    statements' blocks are the tile loop, one straight run of code, so the block takes the
    largest of the summed arithmetic, loads, stores and issue (the loop's own instructions
    once; the second's loads are free, the first's arithmetic fills their slots), not the
    sum of each one's largest; the tile is
    then predicted faster than 16 x 64 tiles, as measured (1024^2, Zen 5: 0.056 against
    0.072 ms). Blocks of different loops (16 x 64: the first stage's rows are its own
    loop) are not merged."""
    tgt = tl.Target.parse("llvm -mtriple=x86_64-unknown-linux-gnu -mcpu=skylake-avx512")
    small, _ = _blur_at_tile(4, 16, n=1024)
    big, _ = _blur_at_tile(16, 64, n=1024)
    rep = {c.name: c for c in cost.estimate(small, tgt).statements}
    bx, by = rep["bx"], rep["by"]
    assert bx.block_key == by.block_key is not None
    # parts: arithmetic, loads, stores, chain (cycles each), additive cycles, the issue of
    # the loop's own instructions and of the block's operations
    p, q = bx.block_parts, by.block_parts
    alone = sum(max(*c[:4], c[5] + c[6]) + c[4] for c in (p, q))
    joint = max(max(p[k] + q[k] for k in range(3)), p[3], q[3],
                max(p[5], q[5]) + p[6] + q[6]) + p[4] + q[4]
    assert joint < alone
    monkeypatch.setattr(cost, "_shared_blocks", lambda costs: None)
    apart = {c.name: c for c in cost.estimate(small, tgt).statements}
    monkeypatch.undo()
    saved = sum(apart[n].compute_s - rep[n].compute_s for n in ("bx", "by"))
    assert saved == pytest.approx((alone - joint) * bx.cycle_s, rel=1e-6)
    assert bx.cycle_s == pytest.approx(by.cycle_s)
    keys = {c.name: c.block_key for c in cost.estimate(big, tgt).statements}
    assert keys["bx"] != keys["by"]
    assert cost.estimate(small, tgt).seconds < cost.estimate(big, tgt).seconds


def test_an_index_select_is_addressing_not_arithmetic():
    """A select in an index (a local buffer's offset in a fused loop, which isl may give
    piecewise: islpy 2026.2.1 did where 2026.2.2 gave an affine form, and the batched
    matmul's predictions moved 5x with it) is the address's computation, hoisted or
    folded: the arithmetic counts the value's operations only."""
    from tensorlang.autoschedule.placed import placed_statements

    A = tl.placeholder((64,), "float32", name="A")
    plain = tl.compute((32,), lambda i: A[i] * 2.0 + 1.0, name="B")
    picked = tl.compute((32,), lambda i: A[tl.if_then_else(i > 3, i + 5, i)] * 2.0 + 1.0,
                        name="B")
    ops = [compute._arith(placed_statements(tl.create_schedule(t))[0].e.stmt.body)[0]
           for t in (plain, picked)]
    assert ops[0] == ops[1] == 1
    masked = tl.compute((32,), lambda i: tl.if_then_else(i > 3, A[i] * 2.0, 0.0), name="B")
    assert compute._arith(placed_statements(tl.create_schedule(masked))[0].e.stmt.body)[0] > 1


def test_a_vector_loop_that_fills_part_of_its_lanes_masks_every_vector():
    """The first stage computed at tiles of 56 columns, split by 16 from its own column 0:
    its vectors straddle each tile's window, so the typical run of the vector loop fills
    8 of 16 lanes and every access is masked (the blur at 1024^2: 0.28 ms measured, where
    whole vectors had been predicted at 0.07 and the 64-column tile runs 0.06)."""
    tgt = tl.Target.parse("llvm -mtriple=x86_64-unknown-linux-gnu -mcpu=skylake-avx512")

    def blur(cols):
        X, bx, by = _blur_program(1024)
        s = tl.create_schedule(by)
        io, jo, ii, ji = s[by].tile(by.op.axis[0], by.op.axis[1], 4, cols)
        s[by].vectorize(s[by].split(ji, factor=16)[1])
        bo, bi = s[bx].split(bx.op.axis[1], factor=64)
        bio, bii = s[bx].split(bi, factor=16)
        s[bx].vectorize(bii)
        s[bx].unroll(bio)
        s[bx].compute_at(s[by], jo)
        return {c.name: c for c in cost.estimate(s, tgt).statements}["bx"]
    straddling, whole = blur(56), blur(64)
    assert "v 8/1" in straddling.block and "v 16/1" in whole.block
    assert straddling.seconds > 3 * whole.seconds


def test_a_block_whose_own_loops_vary_counts_its_average_work():
    """The blur's first stage at 14 x 96 tiles with its own columns split by 128: its
    block's loops vary with the tile (the middle block has 4 vectors, the average 5.8), so
    the block's cycles scale by isl's instances per block, not the middle one's; the
    schedule (0.075 ms measured on Zen 5) then ranks behind 6 x 64 tiles with a 16-column
    split (0.055), which it had been ranked ahead of."""
    tgt = tl.Target.parse("llvm -mtriple=x86_64-unknown-linux-gnu -mcpu=skylake-avx512")

    def blur(rows, cols, bsplit):
        X, bx, by = _blur_program(1024)
        s = tl.create_schedule(by)
        io, jo, ii, ji = s[by].tile(by.op.axis[0], by.op.axis[1], rows, cols)
        jio, jii = s[by].split(ji, factor=16)
        s[by].vectorize(jii)
        s[by].unroll(jio)
        s[by].parallel(io)
        bo, bi = s[bx].split(bx.op.axis[1], factor=bsplit)
        if bsplit > 16:
            bio, bi = s[bx].split(bi, factor=16)
            s[bx].unroll(bio)
        s[bx].vectorize(bi)
        s[bx].compute_at(s[by], jo)
        return s
    wide = blur(14, 96, 128)
    st = {x.e.orig: x for x in cost.placed_statements(wide)}["bx"]
    assert not all(st.constant[-3:])
    rep = {c.name: c for c in cost.estimate(wide, tgt).statements}["bx"]
    assert rep.block.startswith("13024 blocks")      # the middle block: 4 vectors
    runs = st.prefix[2].range().count_val().to_python()          # 12892 blocks
    assert st.prefix[-2].range().count_val().to_python() / runs > 5.5    # vectors a block
    # not 13 cycles a block
    assert rep.compute_s > 1.3 * 13.0 * runs / tgt.cpu_model.clock_hz / rep.cores
    assert cost.estimate(blur(6, 64, 16), tgt).seconds < cost.estimate(wide, tgt).seconds


def test_an_accumulator_tile_whose_vectors_straddle_it_is_no_register_tile():
    """A batched matmul's 8 x 28 accumulator tile, its columns split by 16 from column 0:
    every tile's vectors straddle it (isl: runs that start off a multiple of 16), so the
    tile is indexed dynamically, lives in memory and is masked — 1.9 ms measured on Zen 5
    against 0.07 at 8 x 32, which the model had ranked first (0.094 against 0.106). A
    28-column image's last vector (starting on a multiple of 16) is no straddle."""
    tgt = tl.Target.parse("llvm -mtriple=x86_64-unknown-linux-gnu -mcpu=skylake-avx512")

    def batched(cols, n=128):
        A = tl.placeholder((8, n, n), "float32", name="A")
        B = tl.placeholder((8, n, n), "float32", name="B")
        k = tl.reduce_axis((0, n), name="k")
        C = tl.compute((8, n, n), lambda b, i, j: tl.sum(A[b, i, k] * B[b, k, j], axis=k),
                       name="C")
        s = tl.create_schedule(C)
        s.cache_write("C", "local")
        s["C"].tile("i", "j", 8, cols)
        s["C"].split("j.inner", factor=16)
        s["C"].vectorize("j.inner.inner")
        s["C"].reorder("j.outer", "i.outer")
        s["C_local"].compute_at("C", "i.outer")
        s["C_local"].split("j", factor=16)
        s["C_local"].reorder("b", "k", "i", "j.outer", "j.inner")
        s["C_local"].unroll("i")
        s["C_local"].unroll("j.outer")
        s["C_local"].vectorize("j.inner")
        s["C"].parallel("b")
        return s
    odd, even = (cost.estimate(batched(c), tgt) for c in (28, 32))
    upd = {c.name: c for c in odd.statements}["C_local_update"]
    assert "stores 0" not in upd.block, upd.block           # the tile in memory
    assert odd.seconds > 4 * even.seconds
    image = cost.estimate(batched(28, n=28), tgt)          # 28 columns in all: a row end
    upd = {c.name: c for c in image.statements}["C_local_update"]
    assert "stores 0" in upd.block, upd.block


def _heat(fuse: bool, n: int = 1024):
    steps = 64
    X = tl.placeholder((n,), "float32", name="X")
    U = tl.recurrence((steps, n), lambda u, t, i: tl.if_then_else(
        t == 0, X[i], tl.if_then_else(tl.all(i >= 1, i <= n - 2),
                                      (u[t - 1, i - 1] + u[t - 1, i] + u[t - 1, i + 1]) / 3.0,
                                      u[t - 1, i])), dtype="float32", name="U")
    s = tl.create_schedule(U)
    t, i = U.op.axis
    io, ii = s[U].split(i, factor=16)
    s[U].vectorize(ii)
    if fuse:
        s[U].fuse(t, io)
    return s


def test_a_dependence_far_along_the_block_loop_costs_a_fraction_of_its_chain():
    """The heat stencil with its time loop fused into the row's vector loop: a value is
    read 63-65 iterations of the fused loop after it is written (1024 columns), so the
    blocks between overlap the chain (at 4096 columns: measured 0.028 ms, as fast as
    unfused, Zen 5; the chain counted at distance 1 predicted 2.4x). A recurrence one
    iteration apart (an IIR row) keeps it."""
    from tensorlang.autoschedule.placed import placed_statements

    tgt = "llvm -mtriple=x86_64-unknown-linux-gnu -mcpu=skylake-avx512"
    fused = cost.estimate(_heat(True), tgt).seconds
    plain = cost.estimate(_heat(False), tgt).seconds
    assert fused < 1.3 * plain, (fused, plain)
    assert placed.carry_distance(placed_statements(_heat(True))[0], 0) == 63
    assert placed.carry_distance(placed_statements(_heat(True, n=4096))[0], 0) == 255
    X = tl.placeholder((64, 256), "float32", name="X")
    Y = tl.recurrence((64, 256), lambda y, i, j: X[i, j] + tl.if_then_else(
        j >= 1, 0.5 * y[i, j - 1], 0.0), dtype="float32", name="Y")
    st = placed_statements(tl.create_schedule(Y))[0]
    assert placed.carry_distance(st, 1) == 1


def test_a_fused_loop_walks_the_way_its_steps_go():
    """out[i0, i1] = in[i1, i0] with i0 and i1 fused: each step of the fused loop moves
    `in` down a column (its wrap to the next row is the rare step), so the reads are no
    more contiguous than the unfused nest's (measured 10.5 ms against 12.4 for the nest
    parallel over rows, Zen 5; the fused loop had been predicted 6x faster)."""
    A = tl.placeholder((512, 512), "float32", name="A")
    B = tl.compute((512, 512), lambda i, j: A[j, i], name="B")
    s_fused, s_rows = tl.create_schedule(B), tl.create_schedule(B)
    s_fused[B].parallel(s_fused[B].fuse(*B.op.axis))
    s_rows[B].parallel(B.op.axis[0])
    tgt = "llvm -mtriple=x86_64-unknown-linux-gnu -mcpu=skylake-avx512"
    fused, rows = cost.estimate(s_fused, tgt).seconds, cost.estimate(s_rows, tgt).seconds
    assert 0.7 * rows < fused < 1.5 * rows, (fused, rows)


def _rows_of_pieces(s, by):
    """The blur's second stage in parallel rows of 32-column pieces, two vectors each; the
    piece loop."""
    jo, ji = s[by].split("j", factor=32)
    jio, jii = s[by].split(ji, factor=16)
    s[by].vectorize(jii)
    s[by].parallel("i")
    return jo


def test_a_parallel_loop_inside_another_runs_serially_and_short_ones_unroll():
    """The code generator runs one level of threads: the blur's first stage, marked parallel
    over its rows and computed at each 32-column piece of the second's parallel rows,
    runs its 3 rows serially in each task, and LLVM unrolls them (a constant 3): one
    block a piece, its buffer in registers, shared with the second stage's block — the
    model had kept the inner parallel loop as a loop of its own, 1.6x the time of the
    inlined blur where both measured 0.088 ms (1024^2, Zen 5). No assembly here: the
    inner loop's kind is what the model sees."""
    from tensorlang.autoschedule.placed import placed_statements

    tgt = tl.Target.parse("llvm -mtriple=x86_64-unknown-linux-gnu -mcpu=skylake-avx512")
    X, bx, by = _blur_program(1024)
    s = tl.create_schedule(by)
    jo = _rows_of_pieces(s, by)
    bo, bi = s[bx].split("j", factor=16)
    s[bx].vectorize(bi)
    s[bx].parallel("i")
    s[bx].compute_at(s[by], jo)
    st = {x.e.orig: x for x in placed_statements(s)}["bx"]
    kinds = compute.as_compiled(st, [lp.kind for lp in st.e.loops])
    assert [lp.kind for lp in st.e.loops].count(LoopKind.PARALLEL) == 2
    assert kinds.count(LoopKind.PARALLEL) == 1 and kinds[0] is LoopKind.PARALLEL
    rep = {c.name: c for c in cost.estimate(s, tgt).statements}
    assert rep["bx"].block.startswith("32768 blocks")        # 1024 rows x 32 pieces
    assert cost._promoted(placed_statements(s), tgt) == {"bx"}
    inl = tl.create_schedule(by)
    inl[bx].compute_inline()
    _rows_of_pieces(inl, by)
    assert cost.estimate(s, tgt).seconds < 1.1 * cost.estimate(inl, tgt).seconds


def test_a_loop_whose_bounds_divide_is_not_unrolled_whole():
    """The blur's first stage in tiles of 4 rows, computed at each row of the second: its
    row-tile loop runs `range(i // 4, (i + 2) // 4 + 1)` — 1 or 2 values, a count LLVM
    cannot bound through the divisions, so it is no unrolled loop and the 3-row buffer its
    rows index stays in memory (measured 0.18 ms against the inlined blur's 0.087 on Zen
    5, where the model, taking the buffer for registers, had it at 0.108). A tile clipped
    by a `min` keeps its buffer in registers
    (test_a_tile_of_varying_rows_up_to_the_bounded_unroll_is_kept_in_registers)."""
    from tensorlang.autoschedule.placed import placed_statements

    tgt = tl.Target.parse("llvm -mtriple=x86_64-unknown-linux-gnu -mcpu=skylake-avx512")
    X, bx, by = _blur_program(1024)
    s = tl.create_schedule(by)
    jo = _rows_of_pieces(s, by)
    bjo, bji = s[bx].split("j", factor=16)
    bio, bii = s[bx].split("i", factor=4)
    s[bx].reorder(bio, bjo, bii, bji)
    s[bx].unroll(bii)
    s[bx].vectorize(bji)
    s[bx].compute_at(s[by], jo)
    st = {x.e.orig: x for x in placed_statements(s)}["bx"]
    d = [lp.name for lp in st.e.loops].index("i.outer")
    assert not st.constant[d] and st.divided_bounds(d)
    assert cost._promoted(placed_statements(s), tgt) == set()
    six, _ = _blur_at_tile(6, 16)          # min(6, rows left): no division
    st6 = {x.e.orig: x for x in placed_statements(six)}["bx"]
    assert not any(st6.divided_bounds(k) for k in range(st6.n) if not st6.constant[k])


def test_a_loops_own_instructions_issue_with_its_block():
    """A loop's increment and compare-branch issue with the block's operations
    (ISSUE_WIDTH a cycle): under the blur's nine loads a vector they hide, so its row-wise
    variants — a loop of one vector, two unrolled, eight — are predicted alike, as they
    measured (within 4 % on Zen 5; an added cycle a block had spread them 7 %); a block of
    one load, one add and one store is bound by its issue, and unrolling it pays."""
    tgt = tl.Target.parse("llvm -mtriple=x86_64-unknown-linux-gnu -mcpu=skylake-avx512")
    X, bx, by = _blur_program(1024)
    times = []
    for split in (None, 32, 128):
        s = tl.create_schedule(by)
        s[bx].compute_inline()
        if split is None:
            jo, ji = s[by].split("j", factor=16)
        else:
            jo, ji = s[by].split("j", factor=split)
            jio, ji = s[by].split(ji, factor=16)
        s[by].vectorize(ji)
        s[by].parallel("i")
        times.append(cost.estimate(s, tgt).seconds)
    assert max(times) < 1.02 * min(times), times

    A = tl.placeholder((1024, 1024), "float32", name="A")
    B = tl.compute((1024, 1024), lambda i, j: A[i, j] + 1.0, name="B")

    def block(unroll):
        s = tl.create_schedule(B)
        jo, ji = s[B].split("j", factor=16 * unroll)
        if unroll > 1:
            jio, ji = s[B].split(ji, factor=16)
            s[B].unroll(jio)
        s[B].vectorize(ji)
        c = cost.estimate(s, tgt).statements[0]
        arith, loads, stores, chain, extra, loop_ops, ops = c.block_parts
        return (max(arith, loads, stores, chain, loop_ops + ops) + extra) / unroll, \
            loop_ops + ops > max(arith, loads, stores)
    one, issue_bound = block(1)
    four, _ = block(4)
    assert issue_bound and four < one


# ------------------------------------------------------------------ counting loop nests
@st.composite
def _loop_nest_sets(draw):
    """A bounded set of 2-4 loops as schedules make them: boxes, tiles with tails
    (t*f <= x < t*f + f, x < n), triangles and skews (bounds on an outer loop), strides
    (x = f*k), and unions of two such pieces."""
    def piece():
        n = draw(st.integers(2, 4))
        names = [f"x{k}" for k in range(n)]
        cons = []
        for k, x in enumerate(names):
            ext = draw(st.integers(1, 9))
            kind = draw(st.sampled_from(["box", "tile", "triangle", "stride"] if k else ["box"]))
            o = names[k - 1] if k else None
            if kind == "box":
                cons.append(f"0 <= {x} < {ext}")
            elif kind == "tile":
                f = draw(st.integers(1, 5))
                cons.append(f"{f}{o} <= {x} < {f}{o} + {f} and {x} < {ext + f}")
            elif kind == "triangle":
                cons.append(f"0 <= {x} <= {o} + {draw(st.integers(0, 3))} and {x} < {ext}")
            else:
                cons.append(f"exists (e: {x} = {draw(st.integers(2, 4))}e) and 0 <= {x} < {ext}")
        return names, " and ".join(cons)
    names, a = piece()
    sets = isl.Set(f"{{ [{', '.join(names)}] : {a} }}")
    if draw(st.booleans()):
        names2, b = piece()
        if names2 == names:                 # overlapping or not: the union is one set
            sets = sets.union(isl.Set(f"{{ [{', '.join(names)}] : {b} and x0 >= 2 }}"))
    return sets


@given(_loop_nest_sets())
@settings(max_examples=150, deadline=None)
def test_a_loop_nests_count_summed_by_its_innermost_runs_is_isls_count(s):
    from tensorlang.autoschedule.placed import _points, int_value

    assert _points(s) == int_value(s.count_val())
