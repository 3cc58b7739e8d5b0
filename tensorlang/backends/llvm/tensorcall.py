"""The instructions of `tl.intrin` that the LLVM backend emits itself (`TensorCall`): one
function per lowering key, given the code generator and a pointer to each operand's region
(inputs, then the output; each region one block of memory, which tensorize checked).

x86: AVX512-VNNI `vpdpbusd` and AVX512-BF16 `vdpbf16ps` through LLVM's intrinsics (a
`<16 x i32>` of the packed bytes or bfloat16 pairs per operand). AArch64: `sdot` and
`bfmmla` through LLVM's NEON intrinsics. A target without the instruction's CPU features
gets a TensorlangError naming them: the plain code is what `tensorize` is not.
"""

from __future__ import annotations

from llvmlite import ir

from ...errors import TensorlangError
from ...ir.stmt import TensorCall
from .types import I8, I32

F32 = ir.FloatType()


def _vec(t: ir.Type, n: int) -> ir.VectorType:
    return ir.VectorType(t, n)


class _Operand:
    """A pointer to one operand's region, its accesses tagged as its buffer's alone (so
    that LLVM may keep an accumulator in registers across the loops around)."""

    def __init__(self, cg, buf, base):
        self.cg, self.buf = cg, buf
        self.ptr = cg.builder.bitcast(cg.address(buf, base), I8.as_pointer())


def _load(cg, op: _Operand, t: ir.Type, align: int = 1) -> ir.Value:
    return cg.tag(cg.builder.load(cg.builder.bitcast(op.ptr, t.as_pointer()), align=align),
                  op.buf)


def _store(cg, v: ir.Value, op: _Operand, align: int = 1) -> None:
    cg.tag(cg.builder.store(v, cg.builder.bitcast(op.ptr, v.type.as_pointer()), align=align),
           op.buf)


def _splat(cg, v: ir.Value, n: int) -> ir.Value:
    b = cg.builder
    one = b.insert_element(ir.Constant(_vec(v.type, 1), ir.Undefined), v, ir.Constant(I32, 0))
    return b.shuffle_vector(one, ir.Constant(_vec(v.type, 1), ir.Undefined),
                            ir.Constant(_vec(I32, n), [0] * n))


def _x86_dot(name: str, acc_t: ir.Type):
    """acc (16 lanes) += 16 dot products of one 4-byte group of `a` (the same for each
    lane) with the 4-byte groups of `b`."""
    def emit(cg, ptrs):
        a, b, c = ptrs
        v16 = _vec(I32, 16)
        av = _splat(cg, _load(cg, a, I32), 16)
        bv = _load(cg, b, v16)
        acc = _load(cg, c, _vec(acc_t, 16), 4)
        fn = cg._declare(name, acc.type, [acc.type, v16, v16])
        _store(cg, cg.builder.call(fn, [acc, av, bv]), c, 4)
    return emit


def _sdot(cg, ptrs):
    """acc (4 lanes) += 4 dot products of one 4-byte group of `a` with those of `b`."""
    a, b, c = ptrs
    bb = cg.builder
    v16 = _vec(I8, 16)
    av = bb.bitcast(_splat(cg, _load(cg, a, I32), 4), v16)
    bv = _load(cg, b, v16)
    acc = _load(cg, c, _vec(I32, 4), 4)
    fn = cg._declare("llvm.aarch64.neon.sdot.v4i32.v16i8", acc.type, [acc.type, v16, v16])
    _store(cg, bb.call(fn, [acc, av, bv]), c, 4)


class _BFloat(ir.Type):
    """LLVM's `bfloat`, which llvmlite has no class for (only its name is needed: values of
    it are bitcasts of 16-bit integers)."""

    def _to_string(self) -> str:
        return "bfloat"

    def __eq__(self, other) -> bool:
        return isinstance(other, _BFloat)

    def __hash__(self) -> int:
        return hash("bfloat")


def _bfmmla(cg, ptrs):
    """c (2x2 float32) += a (2x4 bfloat16) times b (2x4 bfloat16) transposed."""
    a, b, c = ptrs
    bb = cg.builder
    v8 = _vec(ir.IntType(16), 8)
    bf8 = _vec(_BFloat(), 8)
    av, bv = (bb.bitcast(_load(cg, x, v8), bf8) for x in (a, b))
    acc = _load(cg, c, _vec(F32, 4), 4)
    fn = cg._declare("llvm.aarch64.neon.bfmmla", acc.type, [acc.type, bf8, bf8])
    _store(cg, bb.call(fn, [acc, av, bv]), c, 4)


EMITTERS = {
    "x86.vnni_u8s8_i32": _x86_dot("llvm.x86.avx512.vpdpbusd.512", I32),
    "x86.bf16_dot_f32": _x86_dot("llvm.x86.avx512bf16.dpbf16ps.512", F32),
    "arm.sdot_s8_i32": _sdot,
    "arm.bfmmla_f32": _bfmmla,
}
ARCHES = {"x86": ("x86_64", "amd64"), "arm": ("aarch64", "arm64")}


def check_target(s: TensorCall, target) -> None:
    """The target has the instruction: its architecture and CPU features."""
    low = s.intrin.impl
    arch = low.key.split(".")[0]
    name = s.intrin.name
    if target is None or target.arch not in ARCHES.get(arch, ()):
        raise TensorlangError(
            f"tensorize: {name} is an {arch} instruction; the target is "
            f"{getattr(target, 'arch', 'unknown')} (build for an {arch} target, or tensorize "
            "with a portable TensorIntrin)")
    feats = target.feature_set
    missing = [f for f in low.features if not target.has_feature(f)]
    if missing:
        raise TensorlangError(
            f"tensorize: {name} needs the CPU feature(s) {', '.join(missing)}, which target "
            f"{target} does not have (cpu {target.cpu!r}, features "
            f"{','.join(sorted(feats)) or 'none'}); build for a CPU that has them (e.g. "
            f"-mattr=+{',+'.join(missing)}) or leave this stage untensorized")


def emit(cg, s: TensorCall) -> None:
    key = s.intrin.impl.key
    fn = EMITTERS.get(key)
    if fn is None:
        raise TensorlangError(f"tensorize: the LLVM backend has no lowering {key!r} "
                              f"(it has {', '.join(sorted(EMITTERS))})")
    check_target(s, cg.target)
    fn(cg, [_Operand(cg, buf, base) for buf, base in zip(s.buffers, s.bases)])
