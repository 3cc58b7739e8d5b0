"""Targets, cross compilation and saved kernels.

The emulation tests link each kernel's object file with a C harness using Debian's cross
compilers and run it under qemu-user (`.ci/run` installs them); they skip, saying which
package is missing, elsewhere. x86-64-v3 objects run natively.
"""

import ctypes
import subprocess

import numpy as np
import pytest

import tensorlang as tl
from tensorlang.aot import ToolchainMissing, toolchain

CROSS = ["aarch64", "aarch64+sve", "riscv64", "riscv64+v", "x86-64-v3"]


def need(target):
    try:
        return toolchain(tl.Target.parse(target))
    except ToolchainMissing as e:
        pytest.skip(str(e))


# ------------------------------------------------------------------------------ kernels
def vector_axpy(target, n=None):
    n = n if n is not None else tl.var("n")
    A = tl.placeholder((n,), "float32", name="A")
    B = tl.placeholder((n,), "float32", name="B")
    C = tl.compute((n,), lambda i: A[i] * 3.0 + B[i], name="C")
    s = tl.create_schedule(C)
    lanes = tl.Target.parse(target).vector_lanes("float32")
    xo, xi = s[C].split(C.op.axis[0], factor=lanes)
    s[C].vectorize(xi)
    return s, [A, B, C]


def tiled_matmul(target, m, n, k, parallel=False):
    A = tl.placeholder((m, k), "float32", name="A")
    B = tl.placeholder((k, n), "float32", name="B")
    r = tl.reduce_axis((0, k), name="r")
    C = tl.compute((m, n), lambda i, j: tl.sum(A[i, r] * B[r, j], axis=r), name="C")
    s = tl.create_schedule(C)
    lanes = tl.Target.parse(target).vector_lanes("float32")
    i, j = C.op.axis
    io, jo, ii, ji = s[C].tile(i, j, 4, lanes)
    s[C].reorder(io, jo, ii, r, ji)
    s[C].vectorize(ji)
    if parallel:
        s[C].parallel(io)
    return s, [A, B, C]


def row_sum():
    n, m = tl.var("n"), tl.var("m")
    A = tl.placeholder((n, m), "float64", name="A")
    r = tl.reduce_axis((0, m), name="r")
    S = tl.compute((n,), lambda i: tl.sum(A[i, r], axis=r), name="S")
    return tl.create_schedule(S), [A, S]


def prefix_recurrence(n):
    X = tl.placeholder((n,), "float64", name="X")
    U = tl.recurrence((n,), lambda u, i: X[i] + tl.if_then_else(i >= 1, 0.5 * u[i - 1], 0.0),
                      dtype="float64", name="U")
    return tl.create_schedule(U), [X, U]


# ------------------------------------------------------------------------------ targets
def test_presets_and_their_vector_widths():
    lanes = {name: tl.Target.parse(name).vector_lanes("float32") for name in tl.Target.presets()}
    assert lanes["x86-64-v3"] == 8 and lanes["x86-64-v4"] == 16
    assert lanes["aarch64"] == 4 and lanes["aarch64+sve"] == 4
    assert lanes["riscv64+v"] == 4 and lanes["riscv64"] == 1
    assert lanes["wasm32"] == 4
    assert tl.Target.parse("aarch64").vector_lanes("float64") == 2
    assert tl.Target.parse("x86-64-v3").vector_lanes("int8") == 32
    t = tl.Target.parse("riscv64+v")
    again = tl.Target.parse(str(t))
    assert (again.triple, again.cpu, again.features) == (t.triple, t.cpu, t.features)
    assert tl.Target.parse("llvm").is_host and tl.Target.parse("llvm").name == "host"
    assert not tl.Target.parse("aarch64").is_host


def test_target_strings_with_cpu_and_features():
    t = tl.Target.parse("llvm -mtriple=aarch64-linux-gnu -mcpu=neoverse-v1")
    assert t.arch == "aarch64" and t.cpu == "neoverse-v1" and t.features == ""
    t = tl.Target.parse("llvm -mtriple=riscv64-linux-gnu -mattr=+m,+f,+d,+v,+zvl256b")
    assert t.cpu == "generic" and t.vector_bits == 256 and t.vector_lanes("float32") == 8


def test_bad_targets_list_what_is_known():
    with pytest.raises(tl.TensorlangError, match="unknown triple 'sparkle-linux'.*aarch64"):
        tl.Target.parse("llvm -mtriple=sparkle-linux")
    with pytest.raises(tl.TensorlangError, match="unknown CPU 'cortex-z9'.*neoverse-v1"):
        tl.Target.parse("llvm -mtriple=aarch64-linux-gnu -mcpu=cortex-z9")
    with pytest.raises(tl.TensorlangError, match=r"unknown feature '\+warp'.*sve"):
        tl.Target.parse("llvm -mtriple=aarch64-linux-gnu -mattr=+neon,+warp")
    with pytest.raises(tl.TensorlangError, match="unknown target 'arm-ish'.*riscv64"):
        tl.Target.parse("arm-ish")
    with pytest.raises(tl.TensorlangError, match="tl.Target"):
        tl.Target.parse(64)
    s, args = vector_axpy("aarch64")
    with pytest.raises(tl.TensorlangError, match="target must be"):
        tl.build(s, args, target=3.5)


def test_a_cross_kernel_is_not_called_in_process():
    s, args = vector_axpy("aarch64")
    f = tl.build(s, args, target="aarch64", name="axpy")
    a = np.zeros(8, "float32")
    with pytest.raises(tl.TensorlangError, match=r"cannot run in this process; use save\(\)"):
        f(a, a.copy(), a.copy())


# ------------------------------------------------------------------------------ assembly
INNER = {  # the vector multiply-add of the matmul's inner loop, per target
    "x86-64-v3": ("vfmadd", "ymm"),
    "x86-64-v4": ("vfmadd", "zmm"),
    "aarch64": ("fmla", "v"),
    "aarch64+sve": ("fmla", "v"),
    "riscv64+v": ("vfmacc", "v"),
    "riscv64": ("fmadd.s", "f"),
    "wasm32": ("f32x4.mul", "f32x4.add"),
    "amdgcn": ("v_pk_fma_f32", "v["),
}


@pytest.mark.parametrize("target", list(INNER))
def test_inner_loop_assembly_uses_the_targets_vector_instructions(target):
    s, args = tiled_matmul(target, 16, 32, 16)
    f = tl.build(s, args, target=target, name="mm")
    asm = f.get_source("asm")
    op, operand = INNER[target]
    lines = [ln for ln in asm.splitlines() if op in ln]
    assert lines, f"no {op} in the {target} assembly"
    assert any(operand in ln for ln in lines) or operand in asm


def test_save_writes_every_format(tmp_path):
    s, args = vector_axpy("aarch64")
    f = tl.build(s, args, target="aarch64", name="axpy")
    for ext in ("o", "s", "ll", "bc", "h"):
        f.save(tmp_path / f"axpy.{ext}")
    obj = (tmp_path / "axpy.o").read_bytes()
    assert obj[:4] == b"\x7fELF" and int.from_bytes(obj[18:20], "little") == 183  # EM_AARCH64
    assert (tmp_path / "axpy.bc").read_bytes()[:2] == b"BC"
    assert "fmla" in (tmp_path / "axpy.s").read_text()
    assert "define" in (tmp_path / "axpy.ll").read_text()
    h = (tmp_path / "axpy.h").read_text()
    assert "int32_t axpy(" in h and "float *A  /* float32[n] */" in h and "int64_t n" in h
    rv = tl.build(*vector_axpy("riscv64+v"), target="riscv64+v", name="axpy")
    rv.save(tmp_path / "rv.o")
    rvo = (tmp_path / "rv.o").read_bytes()
    assert int.from_bytes(rvo[18:20], "little") == 243  # EM_RISCV
    wasm = tl.build(*vector_axpy("wasm32"), target="wasm32", name="axpy")
    wasm.save(tmp_path / "w.o")
    assert (tmp_path / "w.o").read_bytes()[:4] == b"\0asm"


def test_save_refuses_what_it_cannot_write(tmp_path):
    s, args = vector_axpy("aarch64")
    with pytest.raises(tl.TensorlangError, match="C reserves"):
        tl.build(s, args, target="aarch64").save(tmp_path / "k.o")  # named "main"
    f = tl.build(s, args, target="aarch64", name="axpy")
    with pytest.raises(tl.TensorlangError, match="cannot tell the format"):
        f.save(tmp_path / "k.pdf")
    g = tl.build(*vector_axpy("amdgcn"), target="amdgcn", name="axpy")
    with pytest.raises(tl.TensorlangError, match="assembly and LLVM IR only"):
        g.save(tmp_path / "k.o")
    g.save(tmp_path / "k.s")
    with pytest.raises(tl.TensorlangError, match="build: name must be a C identifier"):
        tl.build(s, args, target="aarch64", name="my kernel")


def test_kernel_names_that_the_code_calls_are_refused():
    """Regression: a host kernel named "exp" that calls exp() called itself (a crash)."""
    s, args = vector_axpy("llvm")
    for name in ("exp", "expf", "malloc", "tl_aot_launch"):
        with pytest.raises(tl.TensorlangError, match="generated code may call"):
            tl.build(s, args, name=name)


@pytest.mark.parametrize("target", ["wasm32", "amdgcn"])
def test_parallel_loops_are_refused_without_threads(target):
    s, args = tiled_matmul(target, 8, 8, 8, parallel=True)
    with pytest.raises(tl.TensorlangError, match="no thread runtime"):
        tl.build(s, args, target=target, name="mm")


def test_header_compiles_as_c_and_cpp(tmp_path):
    s, args = row_sum()
    f = tl.build(s, args, name="row_sum")
    f.save(tmp_path / "row_sum.h")
    (tmp_path / "use.c").write_text('#include "row_sum.h"\nint32_t (*p)(double *, double *, '
                                    "int64_t, int64_t) = row_sum;\n")
    for cc in ("gcc", "g++"):
        r = subprocess.run([cc, "-fsyntax-only", "-Wall", "-Werror", "-x",
                            "c" if cc == "gcc" else "c++", str(tmp_path / "use.c")],
                           capture_output=True, text=True, cwd=tmp_path)
        assert r.returncode == 0, r.stderr


def test_an_object_checks_its_sizes_itself(tmp_path):
    """Sizes that would read out of bounds make the saved kernel return 2 (in Python, the
    module raises BoundsError before calling)."""
    n, m = tl.var("n"), tl.var("m")
    A = tl.placeholder((n,), "float32", name="A")
    C = tl.compute((m,), lambda i: A[i + 2], name="C")
    f = tl.build(tl.create_schedule(C), [A, C], name="shift")
    f.save(tmp_path / "shift.o")
    lib = tmp_path / "libshift.so"
    subprocess.run(["gcc", "-shared", "-o", str(lib), str(tmp_path / "shift.o")], check=True)
    k = ctypes.CDLL(str(lib)).shift
    k.restype = ctypes.c_int32
    k.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64]
    a = np.arange(10, dtype="float32")
    c = np.zeros(8, "float32")
    assert k(a.ctypes.data, c.ctypes.data, 10, 8) == 0
    np.testing.assert_array_equal(c, a[2:])
    assert k(a.ctypes.data, c.ctypes.data, 10, 9) == 2
    with pytest.raises(tl.BoundsError):
        f(a, np.zeros(9, "float32"))


# ------------------------------------------------------------------------------ emulation
@pytest.mark.parametrize("target", CROSS)
def test_vectorised_elementwise_with_a_tail(target, rng):
    need(target)
    f = tl.build(*vector_axpy(target), target=target, name="axpy")
    for size in (1, 13, 37):
        a = rng.standard_normal(size).astype("float32")
        b = rng.standard_normal(size).astype("float32")
        c = np.full(size, np.nan, "float32")
        tl.aot.run_emulated(f, a, b, c)
        np.testing.assert_allclose(c, a * 3 + b, rtol=1e-6)


@pytest.mark.parametrize("target", CROSS)
def test_tiled_matmul(target, rng):
    need(target)
    m, n, k = 13, 19, 7  # no size divides the tiles
    f = tl.build(*tiled_matmul(target, m, n, k, parallel=True), target=target, name="mm")
    a = rng.standard_normal((m, k)).astype("float32")
    b = rng.standard_normal((k, n)).astype("float32")
    c = np.zeros((m, n), "float32")
    tl.aot.run_emulated(f, a, b, c, threads=3)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("target", CROSS)
def test_reduction(target, rng):
    need(target)
    f = tl.build(*row_sum(), target=target, name="row_sum")
    a = rng.standard_normal((5, 11))
    out = np.zeros(5)
    tl.aot.run_emulated(f, a, out)
    np.testing.assert_allclose(out, a.sum(axis=1), rtol=1e-12)


@pytest.mark.parametrize("target", CROSS)
def test_recurrence(target, rng):
    need(target)
    f = tl.build(*prefix_recurrence(23), target=target, name="decay")
    x = rng.standard_normal(23)
    u = np.zeros(23)
    tl.aot.run_emulated(f, x, u)
    ref = np.zeros(23)
    for i in range(23):
        ref[i] = x[i] + (0.5 * ref[i - 1] if i else 0.0)
    np.testing.assert_allclose(u, ref, rtol=1e-12)


def test_emulation_checks_arguments_like_a_call():
    need("aarch64")
    f = tl.build(*vector_axpy("aarch64"), target="aarch64", name="axpy")
    a = np.zeros(4, "float32")
    with pytest.raises(tl.TensorlangError, match="expected dtype float32"):
        tl.aot.run_emulated(f, a, a.astype("float64"), a.copy())


def test_fp_contraction_can_be_turned_off(monkeypatch):
    s, args = tiled_matmul("aarch64", 8, 8, 8)
    assert "fmla" in tl.build(s, args, target="aarch64", name="mm").get_source("asm")
    monkeypatch.setenv("TL_FP_CONTRACT", "0")
    s, args = tiled_matmul("aarch64", 8, 8, 8)
    asm = tl.build(s, args, target="aarch64", name="mm").get_source("asm")
    assert "fmla" not in asm and "fmul" in asm


def test_targets_describe_their_caches_and_cores():
    """The cost model's and the executor's machine facts: this machine's caches from /sys
    (L1 <= L2 <= last level), an architecture's typical sizes for a cross target."""
    host = tl.Target.parse("llvm")
    l1, l2, l3 = host.cache_bytes
    assert 4 << 10 <= l1 <= l2 <= l3
    assert host.cores >= 1
    arm = tl.Target.parse("aarch64")
    assert arm.cache_bytes == (64 << 10, 1 << 20, 8 << 20) and arm.cores == 4


def test_the_last_level_cache_rate_is_the_cpus_measured_one_or_the_environments(monkeypatch):
    """The cost model's rate from the last-level cache into a core's L2: Zen 5's measured
    31 bytes a cycle, 10 for the generic x86-64 core (the same 3 GHz clock), and
    TL_L3_BYTES_PER_CYCLE over the host's alone (a named CPU is its entry), with a clear
    error for a value that is not a positive number."""
    from tensorlang.autoschedule import cost

    monkeypatch.delenv("TL_L3_BYTES_PER_CYCLE", raising=False)
    zen5 = tl.Target.parse("llvm -mtriple=x86_64-unknown-linux-gnu -mcpu=znver5")
    other = tl.Target.parse("llvm -mtriple=x86_64-unknown-linux-gnu -mcpu=x86-64-v4")
    assert (zen5.l3_bytes_per_cycle, other.l3_bytes_per_cycle) == (31.0, 10.0)
    assert zen5.cpu_model.clock_hz == other.cpu_model.clock_hz
    # a stream from the last level is predicted 3.1x faster on the faster one, and its
    # written lines cost that path once there (Zen's L3 takes the L2s' victims), twice on
    # the other: 3.1 x 3/2
    assert zen5.victim_llc and not other.victim_llc
    n = 1 << 22
    X = tl.placeholder((n,), "float32", name="X")
    Y = tl.compute((n,), lambda i: X[i] * 2.0, name="Y")
    s = tl.create_schedule(Y)
    s[Y].vectorize(s[Y].split(Y.op.axis[0], factor=16)[1])
    fast, slow = (cost.estimate(s, t).statements[0].memory_s[1] for t in (zen5, other))
    assert fast > 0 and slow == pytest.approx(3.1 * 1.5 * fast)
    host = tl.Target.parse("llvm")
    monkeypatch.setenv("TL_L3_BYTES_PER_CYCLE", "20")
    assert host.l3_bytes_per_cycle == 20.0 and zen5.l3_bytes_per_cycle == 31.0
    for bad in ("fast", "0", "-3"):
        monkeypatch.setenv("TL_L3_BYTES_PER_CYCLE", bad)
        with pytest.raises(tl.TensorlangError, match="TL_L3_BYTES_PER_CYCLE must be a "
                                                     "positive number"):
            _ = host.l3_bytes_per_cycle


@pytest.mark.parametrize("cpu,lanes,registers", [("skylake-avx512", 16, 32), ("znver5", 16, 32),
                                                ("haswell", 8, 16), ("znver3", 8, 16),
                                                ("sandybridge", 8, 16), ("x86-64", 4, 16)])
def test_an_x86_cpu_named_alone_is_described_by_its_vector_features(cpu, lanes, registers):
    """"llvm -mcpu=NAME" without -mattr: the CPU's vector features are spelled out (as the
    host's are), so vectorize and the register tiles use its width, not SSE's. An explicit
    -mattr is taken as it is."""
    t = tl.Target.parse(f"llvm -mtriple=x86_64-unknown-linux-gnu -mcpu={cpu}")
    assert (t.vector_lanes("float32"), t.vector_registers) == (lanes, registers)
    t = tl.Target.parse(f"llvm -mtriple=x86_64-unknown-linux-gnu -mcpu={cpu} -mattr=+sse2")
    assert t.vector_lanes("float32") == 4


def test_l1_ways_are_the_hosts_or_typical():
    """The cost model's set conflicts need the L1's ways: the host's from /sys (as its cache
    sizes), 8 for an x86-64 cross target, 4 for AArch64 (64 KiB, 4 ways)."""
    import glob

    host = tl.Target.parse("llvm")
    want = None
    for d in glob.glob("/sys/devices/system/cpu/cpu0/cache/index*"):
        try:
            level = open(f"{d}/level").read().strip()
            kind = open(f"{d}/type").read().strip()
            ways = int(open(f"{d}/ways_of_associativity").read())
        except (OSError, ValueError):
            continue
        if level == "1" and kind != "Instruction":
            want = ways
    assert host.l1_ways == (want or 8)
    assert tl.Target.parse("llvm -mtriple=x86_64-unknown-linux-gnu -mcpu=znver4").l1_ways == 8
    assert tl.Target.parse("llvm -mtriple=aarch64-linux-gnu -mcpu=neoverse-n1").l1_ways == 4
