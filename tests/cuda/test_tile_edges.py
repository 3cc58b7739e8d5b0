"""Every GPU schedule of tests/cuda and of `tensorlang.schedule.gpu` at constant sizes
below, equal to and one past its tiles (and, where cheap, a larger one): where a loop bound
to a block or thread index takes one value, isl emits no loop for it, and the kernel must
still be one launch with the same geometry and barriers.

Without a GPU: each kernel is built for both targets (CUDA C and PTX through LLVM) from
one lowering, its launch count is the schedule's at every size, every CUDA C source
compiles with nvcc (one translation unit for all of them: one nvcc run), and the kernels
whose work is small run in the interpreter with CUDA semantics (threads as coroutines
between barriers, in index order and backwards) against numpy. With a GPU (`gpu`): each
kernel runs on the device, both targets, against numpy."""

from __future__ import annotations

import functools
import re
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest

import tensorlang as tl
from tensorlang.backends.cuda.codegen import PRELUDE
from tensorlang.backends.cuda.module import NvptxKernel
from tensorlang.driver import CudaModule
from tensorlang.ir.interp import run_lowered
from tensorlang.schedule import gpu

from . import test_cuda as tc
from . import test_reduce_threads as tr
from .test_cuda import GPU

INTERP_WORK = 2500     # interpret the kernels whose `_work` is at most this


@dataclass(frozen=True)
class Case:
    """A schedule at constant sizes: `make(shape)` -> (schedule, args, numpy reference of
    the inputs), for each of `shapes` (an int: a length); `launches`: the kernels it is at
    every shape; `data(shape, rng)`: its inputs (default: standard normal arrays of the
    inputs' shapes and dtypes); `weight`: see `_work`."""

    make: Callable
    shapes: tuple
    launches: int = 1
    data: Callable | None = None
    weight: int = 1        # points run per point of the shape (`_work`)


def _pipeline_data(n, rng):
    return [rng.standard_normal((n, 8)).astype(np.float16),
            rng.integers(0, n, n).astype(np.int32)]


def _wide_index(n):
    s, args, ref = tc.wide_index(n)
    return s, args, lambda a: ref(a, n)


def _prod_data(shape, rng):
    return [(0.9 + 0.2 * rng.random(shape)).astype(np.float32)]


def _edges(tile, rows=(1, 3, 1, 2)):
    """(rows, length) of a row-wise schedule: lengths 1, tile - 1, tile, tile + 1, with one
    row (one block: isl emits no block loop) or a few."""
    return tuple(zip(rows, (1, tile - 1, tile, tile + 1)))


# ---------------------------------------------------------------- library schedules (gpu.py)
def elementwise(n):
    A = tl.placeholder((n,), name="A")
    B = tl.compute((n,), lambda i: A[i] * 2.0 + 1.0, name="B")
    s = tl.create_schedule(B)
    gpu.elementwise(s, B)
    return s, [A, B], lambda a: a * np.float32(2) + np.float32(1)


def elementwise_2d(shape):
    """Two axes of constant extent: fused, then split by the block size."""
    A = tl.placeholder(shape, name="A")
    B = tl.compute(shape, lambda i, j: A[i, j] - 1.0, name="B")
    s = tl.create_schedule(B)
    gpu.elementwise(s, B)
    return s, [A, B], lambda a: a - np.float32(1)


def bind_all(n):
    """C spread over blocks of 64 threads; B, with no binding, then gets one thread per
    element from `bind_all` (min(256, n) threads a block)."""
    A = tl.placeholder((n,), name="A")
    B = tl.compute((n,), lambda i: tl.exp(A[i]), name="B")
    C = tl.compute((n,), lambda i: B[i] + A[i], name="C")
    s = tl.create_schedule(C)
    gpu.elementwise(s, C, 64)
    gpu.bind_all(s)
    return s, [A, C], lambda a: np.exp(a) + a


def matmul_batched_epilogue(shape):
    """`gpu.matmul` with a batch axis (blockIdx.z) and an elementwise epilogue that reads the
    register tile: 16 x 16 blocks of 8 x 8 threads, 2 x 2 outputs each, k-slices of 4. One
    shape (its schedule takes seconds to make and check at constant sizes): one block, one
    batch and one slice, where isl emits none of the bound loops. `sgemm` takes gpu.matmul
    through all four sizes; tests/graph/test_executor_cuda.py runs the epilogue past its
    tiles."""
    b, n, m, p = shape
    A = tl.placeholder((b, n, p), name="A")
    B = tl.placeholder((b, p, m), name="B")
    k = tl.reduce_axis((0, p), name="k")
    C = tl.compute((b, n, m), lambda z, i, j: tl.sum(A[z, i, k] * B[z, k, j], axis=k),
                   name="C")
    D = tl.compute((b, n, m), lambda z, i, j: tl.maximum(C[z, i, j], 0.0), name="D")
    s = tl.create_schedule(D)
    gpu.matmul(s, C, (16, 16), (2, 2), 4, out=D)
    return s, [A, B, D], lambda a, bb: np.maximum(a @ bb, 0)


def reduce_rows(shape):
    """`gpu.reduce` along memory: a block per row, its 64 threads over the row."""
    A = tl.placeholder(shape, name="A")
    k = tl.reduce_axis((0, shape[1]), name="k")
    B = tl.compute((shape[0],), lambda i: tl.sum(A[i, k], axis=k), name="B")
    s = tl.create_schedule(B)
    gpu.reduce(s, B, 64)
    return s, [A, B], lambda a: a.sum(1)


# (n, m, p) around 16 x 16 tiles and k-slices of 16: one tile and slice (isl emits no block
# loop and no k loop), two tiles in one dimension and two slices; LARGER adds several tiles
CUBES = ((1, 1, 1), (15, 15, 7), (16, 16, 16), (17, 3, 20))
LARGER = CUBES + ((40, 33, 36),)
CASES = {
    # tests/cuda/test_cuda.py
    "vadd": Case(lambda n: tc.vadd(n=n), (1, 127, 128, 129, 1000)),
    "matmul": Case(lambda sh: tc.matmul(shape=sh), LARGER),
    "matmul_shared": Case(lambda sh: tc.matmul_shared(shape=sh), CUBES),
    "matmul_shared_textbook": Case(lambda sh: tc.matmul_shared_textbook(shape=sh), LARGER),
    # 64 x 64 blocks, 4 x 4 per thread
    "matmul_register_tiles": Case(lambda sh: tc.matmul_register_tiles(shape=sh),
                                  ((1, 1, 1), (63, 63, 2), (64, 64, 2), (65, 65, 2))),
    # 64 x 64 blocks, 4 x 4 per thread, k-slices of 8 (past the block and the slice in a
    # thin matrix: partial tiles in every dimension take LLVM seconds to compile)
    "sgemm": Case(lambda sh: tc.sgemm(shape=sh), ((1, 1, 1), (63, 63, 7), (64, 64, 8),
                                                  (65, 3, 9))),
    "pipeline": Case(tc.pipeline, (1, 31, 32, 33, 100), 3, _pipeline_data, 17),
    "vadd_shared": Case(tc.vadd_shared, (1, 63, 64, 65, 300)),
    "wide_index": Case(_wide_index, (1, 31, 32, 33)),
    # tests/cuda/test_reduce_threads.py
    "row_sum": Case(lambda sh: tr.row_reduce("sum", 64, sh), _edges(64) + ((2, 200),)),
    "row_min": Case(lambda sh: tr.row_reduce("min", 48, sh), _edges(48)),
    "row_prod": Case(lambda sh: tr.row_reduce("prod", 7, sh), _edges(7) + ((2, 30),),
                     data=_prod_data),
    # 32 outputs per block, 8 threads over the reduction
    "column_sum": Case(lambda sh: tr.column_sum(sh),
                       ((1, 1), (7, 31), (8, 32), (9, 33), (40, 70))),
    "softmax": Case(lambda sh: tr.softmax(64, sh[1], sh[0]), _edges(64), weight=4),
    "softmax_uncached": Case(lambda sh: tr.softmax(64, sh[1], sh[0], cache=False),
                             _edges(64), weight=4),
    "softmax_odd_threads": Case(lambda sh: tr.softmax(33, sh[1], sh[0]), _edges(33),
                                weight=4),
    # tensorlang/schedule/gpu.py (besides gpu.matmul in `sgemm`, gpu.rows in `softmax` and
    # gpu.reduce across rows in `column_sum`)
    "elementwise": Case(elementwise, (1, 255, 256, 257)),
    "elementwise_2d": Case(elementwise_2d, ((1, 1), (5, 51), (4, 64), (257, 1))),
    "bind_all": Case(bind_all, (1, 63, 64, 65), 2, weight=2),
    "matmul_batched_epilogue": Case(matmul_batched_epilogue, ((1, 15, 16, 4),)),
    "reduce_rows": Case(reduce_rows, _edges(64)),
}
PARAMS = [(c, sh) for c in sorted(CASES) for sh in CASES[c].shapes]
IDS = [f"{c}-{sh if isinstance(sh, int) else 'x'.join(map(str, sh))}" for c, sh in PARAMS]


def _data(case: str, shape, args) -> tuple[list[np.ndarray], np.ndarray]:
    rng = np.random.default_rng(0)
    c = CASES[case]
    ins = c.data(shape, rng) if c.data is not None else [
        rng.standard_normal(_shape(a)).astype(a.dtype) for a in args[:-1]]
    return ins, np.zeros(_shape(args[-1]), args[-1].dtype)


def _shape(t) -> tuple[int, ...]:
    return tuple(int(x.value) for x in t.shape)


def _work(case: str, shape) -> int:
    """The interpreter's work (points run, an estimate): the shape's product, times the
    case's `weight`."""
    return int(np.prod(shape)) * CASES[case].weight


@functools.cache
def _built(case: str, shape):
    """(CUDA C module, PTX module, args, numpy reference) of a case at a shape: `tl.build`
    for "cuda", and the PTX written from the same lowering (what `tl.build(..., "nvptx")`
    does, without lowering again)."""
    s, args, ref = CASES[case].make(shape)
    name = f"tl_{case}_{PARAMS.index((case, shape))}"
    cu = tl.build(s, args, target="cuda", name=name)
    low = cu.lowered
    ptx = CudaModule(low, NvptxKernel(name, low.buffers, low.params, low.body))
    return cu, ptx, args, ref


@pytest.mark.parametrize("case,shape", PARAMS, ids=IDS)
def test_builds_for_both_targets_as_one_launch_per_stage(case, shape):
    cu, ptx, _, _ = _built(case, shape)
    want = CASES[case].launches
    assert len(cu.cuda.launches) == want, str(cu.lowered)
    assert cu.get_source().count("__global__") == want
    assert ptx.target == "nvptx" and ptx.get_source().count(".entry ") == want
    for launch in cu.cuda.launches:
        assert 1 <= launch.threads <= 1024
        assert f".maxntid {launch.threads}" in ptx.get_source()


@pytest.mark.parametrize("case,shape", [p for p in PARAMS if _work(*p) <= INTERP_WORK],
                         ids=[i for p, i in zip(PARAMS, IDS) if _work(*p) <= INTERP_WORK])
def test_runs_in_the_interpreter_with_cuda_semantics(case, shape):
    cu, _, args, ref = _built(case, shape)
    ins, out = _data(case, shape, args)
    want = ref(*ins)
    for order in ("forward", "reverse"):
        got = np.zeros_like(out)
        run_lowered(cu.lowered, [*ins, got], parallel_order=order)
        np.testing.assert_allclose(got, want, rtol=2e-3, atol=2e-3, err_msg=order)


def test_the_textbook_matmul_keeps_its_block_and_barriers_at_the_tile():
    """At n = 16 isl emits no block loop (one block) and no k-slice loop (one slice): the
    copies and the product are still phases of one block, a barrier after each."""
    s, args, _ = tc.matmul_shared_textbook(shape=(16, 16, 16))
    text = str(tl.lower(s, args))
    assert "for i_outer in range(1):  # gpu_block blockIdx.y" in text
    assert text.count("sync_threads()") == 3     # after C = 0, after each copy
    src = tl.build(s, args, target="cuda").get_source()
    assert src.count("__global__") == 1 and src.count("__syncthreads();") == 3
    # over two slices, a barrier also ends each slice: the next copy must not overwrite
    # a tile that other threads still read
    s, args, _ = tc.matmul_shared_textbook(shape=(16, 16, 32))
    text = str(tl.lower(s, args))
    assert "for k_outer in range(2):" in text and text.count("sync_threads()") == 4


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
def test_every_cuda_source_compiles_with_nvcc(tmp_path):
    """All the kernels in one translation unit (each source in a namespace of its own, the
    prelude's include once), compiled without optimisation: one quick nvcc run instead of
    one per kernel (test_cuda.py compiles the symbolic-size kernels optimised)."""
    head = "#include <cuda_fp16.h>"
    parts = [head]
    for k, (case, shape) in enumerate(PARAMS):
        src = _built(case, shape)[0].get_source()
        assert src.startswith(PRELUDE) and PRELUDE.startswith(head)
        parts.append(f"namespace tl_unit_{k} {{\n{src[len(head):]}\n}}")
    path = tmp_path / "all.cu"
    path.write_text("\n".join(parts))
    r = subprocess.run(["nvcc", "-ptx", "-arch=sm_90", "-std=c++17", "-Xcicc", "-O0", "-o",
                        str(tmp_path / "all.ptx"), str(path)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-4000:]
    entries = len(re.findall(r"\.entry ", (tmp_path / "all.ptx").read_text()))
    assert entries == sum(CASES[c].launches for c, _ in PARAMS)


@GPU
@pytest.mark.gpu
@pytest.mark.parametrize("target", ["cuda", "nvptx"])
@pytest.mark.parametrize("case,shape", PARAMS, ids=IDS)
def test_runs_on_the_gpu(case, shape, target):
    cu, ptx, args, ref = _built(case, shape)
    f = cu if target == "cuda" else ptx
    ins, out = _data(case, shape, args)
    f(*ins, out)
    tol = 2e-3 if any(a.dtype == np.float16 for a in ins) else 1e-4
    np.testing.assert_allclose(out, ref(*ins), rtol=tol, atol=tol)
