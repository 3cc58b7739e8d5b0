"""Vector loops over packed buffers: `(r + lane) // c` and `% c` with c and r multiples of
the lane count are one uniform value and a contiguous run (backends/llvm/vector.py,
`lane_divmod`), so a read of `B_packed[j // 32, k, j % 32]` is one vector load."""

import itertools

import numpy as np
import pytest

import tensorlang as tl
from tensorlang.backends.llvm.vector import lane_divmod, linear_coeff
from tensorlang.ir.dtype import as_dtype
from tensorlang.ir.expr import Add, Const, FloorDiv, FloorMod, Mul, Var, binary, const

I64 = as_dtype("int64")


def evaluate(e, env):
    """Python's floor semantics, which the IR's // and % have."""
    if isinstance(e, Var):
        return env[e.name]
    if isinstance(e, Const):
        return int(e.value)
    a, b = evaluate(e.a, env), evaluate(e.b, env)
    return {Add: a + b, Mul: a * b, FloorDiv: a // b if b else 0,
            FloorMod: a % b if b else 0}[type(e)]


def _expr(kind, c, mult):
    x, lane = Var("x", I64), Var("t", I64)
    r = binary(Mul, x, const(mult, "int64"))
    return binary(kind, binary(Add, r, lane), const(c, "int64"))


@pytest.mark.parametrize("lanes,c,mult", [(16, 32, 16), (8, 8, 8), (4, 12, 4), (16, 48, 32),
                                          (8, 16, 24)])
@pytest.mark.parametrize("kind", [FloorDiv, FloorMod])
def test_lane_divmod_against_brute_force(kind, lanes, c, mult):
    e = _expr(kind, c, mult)
    new = lane_divmod(e, "t", lanes)
    assert new is not e
    assert linear_coeff(new, "t") == (0 if kind is FloorDiv else 1)
    for x, t in itertools.product(range(-7, 9), range(lanes)):
        env = {"x": x, "t": t}
        assert evaluate(new, env) == evaluate(e, env), (x, t)


def test_lane_divmod_leaves_what_it_cannot_prove_alone():
    e = _expr(FloorDiv, 32, 8)                      # r a multiple of 8 only: lanes may cross
    assert linear_coeff(lane_divmod(e, "t", 16), "t") is None
    e = _expr(FloorMod, 24, 16)                     # c not a multiple of the lanes
    assert linear_coeff(lane_divmod(e, "t", 16), "t") is None


def packed_matmul(n, m, p, mr=4, nr=32):
    A = tl.placeholder((n, p), name="A")
    B = tl.placeholder((p, m), name="B")
    k = tl.reduce_axis((0, p), name="k")
    C = tl.compute((n, m), lambda i, j: tl.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = tl.create_schedule(C)
    BP = s.pack(B, 1, nr)
    CL = s.cache_write(C, "local")
    io, jo, ii, ji = s[C].tile(*s[C].op.axis, mr, nr)
    s[C].vectorize(s[C].split(ji, factor=16)[1])
    s[CL].compute_at(s[C], jo)
    li, lj = s[CL].op.axis
    (lk,) = s[CL].op.reduce_axis
    ljo, lji = s[CL].split(lj, factor=16)
    s[CL].reorder(lk, li, ljo, lji)
    s[CL].unroll(li)
    s[CL].unroll(ljo)
    s[CL].vectorize(lji)
    s[BP].vectorize(s[BP].split(s[BP].op.axis[-1], factor=16)[1])
    return s, [A, B, C]


@pytest.mark.parametrize("shape", [(1, 1, 1), (4, 32, 8), (13, 37, 29), (64, 96, 50)])
def test_packed_matmul_reads_with_vector_loads_and_matches_numpy(shape):
    n, m, p = shape
    s, args = packed_matmul(n, m, p)
    f = tl.build(s, args)
    if m % 32 == 0:      # (partial tiles are scalar loops, which LLVM may vectorise itself)
        assert "masked.gather" not in f.get_source("ll")
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, p)).astype(np.float32)
    b = rng.standard_normal((p, m)).astype(np.float32)
    c = np.zeros((n, m), np.float32)
    f(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("n", [64, 80, 16, 1, 50, 127])
def test_a_partial_register_tile_stays_in_registers(n):
    """Tiles of 6 x 48 that do not divide n: the loops over the partial tile are unrolled
    to their bound with guards, and a partial vector is a masked vector (whole-vector
    blends on the padded tile), so no dynamic index keeps C_local in memory (it was: 4x
    slower whenever the tile did not divide the matrix). A partial vector and a partial
    row group at once (n = 50, 127) give the tile four copies of its code, still within
    the register budget (`registers.UNROLL_BUDGET`)."""
    A = tl.placeholder((n, n), name="A")
    B = tl.placeholder((n, n), name="B")
    k = tl.reduce_axis((0, n), name="k")
    C = tl.compute((n, n), lambda i, j: tl.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = tl.create_schedule(C)
    CL = s.cache_write(C, "local")
    io, jo, ii, ji = s[C].tile(*s[C].op.axis, 6, 48)
    s[C].vectorize(s[C].split(ji, factor=16)[1])
    s[CL].compute_at(s[C], jo)
    li, lj = s[CL].op.axis
    (lk,) = s[CL].op.reduce_axis
    ljo, lji = s[CL].split(lj, factor=16)
    s[CL].reorder(lk, li, ljo, lji)
    s[CL].unroll(li)
    s[CL].unroll(ljo)
    s[CL].vectorize(lji)
    f = tl.build(s, [A, B, C])
    assert "alloca" not in f.get_source("ll")
    rng = np.random.default_rng(n)
    a = rng.standard_normal((n, n)).astype(np.float32)
    b = rng.standard_normal((n, n)).astype(np.float32)
    c = np.zeros((n, n), np.float32)
    f(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)
