"""target="nvptx": the CUDA launches as PTX through LLVM's NVPTX backend, built without a GPU
and without nvcc. CI checks that every kernel compiles (and, where ptxas is installed, that
ptxas accepts it with no local memory); the `gpu` tests in test_cuda.py run both targets."""

import shutil
import subprocess

import numpy as np
import pytest

import tensorlang as tl
from tensorlang.backends.cuda import nvptx

from .test_cuda import CASES, vadd


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_gpu_schedule_compiles_to_ptx(case, tmp_path):
    s, args, _ = CASES[case]()
    f = tl.build(s, args, target="nvptx", name=f"tl_{case}")
    ptx = f.get_source()
    assert f.target == "nvptx" and ".target sm_70" in ptx
    for launch in f.cuda.launches:
        assert f".entry {launch.name}(" in ptx and f".maxntid {launch.threads}" in ptx
    assert "tl_error" in ptx          # the index-check record the host reads
    f.save(tmp_path / "k.ptx")
    assert (tmp_path / "k.ptx").read_text() == ptx
    if shutil.which("ptxas"):
        r = subprocess.run(["ptxas", "-arch=sm_90", "-v", str(tmp_path / "k.ptx"), "-o",
                            str(tmp_path / "k.cubin")], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        # register tiles stay in registers: no stack frame, no spills
        assert "0 bytes stack frame, 0 bytes spill stores" in r.stderr
        assert " bytes stack frame" not in r.stderr.replace("0 bytes stack frame", "")


def test_shared_tiles_and_barriers_in_ptx():
    s, args, _ = CASES["sgemm"]()
    ptx = tl.build(s, args, target="nvptx").get_source()
    assert ".shared .align 16 .b8" in ptx and "bar.sync" in ptx
    assert "st.shared" in ptx and "ld.shared" in ptx


def test_architecture_and_formats():
    s, args, _ = vadd()
    f = tl.build(s, args, target="nvptx -mcpu=sm_90")
    assert ".target sm_90" in f.get_source()
    assert "def main" in f.get_source("loops") or "for " in f.get_source("loops")
    with pytest.raises(tl.TensorlangError, match="sm_53 or later"):
        tl.build(s, args, target="nvptx -mcpu=gfx90a")
    with pytest.raises(tl.TensorlangError, match="-mcpu=sm_XX only"):
        tl.build(s, args, target="nvptx -mattr=+ptx80")
    with pytest.raises(tl.TensorlangError, match=r"saved as \.ptx"):
        f.save("k.cu")
    with pytest.raises(tl.TensorlangError, match="expected 'ptx'"):
        f.get_source("cu")


def _math(dtype):
    n = tl.var("n")
    A = tl.placeholder((n,), dtype, name="A")
    B = tl.compute((n,), lambda i: tl.log(A[i]) + tl.tanh(A[i]) + tl.erf(A[i]) +
                   tl.exp(A[i]) + tl.sqrt(A[i]), name="B")
    s = tl.create_schedule(B)
    bo, bi = s[B].split(B.op.axis[0], factor=128)
    s[B].bind(bo, "blockIdx.x")
    s[B].bind(bi, "threadIdx.x")
    return s, [A, B]


@pytest.mark.skipif(nvptx.find_libdevice() is None, reason="no CUDA toolkit (libdevice)")
@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_math_comes_from_libdevice_inlined(dtype):
    s, args = _math(dtype)
    ptx = tl.build(s, args, target="nvptx").get_source()
    assert "__nv_" not in ptx.replace("__nv_internal", "")   # inlined, nothing to link
    assert "ex2.approx" in ptx or "fma.rn" in ptx


def test_math_without_libdevice_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(nvptx, "find_libdevice", lambda: None)
    s, args = _math("float32")
    with pytest.raises(tl.TensorlangError, match=r"__nv_erff.*__nv_logf.*__nv_tanhf.*"
                                                 r"TL_LIBDEVICE"):
        tl.build(s, args, target="nvptx")
    # float32 exp and sqrt are the backend's own: no libdevice needed
    n = tl.var("n")
    A = tl.placeholder((n,), name="A")
    B = tl.compute((n,), lambda i: tl.exp(A[i]) + tl.sqrt(A[i]), name="B")
    s = tl.create_schedule(B)
    bo, bi = s[B].split(B.op.axis[0], factor=64)
    s[B].bind(bo, "blockIdx.x")
    s[B].bind(bi, "threadIdx.x")
    tl.build(s, [A, B], target="nvptx")


def test_a_call_without_a_gpu_is_a_clear_error():
    from .test_cuda import _has_gpu

    if _has_gpu():
        pytest.skip("this machine has a GPU")
    s, args, _ = vadd()
    f = tl.build(s, args, target="nvptx")
    a = np.ones(10, np.float32)
    with pytest.raises(tl.TensorlangError, match="pycuda"):
        f(a, a.copy(), np.zeros(10, np.float32))
