import numpy as np
import pytest

import tensorlang as tl

SIZES = (1, 13, 300)  # one, a prime, a larger size


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


def build(outputs, args, target="llvm"):
    return tl.build(tl.create_schedule(outputs), args, target=target)


def pytest_addoption(parser):
    parser.addoption("--legality-examples", type=int, default=2000,
                     help="examples of the legality-vs-brute-force property test")
