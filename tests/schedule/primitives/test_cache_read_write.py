"""cache_read / cache_write: a copy of an input that given stages read instead; a stage
computed into a cache stage and copied out."""

import numpy as np
import pytest

import tensorlang as tl

from .helpers import (
    allocations, assert_computes, assert_refused_with_witness, assert_replays, matmul,
    matmul_cases, matmul_nmk, prefix_sum,
)






@pytest.mark.parametrize("shape", [(64, 48, 40), (37, 29, 13), (1, 1, 1)])
def test_matmul_cache_write_compute_at_and_cache_read(shape):
    N, M, K = shape
    A, B, C = matmul_nmk(N, M, K)
    s = tl.create_schedule(C)
    CC = s.cache_write(C, "local")
    AA = s.cache_read(A, "local", [CC])
    i, j = s[C].op.axis
    io, jo, ii, ji = s[C].tile(i, j, 8, 16)
    s[CC].compute_at(s[C], jo)
    ci, cj = s[CC].op.axis
    (ck,) = s[CC].op.reduce_axis
    ko, ki = s[CC].split(ck, factor=4)
    s[CC].reorder(ko, ci, ki, cj)
    s[AA].compute_at(s[CC], ko)
    shapes = allocations(tl.lower(s, [A, B, C]))
    assert shapes["C_local"] == (min(8, N), min(16, M))
    assert shapes["A_local"] == (min(8, N), min(4, K))
    f = tl.build(s, [A, B, C])
    rng = np.random.default_rng(N)
    a = rng.random((N, K), dtype=np.float32)
    b = rng.random((K, M), dtype=np.float32)
    c = np.zeros((N, M), np.float32)
    f(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4)
    # the trace replays onto a fresh schedule
    A2, B2, C2 = matmul_nmk(N, M, K)
    s2 = s.replay(tl.create_schedule(C2))
    assert str(tl.lower(s2, [A2, B2, C2])) == str(tl.lower(s, [A, B, C]))


def test_cache_misuse():
    A, B, C = matmul_nmk(8, 8, 8)
    s = tl.create_schedule(C)
    with pytest.raises(tl.ScheduleError, match="scope"):
        s.cache_read(A, "registers", [C])
    with pytest.raises(tl.ScheduleError, match="not part of this schedule"):
        s.cache_read(tl.placeholder((8,), name="D"), "local", [C])
    AA = s.cache_read(A, "local", [C])
    with pytest.raises(tl.ScheduleError, match="A_local does not read B"):
        s.cache_read(B, "local", [AA])
    s2 = tl.create_schedule(C)
    s2[C].split(C.op.axis[0], factor=2)
    with pytest.raises(tl.ScheduleError, match="apply cache_write first"):
        s2.cache_write(C, "local")
    with pytest.raises(tl.ScheduleError, match="input"):
        s2.cache_write(A, "local")


def _batched_register_tile(nb, m, n, kk, tile, lanes=16, parallel=True):
    """A batched matmul C = A @ B whose accumulator tile (cache_write) is computed at the
    column tile, its rows and column vectors unrolled, under a fused (batch, row-tile)
    loop: (schedule, A, B, C)."""
    A = tl.placeholder((nb, m, kk), "float32", name="A")
    B = tl.placeholder((nb, kk, n), "float32", name="B")
    k = tl.reduce_axis((0, kk), name="k")
    C = tl.compute((nb, m, n), lambda b, i, j: tl.sum(A[b, i, k] * B[b, k, j], axis=k),
                   name="C")
    s = tl.create_schedule(C)
    s.cache_write("C", "local")
    s["C"].tile("i", "j", *tile)
    s["C"].split("j.inner", factor=lanes)
    s["C"].vectorize("j.inner.inner")
    s["C_local"].compute_at("C", "j.outer")
    s["C_local"].split("j", factor=lanes)
    s["C_local"].reorder("b", "k", "i", "j.outer", "j.inner")
    s["C_local"].unroll("i")
    s["C_local"].unroll("j.outer")
    s["C_local"].vectorize("j.inner")
    s["C"].fuse("b", "i.outer")
    if parallel:
        s["C"].parallel("b.i.outer.fused")
    return s, A, B, C


def test_a_local_tile_under_a_fused_loop_has_a_one_piece_corner_and_stays_in_registers():
    """The accumulator tile of a batched matmul under a fused (batch, row-tile) parallel
    loop: its corner along the rows is 8 (f mod 16) — islpy 2026.2.1 gives it as three
    pieces, and `i1 - select(...)` kept the tile out of registers (4x slower). The corner
    is composed from the batch's, one piece: the index is `i1 - f % 16 * 8`, the same
    expression as the row loop's start, and the tile has no stack access; numpy's
    result."""
    import re

    s, A, B, C = _batched_register_tile(8, 128, 128, 128, (8, 48))
    text = str(tl.lower(s, [A, B, C]))
    assert "select" not in text, text
    tgt = "llvm -mtriple=x86_64-unknown-linux-gnu -mcpu=skylake-avx512"
    f = tl.build(s, [A, B, C], target=tgt)
    asm = f.get_source("asm")
    assert len(re.findall(r"\(%rsp", asm)) < 24, "the tile went to the stack"
    a = np.random.default_rng(1).standard_normal((8, 128, 128)).astype("f4")
    b = np.random.default_rng(2).standard_normal((8, 128, 128)).astype("f4")
    got = np.zeros((8, 128, 128), "f4")
    tl.build(s, [A, B, C])(a, b, got)
    np.testing.assert_allclose(got, a @ b, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("rows,tile", [(128, (12, 32)), (61, (6, 48))])
def test_a_local_tile_whose_rows_do_not_divide_stays_in_registers(rows, tile):
    """The same batched matmul with row tiles that do not divide the rows: isl writes the
    copy-out's row under the fused loop with divisions (`127 - (120 f + 131 i + 127) mod
    132` for 12-row tiles of 128 rows), and the row in the tile as that minus the corner —
    equal to the copy-out loop's own variable, which LLVM cannot see, so the tile went to
    the stack, a store after every FMA (0.25 ms against 0.07). The index into the tile is
    now isl's affine form of it: no division in the copy-out's index into the tile, the
    tile no array in memory after LLVM's passes, numpy's result."""
    import re

    s, A, B, C = _batched_register_tile(3, rows, 128, 128, tile)
    text = str(tl.lower(s, [A, B, C]))
    copy_out = re.findall(r"C\[[^\]]*\] = C_local\[([^\]]*)\]", text)
    assert copy_out, text
    assert not any("%" in x or "//" in x for x in copy_out), copy_out
    tgt = "llvm -mtriple=x86_64-unknown-linux-gnu -mcpu=skylake-avx512"
    ll = tl.build(s, [A, B, C], target=tgt).get_source("ll")
    assert not re.search(r"alloca \[\d+ x float\]", ll), "the tile stayed in memory"
    a = np.random.default_rng(1).standard_normal((3, rows, 128)).astype("f4")
    b = np.random.default_rng(2).standard_normal((3, 128, 128)).astype("f4")
    got = np.zeros((3, rows, 128), "f4")
    tl.build(s, [A, B, C])(a, b, got)
    np.testing.assert_allclose(got, a @ b, rtol=1e-4, atol=1e-3)


@pytest.mark.slow
def test_register_tiles_under_fused_loops_match_numpy_at_any_sizes():
    """Property: a batched matmul's accumulator tile (cache_write, computed at the column
    tile, rows and column vectors unrolled) under a fused (batch, row-tile) loop, at sizes
    the tile does and does not divide — 1, primes, larger — against numpy. The indices
    into the tile are isl's affine forms where its loop expressions had divisions."""
    from hypothesis import example, given, settings
    from hypothesis import strategies as hs

    @settings(max_examples=25, deadline=None, derandomize=True)
    @example(1, 1, 1, 1, 1, 4, False)
    @example(3, 29, 37, 7, 6, 12, True)
    @example(2, 13, 40, 5, 7, 16, True)
    @given(hs.integers(1, 3), hs.integers(1, 29), hs.integers(1, 40), hs.integers(1, 7),
           hs.integers(1, 7), hs.sampled_from([4, 8, 12, 16]), hs.booleans())
    def check(nb, m, n, kk, mr, nc, par):
        s, A, B, C = _batched_register_tile(nb, m, n, kk, (mr, nc), lanes=4, parallel=par)
        rng = np.random.default_rng(nb * 1000 + m)
        a = rng.standard_normal((nb, m, kk)).astype("f4")
        b = rng.standard_normal((nb, kk, n)).astype("f4")
        got = np.full((nb, m, n), np.nan, "f4")
        tl.build(s, [A, B, C])(a, b, got)
        np.testing.assert_allclose(got, a @ b, rtol=1e-4, atol=1e-4)

    check()


# ---------------------------------- the interpreter, the refusals, the replay
def test_cache_read_and_write_match_numpy_and_the_interpreter():
    A, B, C = matmul()
    s = tl.create_schedule(C)
    CC = s.cache_write(C, "local")
    AA = s.cache_read(A, "local", [CC])
    io, jo, ii, ji = s[C].tile(*s[C].op.axis, 4, 3)
    s[CC].compute_at(s[C], jo)
    s[AA].compute_at(s[CC], s[CC].op.reduce_axis[0])
    assert_computes(s, [A, B, C], matmul_cases())


def test_cache_write_of_a_recurrence_is_refused():
    x, y = prefix_sum()
    s = tl.create_schedule(y)
    with pytest.raises(tl.ScheduleError, match="cache_write: y is a recurrence"):
        s.cache_write(y, "local")
    assert [st.id for st in s.stages] == ["y"] and s.trace == []


def test_cache_read_of_a_recurrence_by_itself_is_refused_with_a_witness():
    x, y = prefix_sum()
    s = tl.create_schedule(y)
    w = assert_refused_with_witness(s, lambda: s.cache_read(y, "local", [y]), "cache_read",
                                    "y")
    assert w.sink["i"] == w.source["i"] + 1


@pytest.mark.parametrize("which", ["read", "write"])
def test_cache_read_and_write_replay(which):
    A, B, C = matmul()
    s = tl.create_schedule(C)
    if which == "read":
        s.cache_read(B, "local", [C])
    else:
        s.cache_write(C, "local")
    assert_replays(s, [A, B, C], matmul)
