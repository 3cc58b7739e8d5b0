"""What a kernel tells its caller, shared by the LLVM and CUDA backends, the driver, the
executor and the C header of a saved object: the status a CPU kernel returns and the error
record a failed index check writes."""

from __future__ import annotations

import enum


class Status(enum.IntEnum):
    """A CPU kernel's return value (`int32_t` in the C ABI)."""

    OK = 0
    NO_MEMORY = 1       # a temporary buffer could not be allocated
    BAD_SIZES = 2       # sizes whose reads would leave their tensors (the header lists them)
    INDEX = 3           # a run-time index check failed; the error record says which


# the error record: [check site + 1, the index, the extent, the iteration's first values...]
ERROR_RECORD_LEN = 16
