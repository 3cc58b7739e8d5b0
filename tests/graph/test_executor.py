"""The executor's kernels: register-blocked matmuls on sizes that do and do not divide the
tiles, fused elementwise groups against numpy on random chains, and how runs hand arrays
in and out."""

import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tensorlang as tl
import tensorlang.graph as G
from tensorlang.graph import executor
from tests.conftest import set_host_caches

R = np.random.default_rng(11)


def _run_matmul(sa, sb, ta=False, tb=False, dtype="float32"):
    a = G.Variable("a", sa, dtype)
    b = G.Variable("b", sb, dtype)
    av, bv = R.standard_normal(sa).astype(dtype), R.standard_normal(sb).astype(dtype)
    (got,) = G.Executor([G.make("matmul", (a, b), ta=ta, tb=tb)]).run({a: av, b: bv})
    want = np.matmul(np.swapaxes(av, -1, -2) if ta else av, np.swapaxes(bv, -1, -2) if tb else bv)
    return got, want


@pytest.mark.parametrize("m,k,n", [(1, 1, 1), (1, 7, 1), (5, 3, 17), (13, 1, 31), (8, 64, 64),
                                   (37, 29, 97),
                                   pytest.param(127, 61, 253, marks=pytest.mark.slow),
                                   pytest.param(128, 784, 256, marks=pytest.mark.slow)])
def test_matmul_tiles_with_and_without_tails(m, k, n):
    got, want = _run_matmul((m, k), (k, n))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("ta,tb", [(True, False), (False, True), (True, True)])
def test_matmul_transposed_operands(ta, tb):
    m, k, n = 67, 41, 83
    got, want = _run_matmul((k, m) if ta else (m, k), (n, k) if tb else (k, n), ta, tb)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("sa,sb", [((3, 19, 23), (23, 40)), ((2, 1, 9, 33), (5, 33, 17)),
                                   ((1, 70, 70), (4, 70, 70))])
def test_batched_matmul_with_broadcast_batches(sa, sb):
    got, want = _run_matmul(sa, sb)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_matmul_float64():
    got, want = _run_matmul((45, 33), (33, 71), dtype="float64")
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, want, rtol=1e-12)


@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_matmul_kernel_on_integers(dtype):
    # graph Variables are floating point; the op's kernel itself takes any dtype
    mod, used = executor.compile_op("matmul", (("ta", False), ("tb", False)),
                                    ((45, 33), (33, 71)), (dtype, dtype))
    a, b = R.integers(-9, 9, (45, 33)).astype(dtype), R.integers(-9, 9, (33, 71)).astype(dtype)
    c = np.zeros((45, 71), dtype)
    mod(a, b, c)
    np.testing.assert_array_equal(c, a @ b)


def test_large_matmul_is_register_blocked():
    mod, _ = executor.compile_op("matmul", (("ta", False), ("tb", False)),
                                 ((128, 784), (784, 256)), ("float32", "float32"), "hand")
    text = str(mod.lowered)
    mr, nv = executor.register_tile(128, 256, "float32")
    lanes = tl.Target.parse("llvm").vector_lanes("float32")
    assert f"out_local = allocate(float32, [{mr}, {nv * lanes}], 'local')" in text
    assert "# parallel" in text and "# vectorized" in text and "# unrolled" in text


# ------------------------------------------------------------ fused elementwise groups
UNARY = {"neg": (G.neg, np.negative), "exp": (G.exp, np.exp), "sin": (G.sin, np.sin),
         "tanh": (G.tanh, np.tanh), "relu": (G.relu, lambda v: np.maximum(v, 0)),
         "sigmoid": (G.sigmoid, lambda v: 1 / (1 + np.exp(-v)))}
BINARY = {"add": np.add, "sub": np.subtract, "mul": np.multiply}
SHAPES = [(1,), (5,), (3, 1), (1, 5), (3, 5), (2, 1, 1), (2, 3, 5)]   # all broadcast together


@st.composite
def chains(draw):
    """A random DAG of elementwise ops over three inputs of broadcastable shapes; some
    intermediate values are read twice or are outputs, which limits fusion."""
    shapes = [draw(st.sampled_from(SHAPES)) for _ in range(3)]
    steps = []
    for _ in range(draw(st.integers(1, 8))):
        if draw(st.booleans()):
            steps.append(("u", draw(st.sampled_from(sorted(UNARY))), draw(st.integers(0, 20))))
        else:
            steps.append(("b", draw(st.sampled_from(sorted(BINARY))), draw(st.integers(0, 20)),
                          draw(st.integers(0, 20))))
    outs = draw(st.lists(st.integers(0, 20), min_size=1, max_size=3))
    return shapes, steps, outs


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(chains())
def test_fused_elementwise_groups_match_numpy(case):
    shapes, steps, outs = case
    xs = [G.Variable(f"x{k}", s, "float64") for k, s in enumerate(shapes)]
    vals = [R.uniform(-1.5, 1.5, s) for s in shapes]
    nodes, refs = list(xs), list(vals)
    for stp in steps:
        if stp[0] == "u":
            fn, ref = UNARY[stp[1]]
            a = stp[2] % len(nodes)
            nodes.append(fn(nodes[a]))
            refs.append(ref(refs[a]))
        else:
            a, b = stp[2] % len(nodes), stp[3] % len(nodes)
            nodes.append({"add": G.add, "sub": G.sub, "mul": G.mul}[stp[1]](nodes[a], nodes[b]))
            refs.append(BINARY[stp[1]](refs[a], refs[b]))
    picks = [o % len(nodes) for o in outs]
    ex = G.Executor([nodes[p] for p in picks])
    got = ex.run(dict(zip(xs, vals)))
    for g, p in zip(got, picks):
        np.testing.assert_allclose(g, refs[p], rtol=1e-12, atol=1e-12)
    # each output is its own array, never a fed one, even when an output repeats
    assert len({id(g) for g in got}) == len(got)
    assert not any(g is v for g in got for v in vals)


# ------------------------------------------------------------ arrays in and out
def test_runs_read_feeds_in_place_and_return_fresh_outputs():
    x = G.Variable("x", (4,))
    y = G.exp(x)
    ex = G.Executor([y, x, y])
    xv = np.arange(4, dtype="float32")
    keep = xv.copy()
    a, xo, a2 = ex.run({x: xv})
    np.testing.assert_array_equal(xv, keep)            # feeds are only read
    assert xo is not xv and np.array_equal(xo, xv)     # a Variable output is a copy
    assert a is not a2 and np.array_equal(a, a2)
    b, _, _ = ex.run({x: xv + 1})
    np.testing.assert_allclose(a, np.exp(keep), rtol=1e-6)   # earlier results stay
    np.testing.assert_allclose(b, np.exp(keep + 1), rtol=1e-6)


def test_non_contiguous_feeds_are_accepted():
    x = G.Variable("x", (3, 4), "float64")
    base = np.arange(24.0).reshape(4, 6)
    view = base.T[::2, :4]                       # strided: the executor makes it contiguous
    assert not view.flags.c_contiguous
    (got,) = G.Executor([x * 2.0]).run({x: view})
    np.testing.assert_array_equal(got, view * 2.0)


# ------------------------------------------------------------ matmul epilogues
@pytest.mark.parametrize("sa,sb,tb", [((37, 29), (29, 97), False), ((128, 64), (64, 256), False),
                                      ((5, 70, 33), (33, 17), False), ((67, 41), (83, 41), True)])
def test_matmul_epilogue_fused(sa, sb, tb):
    a, b = G.Variable("a", sa, "float64"), G.Variable("b", sb, "float64")
    h = G.Variable("h", sa[:-1] + (sb[-2] if tb else sb[-1],), "float64")
    av, bv = R.standard_normal(sa), R.standard_normal(sb)
    hv = R.standard_normal(h.shape)
    y = h - 0.5 * G.tanh(G.make("matmul", (a, b), ta=False, tb=tb))
    ex = G.Executor([y])
    (got,) = ex.run({a: av, b: bv, h: hv})
    np.testing.assert_allclose(got, hv - 0.5 * np.tanh(av @ (bv.T if tb else bv)), rtol=1e-12,
                               atol=1e-12)
    (plan,) = ex._plans.values()
    assert [[n.op for n in s.nodes] for s in plan.steps] == [["matmul", "tanh", "mul", "sub"]]


@pytest.mark.parametrize("square_m2", [False, True])
def test_one_matmul_per_group_and_none_read_twice(square_m2):
    a, b = G.Variable("a", (9, 20), "float64"), G.Variable("b", (20, 40), "float64")
    m1, m2 = a @ b, a @ (b * 2.0)
    outs = [G.exp(m1) + m2]         # both matmuls could head this group: only one does
    if square_m2:
        outs.append(m2 * m2)        # m2 now has two readers: it is stored
    ex = G.Executor(outs)
    av, bv = R.standard_normal((9, 20)), R.standard_normal((20, 40))
    got = ex.run({a: av, b: bv})
    # float64 to 1e-12 relative, and to the rounding of the sums' terms where they cancel
    # (an element of m2 near 0 squared: numpy's summation order is not ours)
    scale = np.abs(av) @ np.abs(2 * bv)
    for g, want, err in ((got[0], np.exp(av @ bv) + av @ (2 * bv), scale),
                         (got[1] if square_m2 else None, (av @ (2 * bv)) ** 2, scale ** 2)):
        if g is not None:
            assert np.all(np.abs(g - want) <= 1e-12 * np.abs(want) + 1e-14 * err)
    (plan,) = ex._plans.values()
    groups = [[n.op for n in s.nodes] for s in plan.steps]
    assert ["matmul", "exp", "add"] in groups
    assert sorted(g.count("matmul") for g in groups if "matmul" in g) == [1, 1]


def test_matmul_output_is_stored_when_it_is_also_an_output():
    a, b = G.Variable("a", (9, 20)), G.Variable("b", (20, 40))
    m = a @ b
    ex = G.Executor([m, G.relu(m)])
    av, bv = R.standard_normal((9, 20)).astype("f4"), R.standard_normal((20, 40)).astype("f4")
    mv, rv = ex.run({a: av, b: bv})
    np.testing.assert_allclose(mv, av @ bv, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(rv, np.maximum(av @ bv, 0), rtol=1e-5, atol=1e-5)


def test_batched_times_2d_matmul_gradient_compiles():
    # the attention projection's gradient failed with "Instruction does not dominate all
    # uses": a loop variable of an earlier loop nest stayed bound in the code generator and
    # a later parallel loop captured it (found again by the pipeline fuzzer)
    a, b = G.Variable("a", (50, 8, 16), "float32"), G.Variable("b", (16, 16), "float32")
    ga, gb = G.gradients(G.sum(G.matmul(a, b)), [a, b])
    av = R.standard_normal((50, 8, 16)).astype("f4")
    bv = R.standard_normal((16, 16)).astype("f4")
    got_a, got_b = G.Executor([ga, gb]).run({a: av, b: bv})
    np.testing.assert_allclose(got_a, np.ones((50, 8, 16)) @ bv.T, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(got_b, np.einsum("bik,bij->kj", av, np.ones((50, 8, 16))),
                               rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("m,k,n", [(1, 1, 1), (7, 13, 5), (1025, 8, 1030), (2048, 4, 2048)])
def test_default_matmul_schedule_is_not_refused(m, k, n, monkeypatch, capsys):
    # a refused default schedule falls back to the declared loop nest (up to 200x slower):
    # TL_DEBUG=1 says so, and this must not happen for matmuls of any size (n >= 1025 used
    # to: unroll checked the unplaced extent)
    monkeypatch.setenv("TL_DEBUG", "1")
    a, b = G.Variable("a", (m, k), "float32"), G.Variable("b", (k, n), "float32")
    av = R.standard_normal((m, k)).astype("f4")
    bv = R.standard_normal((k, n)).astype("f4")
    (got,) = G.Executor([a @ b]).run({a: av, b: bv})
    np.testing.assert_allclose(got, av @ bv, rtol=1e-4, atol=1e-4)
    assert "was refused" not in capsys.readouterr().err


@pytest.mark.parametrize("shape,axis", [((1, 1), -1), ((3, 7), -1), ((5, 33), -1),
                                        ((64, 1024), -1), ((40, 9), 0), ((2, 3, 50), 1)])
@pytest.mark.parametrize("log", [False, True])
def test_softmax_schedule_is_vectorised_and_not_refused(shape, axis, log, monkeypatch, capsys):
    """Softmax groups: rfactored vector reductions and a vectorised quotient, at sizes below,
    at and above the vector width, along any axis; never the refused fallback."""
    monkeypatch.setenv("TL_DEBUG", "1")
    x = G.Variable("x", shape, "float32")
    xv = (R.standard_normal(shape) * 3).astype("f4")
    node = G.log_softmax(x, axis=axis) if log else G.softmax(x, axis=axis)
    (got,) = G.Executor([node]).run({x: xv})
    m = xv.max(axis, keepdims=True)
    e = np.exp(xv.astype("f8") - m)
    want = (xv - m - np.log(e.sum(axis, keepdims=True))) if log else e / e.sum(axis,
                                                                              keepdims=True)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert "was refused" not in capsys.readouterr().err


@pytest.mark.parametrize("shape", [(5, 7), (33, 100), (6, 1024), (3, 17)])
@pytest.mark.parametrize("log", [False, True])
def test_softmax_rows_with_nan_inf_and_zeros_match_numpy(shape, log):
    """Softmax's row maximum leaves NaN unspecified (`shift_max`: one vmaxps a vector under
    LLVM's nnan flag; it only shifts the exponents): rows with NaN, +-inf, +-0 and huge
    values, a row all NaN and one all -inf give numpy's results, NaN exactly where numpy's
    are; the kernel has no llvm.maximum, and its maxnum carries nnan."""
    rng = np.random.default_rng(len(shape) + shape[1])
    xv = (rng.standard_normal(shape) * 5).astype("f4")
    specials = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e30, -1e30], "f4")
    for r in range(0, shape[0], 2):
        xv[r, rng.integers(0, shape[1], 3)] = rng.choice(specials, 3)
    xv[1, :] = np.nan
    xv[2, :] = -np.inf
    x = G.Variable("x", shape, "float32")
    ex = G.Executor([G.log_softmax(x, axis=-1) if log else G.softmax(x, axis=-1)])
    (got,) = ex.run({x: xv})
    xd = xv.astype("f8")
    with np.errstate(invalid="ignore"):
        m = xd.max(1, keepdims=True)
        e = np.exp(xd - m)
        want = xd - m - np.log(e.sum(1, keepdims=True)) if log else e / e.sum(1, keepdims=True)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    (step,) = ex._last.steps
    source = step.kernel.get_source("ll") if step.pointers is None else \
        step.kernel.kernel.llvm_ir                 # optimised: maxnum or vector.reduce.fmax
    assert ("llvm.maxnum" in source or "reduce.fmax" in source) and "maximum" not in source
    assert re.search(r"nnan[^\n]*(maxnum|reduce\.fmax)", source)


@pytest.mark.parametrize("shape,axis", [((1,), None), ((7,), 0), ((3, 40), 1), ((40, 3), 0),
                                        ((33, 70), 0), ((5, 6, 40), (0, 2)), ((64, 256), -1),
                                        ((4, 9, 17), 1)])
@pytest.mark.parametrize("op", ["sum", "mean", "max"])
def test_reduce_schedule_is_vectorised_and_not_refused(shape, axis, op, monkeypatch, capsys):
    """Reductions along the memory axis (rfactored vector accumulators) and across it
    (a vector of outputs per reduction step), below and above the vector width."""
    monkeypatch.setenv("TL_DEBUG", "1")
    x = G.Variable("x", shape, "float32")
    xv = R.standard_normal(shape).astype("f4")
    (got,) = G.Executor([getattr(G, op)(x, axis=axis)]).run({x: xv})
    np.testing.assert_allclose(got, getattr(np, op)(xv, axis=axis), rtol=1e-5, atol=1e-5)
    assert "was refused" not in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.parametrize("op", ["sum", "layer_norm"])
def test_row_sums_keep_independent_vector_chains(op):
    """A sum along memory of at least 2 * SUM_CHAINS vectors accumulates in SUM_CHAINS
    vectors of partial sums (a buffer of SUM_CHAINS * lanes), added into one vector, then
    its lanes; a shorter one in one vector. numpy's results at lengths around the
    threshold, primes and one."""
    from tensorlang.graph import cpu_schedules as C

    lanes = C._lanes("float32")
    edge = 2 * C.SUM_CHAINS * lanes
    for n in (1, 7, edge - 1, edge, edge + 1, 1031):
        xv = R.standard_normal((5, n)).astype("f4")
        x = G.Variable("x", (5, n), "float32")
        node = G.sum(x, axis=-1) if op == "sum" else G.layer_norm(x)
        ex = G.Executor([node])
        (got,) = ex.run({x: xv})
        if op == "sum":
            want = xv.astype("f8").sum(-1)
        else:
            xd = xv.astype("f8")
            want = (xd - xd.mean(-1, keepdims=True)) / np.sqrt(xd.var(-1, keepdims=True) + 1e-5)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
        (step,) = ex._last.steps
        lowered = str(step.kernel.lowered)
        chained = f"[{C.SUM_CHAINS * lanes}, " in lowered
        assert chained == (C.SUM_CHAINS > 1 and n >= edge), (n, lowered)


def test_layer_norm_schedules_are_not_refused(monkeypatch, capsys):
    monkeypatch.setenv("TL_DEBUG", "1")
    x = G.Variable("x", (48, 96), "float32")
    xv = R.standard_normal((48, 96)).astype("f4")
    (got,) = G.Executor([G.layer_norm(x)]).run({x: xv})
    want = (xv - xv.mean(-1, keepdims=True)) / np.sqrt(xv.var(-1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    assert "was refused" not in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.parametrize("shape_a,shape_b,tb", [((130, 200), (200, 150), False),
                                                ((3, 90, 90), (90, 100), False),
                                                ((2, 80, 100), (2, 150, 100), True)])
def test_large_matmuls_read_B_packed_in_panels(shape_a, shape_b, tb, monkeypatch):
    """Above PACK_MIN_FLOPS, with B larger than two L2 caches (here: 16 KiB ones) or read
    transposed, the executor's matmul copies B into panels of the tile's width (one
    contiguous run per k); results stay numpy's, batched and transposed too."""
    set_host_caches(monkeypatch, 32 << 10, 16 << 10, 1 << 20)
    executor._KERNELS.clear()
    members = (("matmul", (("ta", False), ("tb", tb)), (("in", 0), ("in", 1))),)
    mod, _ = executor.compile_group(members, (shape_a, shape_b), ("float32", "float32"),
                                    "llvm", "hand")
    assert "_packed" in str(mod.lowered)
    a, b = G.Variable("a", shape_a, "float32"), G.Variable("b", shape_b, "float32")
    av = R.standard_normal(shape_a).astype("f4")
    bv = R.standard_normal(shape_b).astype("f4")
    (got,) = G.Executor([G.make("matmul", (a, b), ta=False, tb=tb)]).run({a: av, b: bv})
    want = av @ (np.swapaxes(bv, -1, -2) if tb else bv)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    small = executor.compile_group(members, ((7, 13), (13, 5)) if not tb else
                                   ((7, 13), (5, 13)), ("float32", "float32"), "llvm",
                                   "hand")[0]
    assert "_packed" not in str(small.lowered)
    monkeypatch.undo()
    executor._KERNELS.clear()
    if not tb:    # B within two (real) L2 caches, read along its rows: read in place
        again = executor.compile_group(members, (shape_a, shape_b), ("float32", "float32"),
                                       "llvm", "hand")[0]
        assert "_packed" not in str(again.lowered)


def test_run_takes_each_runs_arrays_and_keeps_none_alive():
    """The executor remembers the address of the arrays of the last run (a weak reference
    each) to skip numpy's pointer lookup when the same arrays come again: a run with new
    arrays, with arrays freed and allocated again (possibly at the same id), with the
    same arrays written in between — numpy's result each time; and a fed array or an
    output array dropped by the caller is freed."""
    import gc
    import weakref

    x, y = G.Variable("x", (64, 48), "float32"), G.Variable("y", (48, 40), "float32")
    ex = G.Executor([G.matmul(x, y)])
    rng = np.random.default_rng(5)
    for k in range(6):
        xv = rng.standard_normal((64, 48)).astype("f4")
        yv = rng.standard_normal((48, 40)).astype("f4")
        out = np.empty((64, 40), "f4")
        for _ in range(2):
            ex.run({x: xv, y: yv}, out=[out])
            np.testing.assert_allclose(out, xv @ yv, rtol=1e-5, atol=1e-4)
            xv *= -1.0                    # the same array, new values
        if k % 2:
            del xv, yv, out               # freed: the next ones may reuse their ids
            gc.collect()
    xv = rng.standard_normal((64, 48)).astype("f4")
    out = np.empty((64, 40), "f4")
    refs = weakref.ref(xv), weakref.ref(out)
    ex.run({x: xv, y: np.ones((48, 40), "f4")}, out=[out])
    del xv, out
    gc.collect()
    assert all(r() is None for r in refs)


def test_run_writes_into_given_output_arrays_and_checks_them():
    a, b = G.Variable("a", (5, 4), "float32"), G.Variable("b", (5, 4), "float32")
    ex = G.Executor([a + b, a, a * b])
    av = R.standard_normal((5, 4)).astype("f4")
    bv = R.standard_normal((5, 4)).astype("f4")
    o1, o2 = np.empty((5, 4), "f4"), np.empty((5, 4), "f4")
    got = ex.run({a: av, b: bv}, out=[o1, o2, None])
    assert got[0] is o1 and got[1] is o2
    np.testing.assert_array_equal(o1, av + bv)
    np.testing.assert_array_equal(o2, av)           # a fed Variable is copied in
    np.testing.assert_array_equal(got[2], av * bv)
    again = ex.run({a: bv, b: av}, out=[o1, None, None])
    assert again[0] is o1 and again[1] is not o2
    np.testing.assert_array_equal(o1, av + bv)
    for bad, match in (([o1], "list of 3"), ([np.empty((4, 5), "f4"), None, None], "shape"),
                       ([np.empty((5, 4), "f8"), None, None], "float32"),
                       ([np.empty((5, 8), "f4")[:, ::2], None, None], "C-contiguous"),
                       ([av, None, None], "shares memory with the array fed for a"),
                       ([o1, None, o1], "share memory")):
        with pytest.raises(G.GraphError, match=match):
            ex.run({a: av, b: bv}, out=bad)


def test_arrays_the_executor_allocates_start_on_a_cache_line():
    """Outputs and intermediates the executor allocates start on a 64-byte boundary
    (numpy's own start 16 bytes past one, and every vector of a row then straddles two
    lines: layer norm 63 against 75 GB/s); they hold the right values."""
    from tensorlang.backends.runtime import aligned_empty

    x = G.Variable("x", (7, 33), "float32")
    y = G.exp(x) * 2.0 + 1.0
    xv = np.linspace(-1, 1, 7 * 33, dtype="float32").reshape(7, 33)
    (got,) = G.Executor([y, G.softmax(y, axis=-1)]).run({x: xv})[:1]
    assert got.ctypes.data % 64 == 0
    np.testing.assert_allclose(got, np.exp(xv) * 2 + 1, rtol=1e-6)
    for shape, dtype in (((3, 5), "float32"), ((0, 4), "float64"), ((), "int8")):
        a = aligned_empty(shape, dtype)
        assert a.shape == shape and a.dtype == np.dtype(dtype) and a.flags.c_contiguous
        assert a.size == 0 or a.ctypes.data % 64 == 0


def test_fresh_outputs_reuse_memory_the_caller_let_go_of():
    """run(feed) without out=: an output's memory comes from the array cache, reused once
    the caller has dropped the array and every view of it (the same addresses come back),
    never while a view lives; values are right in a loop of runs, and an output the caller
    keeps keeps its values while later runs reuse other memory."""
    x = G.Variable("x", (300, 257), "float32")
    ex = G.Executor([G.exp(x) + 1.0, x * 2.0])
    rng = np.random.default_rng(3)
    xv = rng.standard_normal((300, 257)).astype("float32")
    a, b = ex.run({x: xv})
    old = {a.ctypes.data, b.ctypes.data}
    assert all(p % 64 == 0 for p in old)
    del a, b
    a, b = ex.run({x: xv})
    assert {a.ctypes.data, b.ctypes.data} == old           # reused
    view, held = a[5:], a.ctypes.data
    del a
    for _ in range(3):
        c, d = ex.run({x: xv})
        assert held not in (c.ctypes.data, d.ctypes.data)   # a view of it lives
        del c, d
    np.testing.assert_allclose(view, (np.exp(xv) + 1.0)[5:], rtol=1e-6)
    kept = []
    for k in range(12):
        xk = rng.standard_normal((300, 257)).astype("float32")
        e, t = ex.run({x: xk})
        np.testing.assert_allclose(e, np.exp(xk) + 1.0, rtol=1e-6)
        np.testing.assert_array_equal(t, xk * 2.0)
        if k % 4 == 0:
            kept.append((xk, e, t))
    for xk, e, t in kept:
        np.testing.assert_allclose(e, np.exp(xk) + 1.0, rtol=1e-6)
        np.testing.assert_array_equal(t, xk * 2.0)


def test_a_loop_of_runs_maps_no_new_pages():
    """A loop of runs returning a 36 MiB output (above glibc's largest threshold, 32 MiB,
    from which every new array is a new mapping whose pages fault in at the first write)
    faults in no new pages once two outputs' memory is cached: without the cache, 9216
    faults a run (18 with 2 MiB pages)."""
    import resource

    n = 9 << 20
    x = G.Variable("x", (n,), "float32")
    ex = G.Executor([x + 1.0])
    xv = np.ones(n, "float32")
    for _ in range(3):
        y = ex.run({x: xv})[0]
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    hits = G.array_cache_info()["hits"]
    for _ in range(5):
        y = ex.run({x: xv})[0]
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
    assert faults < 10, faults
    assert G.array_cache_info()["hits"] - hits == 5
    assert np.all(y == 2.0)
    del y
    G.empty_array_cache()
    assert G.array_cache_info()["cached_bytes"] == 0
