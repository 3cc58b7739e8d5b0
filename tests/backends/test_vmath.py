"""float32 exp in LLVM IR (backends/llvm/vmath.py) against float64 numpy, in ulps: vector
and scalar lanes, on the host CPU, baseline x86-64 and x86-64-v3."""

import math

import numpy as np
import pytest

import tensorlang as tl

MAX_ULP = 2


def ulps(got: np.ndarray, x: np.ndarray) -> np.ndarray:
    """|got - exp(x)| in units of the float32 spacing at the true value."""
    with np.errstate(over="ignore", invalid="ignore"):
        true = np.exp(x.astype(np.float64))
    spacing = np.spacing(np.abs(true).astype(np.float32)).astype(np.float64)
    with np.errstate(invalid="ignore"):
        err = np.abs(got.astype(np.float64) - true) / spacing
    finite = np.isfinite(true) & (true < np.finfo(np.float32).max)
    return np.where(finite, err, 0.0)


def build(target, vector: bool):
    n = tl.var("n")
    X = tl.placeholder((n,), name="X")
    Y = tl.compute((n,), lambda i: tl.exp(X[i]), name="Y")
    s = tl.create_schedule(Y)
    if vector:
        o, i = s[Y].split(Y.op.axis[0], factor=16)
        s[Y].vectorize(i)
    return tl.build(s, [X, Y], target=target)


def run(f, x):
    y = np.zeros_like(x)
    f(x, y)
    return y


EDGES = np.array([0.0, -0.0, 1.0, -1.0, 1e-30, -1e-30, 1e-45, 88.0, 88.72283, 88.72284,
                  88.7229, 89.0, 100.0, -87.33, -87.34, -100.0, -103.9, -103.972,
                  -103.9721, -104.0, -150.0, -1e10, 1e10, np.inf, -np.inf, np.nan,
                  0.34657359, -0.34657359, 0.5, 2.0, 10.0, -10.0], np.float32)


@pytest.mark.parametrize("vector", [True, False])
def test_exp_is_within_two_ulps_everywhere(cpu_target, vector):
    f = build(cpu_target, vector)
    rng = np.random.default_rng(0)
    sweep = np.linspace(-105.0, 90.0, 1 << 19, dtype=np.float32)
    rand = rng.uniform(-105.0, 90.0, 1 << 19).astype(np.float32)
    small = (rng.standard_normal(1 << 16) * 1e-3).astype(np.float32)
    bits = rng.integers(0, 2 ** 32, 1 << 16, dtype=np.uint64).astype(np.uint32).view(np.float32)
    for x in (sweep, rand, small, bits, EDGES):
        got = run(f, x)
        with np.errstate(over="ignore"):
            want = np.exp(x.astype(np.float64)).astype(np.float32)
        special = ~np.isfinite(want) | (want == 0) | np.isnan(x)
        np.testing.assert_array_equal(got[special], want[special])  # inf, +0, NaN exactly
        assert ulps(got, x)[~special].max() <= MAX_ULP


def test_vector_and_scalar_lanes_agree_and_the_loop_has_no_libm_call():
    x = np.random.default_rng(1).uniform(-100, 88, 1000).astype(np.float32)
    v, sc = build("llvm", True), build("llvm", False)
    np.testing.assert_array_equal(run(v, x), run(sc, x))
    ir = v.get_source("ll")
    assert "@expf" not in ir and "llvm.exp." not in ir


def test_float16_exp_goes_through_the_float32_code():
    X = tl.placeholder((64,), "float16", name="X")
    Y = tl.compute((64,), lambda i: tl.exp(X[i]), name="Y")
    f = tl.build(tl.create_schedule(Y), [X, Y])
    x = np.linspace(-12, 11, 64).astype(np.float16)
    y = np.zeros_like(x)
    f(x, y)
    np.testing.assert_array_equal(y, np.exp(x.astype(np.float32)).astype(np.float16))


def test_an_rfactor_accumulator_is_a_vector_register_not_a_gather():
    """S_rf[k_inner, 0] in a [16, 1] buffer: consecutive lanes are consecutive elements
    (the trailing extent is 1), so the vector loop loads and stores it whole."""
    X = tl.placeholder((64, 256), name="X")
    r = tl.reduce_axis((0, 256), name="r")
    S = tl.compute((64,), lambda i: tl.sum(X[i, r], axis=r), name="S")
    s = tl.create_schedule(S)
    ko, ki = s[S].split(r, factor=16)
    rf = s.rfactor(S, ki)
    kk, i = s[rf].op.axis
    (kr,) = s[rf].op.reduce_axis
    s[rf].reorder(i, kr, kk)
    s[rf].vectorize(kk)
    s[rf].compute_at(s[S], s[S].op.axis[0])
    f = tl.build(s, [X, S])
    assert "gather" not in f.get_source("ll") and "scatter" not in f.get_source("ll")
    x = np.random.default_rng(0).random((64, 256), dtype=np.float32)
    out = np.zeros(64, np.float32)
    f(x, out)
    np.testing.assert_allclose(out, x.sum(1), rtol=1e-5)


# ------------------------------------------------------------- log, tanh and erf (vmath.py)
def _erf64(x: np.ndarray) -> np.ndarray:
    return np.vectorize(math.erf, otypes=[np.float64])(x)


FUNCTIONS = {  # name: (te function, float64 reference, bound in ulps, a range to sweep)
    "log": (tl.log, np.log, 1, (1e-3, 100.0)),
    "tanh": (tl.tanh, np.tanh, 2, (-12.0, 12.0)),
    "erf": (tl.erf, _erf64, 3, (-5.0, 5.0)),
}
SPECIALS = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 1e-38, 1.0, -1.0,
                     0.625, -0.625, 0.62500006, 3.8325, 3.9, -3.9, 3.9000001, 1e30, -1e30,
                     2.0 ** -126, 0.70710677, 0.7071068, 1.4142135], np.float32)


def build_fn(fn, target, vector: bool):
    n = tl.var("n")
    X = tl.placeholder((n,), name="X")
    Y = tl.compute((n,), lambda i: fn(X[i]), name="Y")
    s = tl.create_schedule(Y)
    if vector:
        o, i = s[Y].split(Y.op.axis[0], factor=16)
        s[Y].vectorize(i)
    return tl.build(s, [X, Y], target=target)


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
@pytest.mark.parametrize("vector", [True, False])
def test_log_tanh_erf_are_within_their_ulp_bounds(cpu_target, name, vector):
    fn, ref, bound, (lo, hi) = FUNCTIONS[name]
    f = build_fn(fn, cpu_target, vector)
    rng = np.random.default_rng(2)
    bits = rng.integers(0, 2 ** 32, 1 << 17, dtype=np.uint64).astype(np.uint32).view(np.float32)
    for x in (bits, rng.uniform(lo, hi, 1 << 17).astype(np.float32),
              np.linspace(lo, hi, 1 << 17, dtype=np.float32), SPECIALS):
        got = run(f, x)
        x64 = x.astype(np.float64)
        with np.errstate(all="ignore"):
            true = ref(x64)
        want = true.astype(np.float32)
        special = ~np.isfinite(want) | np.isnan(x) | (want == 0)
        np.testing.assert_array_equal(got[special], want[special])   # inf, 0, NaN exactly
        spacing = np.spacing(np.abs(want[~special])).astype(np.float64)
        err = np.abs(got[~special].astype(np.float64) - true[~special]) / spacing
        assert err.max() <= bound, (name, x[~special][err.argmax()], err.max())
        assert np.all(np.signbit(got[x == 0]) == np.signbit(x[x == 0])) or name == "log"


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_vector_log_tanh_erf_have_no_call_per_lane(name):
    f = build_fn(FUNCTIONS[name][0], "llvm", True)
    ir = f.get_source("ll")
    assert f"llvm.{name}." not in ir and f"@{name}f" not in ir and "call float @" not in ir
    x = np.random.default_rng(3).uniform(0.01, 3, 1000).astype(np.float32)
    np.testing.assert_array_equal(run(f, x), run(build_fn(FUNCTIONS[name][0], "llvm", False), x))


# ------------------------------------------------------------ fast math (opt-in)
def test_fastmath_is_opt_in_and_close():
    import tensorlang as tl

    n = 1000
    X = tl.placeholder((n,), "float32", name="X")
    r = tl.reduce_axis((0, n), name="r")
    M = tl.compute((1,), lambda i: tl.max(X[r], axis=r), name="M")
    Y = tl.compute((n,), lambda i: tl.exp(X[i] - M[0]) / 3.0, name="Y")
    s = tl.create_schedule(Y)
    s[Y].vectorize(s[Y].split(Y.op.axis[0], factor=16)[1])
    exact = tl.build(s, [X, Y], name="e_exact")
    fast = tl.build(s, [X, Y], name="e_fast", fastmath=True)
    assert "fast" not in exact.get_source() and " fast " in fast.get_source()
    assert "maxnum" in fast.get_source() and "maximum" in exact.get_source()
    x = np.random.default_rng(0).uniform(-80, 80, n).astype("float32")
    want = np.exp((x - x.max()).astype("f8")) / 3     # x - max is rounded in float32 first
    for f, rtol in ((exact, 5e-7), (fast, 3e-6)):
        y = np.zeros(n, "float32")
        f(x, y)
        np.testing.assert_allclose(y, want, rtol=rtol, atol=1e-37)
    with pytest.raises(tl.TensorlangError, match="fastmath"):
        tl.build(s, [X, Y], name="e_bad", fastmath="yes")


def test_fastmath_environment_switch(monkeypatch):
    import tensorlang as tl

    X = tl.placeholder((64,), "float32", name="X")
    Y = tl.compute((64,), lambda i: X[i] / 7.0, name="Y")
    monkeypatch.setenv("TL_FASTMATH", "1")
    f = tl.build(tl.create_schedule(Y), [X, Y], name="env_fast")
    assert "fdiv fast" in f.get_source() or "fmul fast" in f.get_source()


def test_avx512_exp_scales_with_vscalefps_and_others_do_not():
    # AVX-512 targets take `_exp_scalef` (no range test, no branch); the results are
    # checked on the host above when it has AVX-512 (16 lanes)
    v4 = build(tl.Target.parse("llvm -mcpu=x86-64-v4"), True).get_source("asm")
    v3 = build(tl.Target.parse("llvm -mcpu=x86-64-v3"), True).get_source("asm")
    assert "vscalefps" in v4
    assert "vscalefps" not in v3
