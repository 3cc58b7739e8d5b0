"""tensorize: a user-declared instruction in plain IR, the built-in x86 and AArch64 ones, the
exact match (with its witness), partial boxes as plain code, traces, and the match against
brute force on tiny domains."""

import json

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tensorlang as tl
from tensorlang.aot import ToolchainMissing, toolchain
from tensorlang.ir.stmt import TensorCall
from tensorlang.ir.visit import walk_stmt
from tensorlang.schedule import dot_products
from tensorlang.schedule.trace import TraceEntry

SIZES = [(1, 1, 1), (1, 1, 4), (3, 2, 3), (5, 3, 8), (4, 7, 13), (17, 31, 37)]


# ------------------------------------------------------------------ a declared 4-wide dot
def dot4():
    """A made-up instruction: c[0] += a[0]*b[0] + ... + a[3]*b[3], its impl plain IR."""
    a = tl.placeholder((4,), "float32", name="a")
    b = tl.placeholder((4,), "float32", name="b")
    k = tl.reduce_axis((0, 4), name="k")
    c = tl.compute((1,), lambda i: tl.sum(a[k] * b[k], axis=k), name="c")

    def impl(ra, rb, rc):
        return rc.store((0,), rc[0] + ra[0] * rb[0] + ra[1] * rb[1] + ra[2] * rb[2]
                        + ra[3] * rb[3])
    return tl.TensorIntrin(c, impl, name="dot4")


def dot_matmul(M, N, K, transposed=False, packed=False):
    A = tl.placeholder((M, K), name="A")
    B = tl.placeholder((K, N) if transposed or packed else (N, K), name="B")
    r = tl.reduce_axis((0, K), name="r")
    if packed:
        Bp = tl.compute((N, K), lambda j, q: B[q, j], name="Bp")
        C = tl.compute((M, N), lambda i, j: tl.sum(A[i, r] * Bp[j, r], axis=r), name="C")
    elif transposed:
        C = tl.compute((M, N), lambda i, j: tl.sum(A[i, r] * B[r, j], axis=r), name="C")
    else:
        C = tl.compute((M, N), lambda i, j: tl.sum(A[i, r] * B[j, r], axis=r), name="C")
    s = tl.create_schedule(C)
    _, ri = s[C].split(r, factor=4)
    return s, [A, B, C], C, ri


def calls(f) -> int:
    return sum(isinstance(x, TensorCall) for x in walk_stmt(f.body))


@pytest.mark.parametrize("M,N,K", SIZES)
def test_declared_dot_matches_numpy_at_sizes_that_do_and_do_not_divide(M, N, K, rng):
    s, args, C, ri = dot_matmul(M, N, K)
    s[C].tensorize(ri, dot4())
    text = str(tl.lower(s, args))
    # the impl's code where the box of 4 is whole; K % 4 leaves plain code
    assert any(line.count(" * B[") == 4 for line in text.splitlines()) == (K >= 4)
    if K % 4 == 0:
        assert "for r_inner in range(" not in text
    elif K > 4:
        assert "for r_inner in range(" in text
    f = tl.build(s, args)
    a = rng.standard_normal((M, K)).astype("float32")
    b = rng.standard_normal((N, K)).astype("float32")
    c = np.full((M, N), np.nan, "float32")
    f(a, b, c)
    np.testing.assert_allclose(c, a @ b.T, rtol=1e-5, atol=1e-5)
    c2 = np.full((M, N), np.nan, "float32")
    tl.run_lowered(tl.lower(s, args), [a, b, c2])
    np.testing.assert_allclose(c2, a @ b.T, rtol=1e-5, atol=1e-5)


def test_a_transposed_operand_is_refused_with_a_witness_and_pack_fixes_it(rng):
    s, args, C, ri = dot_matmul(4, 7, 13, transposed=True)
    with pytest.raises(tl.ScheduleError) as e:
        s[C].tensorize(ri, dot4())
    msg = str(e.value)
    assert "at (i=0, j=0, r.outer=0, r.inner=1)" in msg
    assert "reads B[1, 0] where the instruction's b[1] would be B[0, 1]" in msg
    assert "pack B" in msg
    # the refused primitive left the schedule as it was
    assert s[C].tensorized() is None and "tensorize" not in s.trace_text()
    s, args, C, ri = dot_matmul(4, 7, 13, packed=True)
    s[C].tensorize(ri, dot4())
    f = tl.build(s, args)
    a = rng.standard_normal((4, 13)).astype("float32")
    b = rng.standard_normal((13, 7)).astype("float32")
    c = np.zeros((4, 7), "float32")
    f(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)


def test_refusals_name_what_differs():
    intrin = dot4()
    # the loop runs past the instruction's box
    s, args, C, ri = dot_matmul(3, 3, 16)
    s2 = tl.create_schedule(C)
    _, r8 = s2[C].split(C.op.reduce_axis[0], factor=8)
    with pytest.raises(tl.ScheduleError, match=r"r.inner takes the value 4 .* split r.inner by 4"):
        s2[C].tensorize(r8, intrin)
    # a whole axis wider than the box
    A8 = tl.placeholder((3, 8), name="A8")
    B8 = tl.placeholder((3, 8), name="B8")
    r8 = tl.reduce_axis((0, 8), name="r8")
    C8 = tl.compute((3, 3), lambda i, j: tl.sum(A8[i, r8] * B8[j, r8], axis=r8), name="C8")
    s7 = tl.create_schedule(C8)
    with pytest.raises(tl.ScheduleError, match=r"loop r8 takes the value 4 .* split r8 by 4"):
        s7[C8].tensorize(r8, intrin)
    s6, _, C6, r2 = dot_matmul(3, 3, 16)
    s6 = tl.create_schedule(C6)
    _, r2 = s6[C6].split(C6.op.reduce_axis[0], factor=2)
    with pytest.raises(tl.ScheduleError, match="runs over 2 values.*split by 4"):
        s6[C6].tensorize(r2, intrin)
    # more loops than the instruction has axes
    with pytest.raises(tl.ScheduleError, match="has 3 loops .* 1 axes of more than one value"):
        s[C].tensorize(C.op.axis[1], intrin)
    # another computation
    A = tl.placeholder((3, 8), name="A")
    r = tl.reduce_axis((0, 8), name="r")
    M = tl.compute((3,), lambda i: tl.max(A[i, r], axis=r), name="M")
    s3 = tl.create_schedule(M)
    _, ri = s3[M].split(r, factor=4)
    with pytest.raises(tl.ScheduleError, match="reduces with max, the instruction with sum"):
        s3[M].tensorize(ri, intrin)
    P = tl.compute((3,), lambda i: tl.sum(A[i, r] + A[i, r], axis=r), name="P")
    s4 = tl.create_schedule(P)
    _, ri = s4[P].split(r, factor=4)
    with pytest.raises(tl.ScheduleError, match="Add against Mul"):
        s4[P].tensorize(ri, intrin)
    # a tagged loop
    s5, args, C, ri = dot_matmul(3, 3, 8)
    s5[C].unroll(ri)
    with pytest.raises(tl.ScheduleError, match="r.inner is unrolled; the tensorized loop"):
        s5[C].tensorize(ri, intrin)
    # a stage computed inside the nest
    A2 = tl.placeholder((3, 8), name="A2")
    B2 = tl.placeholder((3, 8), name="B2")
    P2 = tl.compute((3, 8), lambda j, q: B2[j, q] * 2.0, name="P2")
    r2 = tl.reduce_axis((0, 8), name="r2")
    C2 = tl.compute((3, 3), lambda i, j: tl.sum(A2[i, r2] * P2[j, r2], axis=r2), name="C2")
    s9 = tl.create_schedule(C2)
    _, ri2 = s9[C2].split(r2, factor=4)
    s9[P2].compute_at(s9[C2], ri2)
    with pytest.raises(tl.ScheduleError, match="stage P2 is computed at loop r2.inner"):
        s9[C2].tensorize(ri2, intrin)
    # a vector loop around it
    s8, _, C9, ri9 = dot_matmul(3, 16, 8)
    s8[C9].vectorize(C9.op.axis[1])
    with pytest.raises(tl.ScheduleError, match="loop j around it is vectorized"):
        s8[C9].tensorize(ri9, intrin)
    # a name that is not an instruction
    with pytest.raises(tl.ScheduleError, match="not a built-in"):
        s5[C].tensorize(ri, "x86.nope")
    with pytest.raises(tl.ScheduleError, match="must be a tl.TensorIntrin"):
        s5[C].tensorize(ri, 3)


def test_a_primitive_after_tensorize_that_changes_the_nest_is_refused_at_lower():
    s, args, C, ri = dot_matmul(3, 3, 8)
    s[C].tensorize(ri, dot4())
    s[C].split(ri, factor=2)
    with pytest.raises(tl.ScheduleError, match="applied after it changed loop r.inner"):
        tl.lower(s, args)


def test_tensorize_composes_with_parallel_and_replays_from_its_trace(rng):
    M, N, K = 9, 5, 12
    intrin = dot4()
    s, args, C, ri = dot_matmul(M, N, K)
    s[C].parallel(C.op.axis[0])
    s[C].tensorize(ri, intrin)
    assert 's["C"].tensorize("r.inner", intrin="dot4")' in s.trace_text()
    _, args2, C2, _ = dot_matmul(M, N, K)
    s2 = s.replay(tl.create_schedule(C2))
    a = rng.standard_normal((M, K)).astype("float32")
    b = rng.standard_normal((N, K)).astype("float32")
    for sched, ar in ((s, args), (s2, args2)):
        c = np.zeros((M, N), "float32")
        tl.build(sched, ar)(a, b, c)
        np.testing.assert_allclose(c, a @ b.T, rtol=1e-5, atol=1e-5)
    # a trace names the instruction, through JSON
    entry = TraceEntry.from_json(json.loads(json.dumps(s.trace[-1].to_json())))
    assert entry.call.kwargs == (("intrin", "dot4"),)


def test_a_recorded_trace_with_a_built_in_instruction_replays(rng):
    """The tuning log's replay (records.replay_trace) finds a built-in instruction by the
    name its trace entry gives."""
    from tensorlang.autoschedule.records import replay_trace

    s, args = packed_matmul(5, 33, 13, 16, 4, "uint8", "int8", "int32",
                            tl.intrin.x86.vnni_u8s8_i32)
    trace = [TraceEntry.from_json(json.loads(json.dumps(t.to_json()))) for t in s.trace]
    s2 = replay_trace([args[-1]], trace)
    assert s2.trace_text() == s.trace_text()
    a = rng.integers(0, 256, (5, 13), dtype=np.uint8)
    b = rng.integers(-128, 128, (13, 33), dtype=np.int8)
    c = np.zeros((5, 33), np.int32)
    tl.run_lowered(tl.lower(s2, args), [a, b, c])
    np.testing.assert_array_equal(c, a.astype(np.int32) @ b.astype(np.int32))


def test_the_intrinsic_declaration_is_checked():
    a = tl.placeholder((4,), "float32", name="a")
    k = tl.reduce_axis((0, 4), name="k")
    c = tl.compute((1,), lambda i: tl.sum(a[k] * a[k], axis=k), name="c")
    with pytest.raises(tl.TensorlangError, match="reads a twice"):
        tl.TensorIntrin(c, lambda *r: None)
    with pytest.raises(tl.TensorlangError, match="desc must be the output of tl.compute"):
        tl.TensorIntrin(a, lambda *r: None)
    b = tl.placeholder((4,), "float32", name="b")
    c = tl.compute((1,), lambda i: tl.sum(a[k] * b[k], axis=k), name="c")
    with pytest.raises(tl.TensorlangError, match="impl must be"):
        tl.TensorIntrin(c, 5)


# ------------------------------------------------------------------------ brute force
IDX = {
    "B[j, r]": lambda B, i, j, r: B[j, r],
    "B[j, r + 1]": lambda B, i, j, r: B[j, r + 1],
    "B[r, j]": lambda B, i, j, r: B[r, j],
    "B[j, 2 * r]": lambda B, i, j, r: B[j, 2 * r],
    "B[j, 7 - r]": lambda B, i, j, r: B[j, 7 - r],
    "B[j + r, r]": lambda B, i, j, r: B[j + r, r],
    "B[j, r // 2]": lambda B, i, j, r: B[j, r // 2],
}


def _brute(name: str, split: int, N: int, K: int) -> bool:
    """Whether the split r loop can make boxes of 4 and every whole box reads B at the
    box's first element plus the instruction's offset (k along B's last dimension),
    checked point by point."""
    rows = {"B[j, r]": lambda j, r: (j, r), "B[j, r + 1]": lambda j, r: (j, r + 1),
            "B[r, j]": lambda j, r: (r, j), "B[j, 2 * r]": lambda j, r: (j, 2 * r),
            "B[j, 7 - r]": lambda j, r: (j, 7 - r), "B[j + r, r]": lambda j, r: (j + r, r),
            "B[j, r // 2]": lambda j, r: (j, r // 2)}[name]
    if split != 4:
        return False
    for j in range(N):
        for ro in range(K // 4):
            base = rows(j, ro * 4)
            for q in range(4):
                got = rows(j, ro * 4 + q)
                if got != (base[0], base[1] + q):
                    return False
    return True


@settings(max_examples=25, deadline=None)
@given(name=st.sampled_from(sorted(IDX)), split=st.sampled_from([2, 4, 8]),
       N=st.integers(1, 3), K=st.integers(1, 9))
def test_the_match_agrees_with_brute_force_on_tiny_domains(name, split, N, K):
    M = 2
    A = tl.placeholder((M, K), name="A")
    B = tl.placeholder((16, 16), name="B")
    r = tl.reduce_axis((0, K), name="r")
    C = tl.compute((M, N), lambda i, j: tl.sum(A[i, r] * IDX[name](B, i, j, r), axis=r),
                   name="C")
    s = tl.create_schedule(C)
    _, ri = s[C].split(r, factor=split)
    try:
        s[C].tensorize(ri, dot4())
        accepted = True
    except tl.ScheduleError:
        accepted = False
    assert accepted == _brute(name, split, N, K), (name, split, N, K)
    if accepted:
        rng = np.random.default_rng(0)
        a = rng.standard_normal((M, K)).astype("float32")
        b = rng.standard_normal((16, 16)).astype("float32")
        c = np.zeros((M, N), "float32")
        tl.build(s, [A, B, C])(a, b, c)
        ref = np.array([[sum(a[i, q] * IDX[name](b, i, j, q) for q in range(K))
                         for j in range(N)] for i in range(M)], "float32")
        np.testing.assert_allclose(c, ref, rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------------ built-in instructions
def packed_matmul(M, N, K, lanes, depth, a_dt, b_dt, acc, intrin, rows=1, vecs=1,
                  block_bytes=0):
    """C = A @ B with B packed as [N/lanes, K/depth, lanes, depth] (zeros past the edges),
    one use of `intrin` per lanes x depth block (`tensorlang.schedule.dot_products`)."""
    return dot_products.packed_matmul(M, N, K, a_dt, b_dt, acc, lanes, depth, intrin, rows,
                                      vecs, block_bytes)


def _host_has(feature):
    return tl.Target.parse("llvm").has_feature(feature)


@pytest.mark.parametrize("M,N,K,block", [(1, 1, 1, 0), (3, 16, 4, 0), (5, 33, 13, 0),
                                         (17, 47, 64, 0), (9, 97, 21, 1000)])
def test_vnni_int8_matmul(M, N, K, block, rng):
    # block: B's column panels (32 columns x K bytes) in blocks of `block` bytes, the
    # blocks outside the row tiles (97 columns: 4 panels, blocks of one)
    s, args = packed_matmul(M, N, K, 16, 4, "uint8", "int8", "int32",
                            tl.intrin.x86.vnni_u8s8_i32, rows=2, vecs=2, block_bytes=block)
    assert ('split("j.outer", factor=1)' in s.trace_text()) == bool(block)
    f = tl.lower(s, args)
    assert (calls(f) >= 1) == (N >= 16 and K >= 4)
    a = rng.integers(0, 256, (M, K), dtype=np.uint8)
    b = rng.integers(-128, 128, (K, N), dtype=np.int8)
    ref = a.astype(np.int32) @ b.astype(np.int32)
    if M * N * K <= 8000 or not _host_has("avx512vnni"):
        c = np.zeros((M, N), np.int32)
        tl.run_lowered(f, [a, b, c])          # the interpreter runs the description
        np.testing.assert_array_equal(c, ref)
    # the object builds for any AVX512-VNNI CPU wherever the tests run
    obj = tl.build(s, args, target="llvm -mcpu=znver4")
    assert ("vpdpbusd" in obj.get_source("asm")) == (N >= 16 and K >= 4)
    if not _host_has("avx512vnni"):
        pytest.skip("this CPU has no AVX512-VNNI: the kernel was built, not run")
    c = np.full((M, N), -1, np.int32)
    tl.build(s, args)(a, b, c)
    np.testing.assert_array_equal(c, ref)


@pytest.mark.parametrize("M,N,K", [(12, 32, 8), pytest.param(8, 16, 4, marks=pytest.mark.slow),
                                   pytest.param(16, 80, 36, marks=pytest.mark.slow)])
def test_vnni_tile_computed_at_a_row_tile_of_its_reader(M, N, K, rng):
    """The sums in a local tile computed at each 4-row tile of an elementwise reader (the
    tile's loops start at 4 * the row tile, then rebased to count from zero for the
    registers): every use's origin moves with its loops (row tiles past the first once
    wrote outside the tile and read A's first rows)."""
    from tensorlang.graph.quantized import _mmi_te, schedule_matmul_integer

    A = tl.placeholder((M, K), "uint8", name="A")
    B = tl.placeholder((K, N), "int8", name="B")
    zb = tl.placeholder((N,), "int8", name="zb")
    out, _ = _mmi_te([A, B, zb], [(M, K), (K, N), (N,)], (M, N), a_zp=False, b_zp=True)
    s = tl.create_schedule(out)
    schedule_matmul_integer(s, out, tl.Target.parse("llvm -mcpu=znver4"))
    a = rng.integers(0, 256, (M, K), dtype=np.uint8)
    b = rng.integers(-128, 128, (K, N), dtype=np.int8)
    z = rng.integers(-128, 128, N, dtype=np.int8)
    ref = (a.astype(np.int64) @ (b.astype(np.int64) - z)).astype(np.int32)
    c = np.zeros((M, N), np.int32)
    tl.run_lowered(tl.lower(s, [A, B, zb, out]), [a, b, z, c])
    np.testing.assert_array_equal(c, ref)
    if not _host_has("avx512vnni"):
        pytest.skip("this CPU has no AVX512-VNNI: the kernel was built, not run")
    for threads in ("1", "2"):
        c = np.full((M, N), -1, np.int32)
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("TL_NUM_THREADS", threads)
            tl.build(s, [A, B, zb, out])(a, b, z, c)
        np.testing.assert_array_equal(c, ref)


@pytest.mark.parametrize("M,N,K", [(1, 1, 1), (3, 16, 2), (5, 33, 13), (17, 47, 64)])
def test_bf16_dot_matmul(M, N, K, rng):
    s, args = packed_matmul(M, N, K, 16, 2, "bfloat16", "bfloat16", "float32",
                            "x86.bf16_dot_f32", rows=2, vecs=2)
    a = rng.standard_normal((M, K)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((K, N)).astype(ml_dtypes.bfloat16)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    asm = tl.build(s, args, target="llvm -mcpu=znver4").get_source("asm")
    assert ("vdpbf16ps" in asm) == (N >= 16 and K >= 2)
    if not _host_has("avx512bf16"):
        pytest.skip("this CPU has no AVX512-BF16: the kernel was built, not run")
    c = np.zeros((M, N), np.float32)
    tl.build(s, args)(a, b, c)
    # products are exact in float32; the instruction sums in its own order
    np.testing.assert_allclose(c, ref, rtol=1e-5, atol=1e-5 * np.sqrt(K))


def test_a_target_without_the_feature_is_refused_by_name():
    s, args = packed_matmul(4, 16, 8, 16, 4, "uint8", "int8", "int32",
                            tl.intrin.x86.vnni_u8s8_i32)
    with pytest.raises(tl.TensorlangError, match="needs the CPU feature.*avx512vnni.*x86-64"):
        tl.build(s, args, target="llvm -mcpu=x86-64")
    with pytest.raises(tl.TensorlangError, match="x86 instruction; the target is aarch64"):
        tl.build(s, args, target="llvm -mtriple=aarch64-linux-gnu -mcpu=neoverse-v1")
    with pytest.raises(NotImplementedError, match="CPU instruction x86.vnni_u8s8_i32"):
        tl.build(s, args, target="cuda")


def test_a_lowered_instruction_needs_whole_blocks_of_memory():
    A = tl.placeholder((4, 8), "uint8", name="A")
    B = tl.placeholder((32, 8), "int8", name="B")   # rows of 8: a 16x4 block is not one run
    k = tl.reduce_axis((0, 8), name="k")
    C = tl.compute((4, 32), lambda i, j: tl.sum(A[i, k].astype("int32")
                                                * B[j, k].astype("int32"), axis=k), name="C")
    s = tl.create_schedule(C)
    jo, ji = s[C].split(C.op.axis[1], factor=16)
    ko, ki = s[C].split(k, factor=4)
    s[C].reorder(C.op.axis[0], jo, ko, ji, ki)
    with pytest.raises(tl.ScheduleError, match=r"one block of memory, but B has shape \(32, 8\)"):
        s[C].tensorize(ji, tl.intrin.x86.vnni_u8s8_i32)


def _aarch64():
    t = tl.Target.parse("llvm -mtriple=aarch64-linux-gnu -mcpu=neoverse-v1")
    try:
        toolchain(t)
    except ToolchainMissing as e:
        pytest.skip(str(e))
    return t


@pytest.mark.parametrize("M,N,K", [(1, 1, 1), (5, 9, 13), (8, 12, 16)])
def test_arm_sdot_under_qemu(M, N, K, rng):
    t = _aarch64()
    s, args = packed_matmul(M, N, K, 4, 4, "int8", "int8", "int32",
                            tl.intrin.arm.sdot_s8_i32, rows=2, vecs=2)
    f = tl.build(s, args, target=t, name="mm_sdot")
    assert ("\tsdot" in f.get_source("asm")) == (N >= 4 and K >= 4)
    a = rng.integers(-128, 128, (M, K), dtype=np.int8)
    b = rng.integers(-128, 128, (K, N), dtype=np.int8)
    c = np.zeros((M, N), np.int32)
    tl.aot.run_emulated(f, a, b, c)
    np.testing.assert_array_equal(c, a.astype(np.int32) @ b.astype(np.int32))


@pytest.mark.parametrize("M,N,K", [(2, 2, 4), (5, 7, 9)])
def test_arm_bfmmla_under_qemu(M, N, K, rng):
    t = _aarch64()
    # A and B packed in 2 x 4 blocks, C computed in 2 x 2 blocks and unpacked
    A = tl.placeholder((M, K), "bfloat16", name="A")
    B = tl.placeholder((K, N), "bfloat16", name="B")
    MB, NB, KB = -(-M // 2), -(-N // 2), -(-K // 4)
    zero = tl.const(0, "bfloat16")
    Ap = tl.compute((MB, KB, 2, 4), lambda io, ko, ii, ki: tl.if_then_else(
        tl.all(io * 2 + ii < M, ko * 4 + ki < K), A[io * 2 + ii, ko * 4 + ki], zero), name="Ap")
    Bp = tl.compute((NB, KB, 2, 4), lambda jo, ko, ji, ki: tl.if_then_else(
        tl.all(jo * 2 + ji < N, ko * 4 + ki < K), B[ko * 4 + ki, jo * 2 + ji], zero), name="Bp")
    k = tl.reduce_axis((0, KB * 4), name="k")
    Cp = tl.compute((MB, NB, 2, 2), lambda io, jo, ii, ji: tl.sum(
        Ap[io, k // 4, ii, k % 4].astype("float32") * Bp[jo, k // 4, ji, k % 4].astype("float32"),
        axis=k), name="Cp")
    C = tl.compute((M, N), lambda i, j: Cp[i // 2, j // 2, i % 2, j % 2], name="C")
    s = tl.create_schedule(C)
    io, jo, ii, ji = Cp.op.axis
    ko, ki = s[Cp].split(k, factor=4)
    s[Cp].reorder(io, jo, ko, ii, ji, ki)
    s[Cp].tensorize(ii, tl.intrin.arm.bfmmla_f32)
    f = tl.build(s, [A, B, C], target=t, name="mm_bfmmla")
    assert "\tbfmmla" in f.get_source("asm")
    a = rng.standard_normal((M, K)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((K, N)).astype(ml_dtypes.bfloat16)
    c = np.zeros((M, N), np.float32)
    tl.aot.run_emulated(f, a, b, c)
    np.testing.assert_allclose(c, a.astype(np.float64) @ b.astype(np.float64), rtol=1e-3,
                               atol=1e-3)


@pytest.mark.parametrize("h,cols", [(5, 5), (7, 3), pytest.param(9, 4, marks=pytest.mark.slow)])
def test_vnni_conv_with_the_sums_in_a_local_tile(h, cols, rng):
    """The instruction inside a stage computed at a loop (cache_write's local tile): the
    generated nest stores into the local buffer that stands for the tensor."""
    n, c, k = 1, 8, 32
    s, args = dot_products.blocked_conv2d(n, c, h, k, cols, tl.intrin.x86.vnni_u8s8_i32)
    f = tl.lower(s, args)
    assert calls(f) >= 1
    x = rng.integers(0, 256, (n, c, h, h), dtype=np.uint8)
    w = rng.integers(-128, 128, (k, c, 3, 3), dtype=np.int8)
    xp = np.pad(x.astype(np.int64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    win = np.lib.stride_tricks.sliding_window_view(xp, (3, 3), axis=(2, 3))
    want = np.einsum("ncijpq,ocpq->noij", win, w.astype(np.int64)).astype(np.int32)
    if h == 5:                  # the interpreter (slow) once
        y = np.zeros((n, k, h, h), np.int32)
        tl.run_lowered(f, [x, w, y])
        np.testing.assert_array_equal(y, want)
    if not _host_has("avx512vnni"):
        pytest.skip("this CPU has no AVX512-VNNI: the kernel was lowered, not run")
    y = np.full((n, k, h, h), -1, np.int32)
    tl.build(s, args)(x, w, y)
    np.testing.assert_array_equal(y, want)
