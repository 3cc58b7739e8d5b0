"""Schedule edits cost what they change, not the size of the program (issue 40, item 12).

compute_inline along a chain of n stages used to rebuild the whole isl program and its
dependences per edit (72 s for 200 stages), and every primitive made the time maps of the
whole program. The tests count the work an edit does (stage parts built, statements
analysed, time maps made), which must not grow with the pipeline, and check that the
result is still exact: the kernel against numpy, the dependences against a program built
from scratch, illegal primitives refused with the witness of a short program.
"""

from unittest import mock

import numpy as np
import pytest

import tensorlang as tl
from tensorlang.polyhedral import astgen
from tensorlang.schedule import program as P

RNG = np.random.default_rng(0)


def _halve(t, n, flip):
    if flip:      # a reader that is not at its own point: substituted, not shared
        return lambda j: t[n - 1 - j] * 0.5 + 1.0
    return lambda j: t[j] * 0.5 + 1.0


def chain(n_stages: int, size: int = 64, flip_every: int = 0):
    """T(k) = T(k-1) * 0.5 + 1 (bounded: no overflow along 200 stages); every
    `flip_every`-th stage reads its input reversed."""
    A = tl.placeholder((size,), "float32", name="A")
    ts = [A]
    for k in range(n_stages):
        flip = bool(flip_every) and k % flip_every == flip_every - 1
        ts.append(tl.compute((size,), _halve(ts[-1], size, flip), name=f"T{k}"))
    return ts


def reference(a: np.ndarray, n_stages: int, flip_every: int = 0) -> np.ndarray:
    x = a.copy()
    for k in range(n_stages):
        if flip_every and k % flip_every == flip_every - 1:
            x = x[::-1]
        x = (x * np.float32(0.5) + np.float32(1.0)).astype(np.float32)
    return x


@pytest.mark.parametrize("size", [64, 67])
def test_a_200_stage_chain_inlined_matches_numpy(size):
    ts = chain(200, size, flip_every=7)
    s = tl.create_schedule(ts[-1])
    for t in ts[1:-1]:
        s[t].compute_inline()
    assert [st.id for st in s.stages] == ["T199"]
    f = tl.build(s, [ts[0], ts[-1]])
    a = RNG.random(size, dtype=np.float32) * 8 - 4
    out = np.full(size, np.nan, np.float32)
    f(a, out)
    np.testing.assert_allclose(out, reference(a, 200, flip_every=7), rtol=1e-5)


def _inline_work(n_stages: int) -> tuple[int, int, int]:
    """The most work one compute_inline edit did after the first (which analyses the whole
    program once): stage parts built, statements in one dependence analysis, time maps."""
    ts = chain(n_stages)
    s = tl.create_schedule(ts[-1])
    s[ts[1]].compute_inline()
    most = [0, 0, 0]
    with mock.patch.object(P, "_stage_part", wraps=P._stage_part) as parts, \
            mock.patch.object(P, "compute_dependences", wraps=P.compute_dependences) as deps, \
            mock.patch.object(astgen, "_interleave", wraps=astgen._interleave) as times:
        for t in ts[2:-1]:
            for m in (parts, deps, times):
                m.reset_mock()
            s[t].compute_inline()
            seen = max((len(c.args[0]) for c in deps.call_args_list), default=0)
            for k, v in enumerate((parts.call_count, seen, times.call_count)):
                most[k] = max(most[k], v)
    return tuple(most)


def test_inlining_along_a_chain_does_constant_work_per_edit():
    # one part rebuilt per edit (the reader), dependences between the reader and its
    # input only, and the same few time maps, whatever the chain's length
    short, long = _inline_work(50), _inline_work(200)
    assert short == long
    parts, statements, time_maps = long
    assert parts == 1 and statements <= 3 and time_maps <= 6


def _split_work(n_stages: int) -> int:
    ts = chain(n_stages)
    s = tl.create_schedule(ts[-1])
    _ = s.program.deps      # analysed before, as by an earlier primitive
    mid = ts[n_stages // 2]
    with mock.patch.object(astgen, "_interleave", wraps=astgen._interleave) as times:
        jo, ji = s[mid].split(mid.op.axis[0], factor=8)
        s[mid].reorder(ji, jo)
    return times.call_count


def test_a_loop_primitive_on_a_long_pipeline_makes_the_same_time_maps():
    """split and reorder of one stage check its dependences with the time maps of its
    statements and of its neighbours', not of the whole program."""
    assert _split_work(20) == _split_work(120) <= 6


def _red(t, k):
    return lambda a, b: tl.sum(t[a, k] * 0.5, axis=k)


def _mix(t):
    return lambda a, b: t[a, b] + t[(a + 1) % 16, b] * 2.0


def _canonical(prog) -> dict:
    out = {}
    for d in prog.deps:
        key = (d.kind, d.src, d.dst, d.reduction)
        out[key] = out[key].union(d.rel) if key in out else d.rel
    return out


def _same_as_from_scratch(s) -> None:
    kept, fresh = _canonical(s.program), _canonical(P.build_program(s))
    assert set(kept) == set(fresh)
    for key, rel in kept.items():
        assert rel.is_equal(fresh[key]), key


def test_dependences_updated_by_edits_equal_a_fresh_analysis():
    A = tl.placeholder((16, 8), name="A")
    ts = [A]
    for k in range(10):
        if k % 3 == 1:
            r = tl.reduce_axis((0, 8), name="r")
            ts.append(tl.compute((16, 8), _red(ts[-1], r), name=f"R{k}"))
        else:
            ts.append(tl.compute((16, 8), _mix(ts[-1]), name=f"T{k}"))
    s = tl.create_schedule(ts[-1])
    s[ts[1]].compute_inline()
    _same_as_from_scratch(s)
    s[ts[4]].compute_inline()
    _same_as_from_scratch(s)
    s.cache_read(ts[6], "local", [s[ts[7]]])
    _same_as_from_scratch(s)
    s.cache_write(ts[8], "local")
    _same_as_from_scratch(s)
    R = ts[2]
    ro, _ri = s[R].split(R.op.reduce_axis[0], factor=4)
    s.rfactor(R, ro)
    _same_as_from_scratch(s)
    s[ts[3]].compute_inline()
    _same_as_from_scratch(s)


def _with_recurrence(n_before: int):
    ts = chain(n_before)
    R = tl.recurrence((64,), lambda y, i: tl.if_then_else(i > 0, y[i - 1], 0.0) + ts[-1][i],
                      name="R")
    return ts, R


def test_an_illegal_primitive_after_many_edits_is_refused_with_the_same_witness():
    ts, R = _with_recurrence(30)
    s = tl.create_schedule(R)
    for t in ts[1:]:
        s[t].compute_inline()
    with pytest.raises(tl.IllegalScheduleError) as edited:
        s[R].parallel(R.op.axis[0])
    ts, R = _with_recurrence(30)
    with pytest.raises(tl.IllegalScheduleError) as fresh:
        tl.create_schedule(R)[R].parallel(R.op.axis[0])
    assert str(edited.value) == str(fresh.value)
    assert edited.value.witness == fresh.value.witness


def _placed_work(n_stages: int) -> int:
    ts = chain(n_stages)
    s = tl.create_schedule(ts[-1])
    _ = s.program.deps
    k = n_stages // 2
    with mock.patch.object(astgen, "_interleave", wraps=astgen._interleave) as times:
        s[ts[k]].compute_at(s[ts[k + 1]], ts[k + 1].op.axis[0])
    return times.call_count


def test_compute_at_on_a_long_pipeline_checks_the_stages_it_moves():
    """compute_at checks the dependences of the stage it places (and of the stages placed
    by its statements), with their time maps only, and still refuses a placement that
    leaves a reader outside the loop, with the witness of a short program."""
    assert _placed_work(20) == _placed_work(120) <= 6
    ts = chain(40)
    B, C = ts[20], ts[21]
    D = tl.compute((64,), lambda i: B[i] + C[i], name="D")
    E = tl.compute((64,), lambda i: D[i] + ts[-1][i], name="E")
    s = tl.create_schedule(E)
    with pytest.raises(tl.IllegalScheduleError, match=r"D\[i=0\] reads T19\[0\]") as e:
        s[B].compute_at(s[C], C.op.axis[0])
    assert e.value.witness.sink == {"i": 0}
    assert s[B].state.attach is None
