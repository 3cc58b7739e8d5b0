"""AArch64 dot-product and matrix instructions, declared by what they compute, lowered by
the LLVM backend (`backends/llvm/tensorcall.py`).

- `sdot_s8_i32` (`sdot`, the dot-product extension): 4 int32 sums, each of 4 products of a
  signed byte of `a` (the same 4 for every sum) and a signed byte of `b` (row j), added to
  `c`.
- `bfmmla_f32` (`bfmmla`, the BF16 extension): a 2x2 float32 tile `c` plus the 2x4 by 4x2
  product of bfloat16 rows `a` and `b` (c[i, j] += sum_k a[i, k] * b[j, k]). The
  instruction rounds its sums its own way (no subnormals): its results can differ from
  the plain code's in the last bits.
"""

from __future__ import annotations

from ..te.reduce import sum as _sum
from ..te.tensor import compute, placeholder, reduce_axis
from ..te.tensorize import TensorIntrin, lowering


def _sdot() -> TensorIntrin:
    a = placeholder((4,), "int8", name="a")
    b = placeholder((4, 4), "int8", name="b")
    k = reduce_axis((0, 4), name="k")
    c = compute((4,), lambda j: _sum(a[k].astype("int32") * b[j, k].astype("int32"), axis=k),
                name="c")
    return TensorIntrin(c, lowering("arm.sdot_s8_i32", ("dotprod",)), name="arm.sdot_s8_i32")


def _bfmmla() -> TensorIntrin:
    a = placeholder((2, 4), "bfloat16", name="a")
    b = placeholder((2, 4), "bfloat16", name="b")
    k = reduce_axis((0, 4), name="k")
    c = compute((2, 2), lambda i, j: _sum(a[i, k].astype("float32") * b[j, k].astype("float32"),
                                          axis=k), name="c")
    return TensorIntrin(c, lowering("arm.bfmmla_f32", ("bf16",)), name="arm.bfmmla_f32")


sdot_s8_i32 = _sdot()
bfmmla_f32 = _bfmmla()
