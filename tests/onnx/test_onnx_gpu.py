"""ONNX models on the GPU (`Backend.prepare(model, device="CUDA")`).

Without a GPU (CI): every kernel of the light zoo's models and of the BERT-style layer is
built for target "cuda" with the executor's default GPU schedules and its CUDA C compiled by
nvcc (a group without a GPU schedule is an error naming it), and small models run in the
loop-IR interpreter with CUDA semantics (threads as coroutines between barriers). With a GPU
(marked `gpu`): each model runs on the device, its tensors staying there between kernels,
and matches onnxruntime's CPU outputs."""

import shutil
import subprocess

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

import tensorlang.onnx as TO  # noqa: E402
from tensorlang.graph import executor  # noqa: E402
from tensorlang.onnx.zoo import (  # noqa: E402
    LIGHT_MODELS, bert_layer, light_model_path, logits, model_input, with_random_weights,
)
from tests.cuda.test_cuda import _has_gpu  # noqa: E402
from tests.graph.test_executor_cuda import simulated  # noqa: E402, F401 (a fixture)
from tests.onnx.test_onnx_import import small_cnn  # noqa: E402

GPU = pytest.mark.skipif(not _has_gpu(), reason="needs an NVIDIA GPU and pycuda")
NVCC = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
# the models of CI's main step (one kernel per sequence of fused operators: the schedules
# that differ); the slow step compiles every kernel of every model
MAIN_STEP = ("squeezenet", "bert")


def _ort(model, feed):
    # written at IR 8 (what the opsets of these models need): onnx's helper writes its own
    # newest IR version, which an older onnxruntime refuses (1.30 reads up to 13)
    model = type(model).FromString(model.SerializeToString())
    model.ir_version = min(model.ir_version, 8)
    s = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return s.run(None, feed)


def _zoo(name):
    return logits(with_random_weights(onnx.load(light_model_path(name))))


def _graph(name):
    """The model's graph outputs: a zoo model at its declared input size, the BERT-style
    layer at batch 2, sequence 8."""
    if name == "bert":
        outs, _ = TO.from_onnx(bert_layer(np.random.default_rng(0)),
                               shapes={"batch": 2, "seq": 8})
    else:
        outs, _ = TO.from_onnx(_zoo(name))
    return outs


def cuda_kernels(outs, sample: bool = False) -> list[tuple[str, tuple, object]]:
    """(the group's operators, its input shapes, the module built for "cuda") of every
    distinct kernel of the executor's plan for `outs` (a group without a GPU schedule raises,
    naming it); with `sample`, of the first group of each sequence of operators only, and
    of one matmul (every matmul group takes `schedule.gpu.matmul`, its epilogue inlined)."""
    shapes, dtypes, groups = executor.declared_groups(outs, "cuda_kernels", "cuda")
    seen, out = set(), []
    for g in groups:
        ins = executor._Plan._inputs(g)
        key = (executor._members(g, ins), tuple(shapes[i.id] for i in ins),
               tuple(dtypes[i.id] for i in ins))
        ops = tuple(m[0] for m in key[0])
        if ops[0] == "matmul":
            ops = ("matmul",)
        if key in seen or sample and ops in seen:
            continue
        seen.update((key, ops))
        (mod, _), = executor.compile_groups([key], "cuda")
        out.append(("+".join(m[0] for m in key[0]), key[1], mod))
    return out


def _nvcc(paths, odir) -> subprocess.CompletedProcess:
    return subprocess.run(["nvcc", "-ptx", "-arch=sm_90", "-std=c++17", "-odir", str(odir),
                           *map(str, paths)], capture_output=True, text=True)


def assert_nvcc_compiles(kernels, tmp_path) -> None:
    """Every kernel's CUDA C compiles (one nvcc run for all; on a failure, one per kernel
    to name the ones that fail)."""
    paths = []
    for k, (_, _, mod) in enumerate(kernels):
        src = mod.get_source()
        assert "__global__" in src
        paths.append(tmp_path / f"k{k}.cu")
        paths[-1].write_text(src)
    if _nvcc(paths, tmp_path).returncode == 0:
        return
    failed = []
    for (ops, shapes, _), p in zip(kernels, paths):
        r = _nvcc([p], tmp_path)
        if r.returncode:
            failed.append(f"{ops} {shapes}: {r.stderr.strip()[:400]}")
    assert not failed, "\n".join(failed)


@NVCC
@pytest.mark.parametrize("name", MAIN_STEP)
def test_each_kind_of_kernel_of_the_model_builds_for_cuda_and_compiles_with_nvcc(name,
                                                                              tmp_path):
    _check_kernels(cuda_kernels(_graph(name), sample=True), tmp_path)


@NVCC
@pytest.mark.slow
@pytest.mark.parametrize("name", ("bert",) + LIGHT_MODELS)
def test_every_kernel_of_the_model_builds_for_cuda_and_compiles_with_nvcc(name, tmp_path):
    # densenet121's 189 kernels take minutes on a 2-core machine: one kernel per kind of
    # fused group there (its kinds are those of the other models)
    _check_kernels(cuda_kernels(_graph(name), sample=name == "densenet121"), tmp_path)


def _check_kernels(kernels, tmp_path) -> None:
    assert kernels
    for ops, shapes, mod in kernels:    # a launch of one thread is a stage left unbound
        assert any(la.threads > 1 for la in mod.cuda.launches), (ops, shapes)
    assert_nvcc_compiles(kernels, tmp_path)


@pytest.mark.slow    # the interpreter runs each GPU thread in Python
def test_a_small_cnn_runs_with_the_gpu_schedules(simulated, rng):   # noqa: F811
    """Conv (padded), batch norm (folded), Relu, MaxPool (padded), Flatten, Gemm, Softmax
    with the GPU schedules, in the interpreter: onnxruntime's outputs."""
    model = small_cnn(rng)
    xv = rng.standard_normal((2, 3, 9, 9)).astype("f4")
    (got,) = TO.Backend.prepare(model, device="CUDA").run([xv])
    np.testing.assert_allclose(got, _ort(model, {"x": xv})[0], rtol=1e-4, atol=1e-6)


@pytest.mark.slow    # the interpreter runs each GPU thread in Python
def test_the_bert_layer_runs_with_the_gpu_schedules(simulated, rng):   # noqa: F811
    """The BERT-style layer (attention, LayerNorm, an Erf GELU) with the GPU schedules, in
    the interpreter, at two sizes from one prepare: onnxruntime's outputs."""
    model = bert_layer(rng, d=8, heads=2, ff=16)
    rep = TO.Backend.prepare(model, device="CUDA")
    for b, s in ((1, 3), (2, 2)):
        xv = rng.standard_normal((b, s, 8)).astype("f4")
        (got,) = rep.run([xv])
        np.testing.assert_allclose(got, _ort(model, {"x": xv})[0], rtol=1e-4, atol=1e-5)


def test_a_refused_gpu_schedule_is_an_error_naming_the_operators(simulated, monkeypatch,  # noqa: F811
                                                                  rng):
    """No silent fallback to the declared nest (one GPU thread): the node, its operator and
    the group's operators are named."""
    import tensorlang as tl
    from tensorlang.schedule import gpu

    def refuse(s, threads=256):
        raise tl.ScheduleError("bind_all: refused here")

    monkeypatch.setattr(gpu, "bind_all", refuse)
    monkeypatch.setattr(executor, "_KERNELS", type(executor._KERNELS)())   # none compiled
    rep = TO.Backend.prepare(small_cnn(rng), device="CUDA")
    with pytest.raises(tl.TensorlangError, match=r"node \S+ \((\w+)\): cannot compile: "
                       r"executor: no GPU schedule for \1[ +\w]* -> .*bind_all: refused here"):
        rep.run([rng.standard_normal((1, 3, 9, 9)).astype("f4")])


# ------------------------------------------------------------------- on a GPU


@pytest.fixture
def device_only(monkeypatch):
    """Every kernel launch of the run takes device arrays (a host array would be copied to
    the device and back around the kernel): only the model's inputs go to the device, by
    the executor, and only its outputs come back."""
    from tensorlang.backends.cuda.module import CudaKernel

    run = CudaKernel.run
    launches = []

    def checked(self, arrays, *args, **kwargs):
        hosted = [k for k, a in enumerate(arrays) if isinstance(a, np.ndarray)]
        assert not hosted, f"kernel {self.name}: arguments {hosted} are host arrays"
        launches.append(self.name)
        return run(self, arrays, *args, **kwargs)

    monkeypatch.setattr(CudaKernel, "run", checked)
    return launches


@pytest.mark.gpu
@GPU
@pytest.mark.parametrize("name", LIGHT_MODELS)
def test_light_zoo_models_on_cuda_match_onnxruntime(name, device_only):
    model = _zoo(name)
    inp, x = model_input(model)
    (got,) = TO.Backend.prepare(model, device="CUDA").run([x])
    (want,) = _ort(model, {inp: x})
    assert device_only
    assert got.shape == want.shape
    # the GPU sums in other orders than onnxruntime's CPU kernels: a tolerance of the
    # output's scale (an indexing bug is off by far more)
    assert np.abs(got - want).max() <= 1e-3 * np.abs(want).max()


@pytest.mark.gpu
@GPU
def test_the_bert_layer_on_cuda_matches_onnxruntime_at_several_sizes(rng, device_only):
    model = bert_layer(rng)
    rep = TO.Backend.prepare(model, device="CUDA")
    for b, s in ((1, 8), (2, 5), (3, 1), (1, 13), (4, 128)):
        xv = rng.standard_normal((b, s, 32)).astype("f4")
        (got,) = rep.run([xv])
        np.testing.assert_allclose(got, _ort(model, {"x": xv})[0], rtol=1e-4, atol=1e-4)
    assert device_only
