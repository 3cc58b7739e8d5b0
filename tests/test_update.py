"""Update stages and scatter (tl.update): Halide's update definitions over an RDom (a
histogram, a running maximum, a prefix sum) and TVM's scatter, against numpy; the refusals
of unsafe schedules with their witnesses; atomic parallel updates on the thread pool; run-
time checks of data-dependent write indices; the CUDA C of an atomic histogram."""

from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tensorlang as tl  # noqa: E402

SIZES = [(1, 1), (7, 13), (61, 97)]


# ------------------------------------------------------------------------- programs
def histogram(h, w, bins=256, dtype="int32"):
    """Halide lesson 09: hist(x) = 0; hist(im(r.x, r.y)) += 1."""
    im = tl.placeholder((h, w), dtype="int32", name="im")
    zero = tl.compute((bins,), lambda i: tl.const(0, dtype), name="zero")
    rx, ry = tl.reduce_axis(h, "rx"), tl.reduce_axis(w, "ry")
    hist = tl.update(zero, [rx, ry], index=lambda x, y: im[x, y],
                     value=lambda old, x, y: old + tl.const(1, dtype), name="hist")
    return im, hist


def hist_ref(a, bins, dtype="int32"):
    return np.bincount(a.ravel(), minlength=bins).astype(dtype)


def run(s, args, arrays, target="llvm"):
    f = tl.build(s, args, target=target)
    f(*arrays)
    return f


def test_histogram_matches_numpy_and_lowers_in_place():
    rng = np.random.default_rng(0)
    for h, w in SIZES:
        im, hist = histogram(h, w)
        s = tl.create_schedule(hist)
        text = str(tl.lower(s, [im, hist]))
        # one buffer: the init stage and the update store into the argument hist
        assert "hist[i] = 0" in text and "zero" not in text and "hist_init" not in text
        a = rng.integers(0, 256, (h, w), dtype="int32")
        out = np.full(256, -7, "int32")
        run(s, [im, hist], [a, out])
        np.testing.assert_array_equal(out, hist_ref(a, 256))
        ref = np.full(256, -7, "int32")
        tl.run_lowered(tl.lower(s, [im, hist]), [a, ref])
        np.testing.assert_array_equal(ref, out)


def running_max(n):
    """Halide lesson 09's running maximum: f(r) = max(f(r), f(r - 1)) over r in [1, n)."""
    X = tl.placeholder((n,), name="X")
    f = tl.compute((n,), lambda i: X[i], name="f")
    r = tl.reduce_axis((1, n), "r")
    M = tl.update(f, [r], index=lambda r: r, value=lambda old, r: tl.maximum(old, f[r - 1]),
                  name="M")
    return X, M


def prefix_sum(n, dtype="float64"):
    """A prefix sum as an update over an RDom: p(r) = p(r) + p(r - 1)."""
    X = tl.placeholder((n,), dtype=dtype, name="X")
    p = tl.compute((n,), lambda i: X[i], name="p")
    r = tl.reduce_axis((1, n), "r")
    P = tl.update(p, [r], index=lambda r: (r,), value=lambda old, r: old + p[r - 1], name="P")
    return X, P


@pytest.mark.parametrize("n", [1, 13, 1000])
def test_running_max_and_prefix_sum(n):
    rng = np.random.default_rng(n)
    X, M = running_max(n)
    x = rng.standard_normal(n).astype("float32")
    out = np.zeros(n, "float32")
    run(tl.create_schedule(M), [X, M], [x, out])
    np.testing.assert_array_equal(out, np.maximum.accumulate(x))
    X, P = prefix_sum(n)
    x = rng.integers(-50, 50, n).astype("float64")
    out = np.zeros(n)
    s = tl.create_schedule(P)
    run(s, [X, P], [x, out])
    np.testing.assert_array_equal(out, np.cumsum(x))


def test_symbolic_size_prefix_sum_and_its_parallel_refused():
    n = tl.var("n")
    X, P = prefix_sum(n)
    s = tl.create_schedule(P)
    f = tl.build(s, [X, P])
    for m in (1, 2, 31):
        x = np.arange(m, dtype="float64")
        out = np.zeros(m)
        f(x, out)
        np.testing.assert_array_equal(out, np.cumsum(x))
    (r,) = s[P].op.reduce_axis
    with pytest.raises(tl.IllegalScheduleError) as e:
        s[P].parallel(r)
    src, dst = e.value.witness
    assert src["r"] < dst["r"]                  # a true (affine) dependence: r reads r - 1
    with pytest.raises(tl.ScheduleError, match="not old \\+ x"):
        s[P].parallel(r, atomic=True)           # old + P[r - 1] reads the updated tensor


def scatter(n, m, dtype="float32"):
    """TVM's scatter(data, indices, updates) on one axis: out = data, then
    out[indices[i]] = updates[i] in order (the last write to an element wins)."""
    data = tl.placeholder((n,), dtype=dtype, name="data")
    indices = tl.placeholder((m,), dtype="int32", name="indices")
    updates = tl.placeholder((m,), dtype=dtype, name="updates")
    i = tl.reduce_axis(m, "i")
    out = tl.update(data, [i], index=lambda i: indices[i], value=lambda old, i: updates[i],
                    name="out")
    return data, indices, updates, out


def scatter_ref(d, idx, upd):
    out = d.copy()
    for k, j in enumerate(idx):
        out[j] = upd[k]
    return out


@pytest.mark.parametrize("n,m", [(1, 1), (7, 13), (101, 300)])
def test_scatter_matches_numpy_in_order(n, m):
    rng = np.random.default_rng(n * m)
    data, indices, updates, out = scatter(n, m)
    s = tl.create_schedule(out)
    d = rng.standard_normal(n).astype("float32")
    idx = rng.integers(0, n, m).astype("int32")        # duplicates: order matters
    upd = rng.standard_normal(m).astype("float32")
    o = np.zeros(n, "float32")
    d0 = d.copy()
    run(s, [data, indices, updates, out], [d, idx, upd, o])
    np.testing.assert_array_equal(o, scatter_ref(d, idx, upd))
    np.testing.assert_array_equal(d, d0)               # the input is copied, not updated
    if m > 1:       # an overwrite is not commutative: neither reordered nor atomic
        (i,) = s[out].op.reduce_axis
        io, ii = s[out].split(i, factor=4)
        with pytest.raises(tl.IllegalScheduleError) as e:
            s[out].reorder(ii, io)
        assert e.value.witness is not None
        with pytest.raises(tl.ScheduleError, match="associative and commutative"):
            s[out].parallel(io, atomic=True)


def test_scatter_2d_along_axis_0():
    """scatter_elements on axis 0: out[indices[i, j], j] = updates[i, j]."""
    data = tl.placeholder((5, 3), name="data")
    indices = tl.placeholder((4, 3), dtype="int32", name="indices")
    updates = tl.placeholder((4, 3), name="updates")
    i, j = tl.reduce_axis(4, "i"), tl.reduce_axis(3, "j")
    out = tl.update(data, [i, j], index=lambda i, j: (indices[i, j], j),
                    value=lambda old, i, j: old + updates[i, j], name="out")
    rng = np.random.default_rng(2)
    d = rng.standard_normal((5, 3)).astype("float32")
    idx = rng.integers(0, 5, (4, 3)).astype("int32")
    u = rng.standard_normal((4, 3)).astype("float32")
    o = np.zeros((5, 3), "float32")
    run(tl.create_schedule(out), [data, indices, updates, out], [d, idx, u, o])
    ref = d.copy()
    np.add.at(ref, (idx, np.broadcast_to(np.arange(3), (4, 3))), u)
    np.testing.assert_allclose(o, ref, rtol=1e-6)


# ------------------------------------------------------------------------- refusals
def test_parallel_histogram_is_refused_with_the_racing_pair():
    im, hist = histogram(8, 8)
    s = tl.create_schedule(hist)
    rx, ry = hist.op.reduce_axis
    with pytest.raises(tl.IllegalScheduleError, match="may write the same element") as e:
        s[hist].parallel(rx)
    src, dst = e.value.witness
    assert src["rx"] != dst["rx"]               # two iterations of the parallel loop
    assert "atomic=True" in str(e.value)
    yo, yi = s[hist].split(ry, factor=4)
    with pytest.raises(tl.IllegalScheduleError) as e:
        s[hist].vectorize(yi)
    src, dst = e.value.witness
    assert src["ry"] != dst["ry"] and src["rx"] == dst["rx"]
    with pytest.raises(tl.IllegalScheduleError):    # the order of may-writes is kept
        s[hist].reorder(yo, rx)
    with pytest.raises(tl.ScheduleError, match="update stage"):
        s[hist].compute_inline()
    with pytest.raises(tl.ScheduleError, match="first value of the update"):
        s[hist.op.init].compute_inline()
    with pytest.raises(tl.ScheduleError, match="update stage"):
        s.cache_write(hist, "local")
    # nothing was kept: the serial schedule still computes the histogram
    a = np.random.default_rng(1).integers(0, 256, (8, 8), dtype="int32")
    out = np.zeros(256, "int32")
    run(s, [im, hist], [a, out])
    np.testing.assert_array_equal(out, hist_ref(a, 256))


def test_a_reader_of_the_updated_tensor_is_ordered_after_every_update():
    im, hist = histogram(6, 5, bins=16)
    cdf = tl.compute((16,), lambda i: hist[i] * 2, name="cdf")
    s = tl.create_schedule(cdf)
    a = np.random.default_rng(3).integers(0, 16, (6, 5), dtype="int32")
    out = np.zeros(16, "int32")
    run(s, [im, cdf], [a, out])
    np.testing.assert_array_equal(out, 2 * hist_ref(a, 16))


def test_out_of_bounds_data_dependent_index_raises():
    im, hist = histogram(3, 4, bins=8)
    f = tl.build(tl.create_schedule(hist), [im, hist])
    for bad in (8, -1):
        a = np.zeros((3, 4), "int32")
        a[2, 1] = bad
        out = np.zeros(8, "int32")
        with pytest.raises(tl.IndexBoundsError, match=r"hist\[im\[rx, ry\]\]") as e:
            f(a, out)
        assert e.value.index == bad
    data, indices, updates, out = scatter(4, 3)
    s = tl.create_schedule(out)
    args = [data, indices, updates, out]
    with pytest.raises(tl.IndexBoundsError, match=r"writes out\[indices\[i\]\]"):
        run(s, args, [np.zeros(4, "float32"), np.array([0, 4, 1], "int32"),
                      np.zeros(3, "float32"), np.zeros(4, "float32")])
    with pytest.raises(tl.IndexBoundsError):
        tl.run_lowered(tl.lower(s, [data, indices, updates, out]),
                       [np.zeros(4, "float32"), np.array([0, 4, 1], "int32"),
                        np.zeros(3, "float32"), np.zeros(4, "float32")])


# ------------------------------------------------------------------------- atomics
def test_atomic_parallel_histogram_is_exact_under_threads():
    from tensorlang.backends.llvm.pool import pool_threads

    im, hist = histogram(400, 250, bins=5)          # few bins: many colliding updates
    s = tl.create_schedule(hist)
    rx, _ = hist.op.reduce_axis
    s[hist].parallel(rx, atomic=True)
    assert "+= 1  # atomic" in str(tl.lower(s, [im, hist]))
    f = tl.build(s, [im, hist])
    assert "atomicrmw add" in f.get_source()
    if pool_threads() < 2:      # (the suite's own thread count: a module that set
        pytest.skip("one thread: no concurrent updates to race")   # it would change every
    rng = np.random.default_rng(5)                                  # later test's schedules)
    for _ in range(30):
        a = rng.integers(0, 5, (400, 250), dtype="int32")
        out = np.zeros(5, "int32")
        f(a, out)
        np.testing.assert_array_equal(out, hist_ref(a, 5))


@pytest.mark.parametrize("kind", ["add", "max", "min"])
def test_atomic_float_scatter_reductions(kind):
    n, m = 7, 20000
    data = tl.placeholder((n,), dtype="float64", name="data")
    indices = tl.placeholder((m,), dtype="int32", name="indices")
    updates = tl.placeholder((m,), dtype="float64", name="updates")
    i = tl.reduce_axis(m, "i")
    comb = {"add": lambda a, b: a + b, "max": tl.maximum, "min": tl.minimum}[kind]
    out = tl.update(data, [i], index=lambda i: indices[i],
                    value=lambda old, i: comb(updates[i], old), name="out")
    s = tl.create_schedule(out)
    io, ii = s[out].split(i, factor=64)
    s[out].parallel(io, atomic=True)
    f = tl.build(s, [data, indices, updates, out])
    src = f.get_source()        # (LLVM expands a float atomicrmw on x86 to a cmpxchg loop)
    assert "cmpxchg" in src or (kind == "add" and "atomicrmw fadd" in src)
    rng = np.random.default_rng(11)
    for _ in range(10):
        d = rng.integers(-9, 9, n).astype("float64")
        idx = rng.integers(0, n, m).astype("int32")
        u = rng.integers(-1000, 1000, m).astype("float64")   # exact sums in any order
        o = np.zeros(n)
        f(d, idx, u, o)
        ref = d.copy()
        {"add": np.add, "max": np.maximum, "min": np.minimum}[kind].at(ref, idx, u)
        np.testing.assert_array_equal(o, ref)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
def test_cuda_c_of_the_atomic_histogram_compiles(tmp_path):
    im, hist = histogram(64, 64)
    with pytest.raises(tl.IllegalScheduleError):
        tl.create_schedule(hist)[hist].bind(hist.op.reduce_axis[0], "blockIdx.x")
    f = _atomic_histogram_on_gpu("cuda", name="tl_hist")
    src = f.get_source()
    assert "atomicAdd(&hist[" in src
    X = tl.placeholder((64,), name="X")
    I = tl.placeholder((64,), dtype="int32", name="I")
    lo = tl.compute((8,), lambda i: tl.min_value("float32"), name="lo")
    r = tl.reduce_axis(64, "r")
    mx = tl.update(lo, [r], index=lambda r: I[r], value=lambda old, r: tl.maximum(old, X[r]),
                   name="mx")
    s2 = tl.create_schedule(mx)
    s2[mx.op.init].bind(mx.op.init.op.axis[0], "threadIdx.x")
    ro, ri = s2[mx].split(r, factor=32)
    s2[mx].bind(ro, "blockIdx.x", atomic=True)
    s2[mx].bind(ri, "threadIdx.x", atomic=True)
    g = tl.build(s2, [X, I, mx], target="cuda", name="tl_max")
    assert "tl_atomic_fmax(&mx[" in g.get_source()
    for k, mod in enumerate((f, g)):
        path = tmp_path / f"k{k}.cu"
        mod.save(path)
        r = subprocess.run(["nvcc", "-ptx", "-arch=sm_90", "-std=c++17", "-o",
                            str(tmp_path / f"k{k}.ptx"), str(path)], capture_output=True,
                           text=True)
        assert r.returncode == 0, r.stderr


# ------------------------------------------------------------------- property test
@st.composite
def update_programs(draw):
    n = draw(st.integers(1, 9))
    m = draw(st.integers(1, 12))
    form = draw(st.sampled_from(["add", "max", "set", "affine"]))
    factor = draw(st.integers(1, 5))
    atomic = draw(st.booleans())
    seed = draw(st.integers(0, 2**16))
    return n, m, form, factor, atomic, seed


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(update_programs())
def test_random_update_programs_match_the_interpreter(prog):
    n, m, form, factor, atomic, seed = prog
    X = tl.placeholder((m,), dtype="int32", name="X")
    idx = tl.placeholder((m,), dtype="int32", name="idx")
    base = tl.compute((n,), lambda i: i * 3, name="base")
    r = tl.reduce_axis(m, "r")
    index = {"affine": lambda r: r % n}.get(form, lambda r: idx[r])
    value = {"add": lambda old, r: old + X[r], "max": lambda old, r: tl.maximum(old, X[r]),
             "set": lambda old, r: X[r] - old,
             "affine": lambda old, r: old * 2 + X[r]}[form]
    U = tl.update(base, [r], index=index, value=value, name="U")
    s = tl.create_schedule(U)
    ro, ri = s[U].split(r, factor=factor)
    if form in ("add", "max") and atomic:
        s[U].parallel(ro, atomic=True)
    elif form != "affine" and m > factor:   # may-writes: any two chunks may collide
        with pytest.raises(tl.IllegalScheduleError):
            s[U].parallel(ro)
    else:   # exact (affine) writes: when isl allows it, any order of the chunks agrees
        try:
            s[U].parallel(ro)
        except tl.IllegalScheduleError as e:
            a, b = e.witness
            assert (a["r"] - b["r"]) % n == 0 and a["r"] != b["r"]
    rng = np.random.default_rng(seed)
    x = rng.integers(-20, 20, m).astype("int32")
    ix = rng.integers(0, n, m).astype("int32")
    ref = np.arange(n, dtype="int32") * 3
    for k in range(m):                  # the declared, sequential meaning
        j = k % n if form == "affine" else ix[k]
        old = ref[j]
        ref[j] = {"add": old + x[k], "max": max(old, x[k]), "set": x[k] - old,
                  "affine": old * 2 + x[k]}[form]
    args, arrays = ([X, U], [x]) if form == "affine" else ([X, idx, U], [x, ix])
    for order in ("forward", "reverse"):     # reverse: parallel loops run backwards
        got = np.zeros(n, "int32")
        tl.run_lowered(tl.lower(s, args), arrays + [got], parallel_order=order)
        np.testing.assert_array_equal(got, ref)
    out = np.zeros(n, "int32")
    run(s, args, arrays + [out])
    np.testing.assert_array_equal(out, ref)


# ------------------------------------------------------------ Halide lesson 09, ported
def test_halide_lesson_09_update_definitions():
    """Lesson 09's chain of updates on one Func, each an update of the one before:
    f(x, y) = x + y; f(3, 7) = 42; f(x, y) = f(x, y) + 17; f(x, 3) = f(x, 0) * f(x, 10);
    f(0, y) = f(0, y) / f(3, y)."""
    W, H = 12, 11
    f = tl.compute((W, H), lambda x, y: (x + y).astype("float32"), name="f")
    one = tl.reduce_axis(1, "one")
    f1 = tl.update(f, [one], index=lambda one: (3, 7), value=lambda old, one: 42.0,
                   name="f1")
    rx, ry = tl.reduce_axis(W, "rx"), tl.reduce_axis(H, "ry")
    f2 = tl.update(f1, [rx, ry], index=lambda x, y: (x, y), value=lambda old, x, y: old + 17,
                   name="f2")
    sx = tl.reduce_axis(W, "sx")
    f3 = tl.update(f2, [sx], index=lambda x: (x, 3), value=lambda old, x: f2[x, 0] * f2[x, 10],
                   name="f3")
    sy = tl.reduce_axis(H, "sy")
    f4 = tl.update(f3, [sy], index=lambda y: (0, y), value=lambda old, y: old / f3[3, y],
                   name="f4")
    s = tl.create_schedule(f4)
    # f2 is an update at every point of exact (affine) writes: its loops are data-parallel
    s[f2].parallel(rx)
    syo, syi = s[f4].split(sy, factor=4)
    out = np.zeros((W, H), "float32")
    run(s, [f4], [out])
    ref = np.add.outer(np.arange(W), np.arange(H)).astype("float32")
    ref[3, 7] = 42
    ref += 17
    ref[:, 3] = ref[:, 0] * ref[:, 10]
    for y in range(H):                  # in order: row 3's own value changes at y = 0 only
        ref[0, y] = ref[0, y] / ref[3, y]
    np.testing.assert_allclose(out, ref, rtol=1e-6)
    # f3 writes row 3 and reads rows 0 and 10: no iteration reads another's write
    s[f3].parallel(f3.op.reduce_axis[0])
    s[f4].parallel(syo)
    out = np.zeros((W, H), "float32")
    run(s, [f4], [out])
    np.testing.assert_allclose(out, ref, rtol=1e-6)
    # an update that reads what an earlier iteration wrote keeps its order
    gx = tl.reduce_axis(W, "gx")
    g = tl.update(f, [gx], index=lambda x: (x, 0), value=lambda old, x:
                  tl.if_then_else(x > 0, f[x - 1, 0], old), name="g")
    with pytest.raises(tl.IllegalScheduleError) as e:
        tl.create_schedule(g)[g].parallel(gx)
    src, dst = e.value.witness
    assert dst["gx"] == src["gx"] + 1


def test_auto_schedule_refuses_update_stages():
    im, hist = histogram(4, 4)
    with pytest.raises(NotImplementedError, match="update stage"):
        tl.auto_schedule(hist, target="llvm", budget_s=1)


def test_update_arguments_are_checked():
    A = tl.placeholder((4, 3), name="A")
    r = tl.reduce_axis(4, "r")
    k = tl.reduce_axis(3, "k")
    with pytest.raises(tl.TensorlangError, match="returned 1 indices but A has 2"):
        tl.update(A, [r], index=lambda r: r, value=lambda old, r: old)
    with pytest.raises(tl.TensorlangError, match="must be tl.reduce_axis"):
        tl.update(A, [3], index=lambda r: (r, 0), value=lambda old, r: old)
    with pytest.raises(tl.TensorlangError, match="takes 1 arguments but old and 2"):
        tl.update(A, [r, k], index=lambda r, k: (r, k), value=lambda old: old)
    with pytest.raises(tl.TensorlangError, match="integer expression"):
        tl.update(A, [r], index=lambda r: (r, A[r, 0]), value=lambda old, r: old)
    with pytest.raises(tl.TensorlangError, match="not one of the update's axes"):
        tl.update(A, [r], index=lambda r: (r, 0), value=lambda old, r: old + k)
    j = tl.reduce_axis((0, r), "j")
    with pytest.raises(NotImplementedError, match="rectangular"):
        tl.update(A, [r, j], index=lambda r, j: (r, j), value=lambda old, r, j: old)


def test_nvptx_atomic_histogram_is_one_atom_add():
    im, hist = histogram(64, 64)
    s = tl.create_schedule(hist)
    s[hist.op.init].bind(hist.op.init.op.axis[0], "threadIdx.x")
    rx, ry = hist.op.reduce_axis
    s[hist].bind(rx, "blockIdx.x", atomic=True)
    s[hist].bind(ry, "threadIdx.x", atomic=True)
    ptx = tl.build(s, [im, hist], target="nvptx").get_source()
    assert "atom.global.add.u32" in ptx


def _atomic_histogram_on_gpu(target, name="main"):
    """The 64 x 64 histogram with its updates bound to blocks and threads, atomic."""
    im, hist = histogram(64, 64)
    s = tl.create_schedule(hist)
    rx, ry = hist.op.reduce_axis
    io, ii = s[hist.op.init].split(hist.op.init.op.axis[0], factor=64)
    s[hist.op.init].bind(io, "blockIdx.x")
    s[hist.op.init].bind(ii, "threadIdx.x")
    s[hist].bind(rx, "blockIdx.x", atomic=True)
    s[hist].bind(ry, "threadIdx.x", atomic=True)
    return tl.build(s, [im, hist], target=target, name=name)


@pytest.mark.gpu
@pytest.mark.parametrize("target", ["cuda", "nvptx"])
def test_the_atomic_histogram_runs_right_on_the_gpu(target):
    from tests.cuda.test_cuda import _has_gpu

    if not _has_gpu():
        pytest.skip("needs an NVIDIA GPU and pycuda")
    f = _atomic_histogram_on_gpu(target)
    rng = np.random.default_rng(7)
    for _ in range(5):          # 4096 threads adding into 256 bins: a race would lose counts
        a = rng.integers(0, 256, (64, 64)).astype("int32")
        out = np.zeros(256, "int32")
        f(a, out)
        np.testing.assert_array_equal(out, hist_ref(a, 256))
