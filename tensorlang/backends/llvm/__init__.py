"""The LLVM backend: codegen through llvmlite, host JIT."""

from .jit import (CACHE, Kernel, KernelObject, compile_host_object, compile_kernel,  # noqa: F401
                  load_kernel)
from .target import host_target  # noqa: F401
