"""Running saved kernels: a C harness, cross toolchains and qemu-user.

`run_emulated(f, *arrays)` does for a kernel built for another machine what calling it does
on the host: it checks the arrays, writes the kernel's object and header, a small C program
that reads the inputs from files, calls the kernel and writes the outputs back, links them
with the target's cross compiler (Debian's gcc-aarch64-linux-gnu, gcc-riscv64-linux-gnu)
and runs the program under qemu-user (qemu-aarch64, qemu-riscv64), or natively when the
host can run it. The outputs land in the arrays, as with a call.

    f = tl.build(s, [A, B, C], target="aarch64")
    tl.aot.run_emulated(f, a, b, c)      # c now holds what an AArch64 machine computed
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass

import numpy as np

from .errors import TensorlangError
from .backends.llvm.aot import C_TYPES
from .backends.abi import ERROR_RECORD_LEN, Status, error_record_name
from .target import Target


class ToolchainMissing(TensorlangError):
    """The cross compiler or emulator a target needs is not installed."""


@dataclass(frozen=True)
class Toolchain:
    cc: str                  # C compiler that links for the target
    runner: list[str]        # command prefix that runs a target executable ([] = natively)
    packages: str            # the Debian packages that provide them


def toolchain(target: Target) -> Toolchain:
    """The compiler and emulator for `target`; ToolchainMissing names the packages."""
    arch = target.arch
    if target.is_host:
        chain = Toolchain(os.environ.get("CC", "cc"), [], "gcc")
    elif arch == "aarch64" and "linux" in target.triple:
        cpu = ["-cpu", "max"]  # NEON and SVE
        chain = Toolchain("aarch64-linux-gnu-gcc", ["qemu-aarch64", *cpu],
                          "gcc-aarch64-linux-gnu qemu-user")
    elif arch == "riscv64" and "linux" in target.triple:
        cpu = ["-cpu", "rv64,v=true,vlen=128,elen=64,vext_spec=v1.0"] \
            if "+v" in target.feature_set else []
        chain = Toolchain("riscv64-linux-gnu-gcc", ["qemu-riscv64", *cpu],
                          "gcc-riscv64-linux-gnu qemu-user")
    else:
        raise TensorlangError(f"run_emulated: no emulator is set up for {target.name} "
                              f"({target.triple}); known: the host, aarch64 and riscv64 Linux")
    for tool in [chain.cc, *chain.runner[:1]]:
        if shutil.which(tool) is None:
            raise ToolchainMissing(f"run_emulated: {tool} is not installed (Debian packages: "
                                   f"{chain.packages})")
    return chain


def harness_source(f) -> str:
    """A C program calling `f`: argv holds one file per tensor argument (read, and written
    back for outputs) then the sizes; its exit status is the kernel's."""
    low = f.lowered
    lines = ["#include <stdint.h>", "#include <stdio.h>", "#include <stdlib.h>",
             f'#include "{f.name}.h"', "",
             "static void *load(const char *path, size_t bytes) {",
             "  void *p = malloc(bytes ? bytes : 1);",
             "  FILE *fp = fopen(path, \"rb\");",
             "  if (!p || !fp || fread(p, 1, bytes, fp) != bytes) { perror(path); exit(90); }",
             "  fclose(fp);",
             "  return p;",
             "}", "",
             "static void store(const char *path, const void *p, size_t bytes) {",
             "  FILE *fp = fopen(path, \"wb\");",
             "  if (!fp || fwrite(p, 1, bytes, fp) != bytes) { perror(path); exit(91); }",
             "  fclose(fp);",
             "}", "",
             "int main(int argc, char **argv) {",
             f"  if (argc != {2 * len(low.buffers) + len(low.params) + 1}) return 92;",
             "  size_t bytes[64];"]
    for i, b in enumerate(low.buffers):
        lines.append(f"  bytes[{i}] = strtoull(argv[{1 + 2 * i}], 0, 10);")
        lines.append(f"  {C_TYPES[b.dtype.name]} *a{i} = load(argv[{2 + 2 * i}], bytes[{i}]);")
    base = 1 + 2 * len(low.buffers)
    for j, _ in enumerate(low.params):
        lines.append(f"  int64_t s{j} = strtoll(argv[{base + j}], 0, 10);")
    call = [f"a{i}" for i in range(len(low.buffers))] + [f"s{j}" for j in range(len(low.params))]
    lines.append(f"  int32_t status = {f.name}({', '.join(call)});")
    if low.checks:  # a failed index check: its record, for the error message
        rec = error_record_name(f.name)
        lines += [f"  if (status == {int(Status.INDEX)})",
                  f"    for (int k = 0; k < {ERROR_RECORD_LEN}; k++)",
                  f'    printf("%lld\\n", (long long){rec}[k]);']
    written = sorted(_buffer_index(f, i) for i in f.written)
    for i in written:
        lines.append(f"  store(argv[{2 + 2 * i}], a{i}, bytes[{i}]);")
    lines += ["  return status;", "}", ""]
    return "\n".join(lines)


def _buffer_index(f, arg_index: int) -> int:
    """The position among tensor arguments of argument `arg_index`."""
    from .te.tensor import Tensor

    return sum(isinstance(a, Tensor) for a in f.lowered.args[:arg_index])


def build_executable(f, directory: str, chain: Toolchain | None = None) -> str:
    """Save `f` into `directory` with a harness and link them; the executable's path."""
    chain = chain or toolchain(f.target)
    obj, hdr = os.path.join(directory, f"{f.name}.o"), os.path.join(directory, f"{f.name}.h")
    f.save(obj)
    f.save(hdr)
    src = os.path.join(directory, "harness.c")
    with open(src, "w") as fp:
        fp.write(harness_source(f))
    exe = os.path.join(directory, "harness")
    cmd = [chain.cc, "-O1", "-o", exe, src, obj, "-lm"]
    if chain.runner:
        cmd.insert(1, "-static")  # qemu-user then needs no target libraries
    if f.code.threaded:
        cmd.append("-pthread")
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise TensorlangError(f"run_emulated: linking with {chain.cc} failed:\n{r.stderr}")
    return exe


def run_emulated(f, *arrays, threads: int | None = None, timeout: float = 300) -> None:
    """Run kernel `f` (any target with a toolchain) on numpy arrays, outputs in place."""
    from .te.tensor import Tensor

    values = f.check_arguments(arrays)
    chain = toolchain(f.target)
    tensors = [a for a, arg in zip(arrays, f.lowered.args) if isinstance(arg, Tensor)]
    with tempfile.TemporaryDirectory(prefix="tl-aot-") as d:
        exe = build_executable(f, d, chain)
        argv = []
        for i, a in enumerate(tensors):
            path = os.path.join(d, f"arg{i}.bin")
            a.tofile(path)
            argv += [str(a.nbytes), path]
        argv += [str(v) for v in values]
        env = dict(os.environ)
        if threads is not None:
            env["TL_NUM_THREADS"] = str(threads)
        r = subprocess.run([*chain.runner, exe, *argv], capture_output=True, text=True,
                           timeout=timeout, env=env)
        if r.returncode == 2:
            raise TensorlangError(f"{f.name}: the kernel refused these sizes (status 2)")
        if r.returncode == 3 and f.lowered.checks:
            raise f.status_error(3, [int(x) for x in r.stdout.split()[-ERROR_RECORD_LEN:]])
        if r.returncode != 0:
            raise TensorlangError(f"run_emulated: {' '.join(chain.runner) or 'the program'} "
                                  f"exited with status {r.returncode}:\n{r.stderr}")
        for k in f.written:
            i = _buffer_index(f, k)
            out = np.fromfile(os.path.join(d, f"arg{i}.bin"), dtype=tensors[i].dtype)
            tensors[i][...] = out.reshape(tensors[i].shape)
