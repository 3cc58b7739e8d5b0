"""The LLVM backend: codegen through llvmlite, host JIT."""

from .jit import CACHE, Kernel, compile_kernel  # noqa: F401
from .target import host_target  # noqa: F401
