"""tl.build: lower a schedule and compile it for a target; the callable it returns."""

from __future__ import annotations

import islpy as isl

from .config import timed
from .errors import BoundsError, TensorlangError
from .schedule.lower import LoweredFunc, lower
from .schedule.schedule import Schedule
from .te.tensor import ComputeOp, Tensor


class Module:
    """A built kernel. Call it with numpy arrays in the order of `args`; outputs are written
    in place. Symbolic sizes are bound from the arrays' shapes and checked first."""

    def __init__(self, lowered: LoweredFunc, kernel, target):
        from .backends.runtime import bind_arguments

        self._bind = bind_arguments
        self.lowered = lowered
        self.kernel = kernel
        self.target = target
        self.name = lowered.name
        buffers, scalars = [], []
        it = iter(lowered.buffers)
        for a in lowered.args:
            if isinstance(a, Tensor):
                buffers.append(next(it))
                scalars.append(None)
            else:
                buffers.append(None)
                scalars.append(a)
        self._buffers = buffers
        self._scalars = scalars
        self._written = {i for i, a in enumerate(lowered.args)
                         if isinstance(a, Tensor) and isinstance(a.op, ComputeOp)}
        self._checked: set[tuple] = set()

    def __call__(self, *arrays) -> None:
        ptrs, values, env = self._bind(self._buffers, self._scalars, self.lowered.params,
                                       self._written, arrays)
        if self.lowered.violations:
            self._check_preconditions(tuple(values))
        status = self.kernel.cfunc(*ptrs, *values)
        if status != 0:
            raise MemoryError(f"{self.name}: a temporary buffer could not be allocated")

    def _check_preconditions(self, values: tuple) -> None:
        if values in self._checked:
            return
        names = [p.name for p in self.lowered.params]
        fix = " and ".join(f"{n} = {v}" for n, v in zip(names, values)) or "1 = 1"
        point = isl.Set(f"[{', '.join(names)}] -> {{ : {fix} }}")
        for v in self.lowered.violations:
            if not v.where.intersect_params(point).is_empty():
                raise BoundsError(v.message(point), v.witness(point))
        if len(self._checked) < 1024:
            self._checked.add(values)

    def get_source(self, fmt: str = "ll") -> str:
        """The optimised LLVM IR ("ll", default), the assembly ("asm") or the loop nest."""
        if fmt in ("ll", "llvm"):
            return self.kernel.llvm_ir
        if fmt in ("asm", "s"):
            return self.kernel.assembly()
        if fmt in ("tl", "loops"):
            return str(self.lowered)
        raise TensorlangError(f"get_source: unknown format {fmt!r}; expected 'll', 'asm' or "
                              "'loops'")

    def __repr__(self) -> str:
        return f"Module({self.name}, target={self.target})"


def build(s: Schedule, args, target: str = "llvm", name: str = "main") -> Module:
    """Lower `s` and compile it; `args` are the tensors (and tl.var sizes) of the signature."""
    if not isinstance(target, str):
        raise TensorlangError(f"build: target must be a string such as 'llvm', got {target!r}")
    kind = target.split()[0] if target.split() else ""
    if kind in ("cuda", "nvptx"):
        raise NotImplementedError(f"build: the {kind} target is not implemented yet")
    from .backends.llvm import compile_kernel, parse_target

    tgt = parse_target(target)
    with timed("build"):
        lowered = lower(s, args, name)
        kernel = compile_kernel(name, lowered.buffers, lowered.params, lowered.body, tgt)
    return Module(lowered, kernel, tgt)

