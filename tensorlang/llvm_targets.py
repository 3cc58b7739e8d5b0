"""What this process's LLVM knows about targets: the host's triple, CPU and features, the
architectures, CPUs and features it carries, and the x86-64 levels' features. `Target`
(target.py) asks it; the LLVM backend makes its target machines from it."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import tempfile
import threading

import llvmlite.binding as llvm

from .errors import TensorlangError

# architectures worth naming when a triple is unknown; filtered by what this LLVM carries
_KNOWN_ARCHES = ("x86_64", "i686", "aarch64", "arm", "thumb", "riscv64", "riscv32",
                 "powerpc64le", "powerpc64", "wasm32", "wasm64", "nvptx64", "amdgcn",
                 "mips64", "sparcv9", "systemz", "loongarch64", "hexagon", "bpf", "avr")

# x86-64 micro-architecture levels: features a host needs to run code built for them
_X86_LEVELS = {
    "x86-64": set(),
    "x86-64-v2": {"sse4.2", "popcnt", "ssse3", "cx16"},
    "x86-64-v3": {"sse4.2", "popcnt", "avx", "avx2", "bmi", "bmi2", "fma", "f16c", "lzcnt",
                  "movbe"},
    "x86-64-v4": {"sse4.2", "popcnt", "avx", "avx2", "bmi", "bmi2", "fma", "f16c", "lzcnt",
                  "movbe", "avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"},
}

_stderr_lock = threading.Lock()


@functools.cache
def init() -> None:
    """Initialise LLVM's native and all other targets, once."""
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()


@functools.cache
def host_triple() -> str:
    init()
    return llvm.get_process_triple()


def _capture_stderr(fn):
    """Run `fn` with file descriptor 2 sent to a temporary file; (result, what was written).
    LLVM reports unknown CPUs and features there rather than raising."""
    with _stderr_lock:
        sys.stderr.flush()
        saved = os.dup(2)
        with tempfile.TemporaryFile() as tmp:
            os.dup2(tmp.fileno(), 2)
            try:
                result = fn()
            finally:
                os.dup2(saved, 2)
                os.close(saved)
            tmp.seek(0)
            return result, tmp.read().decode(errors="replace")


def llvm_target(triple: str, presets: tuple[str, ...] = ()) -> llvm.Target:
    """LLVM's target for `triple`; an unknown one raises a TensorlangError naming the known
    architectures and the `presets`."""
    init()
    try:
        return llvm.Target.from_triple(triple)
    except RuntimeError:
        raise TensorlangError(
            f"target: unknown triple {triple!r}; this LLVM knows the architectures "
            f"{', '.join(known_arches())} (for example 'aarch64-unknown-linux-gnu'), and the "
            f"presets {', '.join(presets)}") from None


@functools.cache
def known_arches() -> list[str]:
    init()
    out = []
    for a in _KNOWN_ARCHES:
        try:
            llvm.Target.from_triple(f"{a}-unknown-unknown")
            out.append(a)
        except RuntimeError:
            pass
    return out


@functools.cache
def known_cpus_and_features(triple: str) -> tuple[list[str], list[str]]:
    """The CPUs and features LLVM lists for `triple` (from `-mcpu=help`, which LLVM prints
    once per process: so it runs in a child process)."""
    code = ("import llvmlite.binding as l; l.initialize_all_targets(); "
            f"l.Target.from_triple({triple!r}).create_target_machine(cpu='help')")
    try:
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             timeout=60).stderr
    except (OSError, subprocess.SubprocessError):
        return [], []
    cpus, feats, section = [], [], None
    for line in out.splitlines():
        if line.startswith("Available CPUs"):
            section = cpus
        elif line.startswith("Available features"):
            section = feats
        elif section is not None and line.startswith("  ") and " - " in line:
            section.append(line.split()[0])
        elif section is not None and line.strip() == "" and section:
            section = None
    return cpus, feats


@functools.cache
def check_known(triple: str, cpu: str, features: str, presets: tuple[str, ...] = ()) -> None:
    """Raise a TensorlangError naming what LLVM does not know of a triple, CPU and features
    (`presets`: the target names to suggest for an unknown triple), with the known
    alternatives."""
    tgt = llvm_target(triple, presets)
    _, err = _capture_stderr(lambda: tgt.create_target_machine(cpu=cpu, features=features))
    if "is not a recognized processor" in err:
        cpus, _ = known_cpus_and_features(triple)
        raise TensorlangError(f"target: unknown CPU {cpu!r} for {triple}; known: "
                              f"{', '.join(cpus) or '(LLVM gave no list)'}")
    if "is not a recognized feature" in err:
        bad = [f for f in features.split(",") if f and f"'{f}' is not a recognized" in err]
        _, feats = known_cpus_and_features(triple)
        raise TensorlangError(f"target: unknown feature {', '.join(bad) or features!r} for "
                              f"{triple}; features are written +name or -name, known names: "
                              f"{', '.join(feats) or '(LLVM gave no list)'}")


@functools.cache
def host_description() -> tuple[str, str, str]:
    """This machine's triple, CPU and features as LLVM names them."""
    init()
    features = llvm.get_host_cpu_features().flatten()
    if "+avx512f" in features.split(","):
        # the CPU has 512-bit vectors; without this, LLVM's x86 tuning stays at 256 bits
        features += ",-prefer-256-bit"
    return host_triple(), llvm.get_host_cpu_name(), features


def missing_host_features(cpu: str, features: str) -> set[str]:
    """Features code for a CPU and features may use that this host lacks (empty: it runs
    here)."""
    _, host_cpu, host_features = host_description()
    have = {f[1:] for f in host_features.split(",") if f.startswith("+")}
    need = {f[1:] for f in features.split(",") if f.startswith("+")}
    need -= {"prefer-256-bit"}
    if cpu in _X86_LEVELS:
        need |= _X86_LEVELS[cpu]
    elif cpu not in ("generic", host_cpu):
        return {f"cpu={cpu}"}  # another CPU's scheduling model may use anything it has
    return need - have
