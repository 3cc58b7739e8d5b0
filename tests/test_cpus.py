"""CPU models on the Target: a named CPU is described by its table entry wherever it is
parsed, the host by its own CPU and caches, an unknown CPU is a clear error, and a model
can be given by hand."""

import dataclasses
import os

import pytest

import tensorlang as tl
import tensorlang.target as T
from tensorlang.cpus import CPU_MODELS, UnknownCPUError, cpu_model, cpu_models

REQUIRED = ("znver3", "znver4", "znver5", "skylake-avx512", "icelake-server",
            "sapphirerapids", "neoverse-n1", "neoverse-v1", "neoverse-v2", "apple-m1",
            "apple-m2", "apple-m3")


def _triple(model) -> str:
    return {"x86_64": "x86_64-unknown-linux-gnu", "aarch64": "aarch64-unknown-linux-gnu"}[
        model.arch]


def _other_host(monkeypatch, name: str):
    """Describe this machine as the CPU `name` (its caches, ways and pipes), whatever it is."""
    host = tl.Target.parse("llvm")
    monkeypatch.setattr(T, "_HOST_MODEL", {host.cpu: CPU_MODELS[name]})


def test_the_table_has_the_cpus_users_run_on():
    assert set(REQUIRED) <= set(cpu_models())
    for name in REQUIRED:
        m = cpu_model(name)
        assert m.clock_hz > 1e9 and m.l1_bytes < m.l2_bytes and m.l1_ways >= 4, name
        assert m.fma_pipes >= 1 and m.load_ports >= 1 and m.store_ports >= 0.5, name


@pytest.mark.parametrize("name", sorted(CPU_MODELS))
@pytest.mark.parametrize("host_as", ["znver5", "neoverse-n1", "skylake-avx512"])
def test_a_named_cpu_is_described_by_its_entry_whatever_the_host(name, host_as, monkeypatch):
    """`llvm -mcpu=NAME` takes NAME's caches, ways, bandwidths and cores, not the host's:
    the same numbers with the host described as three different machines."""
    _other_host(monkeypatch, host_as)
    m = CPU_MODELS[name]
    t = tl.Target.parse(f"llvm -mtriple={_triple(m)} -mcpu={name}")
    assert t.cpu_model == m
    assert t.cache_bytes == (m.l1_bytes, m.l2_bytes, m.l3_bytes)
    assert t.l1_ways == m.l1_ways and t.victim_llc == m.victim_llc
    assert t.l3_bytes_per_cycle == m.l3_bytes_per_cycle and t.cores == m.cores


def test_the_host_is_its_own_cpu_with_the_caches_sys_reports():
    if os.environ.get("TL_TEST_HOST_AS"):
        pytest.skip("needs this machine's own CPU model (TL_TEST_HOST_AS describes another)")
    host = tl.Target.parse("llvm")
    m = host.cpu_model
    caches = T._sys_caches()
    if 1 in caches and 2 in caches:
        assert (m.l1_bytes, m.l2_bytes) == (caches[1][0], caches[2][0])
        if caches[1][1]:
            assert host.l1_ways == caches[1][1]
    base = CPU_MODELS.get(host.cpu)
    if base is not None:
        assert (m.clock_hz, m.fma_pipes, m.victim_llc) == (base.clock_hz, base.fma_pipes,
                                                           base.victim_llc)
    from tensorlang.config import num_threads

    assert host.cores == num_threads()


def test_generic_levels_get_a_typical_core_of_their_architecture():
    a = tl.Target.parse("llvm -mtriple=x86_64-unknown-linux-gnu -mcpu=x86-64-v3").cpu_model
    b = tl.Target.parse("x86-64-v4").cpu_model
    assert a == b and a.name == "generic x86-64"
    assert tl.Target.parse("aarch64").cpu_model.arch == "aarch64"
    assert tl.Target.parse("riscv64").cpu_model.name == "generic"


def test_an_unknown_cpu_is_a_clear_error_naming_it_and_the_way_out():
    t = tl.Target.parse("llvm -mtriple=x86_64-unknown-linux-gnu -mcpu=bdver2")
    with pytest.raises(UnknownCPUError, match=r"'bdver2'.*Known CPUs: .*znver4.*with_cpu_model"):
        _ = t.cpu_model
    with pytest.raises(tl.TensorlangError, match="bdver2"):
        _ = t.cache_bytes
    # a CPU of another architecture is not taken for the entry of the same name
    with pytest.raises(UnknownCPUError):
        cpu_model("neoverse-n1", "x86_64")


def test_a_model_given_by_hand():
    t = tl.Target.parse("llvm -mtriple=x86_64-unknown-linux-gnu -mcpu=bdver2")
    mine = t.with_cpu_model(cpu_model("znver3"), l2_bytes=2 << 20, clock_hz=3.9e9)
    assert mine.cache_bytes[1] == 2 << 20 and mine.cpu_model.clock_hz == 3.9e9
    assert mine.cpu_model.l1_bytes == cpu_model("znver3").l1_bytes
    z4 = tl.Target.parse("llvm -mtriple=x86_64-unknown-linux-gnu -mcpu=znver4")
    assert z4.with_cpu_model(l1_ways=16).l1_ways == 16 and z4.l1_ways == 8
    with pytest.raises(tl.TensorlangError, match="l2_size"):
        z4.with_cpu_model(l2_size=1)
    with pytest.raises(tl.TensorlangError, match="clock_hz must be a finite positive"):
        z4.with_cpu_model(clock_hz=float("nan"))
    with pytest.raises(tl.TensorlangError, match="model must be a tl.CPUModel"):
        z4.with_cpu_model("znver3")
    # a whole model by hand, fields named
    fresh = dataclasses.replace(cpu_model("znver4"), name="my cpu", l3_bytes=96 << 20)
    assert t.with_cpu_model(fresh).cache_bytes[2] == 96 << 20


def test_the_cost_model_reads_the_targets_cpu():
    """The same schedule on two described CPUs: twice the clock, half the compute time;
    Zen 4's 512-bit FMAs run as halves, Zen 5's whole."""
    from tensorlang.autoschedule import cost

    A = tl.placeholder((256, 256), "float32", name="A")
    B = tl.placeholder((256, 256), "float32", name="B")
    k = tl.reduce_axis((0, 256), name="k")
    C = tl.compute((256, 256), lambda i, j: tl.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = tl.create_schedule(C)
    i, j = C.op.axis
    jo, ji = s[C].split(j, factor=16)
    s[C].reorder(i, jo, k, ji)
    s[C].vectorize(ji)
    z4 = tl.Target.parse("llvm -mtriple=x86_64-unknown-linux-gnu -mcpu=znver4")
    fast = z4.with_cpu_model(clock_hz=2 * z4.cpu_model.clock_hz)
    a, b = (cost.estimate(s, t).statements[0].compute_s for t in (z4, fast))
    assert a == pytest.approx(2 * b)
    m4, m5 = cpu_model("znver4"), cpu_model("znver5")
    assert m4.per_cycle(m4.fma_pipes, 512) == 1 and m4.per_cycle(m4.fma_pipes, 256) == 2
    assert m5.per_cycle(m5.fma_pipes, 512) == 2
