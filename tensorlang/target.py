"""Targets: what `tl.build` generates code for.

A `Target` is an LLVM triple, a CPU and a feature string, plus what tensorlang needs to know
about them: the width of a native vector register (for `vector_lanes`), whether code for it
can run in this process, and whether parallel loops can run on it. It is written as
``"llvm -mtriple=... -mcpu=... -mattr=..."`` (API.md) or named by a preset:

    ========== ============================== =============== ============ =============
    preset     triple                         cpu             features     vector bits
    ========== ============================== =============== ============ =============
    host       this machine's                 this machine's  this CPU's   from features
    x86-64-v3  x86_64-unknown-linux-gnu       x86-64-v3       (AVX2, FMA)  256
    x86-64-v4  x86_64-unknown-linux-gnu       x86-64-v4       (AVX-512)    512
    aarch64    aarch64-unknown-linux-gnu      generic         +neon        128
    aarch64+sve aarch64-unknown-linux-gnu     neoverse-v1     +sve         128 (NEON)
    riscv64    riscv64-unknown-linux-gnu      generic-rv64    +m,+a,+f,+d  1 (scalar)
    riscv64+v  riscv64-unknown-linux-gnu      generic-rv64    ...,+v       128 (VLEN)
    wasm32     wasm32-unknown-unknown         generic         +simd128     128
    amdgcn     amdgcn-amd-amdhsa              gfx90a                       64 (assembly only)
    ========== ============================== =============== ============ =============

Vectorized loops are fixed-width LLVM vectors, so on SVE and RVV the lane count is the
architecture's guaranteed minimum (128 bits); LLVM maps them onto the scalable registers.
"""

from __future__ import annotations

import numbers
import shlex
from dataclasses import dataclass, field

from .cpus import CPUModel, cpu_model, host_model
from .errors import TensorlangError
from .llvm_targets import check_known, host_description, missing_host_features

# arch (first word of the triple) -> default vector bits when the features do not say more
_X86 = ("x86_64", "i386", "i686")
# rows of a register tile at most (`Target.register_tile`): more rows than this gain no reuse
# of B's vector that the registers can hold on any target here
MAX_TILE_ROWS = 8


# the dot-product and matrix features AArch64 CPUs imply (LLVM's names): those tensorize's
# instructions need (tl.intrin.arm); a CPU not listed implies none of them
AARCH64_CPU_FEATURES = {
    "neoverse-n1": ("dotprod",), "neoverse-n2": ("dotprod", "bf16", "i8mm"),
    "neoverse-v1": ("dotprod", "bf16", "i8mm"), "neoverse-v2": ("dotprod", "bf16", "i8mm"),
    "apple-m1": ("dotprod",), "apple-m2": ("dotprod", "bf16", "i8mm"),
    "apple-m3": ("dotprod", "bf16", "i8mm"), "apple-m4": ("dotprod", "bf16", "i8mm"),
    "cortex-a76": ("dotprod",), "cortex-x2": ("dotprod", "bf16", "i8mm"),
}


@dataclass(frozen=True)
class Target:
    """A code-generation target. Build one with `Target.parse` (a preset name, an
    ``"llvm ..."`` string, or a Target) rather than by hand."""

    triple: str
    cpu: str
    features: str = ""
    name: str = "custom"
    kind: str = field(default="llvm")
    # a CPU model given by hand (`with_cpu_model`); None: the CPU's entry in tensorlang.cpus
    # (the host's: with this machine's caches)
    model: CPUModel | None = field(default=None, repr=False)

    # ------------------------------------------------------------------ construction
    @staticmethod
    def parse(spec: str | Target) -> Target:
        """A preset name (`Target.presets()`), ``"llvm"`` (the host), or
        ``"llvm -mtriple=... -mcpu=... -mattr=..."``."""
        if isinstance(spec, Target):
            return spec
        if not isinstance(spec, str):
            raise TensorlangError(f"target: expected a string such as 'llvm' or 'aarch64', or a "
                                  f"tl.Target, got {spec!r}")
        words = shlex.split(spec)
        if len(words) == 1 and words[0] in PRESETS:
            return preset(words[0])
        if not words or words[0] != "llvm":
            raise TensorlangError(
                f"target: unknown target {spec!r}; expected 'llvm', 'cuda', "
                f"'llvm -mtriple=... -mcpu=... -mattr=...' or a preset: {', '.join(PRESETS)}")
        opts = {}
        for w in words[1:]:
            if not w.startswith("-") or "=" not in w:
                raise TensorlangError(f"target: cannot parse option {w!r} in {spec!r}; expected "
                                      "-mtriple=..., -mcpu=... or -mattr=...")
            k, v = w.lstrip("-").split("=", 1)
            if k not in ("mtriple", "mcpu", "mattr"):
                raise TensorlangError(f"target: unknown option -{k} in {spec!r}; known: "
                                      "-mtriple, -mcpu, -mattr")
            opts[k] = v
        host = preset("host")
        if not opts:
            return host
        triple = opts.get("mtriple", host.triple)
        same_arch = _arch(triple) == _arch(host.triple)
        if "mcpu" in opts:
            cpu = opts["mcpu"]
        else:
            cpu = host.cpu if same_arch else "generic"
        if "mattr" in opts:
            features = opts["mattr"]
        else:
            features = host.features if same_arch and cpu == host.cpu else \
                _implied_x86(triple, cpu)
        # a CPU named in the string is described by its own entry (tensorlang.cpus) even
        # where it is this machine's; "llvm" and a string naming no CPU or features of
        # another machine describe this one
        name = "host" if "mcpu" not in opts and (triple, cpu, features) == \
            (host.triple, host.cpu, host.features) else "custom"
        if name == "custom":     # LLVM knows the others
            check_known(triple, cpu, features, tuple(PRESETS))
        return Target(triple, cpu, features, name)

    @staticmethod
    def preset(name: str) -> Target:
        """The preset called `name`; `Target.presets()` lists them."""
        return preset(name)

    @staticmethod
    def presets() -> list[str]:
        return presets()

    # ------------------------------------------------------------------ properties
    @property
    def arch(self) -> str:
        return _arch(self.triple)

    @property
    def feature_set(self) -> set[str]:
        return {f for f in self.features.split(",") if f}

    def has_feature(self, name: str) -> bool:
        """Whether code for this target may use CPU feature `name` (LLVM's name, without
        '+'): given in -mattr (or implied there by an x86 CPU's name, `parse`), or, on
        AArch64, implied by the CPU named (`AARCH64_CPU_FEATURES`); "-name" removes it."""
        f = self.feature_set
        if f"-{name}" in f:
            return False
        if f"+{name}" in f:
            return True
        if self.arch in ("aarch64", "arm64"):
            return name in AARCH64_CPU_FEATURES.get(self.cpu, ())
        return False

    @property
    def vector_bits(self) -> int:
        """Bits of one native vector register that `vectorize` should fill."""
        f = self.feature_set
        a = self.arch
        if a in _X86:
            if self.cpu == "x86-64-v4" or "+avx512f" in f:
                return 512 if "+prefer-256-bit" not in f else 256
            if self.cpu in ("x86-64-v3",) or "+avx2" in f or "+avx" in f:
                return 256
            return 128
        if a in ("aarch64", "arm64"):
            return 128
        if a.startswith("riscv"):
            widths = [int(x[len("+zvl"):-1]) for x in f
                      if x.startswith("+zvl") and x.endswith("b") and x[4:-1].isdigit()]
            if widths:
                return max(widths)
            return 128 if "+v" in f else 0
        if a.startswith("wasm"):
            return 128 if "+simd128" in f else 0
        if a.startswith("arm") or a.startswith("thumb"):
            return 128 if "+neon" in f else 0
        if a.startswith("powerpc") or a.startswith("ppc"):
            return 128
        if a == "amdgcn":
            return 64  # packed pairs of 32-bit floats (v_pk_fma_f32) within one lane
        return 0

    @property
    def vector_registers(self) -> int:
        """Architectural vector registers a kernel can keep values in: 32 with AVX-512
        (zmm0-31, also as ymm with AVX-512VL), 16 with SSE/AVX on x86-64 (8 on 32-bit x86),
        32 on AArch64 and RISC-V V, 16 on 32-bit ARM NEON (q0-15), 32 on PowerPC (VMX);
        16 otherwise (wasm's virtual registers, scalar targets' float registers)."""
        a = self.arch
        if a in _X86:
            if self.cpu == "x86-64-v4" or "+avx512f" in self.feature_set:
                return 32
            return 16 if a in ("x86_64", "amd64") else 8
        if a in ("aarch64", "arm64") or a.startswith("riscv") or a.startswith("powerpc") \
                or a.startswith("ppc"):
            return 32
        return 16

    @property
    def cpu_model(self) -> CPUModel:
        """The machine facts of this target's CPU (`tensorlang.cpus`): a model given by
        hand (`with_cpu_model`), else the host's (its CPU's entry with the caches /sys
        reports) for the ``host`` target, else the named CPU's entry wherever this is
        parsed; an `UnknownCPUError` for a CPU with none."""
        if self.model is not None:
            return self.model
        if self.name == "host":
            got = _HOST_MODEL.get(self.cpu)
            if got is None:
                got = _HOST_MODEL[self.cpu] = host_model(self.cpu, self.arch, _sys_caches())
            return got
        return cpu_model(self.cpu, self.arch)

    def with_cpu_model(self, model: CPUModel | None = None, **fields) -> Target:
        """This target with its CPU described by hand: `model` (a `tl.CPUModel`, default
        the target's own) with `fields` changed, e.g.
        ``t.with_cpu_model(l2_bytes=2 << 20, clock_hz=3.2e9)``."""
        if model is not None and not isinstance(model, CPUModel):
            raise TensorlangError(f"with_cpu_model: model must be a tl.CPUModel (e.g. "
                                  f"tl.cpu_model('znver4')), got {model!r}")
        base = model if model is not None else self.cpu_model
        import dataclasses

        return dataclasses.replace(self, model=base.replace(**fields) if fields else base)

    @property
    def cache_bytes(self) -> tuple[int, int, int]:
        """Data cache sizes (L1, L2, last level) in bytes that one core's kernel can count
        on (`cpu_model`: this machine's, from /sys, for the host)."""
        m = self.cpu_model
        return (m.l1_bytes, m.l2_bytes, m.l3_bytes)

    @property
    def l1_ways(self) -> int:
        """Ways of the L1 data cache's sets (lines of addresses `cache_bytes[0] / l1_ways`
        apart share a set), from `cpu_model`."""
        return self.cpu_model.l1_ways

    @property
    def l3_bytes_per_cycle(self) -> float:
        """Bytes a cycle one core streams into its L2 from the last-level cache (the
        auto-scheduler's cost model), from `cpu_model`; for the host TL_L3_BYTES_PER_CYCLE
        overrides it."""
        if self.name == "host" and self.model is None:
            from .config import l3_bytes_per_cycle

            env = l3_bytes_per_cycle()
            if env is not None:
                return env
        return self.cpu_model.l3_bytes_per_cycle

    @property
    def stream_store_bytes(self) -> int:
        """The bytes of a kernel's arrays, all together, past which its outputs are stored
        non-temporally on x86-64 (`backends/llvm/stream.py`): the cores' L2s together, where
        a line written from the last level costs a read for ownership and a write-back over
        a narrow path, which streaming saves; the last-level cache itself where it is a
        victim cache of the L2s (`victim_llc`: AMD Zen): up to its size a streamed output is
        slower (DRAM takes what the L3 would have kept), beyond it faster (the measurements:
        benchmarks/RESULTS-decisions.md)."""
        _, l2, last = self.cache_bytes
        return last if self.victim_llc else l2 * self.cores

    @property
    def victim_llc(self) -> bool:
        """Whether the last-level cache is a victim cache of the cores' L2s, fed fast (AMD
        Zen): a line an L2 lets go moves there beside the misses, and a written line costs
        the bandwidth into the L2 once, its read for ownership (the cost model's traffic:
        an L3-resident copy, fill or add runs at a sum's bandwidth when each written line
        is counted once)."""
        return self.cpu_model.victim_llc

    @property
    def cores(self) -> int:
        """Cores a parallel loop can use: this process's threads for the host target, the
        model's (4 for a named CPU) otherwise."""
        if self.name == "host" and self.model is None:
            from .config import num_threads

            return max(1, num_threads())
        return self.cpu_model.cores

    def vector_lanes(self, dtype="float32") -> int:
        """Lanes of `dtype` in one native vector (1 when the target has no vectors)."""
        from .ir.dtype import as_dtype

        width = max(as_dtype(dtype).bits, 8)
        return max(self.vector_bits // width, 1)

    def register_tile(self, m: int, n: int, dtype="float32") -> tuple[int, int]:
        """(rows, vectors per row) of a register-blocked tile of an m x n output of `dtype`,
        from this target's vector width and register count: the accumulators, one vector of
        B per column and a broadcast of A fit in the registers (nothing spills), at most 4
        vectors per row (fewer when n is narrow) and at most 8 rows. Of those, the most
        accumulators that do useful work — a tile that overhangs m or n computes lanes and
        rows that are thrown away — and on a tie the most rows (each k step then loads fewer
        bytes of B per multiply-add). The graph executor's matmul and conv2d use it.

        AVX-512 (32 registers, 16 floats): 6 x 4 vectors where n is a multiple of 64 (the
        whole tile works, where 8 x 3 overhangs 512 by 16 columns), else 8 x 3 where its
        48 columns fit n better; AVX2 (16 registers, 8 floats): 6 x 2 vectors (BLIS's
        Haswell tile); NEON (32 of 4 floats): 8 x 3 or 6 x 4 likewise.

        >>> Target.preset("x86-64-v4").register_tile(512, 512)
        (6, 4)
        """
        for name, v in (("m", m), ("n", n)):
            if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < 1:
                raise TensorlangError(f"register_tile: {name} must be a positive int (the "
                                      f"output's extent), got {v!r}")
        m, n = int(m), int(n)
        lanes = self.vector_lanes(dtype)
        regs = self.vector_registers
        tiles = [(max(1, min(m, MAX_TILE_ROWS, (regs - nv - 1) // nv)), nv)
                 for nv in range(1, min(4, -(-n // lanes)) + 1)]

        def fill(extent: int, tile: int) -> float:
            # the fraction of ceil(extent / tile) * tile lanes or rows that do useful work
            return extent / (-(-extent // tile) * tile)

        useful = {t: round(t[0] * t[1] * fill(n, t[1] * lanes) * fill(m, t[0]), 9)
                  for t in tiles}
        return max(tiles, key=lambda t: (useful[t], t[0]))

    @property
    def is_host(self) -> bool:
        """Whether code for this target can run in this process."""
        host = preset("host")
        if self.arch != host.arch:
            return False
        if self.cpu == host.cpu and self.features == host.features:
            return True
        return not missing_host_features(self.cpu, self.features)

    @property
    def assembly_only(self) -> bool:
        """Targets whose kernels are only shown (assembly, LLVM IR), never linked."""
        return self.arch in ("amdgcn", "r600")

    def __str__(self) -> str:
        s = f"llvm -mtriple={self.triple} -mcpu={self.cpu}"
        return s + (f" -mattr={self.features}" if self.features else "")

    def __repr__(self) -> str:
        label = f"{self.name}: " if self.name != "custom" else ""
        return f"Target({label}{self})"


_SYS_CACHES: list = []
_HOST_MODEL: dict[str, CPUModel] = {}


def _sys_caches() -> dict[int, tuple[int, int]]:
    """{level: (bytes, ways)} of cpu0's data (or unified) caches from
    /sys/devices/system/cpu, read once."""
    if _SYS_CACHES:
        return _SYS_CACHES[0]
    import glob

    out: dict[int, tuple[int, int]] = {}
    for d in glob.glob("/sys/devices/system/cpu/cpu0/cache/index*"):
        try:
            with open(f"{d}/type") as f:
                if f.read().strip() == "Instruction":
                    continue
            with open(f"{d}/level") as f:
                level = int(f.read())
            with open(f"{d}/size") as f:
                text = f.read().strip()
            try:
                with open(f"{d}/ways_of_associativity") as f:
                    ways = int(f.read())
            except (OSError, ValueError):
                ways = 0
            unit = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
            out[level] = (int(text.rstrip("KMG")) * unit, ways)
        except (OSError, ValueError):
            continue
    _SYS_CACHES.append(out)
    return out


def _arch(triple: str) -> str:
    return triple.split("-")[0]


_RV = "+m,+a,+f,+d,+c"
# x86 CPUs by the vector instructions their name implies (LLVM's -mcpu names). A target
# named by its CPU alone ("llvm -mcpu=skylake-avx512") gets these features spelled out, as
# the host's are, so its vector width, registers and register tiles are the CPU's: without
# them it was described as SSE (4 lanes, 16 registers) and scheduled for that.
_X86_AVX512 = frozenset((
    "knl", "knm", "skylake-avx512", "skx", "cascadelake", "cooperlake", "cannonlake",
    "icelake-client", "icelake-server", "rocketlake", "tigerlake", "sapphirerapids",
    "emeraldrapids", "graniterapids", "graniterapids-d", "diamondrapids", "znver4",
    "znver5"))
_X86_AVX2 = frozenset((
    "haswell", "broadwell", "skylake", "alderlake", "raptorlake", "meteorlake", "arrowlake",
    "arrowlake-s", "lunarlake", "pantherlake", "gracemont", "sierraforest", "grandridge",
    "clearwaterforest", "znver1", "znver2", "znver3", "bdver4"))
_X86_AVX = frozenset(("sandybridge", "ivybridge", "bdver1", "bdver2", "bdver3", "btver2"))


def _implied_x86(triple: str, cpu: str) -> str:
    """The vector features an x86 CPU name implies ("" for other CPUs and architectures);
    AVX-512 CPUs with 512-bit vectors preferred, as the host's (`host_target`)."""
    if _arch(triple) not in _X86:
        return ""
    if cpu in _X86_AVX512:
        return "+avx,+avx2,+fma,+f16c,+avx512f,-prefer-256-bit"
    if cpu in _X86_AVX2:
        return "+avx,+avx2,+fma,+f16c"
    if cpu in _X86_AVX:
        return "+avx"
    return ""


PRESETS: dict[str, tuple[str, str, str]] = {
    "host": ("", "", ""),
    "x86-64-v3": ("x86_64-unknown-linux-gnu", "x86-64-v3", ""),
    "x86-64-v4": ("x86_64-unknown-linux-gnu", "x86-64-v4", "-prefer-256-bit"),
    "aarch64": ("aarch64-unknown-linux-gnu", "generic", "+neon"),
    "aarch64+sve": ("aarch64-unknown-linux-gnu", "neoverse-v1", "+sve"),
    "riscv64": ("riscv64-unknown-linux-gnu", "generic-rv64", _RV),
    "riscv64+v": ("riscv64-unknown-linux-gnu", "generic-rv64", _RV + ",+v"),
    "wasm32": ("wasm32-unknown-unknown", "generic", "+simd128"),
    "amdgcn": ("amdgcn-amd-amdhsa", "gfx90a", ""),
}

GPU_KINDS = ("cuda", "nvptx")   # CUDA C through pycuda, or PTX through LLVM's NVPTX target


def backend_kind(target) -> str:
    """The backend that builds for `target`: "cuda" for the string "cuda" (CUDA C), "nvptx"
    for "nvptx" and "nvptx -mcpu=sm_XX" (PTX through LLVM), else "llvm": a `tl.Target`'s
    `kind`, and for any other string the kind of the Target `Target.parse` makes of it."""
    if isinstance(target, Target):
        return target.kind
    if isinstance(target, str):
        if target == "cuda":
            return "cuda"
        if target.split()[:1] == ["nvptx"]:
            return "nvptx"
    return "llvm"


_PRESET_CACHE: dict[str, Target] = {}


def preset(name: str) -> Target:
    """The preset called `name` (see the module's table)."""
    t = _PRESET_CACHE.get(name)
    if t is not None:
        return t
    if name not in PRESETS:
        raise TensorlangError(f"target: unknown preset {name!r}; known: {', '.join(PRESETS)}")
    if name == "host":
        t = Target(*host_description(), "host")
    else:
        triple, cpu, features = PRESETS[name]
        t = Target(triple, cpu, features, name)
    _PRESET_CACHE[name] = t
    return t


def presets() -> list[str]:
    """The names `Target.parse` accepts besides "llvm ..." strings."""
    return list(PRESETS)

