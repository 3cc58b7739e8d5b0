"""The simplifier: a table of small rules, each one `match`; applied bottom-up to a fixpoint.

Rules never change a result: float rules are only those exact in IEEE arithmetic (x * 1,
x + (-0.0)); integer folding wraps like the machine does.
"""

from __future__ import annotations

import math

import numpy as np

from .dtype import DType
from .expr import (
    EQ, GE, GT, LE, LT, NE, Add, And, BinaryOp, CmpOp, Const, Div, Expr, FloorDiv, FloorMod,
    Max, Min, Mul, Not, Or, Select, Sub, structural_key,
)
from .stmt import Stmt
from .visit import map_expr, map_stmt


def _wrap(v: int, d: DType) -> int:
    if d.is_bool:
        return int(bool(v))
    bits = d.bits
    v &= (1 << bits) - 1
    if not d.is_unsigned and v >= 1 << (bits - 1):
        v -= 1 << bits
    return v


def _fold_int(op: type, a: int, b: int) -> int | None:
    if op is Add:
        return a + b
    if op is Sub:
        return a - b
    if op is Mul:
        return a * b
    if op is FloorDiv:
        return 0 if b == 0 else a // b
    if op is FloorMod:
        return 0 if b == 0 else a % b
    if op is Min:
        return min(a, b)
    if op is Max:
        return max(a, b)
    return None


_NP_OPS = {Add: np.add, Sub: np.subtract, Mul: np.multiply, Div: np.divide,
           FloorDiv: np.floor_divide, FloorMod: np.mod, Min: np.minimum, Max: np.maximum}
_CMP = {LT: lambda a, b: a < b, LE: lambda a, b: a <= b, GT: lambda a, b: a > b,
        GE: lambda a, b: a >= b, EQ: lambda a, b: a == b, NE: lambda a, b: a != b}


def rule_fold_consts(e: Expr) -> Expr | None:
    match e:
        case BinaryOp(Const(a), Const(b)) if e.dtype.lanes == 1:
            d = e.dtype
            if d.is_float:
                with np.errstate(all="ignore"):
                    v = _NP_OPS[type(e)](np.array(a, d.np), np.array(b, d.np))
                return Const(float(v), d)
            v = _fold_int(type(e), int(a), int(b))
            return None if v is None else Const(_wrap(v, d), d)
        case CmpOp(Const(a), Const(b)):
            return Const(_CMP[type(e)](a, b), e.dtype)
        case Not(Const(a)):
            return Const(not a, e.dtype)
    return None


def rule_add_zero(e: Expr) -> Expr | None:
    match e:
        case Add(x, Const(0)) | Add(Const(0), x) if not e.dtype.is_float:
            return x
        case Sub(x, Const(0)) if not e.dtype.is_float:
            return x
        case Add(x, Const(c)) | Add(Const(c), x) if e.dtype.is_float and c == 0 and \
                math.copysign(1.0, c) < 0:
            return x  # x + (-0.0) == x for every x, including -0.0
    return None


def rule_mul_one(e: Expr) -> Expr | None:
    match e:
        case Mul(x, Const(1)) | Mul(Const(1), x):
            return x
        case Mul(_, Const(0)) | Mul(Const(0), _) if not e.dtype.is_float:
            return Const(0, e.dtype)
        case FloorDiv(x, Const(1)) if not e.dtype.is_float:
            return x
        case FloorMod(_, Const(1)) if not e.dtype.is_float:
            return Const(0, e.dtype)
        case Div(x, Const(1)):
            return x
    return None


def rule_reassociate_consts(e: Expr) -> Expr | None:
    """(x + a) + b -> x + (a + b) and constants to the right, for integers."""
    if e.dtype.is_float:
        return None
    match e:
        case Add(Const() as c, x) if not isinstance(x, Const):
            return Add(x, c, e.dtype)
        case Mul(Const() as c, x) if not isinstance(x, Const):
            return Mul(x, c, e.dtype)
        case Add(Add(x, Const(a)), Const(b)):
            return Add(x, Const(_wrap(a + b, e.dtype), e.dtype), e.dtype)
        case Sub(Add(x, Const(a)), Const(b)):
            return Add(x, Const(_wrap(a - b, e.dtype), e.dtype), e.dtype)
        case Add(Sub(x, Const(a)), Const(b)):
            return Add(x, Const(_wrap(b - a, e.dtype), e.dtype), e.dtype)
        case Mul(Mul(x, Const(a)), Const(b)):
            return Mul(x, Const(_wrap(a * b, e.dtype), e.dtype), e.dtype)
        case Add(x, Const(c)) if c < 0 and not e.dtype.is_unsigned and -c <= 2**62:
            return Sub(x, Const(-c, e.dtype), e.dtype)
    return None


def rule_logic(e: Expr) -> Expr | None:
    match e:
        case And(Const(True), x) | And(x, Const(True)):
            return x
        case And(Const(False), _) | And(_, Const(False)):
            return Const(False, e.dtype)
        case Or(Const(False), x) | Or(x, Const(False)):
            return x
        case Or(Const(True), _) | Or(_, Const(True)):
            return Const(True, e.dtype)
        case Not(Not(x)):
            return x
        case Select(Const(c), t, f):
            return t if c else f
    return None


def _linear_terms(e: Expr, sign: int, terms: dict, consts: list) -> int:
    """Collect sign * e into {atom key: [atom, coefficient]} and constants; returns the leaf
    count."""
    match e:
        case Add(a, b):
            return _linear_terms(a, sign, terms, consts) + _linear_terms(b, sign, terms, consts)
        case Sub(a, b):
            return _linear_terms(a, sign, terms, consts) + _linear_terms(b, -sign, terms, consts)
        case Const(c):
            consts.append(sign * int(c))
            return 1
        case Mul(Add() | Sub() as x, Const(c)) | Mul(Const(c), Add() | Sub() as x) \
                if e.dtype.is_int:      # distributed: (j*3 + 2)*16 - j*48 -> 32
            return _linear_terms(x, sign * int(c), terms, consts)
        case Mul(Mul(_, Const()) | Mul(Const(), _) as x, Const(c)) | \
                Mul(Const(c), Mul(_, Const()) | Mul(Const(), _) as x) if e.dtype.is_int:
            # a multiple of a multiple: (q*2)*16 is q*32, a like term of q*32
            return _linear_terms(x, sign * int(c), terms, consts)
        case Mul(x, Const(c)) | Mul(Const(c), x):
            k = structural_key(x)
            terms.setdefault(k, [x, 0])[1] += sign * int(c)
            return 1
    k = structural_key(e)
    terms.setdefault(k, [e, 0])[1] += sign
    return 1


def rule_linear(e: Expr) -> Expr | None:
    """Integer sums with like terms or several constants: i*2 + 4 - i*2 + 1 -> 5."""
    if not isinstance(e, (Add, Sub)) or not e.dtype.is_int or e.dtype.lanes != 1:
        return None
    terms: dict = {}
    consts: list[int] = []
    leaves = _linear_terms(e, 1, terms, consts)
    kept = [(x, c) for x, c in terms.values() if c != 0]
    const = sum(consts)
    if len(kept) + (const != 0) >= leaves:
        return None
    out = _sum_of_terms(kept, const, e.dtype)
    if _linear_terms(out, 1, {}, []) >= leaves:
        return None
    return out


def _sum_of_terms(kept: list, const: int, d) -> Expr:
    """The integer sum of `kept` ([atom, coefficient] pairs, none zero) and `const`."""
    def term(x, c):
        return x if abs(c) == 1 else Mul(x, Const(abs(c), d), d)

    pos = [term(x, c) for x, c in kept if c > 0]
    neg = [term(x, c) for x, c in kept if c < 0]
    out: Expr | None = None
    for t in pos:
        out = t if out is None else Add(out, t, d)
    if out is None and (const > 0 or not neg):
        out, const = Const(_wrap(const, d), d), 0
    for t in neg:
        out = Sub(Const(0, d), t, d) if out is None else Sub(out, t, d)
    if const:
        out = Add(out, Const(const, d), d) if const > 0 else Sub(out, Const(-const, d), d)
    return out


def rule_div_mod_pair(e: Expr) -> Expr | None:
    """a // m * (c*m) + b % m * c -> a * c in an integer sum (floor division and modulo,
    m > 0), where a - b is a multiple of m in every term: the row and column of a fused
    loop index flattened back into one offset. Exact: with a = b + m*q,
    a // m = q + b // m and b == b // m * m + b % m. It gives the vectoriser back an offset
    that moves by one per lane, where a quotient and remainder (as isl writes them, often
    of two different sums) would make a fused elementwise loop gather and scatter."""
    if not isinstance(e, (Add, Sub)) or not e.dtype.is_int or e.dtype.is_unsigned or \
            e.dtype.lanes != 1:
        return None
    terms: dict = {}
    consts: list[int] = []
    _linear_terms(e, 1, terms, consts)
    for mkey, (t, c) in terms.items():
        if not (isinstance(t, FloorMod) and isinstance(t.b, Const) and int(t.b.value) > 0
                and c != 0):
            continue
        m = int(t.b.value)
        for dkey, (u, cd) in terms.items():
            if not (isinstance(u, FloorDiv) and isinstance(u.b, Const) and
                    int(u.b.value) == m and cd == c * m and _differ_by_multiple(u.a, t.a, m)):
                continue
            terms[dkey][1] = terms[mkey][1] = 0
            _linear_terms(u.a, c, terms, consts)
            kept = [(x, k) for x, k in terms.values() if k != 0]
            return _sum_of_terms(kept, sum(consts), e.dtype)
    return None


def _differ_by_multiple(a: Expr, b: Expr, m: int) -> bool:
    """Whether the integer sums a and b differ by m times an integer sum (every term's
    coefficient and the constant of a - b a multiple of m)."""
    terms: dict = {}
    consts: list[int] = []
    _linear_terms(a, 1, terms, consts)
    _linear_terms(b, -1, terms, consts)
    return sum(consts) % m == 0 and all(k % m == 0 for _, k in terms.values())


def rule_sub_negative(e: Expr) -> Expr | None:
    """x * (-c) + y -> y - x * c and y + x * (-c) -> y - x * c on integers."""
    match e:
        case Add(Mul(x, Const(c)), y) | Add(y, Mul(x, Const(c))) if e.dtype.is_int and \
                not e.dtype.is_unsigned and c < 0 and e.dtype.lanes == 1:
            d = e.dtype
            return Sub(y, Mul(x, Const(-c, d), d), d)
    return None


def rule_min_plus_const(e: Expr) -> Expr | None:
    """min(a, b) + c -> min(a + c, b + c) on integers when a or b is a constant."""
    match e:
        case Add(Min(a, b) | Max(a, b) as m, Const(c)) if e.dtype.is_int and \
                (isinstance(a, Const) or isinstance(b, Const)):
            d = e.dtype
            return type(m)(Add(a, Const(c, d), d), Add(b, Const(c, d), d), d)
    return None


def rule_mod_multiples(e: Expr) -> Expr | None:
    """(a * m + b) % m -> b % m and (a * m + b) // m -> a + b // m on integers (floor
    division and modulo, m > 0): terms whose coefficient is a multiple of m leave the
    modulo whole and the quotient as their multiple. Exact for any integers a, b; it turns
    a tile position such as (i * 32 + j - (6 * i + 6) // 7 * 32) % 32 into j % 32, which
    LLVM then folds per lane (a position it cannot see is constant keeps a tile out of
    registers)."""
    if not isinstance(e, (FloorMod, FloorDiv)) or not e.dtype.is_int or \
            e.dtype.is_unsigned or e.dtype.lanes != 1:
        return None
    x, m = e.a, e.b
    if not isinstance(m, Const) or int(m.value) <= 0 or not isinstance(x, (Add, Sub, Mul)):
        return None
    m = int(m.value)
    terms: dict = {}
    consts: list[int] = []
    _linear_terms(x, 1, terms, consts)
    out_terms = [(t, c) for t, c in terms.values() if c != 0 and c % m == 0]
    k = sum(consts)
    if not out_terms and 0 <= k < m:
        return None
    d = e.dtype
    rest: Expr = Const(k % m, d)
    for t, c in terms.values():
        if c != 0 and c % m != 0:
            rest = Add(rest, t if c == 1 else Mul(t, Const(c, d), d), d)
    if isinstance(e, FloorMod):
        return FloorMod(rest, Const(m, d), d)
    q: Expr = Const(k // m, d)
    for t, c in out_terms:
        q = Add(q, t if c == m else Mul(t, Const(c // m, d), d), d)
    return Add(q, FloorDiv(rest, Const(m, d), d), d)


SIMPLIFY = (rule_fold_consts, rule_add_zero, rule_mul_one, rule_reassociate_consts, rule_logic,
            rule_linear, rule_sub_negative, rule_min_plus_const, rule_mod_multiples)
# a row-major offset: the default rules and a quotient and remainder recombined (the
# vectoriser's question whether an access is contiguous; the default rules leave the
# pair, which LLVM folds no worse)
FLAT_OFFSET = SIMPLIFY + (rule_div_mod_pair,)


def apply_rules(e: Expr, rules=SIMPLIFY) -> Expr | None:
    """Apply the first matching rule repeatedly at the root; None if none matched."""
    changed = False
    for _ in range(64):
        for rule in rules:
            out = rule(e)
            if out is not None:
                e, changed = out, True
                break
        else:
            break
    return e if changed else None


def simplify(e: Expr, rules=SIMPLIFY) -> Expr:
    """Simplify bottom-up with `rules` until nothing matches."""
    def fn(x: Expr) -> Expr | None:
        out = apply_rules(x, rules)
        if out is None:
            return None
        return simplify(out, rules) if out.children else out

    return map_expr(e, fn)


def simplify_stmt(s: Stmt) -> Stmt:
    return map_stmt(s, simplify)
