"""Backends: LLVM (host JIT) and the runtime that binds numpy arrays to kernels."""
