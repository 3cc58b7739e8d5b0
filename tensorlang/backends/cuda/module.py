"""A built CUDA kernel: its CUDA C source (no GPU needed) and, with pycuda and a driver,
calls on numpy arrays (copied in and out) or device arrays.

Building needs neither a GPU nor pycuda, so kernels can be generated on a laptop for a GPU
server: `get_source()` and `save("k.cu")` work anywhere; a call imports pycuda, compiles the
source with nvcc (`SourceModule`) once, and launches each kernel in order.
"""

from __future__ import annotations

import atexit

import numpy as np

from ...config import debug_print
from ...errors import IndexBoundsError, ScheduleError, TensorlangError
from ...ir.expr import Expr
from ..runtime import size_value
from ..abi import ERROR_RECORD_LEN
from .codegen import generate
from .launch import plan
from .index_width import fits_int32
from .nvptx import DEFAULT_ARCH, check_arch, compile_ptx


def _eval(e: Expr, env: dict[str, int]) -> int:
    v = size_value(e, env)
    if v is None:
        raise TensorlangError(f"cuda: the launch extent {e} does not follow from the sizes")
    return v


REGISTERS_PER_BLOCK = 65536
MAX_LOCAL_BYTES = 64   # local memory per thread accepted (a few spilled registers)


def check_resources(launch, fn) -> None:
    """What the compiler made of a kernel, against the limits a launch would fail on (or
    run slowly past): local memory (spilled registers), registers per block."""
    local = fn.local_size_bytes
    if local > MAX_LOCAL_BYTES:
        raise ScheduleError(
            f"cuda: kernel {launch.name} uses {local} bytes of local memory per thread "
            "(registers spilled, or a register array indexed by a loop that is not unrolled); "
            f"the limit is {MAX_LOCAL_BYTES}: use a smaller register tile, or unroll the loops "
            "over it")
    if local:
        debug_print(1, f"cuda: kernel {launch.name} spills {local} bytes of registers to "
                       "local memory per thread")
    if fn.num_regs * launch.threads > REGISTERS_PER_BLOCK:
        raise ScheduleError(
            f"cuda: kernel {launch.name} needs {fn.num_regs} registers x {launch.threads} "
            f"threads = {fn.num_regs * launch.threads} per block; the limit is "
            f"{REGISTERS_PER_BLOCK}: use fewer threads per block or a smaller register tile")


_PRIMARY: list = []     # the primary context this process pushed (at most one)


def _driver():
    """pycuda's driver module, with a current context: the one the caller made current
    (pycuda.autoinit, or torch's, which is the device's primary context), else the first
    device's primary context, the one the CUDA runtime, torch and cupy share, so that their
    arrays can be passed to a kernel as they are."""
    try:
        import pycuda.driver as drv

        drv.init()
        if drv.Context.get_current() is None:
            if _PRIMARY:
                _PRIMARY[0].push()
            else:
                ctx = drv.Device(0).retain_primary_context()
                ctx.push()
                _PRIMARY.append(ctx)
                atexit.register(_pop_primary)
    except Exception as e:  # noqa: BLE001 (no pycuda, no driver or no device)
        raise TensorlangError(
            "calling a CUDA kernel needs pycuda, a CUDA driver and a GPU (pip install "
            f"'tensorlang[cuda]'); building and get_source() do not ({e})") from None
    return drv


def _pop_primary() -> None:
    import pycuda.driver as drv

    try:
        drv.Context.pop()
    except Exception:  # noqa: BLE001 (already popped by whoever made another current)
        pass


def _context_key(drv) -> int:
    """A module is loaded into one context: the current one's handle keys the cache (torch
    switches the thread to the primary context when it starts)."""
    return drv.Context.get_current().handle


class CudaKernel:
    source_format = "cu"

    def __init__(self, name: str, buffers, params, body):
        self.name = name
        self.buffers, self.params = list(buffers), list(params)
        self.source, self.launches, self.temps = generate(name, self.buffers, self.params,
                                                          body)
        self._modules: dict[tuple, object] = {}
        self._wide: dict[tuple, bool] = {}
        self._configs: dict[tuple, list] = {}

    def get_source(self) -> str:
        return self.source

    def wide(self, env: dict[str, int]) -> bool:
        """Whether these sizes need the 64-bit index variant (some index value of some
        launch may not fit 32 bits)."""
        key = tuple(sorted(env.items()))
        if key not in self._wide:
            self._wide[key] = not all(fits_int32(la, env) for la in self.launches)
        return self._wide[key]

    def _compiled(self, wide: bool = False):
        drv = _driver()
        key = (_context_key(drv), wide)
        if key not in self._modules:
            from pycuda.compiler import SourceModule

            opts = ["-std=c++17"] + (["-DTL_INDEX_64"] if wide else [])
            mod = SourceModule(self.source, no_extern_c=True, options=opts)
            for launch in self.launches:
                check_resources(launch, mod.get_function(launch.name))
            self._modules[key] = mod
        return self._modules[key]

    def run(self, arrays: list, env: dict[str, int], written: set[int], checks) -> None:
        """Launch every kernel on `arrays` (numpy, copied, or device arrays), sizes `env`."""
        mod = self._compiled(self.wide(env))
        import pycuda.driver as drv

        dev: dict[int, object] = {}
        copies = []
        keep = []
        for k, (buf, a) in enumerate(zip(self.buffers, arrays)):
            if isinstance(a, np.ndarray):
                g = drv.mem_alloc(max(a.nbytes, 1))
                drv.memcpy_htod(g, a)
                keep.append(g)
                dev[id(buf)] = g
                if k in written:
                    copies.append((a, g))
            else:  # a DeviceArray: used in place
                dev[id(buf)] = np.uintp(a.ptr)
        for t in self.temps:
            n = 1
            for x in t.shape:
                n *= _eval(x, env)
            g = drv.mem_alloc(max(n * t.dtype.itemsize, 1))
            keep.append(g)
            dev[id(t)] = g
        for fn, grid, block, bufs, sizes in self._launches(mod, env):
            fn(*[dev[id(b)] for b in bufs], *sizes, grid=grid, block=block)
        if checks:
            # the record is all zeros between calls (cleared below when a check failed),
            # so a kernel without index checks costs no synchronisation at all
            err, _ = mod.get_global("tl_error")
            rec = np.zeros(ERROR_RECORD_LEN, np.int64)
            drv.memcpy_dtoh(rec, err)          # waits for the kernels
            if rec[0]:
                drv.memset_d8(err, 0, 8 * ERROR_RECORD_LEN)
                site = checks[int(rec[0]) - 1]
                point = tuple(int(x) for x in rec[3:3 + len(site.axes)])
                raise IndexBoundsError(site.message(int(rec[1]), int(rec[2]), point),
                                       dict(zip(site.axes, point)), site.tensor, int(rec[1]),
                                       site.dim, int(rec[2]))
        for a, g in copies:
            drv.memcpy_dtoh(a, g)

    def _launches(self, mod, env: dict[str, int]) -> list:
        """(function, grid, block, buffers, size arguments) of each non-empty launch, for
        these sizes (cached: a graph executor calls the same kernel with the same sizes)."""
        key = (id(mod), tuple(sorted(env.items())))
        got = self._configs.get(key)
        if got is None:
            got = []
            for launch in self.launches:
                grid = tuple(_eval(x, env) if x is not None else 1 for x in launch.grid)
                block = tuple(_eval(x, env) if x is not None else 1 for x in launch.block)
                if 0 in grid or 0 in block:
                    continue  # an empty loop: nothing to launch
                got.append((mod.get_function(launch.name), grid, block, launch.buffers,
                            [np.int64(env[p.name]) for p in launch.params]))
            self._configs[key] = got
        return got


class NvptxKernel(CudaKernel):
    """The same launches as PTX from LLVM's NVPTX backend (`nvptx.py`): loaded with the
    driver's `cuModuleLoadData` (no nvcc, no CUDA C compiler at all)."""

    source_format = "ptx"

    def __init__(self, name: str, buffers, params, body, arch: str = DEFAULT_ARCH):
        self.name = name
        self.buffers, self.params = list(buffers), list(params)
        self.arch = check_arch(arch)
        self.launches, self.temps = plan(name, self.buffers, self.params, body)
        self.source = compile_ptx(name, self.launches, self.arch)
        self._modules = {}
        self._wide = {}
        self._configs = {}

    def wide(self, env: dict[str, int]) -> bool:
        return False         # 64-bit index arithmetic throughout

    def _compiled(self, wide: bool = False):
        drv = _driver()
        key = _context_key(drv)
        if key not in self._modules:
            try:
                mod = drv.module_from_buffer(self.source.encode())
            except drv.Error as e:
                raise TensorlangError(f"nvptx: the driver could not load the PTX of kernel "
                                      f"{self.name} ({e})") from None
            for launch in self.launches:
                check_resources(launch, mod.get_function(launch.name))
            self._modules[key] = mod
        return self._modules[key]
