"""LLVM target machines for `tl.Target`s: cached ones for optimising and printing, fresh
ones for execution engines and object files. What LLVM knows of triples, CPUs and features
is in tensorlang/llvm_targets.py, below `Target`."""

from __future__ import annotations

import functools

import llvmlite.binding as llvm

from ...llvm_targets import llvm_target
from ...target import Target


def host_target() -> Target:
    """This machine's target (the "host" preset)."""
    return Target.preset("host")


@functools.cache
def target_machine(t: Target, jit: bool = True) -> llvm.TargetMachine:
    """A shared target machine for optimising and printing; never give it to an engine."""
    return new_target_machine(t, jit)


def new_target_machine(t: Target, jit: bool = True) -> llvm.TargetMachine:
    """A target machine of one's own: an execution engine takes ownership of (and frees) the
    one it is created with, so each engine needs a fresh one. Objects (jit=False) are
    position-independent so that they link into executables and shared libraries alike."""
    tgt = llvm_target(t.triple, tuple(Target.presets()))
    if jit:
        return tgt.create_target_machine(cpu=t.cpu, features=t.features, opt=3, jit=True,
                                         codemodel="jitdefault")
    return tgt.create_target_machine(cpu=t.cpu, features=t.features, opt=3, reloc="pic",
                                     codemodel="default")
