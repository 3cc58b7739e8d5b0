"""Tutorial 07: kernels for new hardware — one schedule, four instruction sets.

llvmlite carries LLVM's back ends, so tensorlang cross-compiles with `pip install` alone: a
`tl.Target` names the machine (a preset such as "aarch64" or "riscv64+v", or the string
"llvm -mtriple=... -mcpu=... -mattr=..."), `vector_lanes` says how wide its vectors are, and
`save` writes an object file and a C header for a program on that machine. With Debian's
cross compilers and qemu-user installed, `tl.aot.run_emulated` runs the kernel there.

Run: python tutorials/07_new_hardware.py
"""

import os
import re
import tempfile

import numpy as np

import tensorlang as tl

N = int(os.environ.get("TL_TUTORIAL_N", "96"))

A = tl.placeholder((N, N), name="A")
B = tl.placeholder((N, N), name="B")
k = tl.reduce_axis((0, N), name="k")
C = tl.compute((N, N), lambda i, j: tl.sum(A[i, k] * B[k, j], axis=k), name="C")


def schedule(target: tl.Target) -> tl.Schedule:
    """Register tiles of 4 rows x one vector; the reduction outside the vector loop."""
    s = tl.create_schedule(C)
    lanes = target.vector_lanes("float32")        # 8 on AVX2, 4 on NEON / RVV at VLEN 128
    io, jo, ii, ji = s[C].tile(*C.op.axis, 4, lanes)
    s[C].reorder(io, jo, ii, k, ji)
    s[C].unroll(ii)
    s[C].vectorize(ji)
    return s


# --------------------------------------------------- 1. the inner loop on four machines
# each target's vector multiply-add instruction, as its assembly spells it (wasm's SIMD128
# has none: a multiply and an add)
FMA = {"x86-64-v3": (r"\bvfmadd\w*ps\b", "vector multiply-adds"),
       "aarch64": (r"\bfmla\s", "vector multiply-adds"),
       "riscv64+v": (r"\bvfmacc\.v", "vector multiply-adds"),
       "wasm32": (r"\bf32x4\.(mul|add)\b", "vector multiplies and adds")}

modules = {}
for name, (pattern, what) in FMA.items():
    target = tl.Target.parse(name)
    f = tl.build(schedule(target), [A, B, C], target=target, name="matmul")
    modules[name] = f
    asm = f.get_source("asm").splitlines()
    hits = [line.strip() for line in asm if re.search(pattern, line)]
    assert hits, f"no {what} on {name}"
    print(f"--- {name}: {target}")
    print(f"    {target.vector_lanes('float32')} float32 lanes; "
          f"{len(hits)} {what} in the kernel; the first few:")
    for line in hits[:4]:          # the matching instructions only, not their neighbours
        print("    " + line)

# ---------------------------------------------------- 2. an object and a C header to link
f = modules["aarch64"]
with tempfile.TemporaryDirectory() as d:
    f.save(os.path.join(d, "matmul.o"))           # ELF for AArch64
    f.save(os.path.join(d, "matmul.h"))           # int32_t matmul(float *A, float *B, ...)
    header = open(os.path.join(d, "matmul.h")).read()
print("--- the header's declaration:")
print(header[header.index("int32_t matmul("):header.index(");") + 2])

# ----------------------------------------------- 3. run it where it would run: qemu-user
a = np.random.rand(N, N).astype("float32")
b = np.random.rand(N, N).astype("float32")
for name in ("aarch64", "riscv64+v", "x86-64-v3"):
    c = np.zeros((N, N), "float32")
    try:
        tl.aot.run_emulated(modules.get(name) or tl.build(
            schedule(tl.Target.parse(name)), [A, B, C], target=name, name="matmul"), a, b, c)
    except tl.aot.ToolchainMissing as e:
        print(f"--- {name}: not run ({e})")
        continue
    np.testing.assert_allclose(c, a @ b, rtol=1e-4)
    print(f"--- {name}: the saved kernel, linked with a C harness and run, matches numpy")

# ------------------------------------------------------------------- 4. what is refused
try:
    f(a, b, np.zeros((N, N), "float32"))
except tl.TensorlangError as e:
    print("--- calling the AArch64 kernel here:", str(e).split(";")[0])
try:
    tl.Target.parse("llvm -mtriple=aarch64-linux-gnu -mcpu=cortex-z9")
except tl.TensorlangError as e:
    print("--- an unknown CPU:", str(e)[:90], "...")
print("OK")
