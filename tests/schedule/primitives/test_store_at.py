"""store_at / store_root: a stage stored outside the loop it is computed at — Halide lesson
08's sliding window, each value computed once per buffer."""

import numpy as np
import pytest

import tensorlang as tl
from tensorlang.ir.expr import Var
from tensorlang.ir.interp import Interpreter
from tensorlang.ir.stmt import Store

from .helpers import allocations, assert_computes, assert_refused_with_witness, assert_replays


def lesson08(h=None, w=None):
    """Halide lesson 08's blur: blur_x averages three columns, out three rows of blur_x."""
    h = tl.var("h") if h is None else h
    w = tl.var("w") if w is None else w
    inp = tl.placeholder((h + 2, w + 2), name="input")
    bx = tl.compute((h + 2, w), lambda y, x: (inp[y, x] + inp[y, x + 1] + inp[y, x + 2]) / 3.0,
                    name="blur_x")
    out = tl.compute((h, w), lambda y, x: (bx[y, x] + bx[y + 1, x] + bx[y + 2, x]) / 3.0,
                     name="out")
    return inp, bx, out


def lesson08_cases(sizes=((1, 1), (2, 3), (5, 7), (13, 11), (40, 17))):
    """Heights and widths 1, primes and larger; the reference is numpy's."""
    rng = np.random.default_rng(8)
    out = []
    for h, w in sizes:
        a = rng.random((h + 2, w + 2), dtype=np.float32)
        b = (a[:, :-2] + a[:, 1:-1] + a[:, 2:]) / 3
        out.append(([a], (b[:-2] + b[1:-1] + b[2:]) / 3))
    return out


def sliding(where="root", split=None):
    inp, bx, out = lesson08()
    s = tl.create_schedule(out)
    y, _x = out.op.axis
    if split is not None:
        yo, yi = s[out].split(y, factor=split)
        if where == "root":
            s[bx].store_root()
        else:
            s[bx].store_at(s[out], yo)
        s[bx].compute_at(s[out], yi)
    else:
        s[bx].store_root()
        s[bx].compute_at(s[out], y)
    return s, inp, bx, out


class CountingInterpreter(Interpreter):
    """The loop-IR interpreter, counting the stores into one buffer (by name)."""

    def __init__(self, *a, watch: str, **k):
        super().__init__(*a, **k)
        self.watch, self.stores = watch, 0

    def stmt(self, s):
        if isinstance(s, Store) and s.buffer.name == self.watch:
            self.stores += 1
        return super().stmt(s)


def evaluations(s, args, arrays, buffer: str) -> int:
    """How many times the lowered nest stores into `buffer`, run in the interpreter."""
    low = tl.lower(s, args)
    env = {}
    for buf, arr in zip(low.buffers, arrays):
        for ext, n in zip(buf.shape, arr.shape):
            if isinstance(ext, Var):
                env.setdefault(ext.name, np.int64(n))
    it = CountingInterpreter({id(b): a for b, a in zip(low.buffers, arrays)}, env,
                             watch=buffer)
    it.stmt(low.body)
    return it.stores


@pytest.mark.parametrize("where,split", [("root", None), ("root", 4), ("yo", 4)])
def test_lesson08_sliding_window_matches_numpy(where, split):
    s, inp, bx, out = sliding(where, split)
    assert_computes(s, [inp, out], lesson08_cases())


def test_store_root_computes_each_value_once():
    s, inp, bx, out = sliding("root")
    h, w = 13, 11
    rep = tl.analyze(s, [inp, out], sizes={"h": h, "w": w})
    assert rep.stage("blur_x").iterations == (h + 2) * w          # not 3 (h) w
    (ins, want), = lesson08_cases(((h, w),))
    got = np.full(want.shape, np.nan, np.float32)
    assert evaluations(s, [inp, out], ins + [got], "blur_x") == (h + 2) * w
    np.testing.assert_allclose(got, want, rtol=1e-5)
    # compute_at alone recomputes three rows per row of out
    s2 = tl.create_schedule(out)
    s2[bx].compute_at(s2[out], out.op.axis[0])
    assert tl.analyze(s2, [inp, out], sizes={"h": h, "w": w}).stage("blur_x").iterations \
        == 3 * h * w


def test_store_root_buffer_holds_every_row_and_store_at_one_tile():
    s, inp, bx, out = sliding("root")
    assert tuple(map(str, allocations(tl.lower(s, [inp, out]))["blur_x"])) == ("h + 2", "w")
    s, inp, bx, out = sliding("yo", 4)
    low = tl.lower(s, [inp, out])
    assert tuple(map(str, allocations(low)["blur_x"])) == ("6", "w")
    rep = tl.analyze(s, [inp, out], sizes={"h": 10, "w": 3})
    # tiles of 4, 4 and 2 rows: each computes its 2 rows of halo again, never a row twice
    assert rep.stage("blur_x").iterations == (6 + 6 + 4) * 3
    assert rep.buffer("blur_x").footprint == (6 + 6 + 4) * 3
    assert rep.buffer("blur_x").store_iterations == 3


def test_store_at_the_compute_loop_is_compute_at():
    inp, bx, out = lesson08()
    s = tl.create_schedule(out)
    y = out.op.axis[0]
    s[bx].compute_at(s[out], y)
    plain = str(tl.lower(s, [inp, out]))
    s[bx].store_at(s[out], y)
    assert str(tl.lower(s, [inp, out])) == plain


def test_non_monotone_footprint_recomputes(capsys, monkeypatch):
    """Tiles of x inside rows: the footprint's columns go back at each row, so the window
    does not slide; each tile computes its footprint (and TL_DEBUG=1 says why)."""
    inp, bx, out = lesson08()
    s = tl.create_schedule(out)
    y, x = out.op.axis
    xo, xi = s[out].split(x, factor=4)
    s[bx].store_root()
    monkeypatch.setenv("TL_DEBUG", "1")
    s[bx].compute_at(s[out], xo)
    assert "does not advance monotonically" in capsys.readouterr().err
    monkeypatch.delenv("TL_DEBUG")
    rep = tl.analyze(s, [inp, out], sizes={"h": 3, "w": 8})
    assert rep.stage("blur_x").iterations == 3 * 3 * 8
    assert_computes(s, [inp, out], lesson08_cases(((1, 1), (3, 8), (6, 9))), llvm=False)


def test_parallel_between_store_and_compute_is_refused():
    s, inp, bx, out = sliding("root", 4)
    yo = s[out].leaf_iter_vars[0]
    w = assert_refused_with_witness(s, lambda: s[out].parallel(yo), "store_at", "blur_x")
    # two tiles of rows whose windows share rows of blur_x: the earlier computes them
    a, b = w.source, w.sink
    assert a["y.outer"] < b["y.outer"]
    first = [4 * p["y.outer"] + p["y.inner"] for p in (a, b)]     # rows y .. y + 2
    assert abs(first[0] - first[1]) <= 2


def test_parallel_outside_the_store_level_is_legal():
    s, inp, bx, out = sliding("yo", 4)
    s[out].parallel(s[out].leaf_iter_vars[0])
    assert_computes(s, [inp, out], lesson08_cases())


def test_store_at_misuse():
    inp, bx, out = lesson08()
    s = tl.create_schedule(out)
    y, x = out.op.axis
    with pytest.raises(tl.ScheduleError, match="output"):
        s[out].store_root()
    s[bx].compute_at(s[out], y)
    with pytest.raises(tl.ScheduleError, match="encloses"):
        s[bx].store_at(s[out], x)                   # inside the compute loop
    assert s[bx].state.store is None
    s2 = tl.create_schedule(out)
    s2[bx].store_at(s2[out], y)                      # compute_at missing
    with pytest.raises(tl.ScheduleError, match="computed at root"):
        tl.lower(s2, [inp, out])


def test_store_at_replays():
    s, inp, bx, out = sliding("yo", 4)
    s[bx].fold_storage(bx.op.axis[0], 3)

    def make():
        i, _b, o = lesson08()
        return i, o

    assert_replays(s, [inp, out], make)


def test_compute_root_after_store_at_stores_at_root():
    s, inp, bx, out = sliding("yo", 4)
    s[bx].compute_root()
    assert s[bx].state.store is None
    assert_computes(s, [inp, out], lesson08_cases(((2, 3), (9, 4))), llvm=False)
