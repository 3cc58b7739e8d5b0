"""CPU models: the machine facts a `tl.Target` gives the cost model, the executor's schedules
and the code generator (clock, vector pipes, load and store ports, latencies, caches and
their ways, bandwidths at each level, whether the last level is a victim cache).

A target that names a CPU (``llvm -mcpu=znver4``) is described by that CPU's entry in
`CPU_MODELS` wherever it is parsed; the ``host`` target (``"llvm"``) by the entry of the
CPU LLVM detects here, with the caches and ways this machine reports in /sys, and the cores
this process may use. The generic architecture levels (``x86-64``, ``x86-64-v3``, AArch64's
``generic``, ...) get a typical core of their architecture. Any other CPU name is an
`UnknownCPUError` when its model is needed, and a model can always be given by hand:

    t = tl.Target.parse("llvm -mcpu=znver4").with_cpu_model(l2_bytes=2 << 20)
    t = tl.Target.parse("llvm -mtriple=aarch64-linux-gnu -mcpu=cortex-a72").with_cpu_model(
        tl.cpu_model("neoverse-n1"), clock_hz=2.0e9, l2_bytes=512 << 10)

Throughputs are counted at the core's native vector width (`native_bits`): an instruction
twice as wide takes two issues (Zen 4 runs a 512-bit FMA as two 256-bit halves), so
`CPUModel.per_cycle` gives the rate at the target's vector width.

Where a number was measured on a machine of this project, the entry's `source` says so;
the rest are the vendors' and public microbenchmarks' figures for one core of a server part
(the cost model ranks schedules: its ratios matter more than its absolute seconds).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from .errors import TensorlangError

KIB, MIB = 1 << 10, 1 << 20


class UnknownCPUError(TensorlangError):
    """A target names a CPU that has no entry in `CPU_MODELS` (and no model given by hand)."""


@dataclass(frozen=True)
class CPUModel:
    """One core's machine facts (see the module's docstring). Build a variant with
    `dataclasses.replace` or `Target.with_cpu_model(**fields)`."""

    name: str
    arch: str                       # "x86_64", "aarch64", ... (a triple's first word)
    clock_hz: float                 # the clock its per-cycle figures are counted at
    fma_pipes: float                # vector arithmetic instructions a cycle (native width)
    load_ports: float               # vector loads a cycle (native width)
    store_ports: float              # vector stores a cycle (native width)
    l1_bytes: int                   # L1 data cache of one core
    l1_ways: int
    l2_bytes: int                   # L2 of one core
    l3_bytes: int                   # the last level, shared
    l3_bytes_per_cycle: float       # bytes a cycle one core streams into its L2 from the L3
    dram_bytes_per_s: float         # DRAM bandwidth all cores draw together
    dram_core_bytes_per_s: float    # ... and one core alone (the misses it keeps in flight)
    victim_llc: bool = False        # the L3 takes the L2s' victims, fed fast (AMD Zen)
    native_bits: int | None = None  # the vector datapath's width; None: the target's width
    issue_width: float = 4          # vector and memory operations issued a cycle
    fma_latency: float = 4          # cycles
    forward_latency: float = 7      # an add through memory: store, forwarded load, add
    mispredict_cycles: float = 12   # a mispredicted branch (a loop's exit)
    ooo_window: int = 256           # instructions the core looks ahead
    l2_bytes_per_cycle: float = 64  # bytes a cycle into L1 from L2
    cores: int = 4                  # cores a parallel loop is modelled on (named CPUs)
    source: str = ""                # where the numbers come from

    def per_cycle(self, ports: float, vector_bits: int) -> float:
        """`ports` (native-width instructions a cycle) at vectors of `vector_bits`: an
        instruction wider than the datapath takes `vector_bits / native_bits` issues."""
        if not self.native_bits or vector_bits <= self.native_bits:
            return float(ports)
        return ports * self.native_bits / vector_bits

    def replace(self, **fields) -> CPUModel:
        """This model with `fields` changed (a clear error for a field it does not have)."""
        known = {f.name for f in dataclasses.fields(self)}
        bad = sorted(set(fields) - known)
        if bad:
            raise TensorlangError(f"cpu model: unknown field(s) {', '.join(bad)}; known: "
                                  f"{', '.join(sorted(known))}")
        for k, v in fields.items():
            if k in ("name", "arch", "source"):
                if not isinstance(v, str):
                    raise TensorlangError(f"cpu model: {k} must be a string, got {v!r}")
            elif k == "victim_llc":
                if not isinstance(v, bool):
                    raise TensorlangError(f"cpu model: victim_llc must be a bool, got {v!r}")
            elif k == "native_bits" and v is None:
                pass
            elif isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0 \
                    or v != v or v == float("inf"):
                raise TensorlangError(f"cpu model: {k} must be a finite positive number, "
                                      f"got {v!r}")
        return dataclasses.replace(self, **fields)


_ZEN = dict(arch="x86_64", victim_llc=True, l1_ways=8, fma_pipes=2, load_ports=2,
            store_ports=1, dram_bytes_per_s=25e9, dram_core_bytes_per_s=12.5e9)
_INTEL_SP = dict(arch="x86_64", native_bits=512, fma_pipes=2, load_ports=2, store_ports=1,
                 l3_bytes_per_cycle=14.0)
_NEOVERSE = dict(arch="aarch64", native_bits=128, l1_bytes=64 * KIB, l1_ways=4,
                 l3_bytes_per_cycle=16.0)
_APPLE = dict(arch="aarch64", native_bits=128, fma_pipes=4, load_ports=3, store_ports=2,
              l1_bytes=128 * KIB, l1_ways=8, l3_bytes_per_cycle=32.0, issue_width=8,
              ooo_window=600, fma_latency=4)

_ENTRIES = (
    # AMD Zen: the L3 a victim cache of the L2s
    CPUModel("znver3", clock_hz=3.5e9, native_bits=256, l1_bytes=32 * KIB, l2_bytes=512 * KIB,
             l3_bytes=32 * MIB, l3_bytes_per_cycle=32.0, **_ZEN,
             source="Zen 3 (EPYC Milan): 2x256-bit FMA, 2 loads and 1 store of 256 bits"),
    CPUModel("znver4", clock_hz=3.6e9, native_bits=256, l1_bytes=32 * KIB, l2_bytes=1 * MIB,
             l3_bytes=32 * MIB, l3_bytes_per_cycle=10.0, **_ZEN,
             source="Zen 4 (EPYC Genoa), a 2-core VM of this project: FMA peak 32 FLOP a "
                    "cycle at 3.6 GHz (512-bit FMAs as two 256-bit halves), an 8 MiB blur "
                    "streamed from L3 at ~30 GB/s"),
    CPUModel("znver5", clock_hz=3.0e9, native_bits=512, l1_bytes=48 * KIB, l2_bytes=1 * MIB,
             l3_bytes=32 * MIB, l3_bytes_per_cycle=31.0,
             **{**_ZEN, "l1_ways": 12},
             source="Zen 5 (EPYC Turin), a 2-core VM of this project, where the cost model "
                    "was fitted: 2x512-bit FMA; one core summed an 8 MiB array at 93 GB/s"),
    # Intel client and Xeon E5 cores with AVX2: 2x256-bit FMA
    CPUModel("haswell", "x86_64", clock_hz=3.0e9, native_bits=256, fma_pipes=2, load_ports=2,
             store_ports=1, l1_bytes=32 * KIB, l1_ways=8, l2_bytes=256 * KIB,
             l3_bytes=20 * MIB, l3_bytes_per_cycle=16.0, dram_bytes_per_s=60e9,
             dram_core_bytes_per_s=10e9, fma_latency=5,
             source="Haswell (Xeon E5 v3): 2.5 MiB of L3 a core"),
    CPUModel("skylake", "x86_64", clock_hz=3.6e9, native_bits=256, fma_pipes=2, load_ports=2,
             store_ports=1, l1_bytes=32 * KIB, l1_ways=8, l2_bytes=256 * KIB,
             l3_bytes=8 * MIB, l3_bytes_per_cycle=16.0, dram_bytes_per_s=35e9,
             dram_core_bytes_per_s=15e9, source="Skylake client (Core i7-6700 class)"),
    # Intel Xeon Scalable: 2x512-bit FMA (Gold and Platinum parts)
    CPUModel("skylake-avx512", clock_hz=2.5e9, l1_bytes=32 * KIB, l1_ways=8, l2_bytes=1 * MIB,
             l3_bytes=32 * MIB, dram_bytes_per_s=100e9, dram_core_bytes_per_s=12e9,
             **_INTEL_SP, source="Skylake-SP: AVX-512 clock, 1.375 MiB of L3 a core"),
    CPUModel("icelake-server", clock_hz=2.8e9, l1_bytes=48 * KIB, l1_ways=12,
             l2_bytes=1280 * KIB, l3_bytes=48 * MIB, dram_bytes_per_s=150e9,
             dram_core_bytes_per_s=14e9, **_INTEL_SP,
             source="Ice Lake-SP: 1.5 MiB of L3 a core"),
    CPUModel("sapphirerapids", clock_hz=2.9e9, l1_bytes=48 * KIB, l1_ways=12,
             l2_bytes=2 * MIB, l3_bytes=64 * MIB, dram_bytes_per_s=250e9,
             dram_core_bytes_per_s=16e9, **_INTEL_SP,
             source="Sapphire Rapids: 1.875 MiB of L3 a core, DDR5"),
    # Arm Neoverse (NEON's 128-bit vectors)
    CPUModel("neoverse-n1", clock_hz=2.5e9, fma_pipes=2, load_ports=2, store_ports=1,
             l2_bytes=1 * MIB, l3_bytes=32 * MIB, dram_bytes_per_s=150e9,
             dram_core_bytes_per_s=10e9, **_NEOVERSE,
             source="Neoverse N1 (Graviton2, Ampere Altra)"),
    CPUModel("neoverse-v1", clock_hz=2.6e9, fma_pipes=4, load_ports=3, store_ports=2,
             l2_bytes=1 * MIB, l3_bytes=32 * MIB, dram_bytes_per_s=300e9,
             dram_core_bytes_per_s=16e9, issue_width=6, **_NEOVERSE,
             source="Neoverse V1 (Graviton3): 4x128-bit FMA, 2x256-bit SVE"),
    CPUModel("neoverse-v2", clock_hz=3.1e9, fma_pipes=4, load_ports=3, store_ports=2,
             l2_bytes=2 * MIB, l3_bytes=64 * MIB, dram_bytes_per_s=400e9,
             dram_core_bytes_per_s=20e9, issue_width=6, **_NEOVERSE,
             source="Neoverse V2 (Grace, Graviton4): 4x128-bit FMA"),
    # Apple M: 4x128-bit FMA, a large L1 and an L2 shared by the performance cores
    CPUModel("apple-m1", clock_hz=3.2e9, l2_bytes=12 * MIB, l3_bytes=8 * MIB,
             dram_bytes_per_s=60e9, dram_core_bytes_per_s=50e9, **_APPLE,
             source="Apple M1 performance cores (Firestorm)"),
    CPUModel("apple-m2", clock_hz=3.5e9, l2_bytes=16 * MIB, l3_bytes=8 * MIB,
             dram_bytes_per_s=90e9, dram_core_bytes_per_s=60e9, **_APPLE,
             source="Apple M2 performance cores (Avalanche)"),
    CPUModel("apple-m3", clock_hz=4.0e9, l2_bytes=16 * MIB, l3_bytes=8 * MIB,
             dram_bytes_per_s=90e9, dram_core_bytes_per_s=60e9, **_APPLE,
             source="Apple M3 performance cores"),
    CPUModel("apple-m4", clock_hz=4.4e9, l2_bytes=16 * MIB, l3_bytes=8 * MIB,
             dram_bytes_per_s=110e9, dram_core_bytes_per_s=70e9, **_APPLE,
             source="Apple M4 performance cores"),
)

# LLVM names of the same core as an entry
_ALIASES = {"broadwell": "haswell", "skx": "skylake-avx512", "skylake_avx512": "skylake-avx512",
            "cascadelake": "skylake-avx512", "cooperlake": "skylake-avx512",
            "icelake_server": "icelake-server", "emeraldrapids": "sapphirerapids"}

# a typical core of each architecture, for its generic levels (and a host CPU LLVM names
# but the table lacks, with the host's own caches over it)
_GENERIC = {
    "x86_64": CPUModel("generic x86-64", "x86_64", clock_hz=3.0e9, fma_pipes=2, load_ports=2,
                       store_ports=1, l1_bytes=32 * KIB, l1_ways=8, l2_bytes=1 * MIB,
                       l3_bytes=32 * MIB, l3_bytes_per_cycle=10.0, dram_bytes_per_s=25e9,
                       dram_core_bytes_per_s=12.5e9,
                       source="a typical x86-64 server core, at the target's vector width"),
    "aarch64": CPUModel("generic aarch64", "aarch64", clock_hz=2.5e9, fma_pipes=2,
                        load_ports=2, store_ports=1, l1_bytes=64 * KIB, l1_ways=4,
                        l2_bytes=1 * MIB, l3_bytes=8 * MIB, l3_bytes_per_cycle=10.0,
                        dram_bytes_per_s=25e9, dram_core_bytes_per_s=12.5e9,
                        source="a typical AArch64 core"),
    "other": CPUModel("generic", "other", clock_hz=2.0e9, fma_pipes=1, load_ports=1,
                      store_ports=1, l1_bytes=32 * KIB, l1_ways=8, l2_bytes=512 * KIB,
                      l3_bytes=4 * MIB, l3_bytes_per_cycle=10.0, dram_bytes_per_s=10e9,
                      dram_core_bytes_per_s=5e9, source="a typical small core"),
}
_X86_LEVELS = ("generic", "x86-64", "x86-64-v2", "x86-64-v3", "x86-64-v4", "i686", "i386")

CPU_MODELS: dict[str, CPUModel] = {m.name: m for m in _ENTRIES}


def _family(arch: str) -> str:
    if arch in ("x86_64", "amd64", "i386", "i686"):
        return "x86_64"
    if arch in ("aarch64", "arm64"):
        return "aarch64"
    return "other"


def cpu_models() -> list[str]:
    """The CPU names with an entry (aliases of the same core included)."""
    return sorted(set(CPU_MODELS) | set(_ALIASES))


def cpu_model(cpu: str, arch: str | None = None) -> CPUModel:
    """The model of the CPU LLVM calls `cpu` (for `arch`, a triple's first word: a generic
    level's typical core); an `UnknownCPUError` for a CPU with no entry."""
    if not isinstance(cpu, str):
        raise TensorlangError(f"cpu_model: cpu must be a CPU name such as 'znver4', got {cpu!r}")
    name = _ALIASES.get(cpu, cpu)
    if name in CPU_MODELS and (arch is None or _family(arch) == CPU_MODELS[name].arch):
        return CPU_MODELS[name]
    family = _family(arch or "x86_64")
    if cpu in ("generic", "") or family == "x86_64" and cpu in _X86_LEVELS or \
            family == "other" and cpu.startswith("generic"):
        return _GENERIC[family]
    raise UnknownCPUError(
        f"target: no CPU model for {cpu!r}{f' ({arch})' if arch else ''}: the cost model, the "
        f"executor's schedules and the code generator need its caches, pipes and bandwidths. "
        f"Known CPUs: {', '.join(cpu_models())}; generic levels: x86-64, x86-64-v2/v3/v4, "
        f"generic. Give the numbers by hand: target.with_cpu_model(tl.cpu_model('znver4'), "
        f"clock_hz=..., l2_bytes=...) or target.with_cpu_model(tl.CPUModel(...))")


def host_model(cpu: str, arch: str, caches: dict[int, tuple[int, int]]) -> CPUModel:
    """This machine's model: the entry of the CPU LLVM detects (a typical core of the
    architecture when the table lacks it, said at TL_DEBUG=1), with the cache sizes and L1
    ways `caches` ({level: (bytes, ways)}, from /sys) reports."""
    try:
        base = cpu_model(cpu, arch)
    except UnknownCPUError:
        from .config import debug_print

        base = _GENERIC[_family(arch)]
        debug_print(1, "target", f"host CPU {cpu!r} has no entry in tensorlang.cpus: its "
                                 f"model is {base.name!r} with this machine's caches")
    fields: dict = {"name": f"host ({cpu})" if cpu else "host"}
    if 1 in caches and 2 in caches:
        fields.update(l1_bytes=caches[1][0], l2_bytes=caches[2][0],
                      l3_bytes=caches.get(3, caches[2])[0])
        if caches[1][1]:
            fields["l1_ways"] = caches[1][1]
    return dataclasses.replace(base, **fields)
