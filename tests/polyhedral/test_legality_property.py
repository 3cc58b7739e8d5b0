"""The legality checker against brute force on tiny domains.

A random 2-D recurrence u[i, j] = sum_k c_k * u[i - a_k, j - b_k] + x[i, j] (each offset
lexicographically positive, reads guarded by the bounds) gets a random sequence of split,
reorder, skew, fuse and parallel. After every primitive, the checker's verdict must equal
brute force: the schedule, applied *without* the check, is run in the IR interpreter (its
parallel loops forwards and backwards) on several random inputs with the output preset to
NaN, and is legal exactly when every run equals the declared order's result.

Examples: 1,000 in CI; `pytest ... --legality-examples=20000` runs more.
"""

import pytest
import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tensorlang as tl
from tensorlang.ir.interp import run_lowered
from tensorlang.ir.stmt import LoopKind
from tensorlang.polyhedral import transform as T

OFFSETS = [(0, 1), (0, 2), (1, 0), (1, 1), (1, -1), (1, 2), (1, -2), (2, 0), (2, -1), (2, 1)]


def recurrence(n, m, offsets, coeffs):
    x = tl.placeholder((n, m), dtype="float64", name="x")

    def body(u, i, j):
        out = x[i, j]
        for (a, b), c in zip(offsets, coeffs):
            ok = (i >= a) & (j >= b) & (j < m + b)
            out = out + tl.if_then_else(ok, c * u[i - a, j - b], 0.0)
        return out
    return x, tl.recurrence((n, m), body, dtype="float64", name="u")


def run(s, x, u, xs, order):
    f = tl.lower(s, [x, u])
    outs = []
    for xv in xs:
        out = np.full(xv.shape, np.nan)
        run_lowered(f, [xv, out], parallel_order=order)
        outs.append(out)
    return outs


def same(a, b):
    return all(np.array_equal(p, q, equal_nan=True) for p, q in zip(a, b))


def unchecked(state, prim, args):
    if prim == "split":
        return T.split_dim(state, args[0], args[1])
    if prim == "reorder":
        return T.reorder_dims(state, args)
    if prim == "skew":
        return T.skew_dims(state, args[0], args[1], args[2])
    if prim == "fuse":
        return T.fuse_dims(state, args[0], args[1])
    return T.tag_dim(state, args[0], LoopKind.PARALLEL)


@pytest.mark.slow
def test_checker_equals_brute_force(request):
    examples = request.config.getoption("--legality-examples")
    settings(max_examples=examples, deadline=None, database=None, print_blob=True,
             suppress_health_check=[HealthCheck.too_slow])(given(st.data())(check_one))()


def check_one(data):
    n = data.draw(st.integers(1, 5), label="n")
    m = data.draw(st.integers(1, 5), label="m")
    k = data.draw(st.integers(1, 3), label="reads")
    offsets = data.draw(st.lists(st.sampled_from(OFFSETS), min_size=k, max_size=k, unique=True),
                        label="offsets")
    coeffs = data.draw(st.lists(st.sampled_from([1.0, 2.0, -1.0, 0.5]), min_size=k,
                                max_size=k), label="coeffs")
    x, u = recurrence(n, m, offsets, coeffs)
    s = tl.create_schedule(u)
    rng = np.random.default_rng(0)
    xs = [rng.integers(-3, 4, (n, m)).astype(np.float64) for _ in range(2)]
    expected = run(s, x, u, xs, "forward")
    stage = s[u]
    for _ in range(data.draw(st.integers(1, 4), label="steps")):
        loops = stage.loops
        prim = data.draw(st.sampled_from(["split", "reorder", "skew", "fuse", "parallel"]))
        if prim == "split":
            args = [data.draw(st.sampled_from(loops)), data.draw(st.integers(1, 4))]
        elif prim == "reorder":
            args = data.draw(st.permutations(loops))
        elif prim in ("skew", "fuse"):
            if len(loops) < 2:
                continue
            d = data.draw(st.integers(0, len(loops) - 2))
            args = [loops[d], loops[d + 1]]
            if prim == "skew":
                args.append(data.draw(st.sampled_from([1, -1, 2])))
        else:
            args = [data.draw(st.sampled_from(loops))]
        try:
            candidate = unchecked(stage.state, prim, args)
        except (NotImplementedError, tl.ScheduleError):
            continue  # not expressible (fuse of a symbolic range): no verdict to compare
        saved = stage.state
        try:
            if prim == "split":
                stage.split(args[0], factor=args[1])
            elif prim == "skew":
                stage.skew(args[0], args[1], factor=args[2])
            else:
                getattr(stage, prim)(*args)
            verdict = True
        except tl.IllegalScheduleError:
            verdict = False
        stage.state = candidate
        got = run(s, x, u, xs, "forward") + run(s, x, u, xs, "reverse")
        brute = same(got, expected + expected)
        assert verdict == brute, (prim, args, saved.trace, offsets)
        if not verdict:
            stage.state = saved
