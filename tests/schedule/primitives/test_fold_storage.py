"""fold_storage: a buffer stored outside its compute loop, folded to the rows in flight (a
circular buffer), with isl's smallest correct fold and the refusal of a smaller one."""

import numpy as np
import pytest

import tensorlang as tl
from tensorlang.ir.expr import Load, Var
from tensorlang.ir.interp import Interpreter
from tensorlang.ir.stmt import Store

from .helpers import allocations, assert_computes, assert_refused_with_witness
from .test_store_at import lesson08, lesson08_cases, sliding


def gap(h=None, w=None):
    """out[y, x] = B[y, x] + B[y + 4, x]: two rows four apart (a window with a hole)."""
    h = tl.var("h") if h is None else h
    w = tl.var("w") if w is None else w
    inp = tl.placeholder((h + 4, w), name="input")
    b = tl.compute((h + 4, w), lambda y, x: inp[y, x] * 2.0 + 1.0, name="B")
    out = tl.compute((h, w), lambda y, x: b[y, x] + b[y + 4, x], name="out")
    return inp, b, out


def gap_cases(sizes=((1, 1), (3, 2), (7, 5), (12, 3))):
    rng = np.random.default_rng(4)
    out = []
    for h, w in sizes:
        a = rng.random((h + 4, w), dtype=np.float32)
        b = a * 2 + 1
        out.append(([a], b[:-4] + b[4:]))
    return out


def gap_schedule(split=None):
    inp, b, out = gap()
    s = tl.create_schedule(out)
    y = out.op.axis[0]
    s[b].store_root()
    if split:
        y = s[out].split(y, factor=split)[1]
    s[b].compute_at(s[out], y)
    return s, inp, b, out


class Events(Interpreter):
    """The interpreter, recording each store and load of one buffer (kind, indices)."""

    def __init__(self, *a, watch: str, **k):
        super().__init__(*a, **k)
        self.watch, self.events = watch, []

    def stmt(self, s):
        if isinstance(s, Store) and s.buffer.name == self.watch:
            self.events.append(("w", tuple(int(self.expr(i)) for i in s.indices)))
        return super().stmt(s)

    def _expr(self, e):
        if isinstance(e, Load) and e.buffer.name == self.watch:
            self.events.append(("r", tuple(int(self.expr(i)) for i in e.indices)))
        return super()._expr(e)


def brute_smallest_fold(s, args, arrays, buffer: str, dim: int) -> int:
    """Run the unfolded nest, then replay its stores and loads of `buffer` into a circular
    buffer of f positions along `dim`, f = 1, 2, ...: the least f whose every load finds
    the element it wants."""
    low = tl.lower(s, args)
    env = {}
    for buf, arr in zip(low.buffers, arrays):
        for ext, n in zip(buf.shape, arr.shape):
            if isinstance(ext, Var):
                env.setdefault(ext.name, np.int64(n))
    it = Events({id(b): a for b, a in zip(low.buffers, arrays)}, env, watch=buffer)
    it.stmt(low.body)
    f = 1
    while True:
        slots, ok = {}, True
        for kind, idx in it.events:
            slot = idx[:dim] + (idx[dim] % f,) + idx[dim + 1:]
            if kind == "w":
                slots[slot] = idx
            elif slots.get(slot) != idx:
                ok = False
                break
        if ok:
            return f
        f += 1


def test_lesson08_folded_to_three_rows_matches_numpy():
    s, inp, bx, out = sliding("root")
    s[bx].fold_storage(bx.op.axis[0], 3)
    low = tl.lower(s, [inp, out])
    assert tuple(map(str, allocations(low)["blur_x"])) == ("3", "w")
    assert "% 3" in str(low)
    assert_computes(s, [inp, out], lesson08_cases())


def test_folded_footprint_is_exact():
    h, w = 9, 5
    s, inp, bx, out = sliding("root")
    rep = tl.analyze(s, [inp, out], sizes={"h": h, "w": w})
    assert rep.buffer("blur_x").footprint == (h + 2) * w
    assert rep.buffer("blur_x").smallest_fold == {"y": 3, "x": w}
    s[bx].fold_storage("y", 3)
    rep = tl.analyze(s, [inp, out], sizes={"h": h, "w": w})
    b = rep.buffer("blur_x")
    assert b.shape == (3, "w") and b.folds == {"y": 3}
    assert b.footprint == 3 * w and b.store_iterations == 1
    assert rep.stage("blur_x").iterations == (h + 2) * w


@pytest.mark.parametrize("kernel,split", [("lesson08", None), ("lesson08", 2),
                                          ("gap", None), ("gap", 3)])
@pytest.mark.parametrize("h,w", [(1, 1), (2, 3), (6, 2)])
def test_smallest_fold_equals_brute_force(kernel, split, h, w):
    if kernel == "lesson08":
        s, inp, bx, out = sliding("root", split)
        (ins, want), = lesson08_cases(((h, w),))
        name = "blur_x"
    else:
        s, inp, bx, out = gap_schedule(split)
        (ins, want), = gap_cases(((h, w),))
        name = "B"
    got = tl.analyze(s, [inp, out], sizes={"h": h, "w": w}).buffer(name).smallest_fold["y"]
    res = np.zeros(want.shape, np.float32)
    assert got == brute_smallest_fold(s, [inp, out], ins + [res], name, 0)
    np.testing.assert_allclose(res, want, rtol=1e-5)


def test_gap_window_is_exact_and_folds():
    s, inp, b, out = gap_schedule()
    rep = tl.analyze(s, [inp, out], sizes={"h": 7, "w": 2})
    assert rep.stage("B").iterations == (7 + 4) * 2          # each row once
    best = rep.buffer("B").smallest_fold["y"]
    s[b].fold_storage(0, best)
    assert_computes(s, [inp, out], gap_cases())


def test_too_small_fold_is_refused_with_the_colliding_pair():
    s, inp, bx, out = sliding("root")
    w = assert_refused_with_witness(s, lambda: s[bx].fold_storage(bx.op.axis[0], 2),
                                    "fold_storage", "blur_x")
    live, written = w.source, w.sink
    assert live["x"] == written["x"] and live["y"] != written["y"]
    assert (live["y"] - written["y"]) % 2 == 0
    # checked apart from isl: in the unfolded nest, `written` is stored after `live` and
    # before a load of `live`
    h, wd = w.sizes.get("h", 1), w.sizes.get("w", 1)
    (ins, want), = lesson08_cases(((h, wd),))
    low = tl.lower(s, [inp, out])
    arrays = ins + [np.zeros(want.shape, np.float32)]
    it = Events({id(b): a for b, a in zip(low.buffers, arrays)},
                {"h": np.int64(h), "w": np.int64(wd)}, watch="blur_x")
    it.stmt(low.body)
    ev = it.events
    a, b = (live["y"], live["x"]), (written["y"], written["x"])
    wa = ev.index(("w", a))
    wb = ev.index(("w", b), wa)
    assert ("r", a) in ev[wb:]
    with pytest.raises(tl.IllegalScheduleError, match="smallest fold of y is 3"):
        s[bx].fold_storage("y", 2)


def test_folding_columns_is_refused():
    s, inp, bx, out = sliding("root")
    assert_refused_with_witness(s, lambda: s[bx].fold_storage("x", 2), "fold_storage",
                                "blur_x")


def test_fold_storage_misuse():
    inp, bx, out = lesson08()
    s = tl.create_schedule(out)
    with pytest.raises(tl.ScheduleError, match="factor"):
        s[bx].fold_storage(0, 0)
    with pytest.raises(tl.ScheduleError, match="dim"):
        s[bx].fold_storage("z", 3)
    with pytest.raises(tl.ScheduleError, match="output"):
        s[out].fold_storage(0, 3)
    s[bx].fold_storage(0, 3)                      # before compute_at, as Halide allows
    with pytest.raises(tl.ScheduleError, match="computed at root"):
        tl.lower(s, [inp, out])
    s[bx].store_root()
    s[bx].compute_at(s[out], out.op.axis[0])
    assert_computes(s, [inp, out], lesson08_cases(((1, 1), (5, 7))), llvm=False)


@pytest.mark.parametrize("where", ["root", "yo"])
def test_fold_of_a_split_schedule_matches_numpy(where):
    s, inp, bx, out = sliding(where, 4)
    s[bx].fold_storage(bx.op.axis[0], 3)
    assert tuple(map(str, allocations(tl.lower(s, [inp, out]))["blur_x"])) == ("3", "w")
    assert_computes(s, [inp, out], lesson08_cases(((1, 1), (5, 7), (13, 11))))


def test_fold_of_a_reduction_producer():
    """The producer is a reduction (an init and an update per element): its accumulator is
    folded; its own reads of it are part of the values' live ranges."""
    h, w = tl.var("h"), tl.var("w")
    A = tl.placeholder((h + 2, w + 2), name="A")
    k = tl.reduce_axis((0, 3), name="k")
    R = tl.compute((h + 2, w), lambda y, x: tl.sum(A[y, x + k], axis=k), name="R")
    O = tl.compute((h, w), lambda y, x: R[y, x] + R[y + 2, x], name="O")
    s = tl.create_schedule(O)
    s[R].store_root()
    s[R].compute_at(s[O], O.op.axis[0])
    rep = tl.analyze(s, [A, O], sizes={"h": 6, "w": 3})
    assert rep.buffer("R").smallest_fold["y"] == 3
    assert_refused_with_witness(s, lambda: s[R].fold_storage(0, 2), "fold_storage", "R")
    s[R].fold_storage(0, 3)
    cases = []
    for n, m in ((1, 1), (6, 3), (11, 5)):
        a = np.random.default_rng(n).random((n + 2, m + 2), dtype=np.float32)
        r = a[:, :-2] + a[:, 1:-1] + a[:, 2:]
        cases.append(([a], r[:-2] + r[2:]))
    assert_computes(s, [A, O], cases)
