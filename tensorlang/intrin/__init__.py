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
