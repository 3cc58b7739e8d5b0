"""LLVM targets: parsing target strings and making (cached) target machines."""

from __future__ import annotations

import functools
import shlex
from dataclasses import dataclass

import llvmlite.binding as llvm

from ...errors import TensorlangError


@functools.cache
def _init() -> None:
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()


@dataclass(frozen=True)
class LLVMTarget:
    """An LLVM code-generation target: triple, CPU and features."""

    triple: str
    cpu: str
    features: str

    @property
    def is_host(self) -> bool:
        return self.triple == host_triple()

    def __str__(self) -> str:
        return f"llvm -mtriple={self.triple} -mcpu={self.cpu}"


@functools.cache
def host_triple() -> str:
    _init()
    return llvm.get_process_triple()


@functools.cache
def host_target() -> LLVMTarget:
    _init()
    features = llvm.get_host_cpu_features().flatten()
    if "+avx512f" in features.split(","):
        # the CPU has 512-bit vectors; without this, LLVM's x86 tuning stays at 256 bits
        features += ",-prefer-256-bit"
    return LLVMTarget(host_triple(), llvm.get_host_cpu_name(), features)


def parse_target(target: str) -> LLVMTarget:
    """Parse "llvm" or "llvm -mtriple=... -mcpu=... -mattr=..." (host when unspecified)."""
    if not isinstance(target, str):
        raise TensorlangError(f"target: expected a string such as 'llvm', got {target!r}")
    words = shlex.split(target)
    if not words or words[0] != "llvm":
        raise TensorlangError(f"target: expected 'llvm' or 'cuda', got {target!r}")
    host = host_target()
    opts = {}
    for w in words[1:]:
        if not w.startswith("-") or "=" not in w:
            raise TensorlangError(f"target: cannot parse option {w!r} in {target!r}; expected "
                                  "-mtriple=..., -mcpu=... or -mattr=...")
        k, v = w.lstrip("-").split("=", 1)
        if k not in ("mtriple", "mcpu", "mattr"):
            raise TensorlangError(f"target: unknown option -{k}; known: -mtriple, -mcpu, -mattr")
        opts[k] = v
    triple = opts.get("mtriple", host.triple)
    if triple != host.triple and triple.split("-")[0] != host.triple.split("-")[0]:
        raise NotImplementedError(
            f"target {target!r}: cross-compilation is not implemented yet; only the host "
            f"({host.triple}) is supported"
        )
    cpu = opts.get("mcpu", host.cpu if "mcpu" not in opts else opts["mcpu"])
    features = opts.get("mattr", host.features if cpu == host.cpu else "")
    return LLVMTarget(host.triple, cpu, features)


@functools.cache
def target_machine(t: LLVMTarget, jit: bool = True) -> llvm.TargetMachine:
    """A shared target machine for optimising and printing; never give it to an engine."""
    return new_target_machine(t, jit)


def new_target_machine(t: LLVMTarget, jit: bool = True) -> llvm.TargetMachine:
    """A target machine of one's own: an execution engine takes ownership of (and frees) the
    one it is created with, so each engine needs a fresh one."""
    _init()
    try:
        tgt = llvm.Target.from_triple(t.triple)
    except RuntimeError as e:
        raise TensorlangError(f"target: unknown triple {t.triple}: {e}") from None
    return tgt.create_target_machine(cpu=t.cpu, features=t.features, opt=3, jit=jit,
                                     codemodel="jitdefault" if jit else "default")
