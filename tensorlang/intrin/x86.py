"""x86 dot-product instructions (AVX-512): each declared by what it computes, lowered by
the LLVM backend (`backends/llvm/tensorcall.py`).

- `vnni_u8s8_i32` (AVX512-VNNI `vpdpbusd`): 16 int32 sums, each of 4 products of an
  unsigned byte of `a` (the same 4 for every sum) and a signed byte of `b` (row j),
  added to `c`. No saturation: the int32 sums wrap, as the plain code's do.
- `bf16_dot_f32` (AVX512-BF16 `vdpbf16ps`): 16 float32 sums, each of 2 products of
  bfloat16s, added to `c`. The instruction adds the two products one after the other in
  its own order and treats subnormal bfloat16 inputs as zero (no flag changes that), so
  its sums can differ from the plain code's in the last bits.
"""

from __future__ import annotations

from ..te.reduce import sum as _sum
from ..te.tensor import compute, placeholder, reduce_axis
from ..te.tensorize import TensorIntrin, lowering


def _dot(name: str, lanes: int, depth: int, a_dtype: str, b_dtype: str, acc: str,
         features: tuple[str, ...]) -> TensorIntrin:
    a = placeholder((depth,), a_dtype, name="a")
    b = placeholder((lanes, depth), b_dtype, name="b")
    k = reduce_axis((0, depth), name="k")
    c = compute((lanes,), lambda j: _sum(a[k].astype(acc) * b[j, k].astype(acc), axis=k),
                name="c")
    return TensorIntrin(c, lowering(f"x86.{name}", features), name=f"x86.{name}")


vnni_u8s8_i32 = _dot("vnni_u8s8_i32", 16, 4, "uint8", "int8", "int32", ("avx512vnni",))
bf16_dot_f32 = _dot("bf16_dot_f32", 16, 2, "bfloat16", "bfloat16", "float32", ("avx512bf16",))
