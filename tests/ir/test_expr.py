"""The scalar IR: promotion, structural equality, printing, the simplifier's rules."""

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from tensorlang.ir import Buffer, Const, Load, Var, simplify
from tensorlang.ir.dtype import float32, int8, int32, int64, promote
from tensorlang.ir.simplify import rule_add_zero, rule_fold_consts, rule_mul_one


def test_structural_equality_and_hashing():
    i, j = Var("i"), Var("j")
    assert bool(i + 1 == Var("i") + 1)
    assert not bool(i + 1 == j + 1)
    d = {i * 2: "x"}
    assert d[Var("i") * 2] == "x"


def test_printer_precedence():
    i, j = Var("i"), Var("j")
    assert str((i + j) * 2) == "(i + j) * 2"
    assert str(i - (j - 1)) == "i - (j - 1)"
    assert str(i // 4 % 3) == "i // 4 % 3"
    A = Buffer("A", (Const(4, int32),), float32)
    assert str(Load(A, (i,)) * 2.0) == "A[i] * 2.0"


def test_promotion_follows_numpy():
    for a, b in [("int8", "uint8"), ("int32", "float32"), ("float16", "int16"),
                 ("int64", "float32"), ("bool", "int8")]:
        from tensorlang.ir.dtype import as_dtype

        assert promote(as_dtype(a), as_dtype(b)).name == np.result_type(a, b).name


def test_rules_each_match_what_they_say():
    i = Var("i")
    assert rule_add_zero(i + 0) is i
    assert rule_mul_one(i * 1) is i
    assert rule_mul_one(Var("x", float32) * 0.0) is None  # x * 0 is not 0 for NaN/inf floats
    assert rule_fold_consts(Const(7, int32) // Const(-2, int32)).value == -4
    assert rule_fold_consts(Const(127, int8) + Const(1, int8)).value == -128


def test_simplify_folds_index_arithmetic():
    i = Var("i", int64)
    assert str(simplify(i + 1 - 1)) == "i"
    assert str(simplify((i * 2 + 3) + 4)) == "i * 2 + 7"
    assert str(simplify(i - 1 + 1)) == "i"


@given(st.integers(-1000, 1000), st.integers(-1000, 1000),
       st.sampled_from(["add", "sub", "mul", "floordiv", "mod"]))
def test_constant_folding_matches_python_semantics(a, b, op):
    x, y = Const(a, int64), Const(b, int64)
    e = {"add": x + y, "sub": x - y, "mul": x * y, "floordiv": x // y, "mod": x % y}[op]
    want = {"add": a + b, "sub": a - b, "mul": a * b,
            "floordiv": a // b if b else 0, "mod": a % b if b else 0}[op]
    assert simplify(e).value == want


def test_modulo_and_quotient_drop_multiples_of_the_divisor():
    i, j = Var("i", int64), Var("j", int64)
    tile = (i * 32 + j - ((i * 6 + 6) // 7) * 32) % 32   # a fused loop's tile position
    assert str(simplify(tile)) == "j % 32"
    assert str(simplify((i * 64 + j + 70) // 32)) == "i * 2 + 2 + (j + 6) // 32"
    assert simplify((i * 64) % 32).value == 0
    assert str(simplify((i * 3 + j) % 32)) == "(i * 3 + j) % 32"     # nothing to drop


@given(st.integers(-500, 500), st.integers(-500, 500), st.integers(-40, 40),
       st.integers(-40, 40), st.integers(-100, 100), st.integers(1, 40),
       st.sampled_from(["floordiv", "mod"]))
def test_dropping_multiples_keeps_python_floor_semantics(a, b, ca, cb, k, m, op):
    """(ca * i + cb * (j // 3) + k) // m and % m, simplified, evaluated at i = a, j = b."""
    i, j = Var("i", int64), Var("j", int64)
    x = i * ca + (j // 3) * cb + k
    e = x // m if op == "floordiv" else x % m
    got = simplify(e)
    val = ca * a + cb * (b // 3) + k
    want = val // m if op == "floordiv" else val % m

    def ev(t):
        from tensorlang.ir.expr import Add, FloorDiv, FloorMod, Mul, Sub
        if isinstance(t, Const):
            return int(t.value)
        if isinstance(t, Var):
            return {"i": a, "j": b}[t.name]
        f = {Add: lambda p, q: p + q, Sub: lambda p, q: p - q, Mul: lambda p, q: p * q,
             FloorDiv: lambda p, q: p // q, FloorMod: lambda p, q: p % q}[type(t)]
        return f(ev(t.a), ev(t.b))
    assert ev(got) == want, (e, got)


def test_hoisted_tile_guards_leave_the_full_tile_loop_without_tests():
    """A k loop around an unrolled tile of 4 vectors, each tested for being whole
    (`min(16, n - j * 16) == 16`): the conjunction of the 4 tests is tested once outside,
    the loop under it has no test, and the loop as it was runs otherwise."""
    from tensorlang.ir.expr import EQ, Min, compare
    from tensorlang.ir.stmt import Buffer, For, If, LoopKind, Store
    from tensorlang.ir.unswitch import hoist_tile_guards
    from tensorlang.ir.visit import walk_stmt

    jo, j, k, n = (Var(v, int64) for v in ("jo", "j", "k", "n"))
    buf = Buffer("acc", (Const(64, int64),), float32)
    full = compare(EQ, Min(Const(16, int64), n - j * 16), Const(16, int64))
    tile = For(j, jo * 4, Const(4, int64), If(full, Store(buf, (j * 16 - jo * 64,), 1.0),
                                               Store(buf, (Const(0, int64),), 2.0)),
               LoopKind.UNROLLED)
    loop = For(k, Const(0, int64), n, tile, LoopKind.SERIAL)
    out = hoist_tile_guards(loop)
    assert isinstance(out, If) and out.else_body is loop
    assert not any(isinstance(x, If) for x in walk_stmt(out.then_body))
    assert "jo * 4 + 3" in str(out.cond) and "k" not in str(out.cond).replace("jo", "")
    # a test that changes with k stays where it is
    inner = For(k, Const(0, int64), n, For(j, jo * 4, Const(4, int64), If(
        compare(EQ, k + j, n), Store(buf, (Const(0, int64),), 1.0)), LoopKind.UNROLLED),
        LoopKind.SERIAL)
    assert hoist_tile_guards(inner) is not None and \
        not isinstance(hoist_tile_guards(inner), If)
