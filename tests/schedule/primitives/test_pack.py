"""pack: a tensor stored blocked along one axis for its readers."""

import numpy as np
import pytest

import tensorlang as tl

from .helpers import assert_computes, assert_replays, matmul, matmul_cases, matmul_nmk






@pytest.mark.parametrize("shape", [(37, 45, 23), (16, 32, 8), (1, 1, 1)])
def test_pack_matmul_operand_into_blocks(shape):
    N, M, K = shape
    A, B, C = matmul_nmk(N, M, K)
    s = tl.create_schedule(C)
    BP = s.pack(B, 1, 16)
    assert [getattr(x, "value", x) for x in BP.shape] == [-(-M // 16), K, 16]
    i, j = C.op.axis
    (k,) = C.op.reduce_axis
    io, jo, ii, ji = s[C].tile(i, j, 8, 16)
    s[C].reorder(io, jo, k, ii, ji)
    s[BP].compute_root()
    text = str(tl.lower(s, [A, B, C]))
    assert "B_packed[" in text and "* B[" not in text
    f = tl.build(s, [A, B, C])
    rng = np.random.default_rng(M)
    a = rng.random((N, K), dtype=np.float32)
    b = rng.random((K, M), dtype=np.float32)
    c = np.zeros((N, M), np.float32)
    f(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4)


def test_pack_misuse():
    A, B, C = matmul_nmk(4, 4, 4)
    s = tl.create_schedule(C)
    with pytest.raises(tl.ScheduleError, match="axis must be < 2"):
        s.pack(B, 2, 4)
    with pytest.raises(tl.ScheduleError, match="factor must be >= 1"):
        s.pack(B, 1, 0)


# --------------------------------------------- the interpreter, the replay
def test_pack_matches_numpy_and_the_interpreter():
    A, B, C = matmul()
    s = tl.create_schedule(C)
    BP = s.pack(B, 1, 4)                 # n = 1, 7, 8, 13: blocks of 4 padded or full
    assert "B_packed[" in str(tl.lower(s, [A, B, C])) and BP.shape[-1].value == 4
    assert_computes(s, [A, B, C], matmul_cases())


def test_pack_replays():
    # packing copies, it reorders nothing: no witness to give; its refusals are misuse
    A, B, C = matmul()
    s = tl.create_schedule(C)
    s.pack(B, 1, 4)
    assert_replays(s, [A, B, C], matmul)
