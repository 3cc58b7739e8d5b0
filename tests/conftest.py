import os

import numpy as np
import pytest

# a refused default schedule is an error in the tests, not a quiet 200x slower fallback
os.environ.setdefault("TL_STRICT", "1")
# the executor's tuning log (its model-only choices, recorded) in a folder of this run, not
# the user's ~/.cache: each kernel is searched once per run, and never read from an old run
if "TL_CACHE_DIR" not in os.environ:
    import tempfile

    os.environ["TL_CACHE_DIR"] = tempfile.mkdtemp(prefix="tensorlang-tests-")

import tensorlang as tl

SIZES = (1, 13, 300)


@pytest.fixture(autouse=True, scope="session")
def _host_described_as():
    """TL_TEST_HOST_AS=NAME describes this machine as the CPU NAME of tensorlang.cpus for the
    whole run (its caches, ways, pipes, bandwidths; code still runs on this CPU): tests of
    named CPUs must pass whatever the host is, and CI runs the cost tests so."""
    name = os.environ.get("TL_TEST_HOST_AS")
    if not name:
        yield
        return
    import tensorlang.target as T

    host = tl.Target.parse("llvm")
    saved = dict(T._HOST_MODEL)
    T._HOST_MODEL.clear()
    T._HOST_MODEL[host.cpu] = tl.cpu_model(name)
    yield
    T._HOST_MODEL.clear()
    T._HOST_MODEL.update(saved)


def set_host_caches(monkeypatch, l1: int, l2: int, l3: int) -> None:
    """Describe this machine (the ``host`` target) as having caches of `l1`, `l2` and `l3`
    bytes for the rest of a test, whatever it has."""
    import tensorlang.target as T

    host = tl.Target.parse("llvm")
    model = host.cpu_model.replace(l1_bytes=l1, l2_bytes=l2, l3_bytes=l3)
    monkeypatch.setattr(T, "_HOST_MODEL", {host.cpu: model})  # one, a prime, a larger size


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


def random_array(rng, shape, dtype):
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return rng.random(shape) < 0.5
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        lo, hi = max(info.min, -100), min(info.max, 100)
        return rng.integers(lo, hi + 1, size=shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


# the host's CPU, baseline x86-64 (SSE2: no AVX, no F16C) and x86-64-v3 (AVX2, FMA, F16C):
# an operation that needs an instruction the CPU lacks must still work (issue: float16
# conversions became calls that the JIT could not resolve, on CPUs without AVX512-FP16)
CPU_TARGETS = ("llvm", "llvm -mcpu=x86-64", "llvm -mcpu=x86-64-v3")


@pytest.fixture(params=CPU_TARGETS, ids=("host", "x86-64", "x86-64-v3"))
def cpu_target(request):
    """Each CPU level this machine can run (others skip)."""
    t = tl.Target.parse(request.param)
    if not t.is_host:
        pytest.skip(f"this machine cannot run code for {request.param}")
    return t


def every_cpu_level(module_name: str):
    """An autouse fixture that runs each test of `module_name` once per CPU level, with the
    module's `build` bound to that target."""

    @pytest.fixture(autouse=True)
    def _levels(cpu_target, monkeypatch):
        import functools
        import sys

        monkeypatch.setattr(sys.modules[module_name], "build",
                            functools.partial(build, target=cpu_target))

    return _levels


def build(outputs, args, target="llvm"):
    return tl.build(tl.create_schedule(outputs), args, target=target)


def pytest_addoption(parser):
    parser.addoption("--legality-examples", type=int, default=1000,
                     help="examples of the legality-vs-brute-force property test")
    parser.addoption("--fuzz-examples", type=int, default=1000,
                     help="examples of the whole-pipeline differential fuzzer")
    parser.addoption("--fuzz-random", action="store_true",
                     help="draw the fuzzer's examples at random (default: a fixed sequence, "
                          "so that CI is reproducible)")
