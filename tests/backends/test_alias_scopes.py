"""Scoped-noalias metadata (backends/llvm/alias.py), and TVM's opt_gemm tutorial ported
stage by stage (benchmarks/opt_gemm.py) against numpy.

The tutorial's Opt6 (a 32 x 32 cache_write tile of C under a parallel row-tile loop) kept,
without the metadata, a store of the tile after each of the four unrolled k steps: in the
outlined parallel body the pointers of A and packedB come from a closure, and LLVM's
capture analysis gave up on the tile's many uses, so a load of A might have read the tile.
"""

import pathlib
import re
import runpy

import numpy as np
import pytest

import tensorlang as tl

SCRIPT = pathlib.Path(__file__).parent.parent.parent / "benchmarks" / "opt_gemm.py"
PORT = runpy.run_path(str(SCRIPT))
tensorlang_stage, KFACTOR = PORT["tensorlang_stage"], PORT["KFACTOR"]

# object code for another machine: its parallel loops are always outlined (the runtime says
# how many threads), whatever the cores of the machine that runs the test
CROSS = ["llvm -mtriple=x86_64-linux-gnu -mcpu=znver4",
         "llvm -mtriple=aarch64-linux-gnu -mcpu=neoverse-v1"]


def _blocks(ir: str) -> list[str]:
    """The basic blocks of LLVM IR text (each from its label to the next)."""
    return re.split(r"\n(?=[\w.\-]+:)", ir)


def _multiply_adds(block: str) -> int:
    return len(re.findall(r"= fmul ", block)) + \
        len(re.findall(r"call [^\n]*@llvm\.(fmuladd|fma)\.", block))


@pytest.mark.parametrize("target", CROSS)
def test_opt6_tile_is_stored_once_per_row_and_k_step(target):
    """The innermost loop of Opt6 (ko, mc, ki unrolled, nc vectorized) loads a row of the
    tile, does the kfactor multiply-adds and stores the row once, as TVM's does; not a
    store after every multiply-add."""
    s, args = tensorlang_stage(64, 6)
    ir = tl.build(s, args, target=target).get_source()
    hot = max(_blocks(ir), key=_multiply_adds)
    stores = len(re.findall(r"\n\s+store ", hot))
    assert _multiply_adds(hot) == KFACTOR, hot
    assert stores == 1, hot


def test_every_access_in_a_parallel_body_names_its_buffer():
    """Each load and store of tensor data carries the buffer's scope and the others' as
    noalias, in the kernel and in its outlined parallel bodies; the closure's own loads
    (the buffers' pointers) carry none."""
    s, args = tensorlang_stage(64, 6)
    ir = tl.build(s, args, target=CROSS[0]).get_source()
    bodies = re.findall(r"define [^\n]*@main\.parallel[^\n]*\{\n(.*?)\n}\n", ir, re.S)
    assert len(bodies) == 2          # packedB's panels, C's row tiles
    data = [ln for body in bodies for ln in body.splitlines()
            if re.search(r"(= load|^\s*store) [^,]*float", ln)]
    assert data
    for ln in data:
        assert "!alias.scope" in ln and "!noalias" in ln, ln
    pointers = [ln for body in bodies for ln in body.splitlines() if "= load ptr" in ln]
    assert pointers and not any("alias.scope" in ln for ln in pointers)
    scopes = {m for ln in data for m in re.findall(r"!alias\.scope (!\d+)", ln)}
    assert len(scopes) == 4           # A, B, packedB, C_global: one scope each read here


@pytest.mark.parametrize("stage", range(7))
@pytest.mark.parametrize("n", [13, 100, pytest.param(1, marks=pytest.mark.slow),
                               pytest.param(64, marks=pytest.mark.slow)])
def test_opt_gemm_stage_matches_numpy(stage, n, rng):
    """Every stage of the port at sizes that divide bn = 32 and kfactor = 4 (64), divide
    kfactor only (100), and divide neither (1, 13)."""
    s, args = tensorlang_stage(n, stage)
    f = tl.build(s, args)
    a = rng.standard_normal((n, n)).astype("float32")
    b = rng.standard_normal((n, n)).astype("float32")
    c = np.full((n, n), np.nan, "float32")
    f(a, b, c)
    np.testing.assert_allclose(c, a.astype("float64") @ b, rtol=1e-4, atol=1e-4 * np.sqrt(n))
