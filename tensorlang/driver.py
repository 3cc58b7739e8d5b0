"""tl.build: lower a schedule and compile it for a target; the callable it returns."""

from __future__ import annotations

import islpy as isl
import numpy as np

from .deep import deep
from .backends.abi import Status
from .config import timed
from .errors import BoundsError, IndexBoundsError, TensorlangError
from .schedule.lower import LoweredFunc, lower
from .schedule.schedule import Schedule
from .target import Target, backend_kind
from .te.tensor import PlaceholderOp, Tensor


class Module:
    """A built kernel. Call it with numpy arrays in the order of `args`; outputs are written
    in place. Symbolic sizes are bound from the arrays' shapes and checked first.

    A kernel built for another machine (a cross target) is not loaded: `save` writes it as an
    object file, assembly, LLVM IR or C header, and `tl.aot.run_emulated` runs it under
    qemu-user."""

    def __init__(self, lowered: LoweredFunc, kernel, target, code=None):
        from .backends.runtime import bind_arguments

        self._bind = bind_arguments
        self.lowered = lowered
        self.kernel = kernel      # the JIT-compiled kernel (None for a cross target)
        self._code = code         # the object-file form, made on the first save
        self.target = target
        self.name = lowered.name
        buffers, scalars = [], []
        it = iter(lowered.buffers)
        for a in lowered.args:
            if isinstance(a, Tensor):
                buffers.append(next(it))
                scalars.append(None)
            else:
                buffers.append(None)
                scalars.append(a)
        self._buffers = buffers
        self._scalars = scalars
        self._written = {i for i, a in enumerate(lowered.args)
                         if isinstance(a, Tensor) and not isinstance(a.op, PlaceholderOp)}
        self._params = lowered.params
        self._checks = lowered.checks
        self._violations = lowered.violations
        self._seen_sizes: set[tuple] = set()
        self._last = None

    @property
    def params(self) -> list:
        """The size parameters the kernel takes after its pointers (int64 each)."""
        return self._params

    def __call__(self, *arrays) -> None:
        if self.kernel is None:
            raise TensorlangError(
                f"{self.name} was built for {self.target.name} ({self.target.triple}) and "
                "cannot run in this process; use save() (f.save('kernel.o') and "
                "f.save('kernel.h')) and link it into a program for that machine, or run it "
                "under emulation with tl.aot.run_emulated(f, *arrays)")
        bound = self._same_as_last(arrays)
        if bound is None:
            bound = self._checked(arrays)
            self._remember(arrays, bound)
        status, record = self.kernel.run(*bound[0], *bound[1])
        if status != 0:
            raise self.status_error(status, record)

    # A call with the very arrays of the previous call (a timing loop, the executor's
    # steps) skips the argument checks: same objects (weak references, so nothing is kept
    # alive), same shape, strides, dtype and writeability, hence the same pointers, sizes
    # and overlaps. The checks take as long as a small kernel itself.
    def _same_as_last(self, arrays):
        last = self._last
        if last is None or len(arrays) != len(last[0]):
            return None
        for a, ref, sig in zip(arrays, last[0], last[1]):
            # a dead reference is None, and so may be the argument: not the same array
            if type(a) is not np.ndarray or ref() is not a or a.shape != sig[0] or \
                    a.strides != sig[1] or a.dtype != sig[2] or a.flags.writeable != sig[3]:
                return None
        return last[2]

    def _remember(self, arrays, bound) -> None:
        import weakref

        self._last = None
        if all(type(a) is np.ndarray for a in arrays):
            self._last = ([weakref.ref(a) for a in arrays],
                          [(a.shape, a.strides, a.dtype, a.flags.writeable) for a in arrays],
                          bound)

    def status_error(self, status: int, record) -> Exception:
        """The exception for a kernel's nonzero status; `record` is its error record (a
        sequence of int64, see `backends/abi.py`), read and cleared by the caller."""
        if status == Status.NO_MEMORY:
            return MemoryError(f"{self.name}: a temporary buffer could not be allocated")
        if status == Status.INDEX and record is not None and \
                0 < record[0] <= len(self._checks):
            site = self._checks[record[0] - 1]
            value, extent = record[1], record[2]
            point = tuple(record[3:3 + len(site.axes)])
            return IndexBoundsError(site.message(value, extent, point),
                                    dict(zip(site.axes, point)), site.tensor, value, site.dim,
                                    extent)
        if status == Status.EXTERN:
            return self._extern_error()
        return TensorlangError(f"{self.name}: the kernel stopped with status {status}")

    def _extern_error(self) -> Exception:
        """A failed extern stage: the exception of its Python function (chained), or the
        C functions that may have returned nonzero."""
        from .backends.extern import take_error
        from .ir.stmt import ExternCall
        from .ir.visit import walk_stmt

        err = take_error()
        if err is not None:
            stages = [s.stage for s in walk_stmt(self.lowered.body)
                      if isinstance(s, ExternCall) and not isinstance(s.fn, str)]
            out = TensorlangError(f"{self.name}: the Python function of extern stage "
                                  f"{' or '.join(stages)} raised {type(err).__name__}: {err}")
            out.__cause__ = err
            return out
        calls = [f"{s.stage} ({s.fn})" for s in walk_stmt(self.lowered.body)
                 if isinstance(s, ExternCall) and isinstance(s.fn, str)]
        return TensorlangError(f"{self.name}: an extern stage's C function returned a nonzero "
                               f"status; the C extern stages are {', '.join(calls)}")

    def _check_preconditions(self, values: tuple) -> None:
        if values in self._seen_sizes:
            return
        names = [p.name for p in self._params]
        fix = " and ".join(f"{n} = {v}" for n, v in zip(names, values)) or "1 = 1"
        env = dict(zip(names, values))
        for p, fs in getattr(self.lowered, "products", {}).items():   # n * m's parameter
            prod = 1
            for f in fs:
                prod *= int(env[f])
            names.append(p)
            fix += f" and {p} = {prod}"
        point = isl.Set(f"[{', '.join(names)}] -> {{ : {fix} }}")
        for v in self._violations:
            if not v.where.intersect_params(point).is_empty():
                raise BoundsError(v.message(point), v.witness(point))
        if len(self._seen_sizes) < 1024:
            self._seen_sizes.add(values)

    def check_arguments(self, arrays) -> list[int]:
        """Check `arrays` against the signature as a call does; the sizes' values."""
        return self._checked(arrays)[1]

    def _checked(self, arrays) -> tuple[list[int], list[int]]:
        ptrs, values, _ = self._bind(self._buffers, self._scalars, self._params,
                                     self._written, arrays)
        if self._violations:
            self._check_preconditions(tuple(values))
        return ptrs, values

    @property
    def written(self) -> set[int]:
        """Indices of the arguments the kernel writes."""
        return set(self._written)

    @property
    def code(self):
        """The kernel as an object for `self.target` (the AOT form; see `save`)."""
        if self._code is None:
            from .backends.llvm.aot import compile_object

            low = self.lowered
            self._code = compile_object(self.name, low.buffers, low.params, low.body,
                                        self.target, low.refuse)
        return self._code

    def save(self, path, fmt: str | None = None) -> None:
        """Write the kernel to `path`; the format follows the suffix unless `fmt` says:
        ".so" (a shared library for the host, `tl.load_module`), ".o" (object file), ".s"
        (assembly), ".ll" (LLVM IR), ".bc" (LLVM bitcode), ".h" (a C header declaring the
        kernel's ABI)."""
        import os

        path = os.fspath(path)
        kind = fmt or os.path.splitext(path)[1].lstrip(".")
        if self.name in _C_RESERVED and kind in ("o", "obj", "h"):
            raise TensorlangError(
                f"save: the kernel is named {self.name!r}, which C reserves; build it with "
                f"another name, e.g. tl.build(s, args, target=..., name='my_kernel')")
        if kind == "so":
            from .shared_lib import export

            export(self, path)
            return
        if kind in ("o", "obj"):
            data: bytes | str = self.code.object()
        elif kind in ("s", "asm"):
            data = self.code.assembly()
        elif kind in ("ll", "llvm"):
            data = self.code.llvm_ir
        elif kind == "bc":
            data = self.code.bitcode()
        elif kind == "h":
            from .backends.llvm.aot import header

            low = self.lowered
            checks = [f"{c.stage} reads {c.access}, dimension {c.dim} (axes "
                      f"{', '.join(c.axes)})" for c in low.checks]
            data = header(self.name, low.args, low.buffers, low.params, self.target,
                          self.code.threaded, [str(v.where.params()) for v in low.violations],
                          checks)
        else:
            raise TensorlangError(f"save: cannot tell the format of {path!r}; use a suffix "
                                  ".so, .o, .s, .ll, .bc or .h, or pass fmt=")
        mode = "wb" if isinstance(data, bytes) else "w"
        with open(path, mode) as f:
            f.write(data)

    def export_library(self, path) -> None:
        """TVM's name for `save(path)` of a shared library (".so"): the kernel and its
        signature, loadable with `tl.load_module` or ctypes."""
        from .shared_lib import export

        export(self, path)

    @property
    def entry_name(self) -> str:
        """The kernel's name (TVM's `entry_name`)."""
        return self.name

    def time_evaluator(self, func_name: str | None = None, dev=None, number: int = 10,
                       repeat: int = 1, min_repeat_ms: float = 0.0):
        """TVM's timer: a function of the kernel's arguments that calls the kernel (after
        one warm-up call) in `repeat` rounds of `number` calls and returns a
        `tl.testing.BenchmarkResult` (`.mean` seconds a call, `.results` per round).
        `func_name` must be the kernel's name if given; `dev` is accepted for TVM's call
        shape (the kernel runs where it was built for)."""
        from .testing import benchmark

        if func_name is not None and func_name != self.name:
            raise TensorlangError(f"time_evaluator: this module's kernel is {self.name!r}, "
                                  f"got func_name={func_name!r}")

        def evaluator(*arrays):
            return benchmark(self, *arrays, number=number, repeat=repeat,
                             min_repeat_ms=min_repeat_ms)
        return evaluator

    def get_source(self, fmt: str = "ll") -> str:
        """The optimised LLVM IR ("ll", default), the assembly ("asm") or the loop nest."""
        if fmt in ("ll", "llvm"):
            return self.kernel.llvm_ir if self.kernel is not None else self.code.llvm_ir
        if fmt in ("asm", "s"):
            return self.kernel.assembly() if self.kernel is not None else self.code.assembly()
        if fmt in ("tl", "loops"):
            return str(self.lowered)
        raise TensorlangError(f"get_source: unknown format {fmt!r}; expected 'll', 'asm' or "
                              "'loops'")

    def __repr__(self) -> str:
        return f"Module({self.name}, target={self.target})"


class CudaModule(Module):
    """A kernel built for target="cuda" (CUDA C: `get_source()`, `save("k.cu")`) or
    target="nvptx" (PTX from LLVM: `save("k.ptx")`), made without a GPU; a call (numpy
    arrays, copied to the device and back, or device arrays) needs pycuda and a CUDA driver."""

    def __init__(self, lowered: LoweredFunc, kernel):
        super().__init__(lowered, None, "cuda" if kernel.source_format == "cu" else "nvptx")
        self.cuda = kernel

    def __call__(self, *arrays) -> None:
        """numpy arrays are copied to the device and the outputs back; GPU arrays (torch,
        cupy, pycuda: `__cuda_array_interface__`) are used in place."""
        from .backends.runtime import DeviceArray, bind_arguments

        arrays = tuple(a if b is None or isinstance(a, np.ndarray) else DeviceArray(a)
                       for a, b in zip(arrays, self._buffers))
        _, values, _ = bind_arguments(self._buffers, self._scalars, self.lowered.params,
                                      self._written, arrays)
        if self.lowered.violations:
            self._check_preconditions(tuple(values))
        env = {p.name: v for p, v in zip(self.lowered.params, values)}
        tensors = [a for a, b in zip(arrays, self._buffers) if b is not None]
        written = {k for k, i in enumerate(i for i, b in enumerate(self._buffers)
                                           if b is not None) if i in self._written}
        self.cuda.run(tensors, env, written, self.lowered.checks)

    def _formats(self) -> tuple[str, ...]:
        return ("cu", "cuda") if self.cuda.source_format == "cu" else ("ptx",)

    def get_source(self, fmt: str | None = None) -> str:
        """The kernel's source (CUDA C or PTX, by target; the default) or the loop nest
        ("loops")."""
        if fmt is None or fmt in self._formats():
            return self.cuda.get_source()
        if fmt in ("tl", "loops"):
            return str(self.lowered)
        raise TensorlangError(f"get_source: unknown format {fmt!r} for a {self.target} "
                              f"kernel; expected {self._formats()[0]!r} or 'loops'")

    def save(self, path, fmt: str | None = None) -> None:
        """Write the kernel's source to `path` (".cu" for CUDA C, ".ptx" for PTX)."""
        import os

        path = os.fspath(path)
        kind = fmt or os.path.splitext(path)[1].lstrip(".")
        if kind not in self._formats():
            raise TensorlangError(f"save: a {self.target} kernel is saved as "
                                  f".{self._formats()[0]}, not {kind!r}")
        with open(path, "w") as f:
            f.write(self.cuda.get_source())

    def __repr__(self) -> str:
        return f"CudaModule({self.name}, target={self.target})"


class CachedModule(Module):
    """A host kernel loaded from machine code compiled earlier, by this process or another
    (the graph executor's kernel cache, `graph/kernel_cache.py`): called, checked and bound
    as the `Module` it was saved from. It has no loop nest of its own: `lowered`, `code`,
    `save` and `get_source` compile it again (`rebuild`, once) and answer from that."""

    def __init__(self, entry: dict, kernel, target, rebuild):
        from .backends.runtime import bind_arguments
        from .polyhedral.bounds import BoundsViolation
        from .polyhedral.checks import CheckSite
        from .shared_lib import decode_signature

        self._bind = bind_arguments
        self.kernel = kernel
        self._code = None
        self.target = target
        self.name = entry["signature"]["name"]
        self._buffers, self._scalars, self._params, self._written = \
            decode_signature(entry["signature"])
        self._checks = [CheckSite(c["stage"], c["tensor"], c["access"], c["dim"],
                                  tuple(c["axes"])) for c in entry["checks"]]
        self._violations = [BoundsViolation(v["stmt"], v["text"], isl.Set(v["where"]))
                            for v in entry["violations"]]
        self._seen_sizes = set()
        self._last = None
        self._rebuild = rebuild
        self._full: Module | None = None

    def _built(self) -> Module:
        if self._full is None:
            self._full = self._rebuild()
        return self._full

    @property
    def lowered(self) -> LoweredFunc:
        """The loop nest (compiled again from the kernel's schedule: see the class)."""
        return self._built().lowered

    @property
    def code(self):
        return self._built().code

    def save(self, path, fmt: str | None = None) -> None:
        self._built().save(path, fmt)

    def export_library(self, path) -> None:
        self._built().export_library(path)

    def get_source(self, fmt: str = "ll") -> str:
        return self._built().get_source(fmt)


def module_entry(module: Module) -> dict:
    """What `CachedModule` needs of a built host module besides its machine code, as JSON
    data: the signature, the run-time index checks and the size preconditions."""
    from .shared_lib import signature

    return {"signature": signature(module),
            "checks": [{"stage": c.stage, "tensor": c.tensor, "access": c.access,
                        "dim": c.dim, "axes": list(c.axes)} for c in module._checks],
            "violations": [{"stmt": v.stmt, "text": v.text, "where": str(v.where)}
                           for v in module._violations]}


@deep
def build_host_object(s: Schedule, args, name: str = "main", checks: bool = True):
    """`build` for the host without loading the kernel: (the module, its kernel not loaded;
    its machine code as a `backends.llvm.KernelObject`). `with_kernel` loads the code
    here; another process of this machine loads it with `load_host_object` (and the
    module's `module_entry`)."""
    from .backends.llvm import compile_host_object

    _check_name(name)
    tgt = Target.parse("llvm")
    with timed("build"):
        lowered = lower(s, args, name, checks=checks)
        code = compile_host_object(name, lowered.buffers, lowered.params, lowered.body, tgt)
    return Module(lowered, None, tgt), code


def with_kernel(module: Module, code) -> Module:
    """`module` (of `build_host_object`) with its machine code `code` loaded: callable."""
    from .backends.llvm import load_kernel

    kernel = load_kernel(code, len(module.lowered.buffers), len(module.lowered.params),
                         module.target)
    return Module(module.lowered, kernel, module.target)


def load_host_object(entry: dict, code, rebuild) -> CachedModule:
    """The module of `build_host_object`'s results, loaded into this process; `rebuild()`
    makes the full `Module` when its loop nest or sources are asked for."""
    from .backends.llvm import load_kernel

    tgt = Target.parse("llvm")
    sig = entry["signature"]
    n_buffers = sum("tensor" in a for a in sig["args"])
    kernel = load_kernel(code, n_buffers, len(sig["params"]), tgt)
    return CachedModule(entry, kernel, tgt, rebuild)


_C_RESERVED = {
    "main", "auto", "break", "case", "char", "const", "continue", "default", "do", "double",
    "else", "enum", "extern", "float", "for", "goto", "if", "inline", "int", "long",
    "register", "restrict", "return", "short", "signed", "sizeof", "static", "struct",
    "switch", "typedef", "union", "unsigned", "void", "volatile", "while", "malloc", "free",
}


# functions the generated code may call: a kernel with one of these names would call itself
_LIBC = {f + suffix for f in ("exp", "log", "sin", "cos", "tan", "tanh", "sqrt", "pow", "floor",
                              "ceil", "fabs", "erf", "exp2", "log2", "log10", "fma", "fmin",
                              "fmax", "round", "roundeven", "trunc", "rint", "nearbyint",
                              "copysign")
         for suffix in ("", "f", "l")} | {"malloc", "free", "memcpy", "memset", "getenv",
                                         "strtol", "sysconf", "syscall", "sched_yield",
                                         "pthread_create", "pthread_join", "abort"}


def _build_nvptx(s: Schedule, args, target: str, name: str, checks: bool) -> Module:
    """target="nvptx" or "nvptx -mcpu=sm_90": PTX for that GPU architecture and later."""
    from .backends.cuda.module import NvptxKernel
    from .backends.cuda.nvptx import DEFAULT_ARCH

    arch = DEFAULT_ARCH
    for opt in target.split()[1:]:
        if not opt.startswith("-mcpu="):
            raise TensorlangError(f"build: the nvptx target takes -mcpu=sm_XX only, got "
                                  f"{opt!r}")
        arch = opt.split("=", 1)[1]
    _check_name(name)
    _refuse_extern_on_gpu(s, "nvptx")
    with timed("build"):
        lowered = lower(s, args, name, checks=checks)
        kernel = NvptxKernel(name, lowered.buffers, lowered.params, lowered.body, arch)
    return CudaModule(lowered, kernel)


def _refuse_extern_on_gpu(s: Schedule, target: str) -> None:
    """Extern stages run on the host: a Python function cannot run on a GPU, and calling a
    C function from device code (a __device__ function linked in) is not built yet."""
    from .te.extern import ExternOp

    for st in s.stages:
        if not isinstance(st.op, ExternOp):
            continue
        if not isinstance(st.op.fn, str):
            raise TensorlangError(
                f"build: extern stage {st.op.name} runs the Python function {st.op.what}, "
                f"which cannot run on the GPU (target={target!r}); build for target='llvm', "
                "or write the stage with tl.compute")
        raise NotImplementedError(
            f"build: extern stage {st.op.name} calls the C function {st.op.fn!r}; extern "
            f"stages on GPU targets ({target!r}) are not supported yet; build for "
            "target='llvm'")


def _check_name(name) -> None:
    """The kernel's name is its symbol in the object file and the C header: an ASCII C
    identifier. Other names are refused, not mangled, so that the symbol a C caller links
    against is the name it gave."""
    if not isinstance(name, str) or not name.isascii() or not name.isidentifier():
        raise TensorlangError(f"build: name must be a C identifier of ASCII letters, digits "
                              f"and _ (not starting with a digit), got {name!r}")


@deep
def build(s: Schedule, args, target="llvm", name: str = "main", checks: bool = True,
          fastmath: bool | None = None) -> Module:
    """Lower `s` and compile it; `args` are the tensors (and tl.var sizes) of the signature.

    The result is a `Module`, called with one numpy array per tensor of `args` (and an int
    per tl.var), in that order; outputs are written into the arrays passed for them::

        f = tl.build(s, [A, B, C])
        f(a, b, c)                      # c = the result, written in place
        f.time_evaluator(number=10)(a, b, c).mean     # seconds a call
        f.save("k.so")                  # or .o/.s/.ll/.h; tl.load_module("k.so")

    `target` is a `tl.Target`, a preset name ("aarch64", "riscv64+v", ...) or a string
    "llvm -mtriple=... -mcpu=... -mattr=...". Code for the host is JIT-compiled and callable;
    code for another machine is compiled to an object (see `Module.save`).

    Reads whose index isl cannot prove in range (`A[I[i]]`: it depends on data) are checked
    when the kernel runs; an index outside its tensor raises `tl.IndexBoundsError` naming the
    tensor, the index and the iteration. `checks=False` removes those checks, for indices
    the caller guarantees (an out-of-range index then reads outside the array).

    `fastmath=True` (LLVM targets; default TL_FASTMATH, off) lets LLVM reassociate float
    arithmetic, divide by reciprocals and assume no NaN or inf, makes min/max ignore NaN
    and exp skip its edge cases: faster reductions, softmax and activations, results that
    differ from numpy's by a few ulp, and no NaN guarantees."""
    if fastmath is not None:
        if not isinstance(fastmath, bool):
            raise TensorlangError(f"build: fastmath must be True, False or None, got "
                                  f"{fastmath!r}")
        from .config import _FASTMATH

        token = _FASTMATH.set(fastmath)
        try:
            return build(s, args, target, name, checks)
        finally:
            _FASTMATH.reset(token)
    kind = backend_kind(target)
    if kind == "nvptx":
        return _build_nvptx(s, args, target, name, checks)
    if not isinstance(target, (str, Target)):
        raise TensorlangError(f"build: target must be a tl.Target or a string such as 'llvm' "
                              f"or 'aarch64', got {target!r}")
    _check_name(name)
    if name in _LIBC or name.startswith(("llvm", "tl_aot_", "tl_parallel")):
        raise TensorlangError(f"build: name {name!r} is a function the generated code may call "
                              "(C library or tensorlang runtime); choose another name")
    from .backends.llvm import compile_kernel
    from .backends.llvm.aot import compile_object

    if kind == "cuda":
        from .backends.cuda.module import CudaKernel

        _refuse_extern_on_gpu(s, "cuda")
        with timed("build"):
            lowered = lower(s, args, name, checks=checks)
            kernel = CudaKernel(name, lowered.buffers, lowered.params, lowered.body)
        return CudaModule(lowered, kernel)
    tgt = Target.parse(target)
    with timed("build"):
        lowered = lower(s, args, name, checks=checks)
        if tgt.is_host:
            kernel = compile_kernel(name, lowered.buffers, lowered.params, lowered.body, tgt)
            return Module(lowered, kernel, tgt)
        code = compile_object(name, lowered.buffers, lowered.params, lowered.body, tgt,
                              lowered.refuse)
    return Module(lowered, None, tgt, code)

