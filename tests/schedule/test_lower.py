"""lower(): the printed loop nest, argument checks, schedule construction."""

import numpy as np
import pytest

import tensorlang as tl


def _matmul():
    n = tl.var("n")
    A = tl.placeholder((n, 64), "float32", name="A")
    B = tl.placeholder((64, 32), "float32", name="B")
    k = tl.reduce_axis((0, 64), name="k")
    C = tl.compute((n, 32), lambda i, j: tl.sum(A[i, k] * B[k, j], axis=k), name="C")
    return A, B, C


def test_matmul_loop_nest():
    A, B, C = _matmul()
    text = str(tl.lower(tl.create_schedule(C), [A, B, C]))
    assert text == """\
def main(A: float32[n, 64], B: float32[64, 32], C: float32[n, 32]):
  for i in range(n):
    for j in range(32):
      C[i, j] = 0.0
      for k in range(64):
        C[i, j] = C[i, j] + A[i, k] * B[k, j]"""


def test_intermediate_stage_is_allocated_and_ordered():
    n = tl.var("n")
    A = tl.placeholder((n,), name="A")
    B = tl.compute((n,), lambda i: A[i] * 2.0, name="B")
    C = tl.compute((n,), lambda i: B[i] + 1.0, name="C")
    text = str(tl.lower(tl.create_schedule(C), [A, C]))
    assert text == """\
def main(A: float32[n], C: float32[n]):
  B = allocate(float32, [n], 'global')
  for i in range(n):
    B[i] = A[i] * 2.0
  for i in range(n):
    C[i] = B[i] + 1.0"""


def test_reduce_axis_with_offset_prints_its_range():
    A = tl.placeholder((10,), name="A")
    k = tl.reduce_axis((3, 10), name="k")
    C = tl.compute((1,), lambda i: tl.max(A[k], axis=k), name="C")
    text = str(tl.lower(tl.create_schedule(C), [A, C]))
    assert "for k in range(3, 10):" in text
    assert "C[0] = -inf" in text  # isl drops the loop of extent 1


def test_args_are_checked():
    A, B, C = _matmul()
    s = tl.create_schedule(C)
    with pytest.raises(tl.TensorlangError, match="the input B is read but not in args"):
        tl.lower(s, [A, C])
    with pytest.raises(tl.TensorlangError, match="the output C is not in args"):
        tl.lower(s, [A, B])
    with pytest.raises(tl.TensorlangError, match="listed twice"):
        tl.lower(s, [A, B, C, A])
    other = tl.placeholder((3,), name="X")
    with pytest.raises(tl.TensorlangError, match="X is not part of this schedule"):
        tl.lower(s, [A, B, C, other])
    with pytest.raises(tl.TensorlangError, match="Schedule"):
        tl.lower("not a schedule", [A])


def test_schedule_indexing_and_stage_ids():
    A = tl.placeholder((4,), name="A")
    B = tl.compute((4,), lambda i: A[i] + 1.0)
    C = tl.compute((4,), lambda i: B[i] + 1.0)
    s = tl.create_schedule(C)
    assert [st.id for st in s.stages] == ["compute", "compute_1"]
    assert s[C].op is C.op and s[C.op] is s[C]
    with pytest.raises(tl.ScheduleError, match="placeholder"):
        s[A]
    with pytest.raises(tl.TensorlangError, match="placeholder"):
        tl.create_schedule(A)


def test_bound_schedules_build_for_both_gpu_targets():
    A, B, C = _matmul()
    s = tl.create_schedule(C)
    s[C].bind(C.op.axis[0], "blockIdx.x")
    assert ".entry main_k0" in tl.build(s, [A, B, C], target="nvptx").get_source()
    assert "__global__" in tl.build(s, [A, B, C], target="cuda").get_source()


@pytest.mark.parametrize("parallel_outer", [False, True])
def test_a_compute_at_buffer_is_allocated_once_per_iteration_of_its_loop(parallel_outer):
    """The tile of `cache_write` placed at a loop inside a parallel loop is allocated in
    that loop only: a second allocation at the parallel loop (which each iteration of
    the inner loop already has its own copy inside) made the code generator count the
    inner loop's copies as the register tile's code and leave it in memory."""
    A = tl.placeholder((64, 64), name="A")
    B = tl.placeholder((64, 64), name="B")
    k = tl.reduce_axis((0, 64), name="k")
    C = tl.compute((64, 64), lambda i, j: tl.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = tl.create_schedule(C)
    CL = s.cache_write(C, "local")
    io, jo, ii, ji = s[C].tile(*s[C].op.axis, 8, 16)
    s[CL].compute_at(s[C], jo)
    if parallel_outer:
        s[C].parallel(io)
    text = str(tl.lower(s, [A, B, C]))
    assert text.count("C_local = allocate(") == 1, text
    lines = text.splitlines()
    at = next(i for i, x in enumerate(lines) if "C_local = allocate(" in x)
    assert "for j_outer in range(4)" in lines[at - 1]           # inside its own loop
    f = tl.build(s, [A, B, C])
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((64, 64)).astype("f4") for _ in range(2))
    c = np.zeros((64, 64), "f4")
    f(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)


def test_a_loop_whose_first_values_have_no_work_keeps_its_whole_extent():
    """A blur whose producer is tiled, unrolled and placed inside a fused consumer loop:
    isl's loop over the producer's column tiles starts at a value whose statements a
    modulo guard switches off, so the values with work (one) are fewer than the loop's
    (two). The loop's bound was the former; the code generator's guarded unroll of the
    register-sized buffer then ran only the first value, and by[0, 32] came out wrong (a
    sampled auto-scheduler candidate, hypothesis seed 76100). The bound now covers the
    loop's own extent too."""
    h, w = 2, 33
    X = tl.placeholder((h + 2, w + 2), "float32", name="X")
    bx = tl.compute((h + 2, w), lambda i, j: X[i, j] + X[i, j + 1] + X[i, j + 2], name="bx")
    by = tl.compute((h, w), lambda i, j: bx[i, j] + bx[i + 1, j] + bx[i + 2, j], name="by")
    s = tl.create_schedule(by)
    s[by].split("j", factor=16)
    s[by].fuse("i", "j.outer")
    s[bx].split("j", factor=32)
    s[bx].split("j.inner", factor=16)
    s[bx].split("i", factor=4)
    s[bx].reorder("i.outer", "j.outer", "i.inner", "j.inner.outer", "j.inner.inner")
    s[bx].compute_at(s[by], "i.j.outer.fused")
    f = tl.build(s, [X, by])
    x = np.random.default_rng(0).standard_normal((h + 2, w + 2)).astype("float32")
    got = np.zeros((h, w), "float32")
    f(x, got)
    t = x[:, :-2] + x[:, 1:-1] + x[:, 2:]
    np.testing.assert_allclose(got, t[:-2] + t[1:-1] + t[2:], rtol=1e-5, atol=1e-5)
