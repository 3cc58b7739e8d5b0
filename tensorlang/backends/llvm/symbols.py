"""Which functions a compiled kernel calls that it does not define, and whether it may.

LLVM decides late, in instruction selection, that an operation the CPU lacks becomes a call to
a support library (compiler-rt's `__truncdfhf2` for float64 -> float16 without AVX512-FP16,
`__powisf2`, `__udivti3`, ...). Such a call is invisible in the optimised IR; a JIT that cannot
resolve it jumps to address 0. So every kernel is compiled to an object first and its
undefined symbols are read from the object's symbol table (ELF with pyelftools; WebAssembly's
import section); each must be a C library or libm function (or tensorlang's own runtime),
else `tl.build` raises naming the symbol and the target. The JIT then loads that same object.
"""

from __future__ import annotations

import io

from ...errors import TensorlangError
from ...target import Target

_LIBM_BASE = (
    "exp", "exp2", "exp10", "expm1", "log", "log2", "log10", "log1p", "logb", "sin", "cos",
    "tan", "asin", "acos", "atan", "atan2", "sinh", "cosh", "tanh", "asinh", "acosh", "atanh",
    "pow", "sqrt", "cbrt", "hypot", "erf", "erfc", "tgamma", "lgamma", "floor", "ceil", "trunc",
    "round", "roundeven", "rint", "nearbyint", "fabs", "fmod", "remainder", "fma", "fmin",
    "fmax", "copysign", "ldexp", "frexp", "modf", "sincos", "lrint", "llrint", "lround",
    "llround",
)
LIBM = frozenset(f + s for f in _LIBM_BASE for s in ("", "f"))
LIBC = frozenset({
    "malloc", "calloc", "free", "memcpy", "memmove", "memset", "getenv", "strtol", "sysconf",
    "abort", "pthread_create", "pthread_join",
})
# linker-defined names that position-independent objects may refer to
_LINKER = frozenset({"_GLOBAL_OFFSET_TABLE_", "__dso_handle"})
ALLOWED = LIBM | LIBC | _LINKER


def undefined_symbols(obj: bytes) -> set[str]:
    """The names an object file uses but does not define (ELF or WebAssembly)."""
    if obj[:4] == b"\x7fELF":
        return _elf_undefined(obj)
    if obj[:4] == b"\0asm":
        return _wasm_imports(obj)
    raise TensorlangError("internal: cannot read the symbol table of an object that is "
                          f"neither ELF nor WebAssembly (magic {obj[:4]!r})")


def _elf_undefined(obj: bytes) -> set[str]:
    from elftools.elf.elffile import ELFFile
    from elftools.elf.sections import SymbolTableSection

    elf = ELFFile(io.BytesIO(obj))
    out = set()
    for sec in elf.iter_sections():
        if isinstance(sec, SymbolTableSection):
            for sym in sec.iter_symbols():
                if sym.name and sym["st_shndx"] == "SHN_UNDEF":
                    out.add(sym.name)
    return out


def _leb(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return value, pos


def _wasm_imports(obj: bytes) -> set[str]:
    """Function imports of a WebAssembly object (its undefined functions)."""
    out, pos = set(), 8
    while pos < len(obj):
        sid = obj[pos]
        size, pos = _leb(obj, pos + 1)
        end = pos + size
        if sid == 2:  # the import section
            count, p = _leb(obj, pos)
            for _ in range(count):
                n, p = _leb(obj, p)
                p += n                                   # module name
                n, p = _leb(obj, p)
                field = obj[p:p + n].decode()
                p += n
                kind = obj[p]
                p += 1
                if kind == 0:                            # a function: its type index
                    _, p = _leb(obj, p)
                    out.add(field)
                elif kind == 1:                          # a table: type, limits
                    p += 1
                    flags, p = _leb(obj, p)
                    _, p = _leb(obj, p)
                    if flags & 1:
                        _, p = _leb(obj, p)
                elif kind == 2:                          # a memory: limits
                    flags, p = _leb(obj, p)
                    _, p = _leb(obj, p)
                    if flags & 1:
                        _, p = _leb(obj, p)
                else:                                    # a global (or tag): two bytes
                    p += 2
        pos = end
    return out


def check_symbols(obj: bytes, target: Target, kernel: str, provided=frozenset(),
                  resolve=None, undefined=None) -> None:
    """Raise a TensorlangError unless every undefined symbol of `obj` is allowed (C library,
    libm, `provided`) and, with `resolve` (a name -> address function, for the JIT), found.
    `undefined`: those symbols, read from `obj` before (`undefined_symbols`)."""
    for sym in sorted(undefined_symbols(obj) if undefined is None else undefined):
        if sym not in ALLOWED and sym not in provided:
            raise TensorlangError(
                f"build: kernel {kernel} for target {target.name} ({target.triple}, cpu "
                f"{target.cpu}) needs the function {sym!r}, which is not in the C library, libm "
                "or tensorlang's runtime (LLVM calls such support functions for operations a "
                "CPU lacks); nothing was loaded. This is a tensorlang bug: please report it "
                "with the TL_DEBUG=3 output.")
        if resolve is not None and not resolve(sym):
            raise TensorlangError(
                f"build: kernel {kernel} calls {sym!r}, which this process does not provide "
                f"(target {target.name}, {target.triple}); is the C library's libm loaded?")
