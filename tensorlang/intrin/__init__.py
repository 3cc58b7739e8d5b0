"""Declared hardware instructions for `Stage.tensorize` (`tl.intrin`): the built-in ones per
architecture (`x86`, `arm`), and what a user needs to declare one (`TensorIntrin`,
`Region`, `serial`, `lowering`)."""

from __future__ import annotations

from ..te.tensorize import Lowering, Region, TensorIntrin, lowering, serial  # noqa: F401
from . import arm, x86


def builtin(name: str) -> TensorIntrin | None:
    """The built-in instruction of this name ("x86.vnni_u8s8_i32"), or None."""
    arch, _, short = name.partition(".")
    mod = {"x86": x86, "arm": arm}.get(arch)
    found = getattr(mod, short, None) if mod is not None else None
    return found if isinstance(found, TensorIntrin) else None


def dot_instructions(target) -> list[TensorIntrin]:
    """The built-in dot-product instructions (c[j] += sum_k a[k] * b[j, k]: `depth`
    products into each of `lanes` sums) that `target` has, fastest first: what the
    auto-scheduler's dot-product sketch tensorizes onto. (`arm.bfmmla_f32` computes a 2 x 2
    tile, not one vector of sums: it is not among them.)"""
    found = []
    for intrin in (x86.vnni_u8s8_i32, x86.bf16_dot_f32, arm.sdot_s8_i32):
        if all(target.has_feature(f) for f in intrin.impl.features):
            found.append(intrin)
    return found
