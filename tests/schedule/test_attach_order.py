"""The order of compute_at calls (a TVM user's habit): TVM's three-stage softmax attached in
every order gives the same kernel, or a refusal that names the call to make first — and
making that call, then retrying, gives the same kernel."""

import itertools
import re

import numpy as np
import pytest

import tensorlang as te


def softmax(m, n):
    X = te.placeholder((m, n), name="X")
    k, k2 = te.reduce_axis((0, n), "k"), te.reduce_axis((0, n), "k2")
    Xmax = te.compute((m,), lambda i: te.max(X[i, k], axis=k), name="Xmax")
    E = te.compute((m, n), lambda i, j: te.exp(X[i, j] - Xmax[i]), name="E")
    S = te.compute((m,), lambda i: te.sum(E[i, k2], axis=k2), name="S")
    Y = te.compute((m, n), lambda i, j: E[i, j] / S[i], name="Y")
    return X, {"Xmax": Xmax, "E": E, "S": S}, Y


def attach_in_order(order, m=5, n=13):
    X, stages, Y = softmax(m, n)
    s = te.create_schedule(Y.op)
    todo, suggested = list(order), []
    while todo:
        assert len(suggested) < 10
        name = todo.pop(0)
        if s[name].state.attach is not None:
            continue
        try:
            if name in order:
                s[stages[name]].compute_at(s[Y], Y.op.axis[0])
            else:
                raise AssertionError(f"suggested a stage outside the plan: {name}")
        except te.ScheduleError as e:
            call = re.search(r"s\['(\w+)'\]\.compute_at\(s\['Y'\], 'i'\)", str(e))
            assert call, str(e)              # the refusal names the call to make first
            suggested.append(call.group(0))
            todo[:0] = [call.group(1), name]   # that call first, then this one again
    return s, X, Y, suggested


def test_every_attachment_order_of_softmax_gives_the_same_kernel():
    nests, refused = set(), 0
    for order in itertools.permutations(["Xmax", "E", "S"]):
        s, X, Y, suggested = attach_in_order(order)
        refused += bool(suggested)
        nests.add(str(te.lower(s, [X, Y])))
        f = te.build(s, [X, Y])
        x = np.random.default_rng(0).standard_normal((5, 13)).astype("f4")
        y = np.zeros_like(x)
        f(x, y)
        e = np.exp(x - x.max(1, keepdims=True))
        np.testing.assert_allclose(y, e / e.sum(1, keepdims=True), rtol=1e-5, atol=1e-7)
    assert len(nests) == 1
    assert refused >= 2         # Xmax before E: the orders that needed the named call


def test_the_refusal_names_the_reader_to_attach_first():
    X, stages, Y = softmax(4, 6)
    s = te.create_schedule(Y.op)
    with pytest.raises(te.ScheduleError, match=r"E reads it .* s\['E'\]\.compute_at") as e:
        s[stages["Xmax"]].compute_at(s[Y], Y.op.axis[0])
    s[stages["S"]].compute_at(s[Y], Y.op.axis[0])
    call = re.search(r"s\['E'\]\.compute_at\(s\['Y'\], 'i'\)", str(e.value)).group(0)
    exec(call, {"s": s})                         # the named call, as written, works
    s[stages["Xmax"]].compute_at(s[Y], Y.op.axis[0])
    assert all(s[n].state.attach is not None for n in ("Xmax", "E", "S"))
