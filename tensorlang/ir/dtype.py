"""Scalar data types and numpy-like type promotion.

Besides numpy's own types, the low-precision floats of the `ml_dtypes` package: bfloat16
(float32's exponent, 7 mantissa bits), float8_e4m3fn (no infinities, one NaN per sign,
largest finite 448) and float8_e5m2 (IEEE-like: infinities, NaNs). numpy arrays of them are
`ml_dtypes` arrays; arithmetic on them is done in float32 and rounded back after each
operation, as `ml_dtypes` computes.
"""

from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np

from ..errors import TensorlangError

# the floats stored in fewer bits than any native arithmetic takes: (exponent bits, mantissa
# bits, whether the encoding has infinities: IEEE-like)
SMALL_FLOATS = {"bfloat16": (8, 7, True), "float8_e4m3fn": (4, 3, False),
                "float8_e5m2": (5, 2, True)}
_NAMES = ("bool", "int8", "int16", "int32", "int64", "uint8", "float16", "float32", "float64",
          *SMALL_FLOATS)
_NP = {name: np.dtype(getattr(ml_dtypes, name)) for name in SMALL_FLOATS}


def _np_dtype(name: str) -> np.dtype:
    return _NP.get(name) or np.dtype(name)


@dataclass(frozen=True, slots=True)
class DType:
    """A scalar type such as float32; `lanes` > 1 is a vector of that many elements."""

    name: str
    lanes: int = 1

    @property
    def np(self) -> np.dtype:
        return _np_dtype(self.name)

    @property
    def dtype(self) -> np.dtype:
        """numpy reads this: `np.zeros(shape, C.dtype)` works, as with TVM's str dtypes."""
        return _np_dtype(self.name)

    def __eq__(self, other) -> bool:
        if isinstance(other, str):  # C.dtype == "float32", as TVM users write
            return self.lanes == 1 and self.name == other
        if isinstance(other, DType):
            return self.name == other.name and self.lanes == other.lanes
        return NotImplemented

    def __hash__(self) -> int:  # equal to the name's hash, as equality with str requires
        return hash(self.name) if self.lanes == 1 else hash((self.name, self.lanes))

    @property
    def bits(self) -> int:
        return 1 if self.name == "bool" else self.np.itemsize * 8

    @property
    def itemsize(self) -> int:
        return self.np.itemsize

    @property
    def is_float(self) -> bool:
        return self.name.startswith("float") or self.name == "bfloat16"

    @property
    def is_small_float(self) -> bool:
        """bfloat16 or a float8: stored as its bits, computed in float32 (`SMALL_FLOATS`)."""
        return self.name in SMALL_FLOATS

    @property
    def is_int(self) -> bool:
        """Signed or unsigned integer (not bool)."""
        return self.name.startswith(("int", "uint"))

    @property
    def is_unsigned(self) -> bool:
        return self.name.startswith("uint")

    @property
    def is_bool(self) -> bool:
        return self.name == "bool"

    def with_lanes(self, lanes: int) -> DType:
        return DType(self.name, lanes)

    @property
    def element(self) -> DType:
        return DType(self.name)

    def min_value(self):
        """The least value of the type: -inf for a float that has it, else the least
        finite one (float8_e4m3fn: -448)."""
        if self.is_float:
            return -np.inf if self.has_inf else float(ml_dtypes.finfo(self.np).min)
        return False if self.is_bool else int(np.iinfo(self.np).min)

    def max_value(self):
        if self.is_float:
            return np.inf if self.has_inf else float(ml_dtypes.finfo(self.np).max)
        return True if self.is_bool else int(np.iinfo(self.np).max)

    @property
    def has_inf(self) -> bool:
        return self.is_float and SMALL_FLOATS.get(self.name, (0, 0, True))[2]

    def __str__(self) -> str:
        return self.name if self.lanes == 1 else f"{self.name}x{self.lanes}"

    def __repr__(self) -> str:
        return f"DType({str(self)!r})"


bool_ = DType("bool")
int8, int16, int32, int64 = DType("int8"), DType("int16"), DType("int32"), DType("int64")
uint8 = DType("uint8")
float16, float32, float64 = DType("float16"), DType("float32"), DType("float64")


def as_dtype(value: object, argname: str = "dtype") -> DType:
    """Parse a dtype given as DType, str or numpy dtype; raise naming `argname` otherwise."""
    if isinstance(value, DType):
        return value
    try:
        name = np.dtype(value).name if not isinstance(value, str) else value
    except TypeError:
        name = None
    if name not in _NAMES:
        raise TensorlangError(
            f"{argname}: unsupported dtype {value!r}; expected one of {', '.join(_NAMES)}"
        )
    return DType(name)


def promote(a: DType, b: DType) -> DType:
    """The numpy result type of a binary arithmetic operation on `a` and `b`. Where numpy
    has none (bfloat16 with float16 or int32, two float8 kinds): float32, or float64 when
    either side has more than 16 bits of integer or 32 of float."""
    if a == b:
        return a
    lanes = max(a.lanes, b.lanes)
    try:
        return DType(np.result_type(a.np, b.np).name, lanes)
    except TypeError:
        wide = any(d.bits > (32 if d.is_float else 16) for d in (a, b))
        return DType("float64" if wide else "float32", lanes)


def dtype_of_python(value: object) -> DType:
    """The dtype a Python scalar gets when it stands alone (numpy's defaults)."""
    if isinstance(value, (bool, np.bool_)):
        return bool_
    if isinstance(value, (int, np.integer)):
        return as_dtype(np.asarray(value).dtype) if isinstance(value, np.integer) else int32
    if isinstance(value, (float, np.floating)):
        return as_dtype(np.asarray(value).dtype) if isinstance(value, np.floating) else float32
    raise TensorlangError(f"cannot make a constant of {type(value).__name__} {value!r}")


def weak_dtype(value: object, other: DType) -> DType:
    """The dtype of a Python scalar combined with an expression of dtype `other` (NEP 50).

    Python scalars are 'weak': `x * 2.0` keeps float16/float32, `i + 1` keeps int8. An int
    tensor combined with a Python float becomes float64, as in numpy.
    """
    if isinstance(value, (bool, np.bool_)):
        return other
    if isinstance(value, (int, np.integer)) and not isinstance(value, np.integer):
        # bool with a Python int: numpy's default integer (int64), as numpy gives
        return other if not other.is_bool else int64.with_lanes(other.lanes)
    if isinstance(value, float):
        return other if other.is_float else float64.with_lanes(other.lanes)
    return promote(dtype_of_python(value), other)
