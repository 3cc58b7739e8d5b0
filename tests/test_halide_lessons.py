"""Halide lesson 09 (update definitions), the parts that tests/test_update.py does not port:
an update inside a loop over a pure variable, scheduling update steps, updates in
producer-consumer pairs (cases 1-5 of the lesson, with the loop nest Halide's C shows), the
5x5 box sum as an update, the reduction helpers, and the local spread with its clamped input
stored per strip (`store_at(spread, yo).compute_at(spread, yi)`). Each result against numpy
or the lesson's C loops, written here in Python.

Already ported elsewhere, not repeated: the histogram, the running maximum, the prefix sum
and the lesson's first chain of update definitions (tests/test_update.py); lesson 08's
sliding window (tests/schedule/primitives/test_store_at.py, test_fold_storage.py)."""

from __future__ import annotations

import numpy as np
import pytest

import tensorlang as tl


def run(s, args, arrays):
    tl.build(s, args)(*arrays)


# ------------------------------------------------------------ update passes in loops
def test_update_inside_a_loop_over_a_pure_variable():
    """f(x, y) = (x + y) / 100; RDom r(0, 50); f(x, r) = f(x, r) * f(x, r): the reduction
    loop runs inside the loop over the pure variable x."""
    f = tl.compute((100, 100), lambda x, y: (x + y).astype("float32") / 100.0, name="f")
    ux, r = tl.reduce_axis(100, "ux"), tl.reduce_axis(50, "r")
    g = tl.update(f, [ux, r], index=lambda x, r: (x, r), value=lambda old, x, r: old * old,
                  name="g")
    s = tl.create_schedule(g)
    text = str(tl.lower(s, [g]))
    assert text.index("for ux in range(100)") < text.index("for r in range(50)")
    out = np.zeros((100, 100), "float32")
    run(s, [g], [out])
    ref = np.add.outer(np.arange(100), np.arange(100)).astype("float32") / 100
    ref[:, :50] = ref[:, :50] * ref[:, :50]
    np.testing.assert_allclose(out, ref, rtol=1e-6)


def test_scheduling_update_steps():
    """f(x, y) = x * y; f(x, 0) = f(x, 8); f(0, y) = f(8, y) + 2; the pure step vectorised
    in x and parallel in y, the first update vectorised in x, the second split by 4 with
    its outer loop parallel."""
    f = tl.compute((16, 16), lambda x, y: x * y, name="f")
    ux = tl.reduce_axis(16, "ux")
    f1 = tl.update(f, [ux], index=lambda x: (x, 0), value=lambda old, x: f[x, 8], name="f1")
    uy = tl.reduce_axis(16, "uy")
    f2 = tl.update(f1, [uy], index=lambda y: (0, y), value=lambda old, y: f1[8, y] + 2,
                   name="f2")
    s = tl.create_schedule(f2)
    pure = s[f1.op.init]
    x, y = f1.op.init.op.axis
    xo, xi = pure.split(x, factor=4)
    pure.reorder(y, xo, xi)
    pure.parallel(y)
    pure.vectorize(xi)
    _, uxi = s[f1].split(ux, factor=4)
    s[f1].vectorize(uxi)
    uyo, _ = s[f2].split(uy, factor=4)
    s[f2].parallel(uyo)
    out = np.zeros((16, 16), "int32")
    run(s, [f2], [out])
    c = np.multiply.outer(np.arange(16), np.arange(16)).astype("int32")   # c[x, y]
    c[:, 0] = c[:, 8]
    c[0, :] = c[8, :] + 2
    np.testing.assert_array_equal(out, c)


# ----------------------------------------------------- updates as producers and consumers
def test_a_producer_with_an_update_is_computed_before_its_consumer():
    """producer(x) = x * 2; producer(x) += 10; consumer(x) = 2 * producer(x). Halide
    computes the producer innermost in the consumer; tensorlang keeps an update's buffer
    whole (compute_at refused) and computes it at root: the same values."""
    p0 = tl.compute((10,), lambda x: x * 2, name="p0")
    ux = tl.reduce_axis(10, "ux")
    producer = tl.update(p0, [ux], index=lambda x: x, value=lambda old, x: old + 10,
                         name="producer")
    consumer = tl.compute((10,), lambda x: 2 * producer[x], name="consumer")
    s = tl.create_schedule(consumer)
    with pytest.raises(tl.ScheduleError, match="update stage"):
        s[producer].compute_at(s[consumer], consumer.op.axis[0])
    out = np.zeros(10, "int32")
    run(s, [consumer], [out])
    np.testing.assert_array_equal(out, 2 * (np.arange(10) * 2 + 10))


def _one_element_producer_in(text: str, loop: str) -> bool:
    """The producer is allocated as one element inside `loop` (Halide's producer_storage[1])."""
    after = text[text.index(f"for {loop} in range"):]
    return "producer = allocate(int32, [1], 'local')" in after.split("\n  for ")[0]


def test_case1_the_consumer_reads_the_producer_in_its_pure_step_only():
    producer = tl.compute((10,), lambda x: x * 17, name="producer")
    c0 = tl.compute((10,), lambda x: 2 * producer[x], name="c0")
    ux = tl.reduce_axis(10, "ux")
    consumer = tl.update(c0, [ux], index=lambda x: x, value=lambda old, x: old + 50,
                         name="consumer")
    s = tl.create_schedule(consumer)
    pure = consumer.op.init
    s[producer].compute_at(s[pure], pure.op.axis[0])
    text = str(tl.lower(s, [consumer]))
    assert _one_element_producer_in(text, "x")
    assert "for ux in range(10)" in text                 # the update: its own loop over x
    out = np.zeros(10, "int32")
    run(s, [consumer], [out])
    np.testing.assert_array_equal(out, 2 * np.arange(10) * 17 + 50)


def test_case2_the_consumer_reads_the_producer_in_its_update_only():
    producer = tl.compute((10,), lambda x: x * 17, name="producer")
    c0 = tl.compute((10,), lambda x: 100 - x * 10, name="c0")
    ux = tl.reduce_axis(10, "ux")
    consumer = tl.update(c0, [ux], index=lambda x: x, value=lambda old, x: old + producer[x],
                         name="consumer")
    s = tl.create_schedule(consumer)
    s[producer].compute_at(s[consumer], ux)
    assert _one_element_producer_in(str(tl.lower(s, [consumer])), "ux")
    out = np.zeros(10, "int32")
    run(s, [consumer], [out])
    np.testing.assert_array_equal(out, 100 - np.arange(10) * 10 + np.arange(10) * 17)


def test_case3_both_steps_read_the_producer():
    """Halide computes the producer twice, once in each step's loop. One stage has one
    place in tensorlang: compute_at in the update's loop is refused (the pure step reads
    it outside that loop); two copies of the producer, one per step, are Halide's nest."""
    producer = tl.compute((10,), lambda x: x * 17, name="producer")
    c0 = tl.compute((10,), lambda x: 170 - producer[x], name="c0")
    ux = tl.reduce_axis(10, "ux")
    consumer = tl.update(c0, [ux], index=lambda x: x,
                         value=lambda old, x: old + producer[x] // 2, name="consumer")
    s = tl.create_schedule(consumer)
    with pytest.raises(tl.IllegalScheduleError, match="outside consumer's loop ux"):
        s[producer].compute_at(s[consumer], ux)
    want = 170 - np.arange(10) * 17 + np.arange(10) * 17 // 2
    out = np.zeros(10, "int32")
    run(s, [consumer], [out])                            # at root: the same values
    np.testing.assert_array_equal(out, want)

    p1 = tl.compute((10,), lambda x: x * 17, name="producer_1")
    p2 = tl.compute((10,), lambda x: x * 17, name="producer_2")
    c0 = tl.compute((10,), lambda x: 170 - p1[x], name="c0")
    ux = tl.reduce_axis(10, "ux")
    consumer = tl.update(c0, [ux], index=lambda x: x, value=lambda old, x: old + p2[x] // 2,
                         name="consumer")
    s = tl.create_schedule(consumer)
    pure = consumer.op.init
    s[p1].compute_at(s[pure], pure.op.axis[0])
    s[p2].compute_at(s[consumer], ux)
    text = str(tl.lower(s, [consumer]))
    assert "producer_1 = allocate(int32, [1], 'local')" in text
    assert "producer_2 = allocate(int32, [1], 'local')" in text
    out = np.zeros(10, "int32")
    run(s, [consumer], [out])
    np.testing.assert_array_equal(out, want)


def test_case4_two_updates_read_the_producer_through_wrappers():
    """consumer(x, y) = x + y; consumer(x, 0) += producer(x, x); consumer(0, y) +=
    producer(y, 9 - y), with producer_1 and producer_2 (wrappers) computed in each
    update's loop."""
    producer = tl.compute((10, 10), lambda x, y: (x * y) // 10 + 8, name="producer")
    p1 = tl.compute((10, 10), lambda x, y: producer[x, y], name="producer_1")
    p2 = tl.compute((10, 10), lambda x, y: producer[x, y], name="producer_2")
    c = tl.compute((10, 10), lambda x, y: x + y, name="c")
    ux = tl.reduce_axis(10, "ux")
    c1 = tl.update(c, [ux], index=lambda x: (x, 0), value=lambda old, x: old + p1[x, x],
                   name="c1")
    uy = tl.reduce_axis(10, "uy")
    c2 = tl.update(c1, [uy], index=lambda y: (0, y),
                   value=lambda old, y: old + p2[y, 9 - y], name="c2")
    s = tl.create_schedule(c2)
    s[producer].compute_inline()
    s[p1].compute_at(s[c1], ux)
    s[p2].compute_at(s[c2], uy)
    text = str(tl.lower(s, [c2]))
    assert "producer_1 = allocate(int32, [1, 1], 'local')" in text
    assert "producer_2 = allocate(int32, [1, 1], 'local')" in text
    out = np.zeros((10, 10), "int32")
    run(s, [c2], [out])
    r = np.add.outer(np.arange(10), np.arange(10))                       # r[x, y]
    x = np.arange(10)
    r[:, 0] += (x * x) // 10 + 8
    r[0, :] += (x * (9 - x)) // 10 + 8
    np.testing.assert_array_equal(out, r)


def test_case5_a_producer_computed_under_a_reduction_variable():
    """RDom r(0, 5); producer(x) = x % 8; consumer(x) = x + 10; consumer(x) += r +
    producer(x + r); producer.compute_at(consumer, r): one value per (x, r)."""
    producer = tl.compute((14,), lambda x: x % 8, name="producer")
    c0 = tl.compute((10,), lambda x: x + 10, name="c0")
    ux, r = tl.reduce_axis(10, "ux"), tl.reduce_axis(5, "r")
    consumer = tl.update(c0, [ux, r], index=lambda x, r: x,
                         value=lambda old, x, r: old + r + producer[x + r], name="consumer")
    s = tl.create_schedule(consumer)
    s[producer].compute_at(s[consumer], r)
    assert _one_element_producer_in(str(tl.lower(s, [consumer])), "r")
    out = np.zeros(10, "int32")
    run(s, [consumer], [out])
    x, rr = np.arange(10)[:, None], np.arange(5)[None, :]
    np.testing.assert_array_equal(out, np.arange(10) + 10 + (rr + (x + rr) % 8).sum(1))


# --------------------------------------------------- a reduction in a producer-consumer chain
def _clamped(inp, h, w, pad=2):
    """Halide's repeat_edge, materialised with a border of `pad`: clamped[y, x] =
    input[clamp(y - pad), clamp(x - pad)]."""
    return tl.compute((h + 2 * pad, w + 2 * pad), lambda y, x: inp[
        tl.min(tl.max(y - pad, 0), h - 1), tl.min(tl.max(x - pad, 0), w - 1)], name="clamped")


def test_box_sum_as_an_update_with_a_clamped_input():
    """local_sum(x, y) = 0; local_sum(x, y) += clamped(x + r.x, y + r.y) over RDom r(-2, 5,
    -2, 5); blurry = local_sum / 25 — the update over the pure variables and the box."""
    h, w = 23, 19
    inp = tl.placeholder((h, w), dtype="int32", name="input")
    clamped = _clamped(inp, h, w)
    zero = tl.compute((h, w), lambda y, x: 0, name="zero")
    uy, ux = tl.reduce_axis(h, "uy"), tl.reduce_axis(w, "ux")
    ry, rx = tl.reduce_axis(5, "ry"), tl.reduce_axis(5, "rx")
    local_sum = tl.update(zero, [uy, ux, ry, rx], index=lambda y, x, ry, rx: (y, x),
                          value=lambda old, y, x, ry, rx: old + clamped[y + ry, x + rx],
                          name="local_sum")
    blurry = tl.compute((h, w), lambda y, x: local_sum[y, x] // 25, name="blurry")
    s = tl.create_schedule(blurry)
    s[clamped].compute_inline()                  # Halide's default: inlined into the update
    a = np.random.default_rng(9).integers(0, 256, (h, w), dtype="int32")
    out = np.zeros((h, w), "int32")
    run(s, [inp, blurry], [a, out])
    p = np.pad(a, 2, mode="edge")
    box = sum(p[dy:dy + h, dx:dx + w] for dy in range(5) for dx in range(5))
    np.testing.assert_array_equal(out, box // 25)


def test_reduction_helper_sum_equals_its_anonymous_update():
    """f1(x) = sum(r + x) * 7 over RDom r(0, 100) is f2(x) = anon(x) * 7 with anon(x) = 0;
    anon(x) += r + x. tensorlang's tl.sum is a stage of its own (Halide's anonymous Func),
    computed innermost in its consumer as Halide's helpers are."""
    r = tl.reduce_axis(100, "r")
    total = tl.compute((10,), lambda x: tl.sum(r + x, axis=r), name="sum")
    f1 = tl.compute((10,), lambda x: total[x] * 7, name="f1")
    anon0 = tl.compute((10,), lambda x: 0, name="anon0")
    ux, r2 = tl.reduce_axis(10, "ux"), tl.reduce_axis(100, "r2")
    anon = tl.update(anon0, [ux, r2], index=lambda x, r: x, value=lambda old, x, r: old + r + x,
                     name="anon")
    f2 = tl.compute((10,), lambda x: anon[x] * 7, name="f2")
    want = (np.arange(100)[None, :] + np.arange(10)[:, None]).sum(1) * 7
    s1 = tl.create_schedule(f1)
    s1[total].compute_at(s1[f1], f1.op.axis[0])
    for s, f in ((s1, f1), (tl.create_schedule(f2), f2)):
        out = np.zeros(10, f.dtype)
        run(s, [f], [out])
        np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("h,w", [(37, 40), (64, 33)])
def test_local_spread_with_the_clamped_input_stored_per_strip(h, w):
    """spread(x, y) = maximum(clamped(x + box)) - minimum(clamped(x + box)) over a 5x5 box;
    spread.split(y, yo, yi, 32).parallel(yo).vectorize(x, 16);
    clamped.store_at(spread, yo).compute_at(spread, yi): each strip computes the rows of
    clamped it needs once (a sliding window inside each parallel strip)."""
    inp = tl.placeholder((h, w), dtype="int32", name="input")
    clamped = _clamped(inp, h, w)
    by, bx = tl.reduce_axis(5, "by"), tl.reduce_axis(5, "bx")
    mx = tl.compute((h, w), lambda y, x: tl.max(clamped[y + by, x + bx], axis=[by, bx]),
                    name="maximum")
    by2, bx2 = tl.reduce_axis(5, "by2"), tl.reduce_axis(5, "bx2")
    mn = tl.compute((h, w), lambda y, x: tl.min(clamped[y + by2, x + bx2], axis=[by2, bx2]),
                    name="minimum")
    spread = tl.compute((h, w), lambda y, x: mx[y, x] - mn[y, x], name="spread")
    s = tl.create_schedule(spread)
    y, x = spread.op.axis
    yo, yi = s[spread].split(y, factor=32)
    s[spread].parallel(yo)
    xo, xi = s[spread].split(x, factor=16)
    s[spread].vectorize(xi)
    for helper in (mx, mn):                    # Halide's helpers: innermost in their consumer
        s[helper].compute_at(s[spread], xo)
    s[clamped].store_at(s[spread], yo)
    s[clamped].compute_at(s[spread], yi)
    rep = tl.analyze(s, [inp, spread], sizes={})
    strips = -(-h // 32)
    # each strip computes its rows once: h + 4 rows, plus 4 rows of overlap per extra strip
    assert rep.stage("clamped").iterations == (h + 4 + 4 * (strips - 1)) * (w + 4)
    a = np.random.default_rng(h).integers(0, 256, (h, w), dtype="int32")
    out = np.zeros((h, w), "int32")
    run(s, [inp, spread], [a, out])
    p = np.pad(a, 2, mode="edge")
    win = np.stack([p[dy:dy + h, dx:dx + w] for dy in range(5) for dx in range(5)])
    np.testing.assert_array_equal(out, win.max(0) - win.min(0))
