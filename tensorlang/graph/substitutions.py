"""Generated graph substitutions, as TASO (SOSP'19) makes them: enumerate every small graph
over a few operators and inputs, fingerprint each on random integer inputs, pair graphs
whose fingerprints are equal, verify each pair, and prune the pairs that a smaller rule
already implies. The verified rules ship as data (`rules/substitutions.json`);
`tensorlang gen-rules` regenerates them and prints the statistics.

A graph here is a term: ("in", name) or (op, arg, ...). Two domains, each with its inputs
at small fixed shapes:

- matrices: A, B, C of shape (n, n); add, mul (elementwise), matmul, transpose, relu,
  concat along axis 0 or 1 and the halves of a split along either axis (shapes (2n, n),
  (n, 2n) appear);
- convolutions: x (1, c, h, w), weights W1, W2 (o, c, 3, 3); conv2d (padding 1), add,
  relu, concat of weights along output channels (axis 0) and of images along channels
  (axis 1).

Verification: a pair whose operators are all multilinear (everything but relu) is checked
exactly with sympy — every input a tensor of distinct symbols, both sides expanded and
subtracted — at two sizes; a pair with relu is checked on `RANDOM_SEEDS` random float
inputs of several sizes. A pair that fails either is refused, with the inputs that show it.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import pathlib
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

# the public part (docs/api/graph.md): the shipped rules, parsing and printing terms,
# verifying a pair, and regenerating the rules; the rest is the generator's machinery
__all__ = ["RULES_PATH", "Stats", "Verdict", "generate", "load", "parse", "save", "text",
           "verify"]

RULES_PATH = pathlib.Path(__file__).parent / "rules" / "substitutions.json"
RANDOM_SEEDS = 64
MAX_OPS = 3

UNARY = {"matrix": ("transpose", "relu", "split0a", "split0b", "split1a", "split1b"),
         "conv": ("relu",)}
BINARY = {"matrix": ("add", "mul", "matmul", "concat0", "concat1"),
          "conv": ("add", "conv2d", "concat0", "concat1")}
COMMUTATIVE = ("add", "mul")
POLYNOMIAL = ("transpose", "split0a", "split0b", "split1a", "split1b", "add", "mul", "matmul",
              "concat0", "concat1", "conv2d")


def inputs(domain: str, n: int = 3) -> dict[str, tuple]:
    """The inputs of a domain and their shapes at size n."""
    if domain == "matrix":
        return {"A": (n, n), "B": (n, n), "C": (n, n)}
    return {"x": (1, 2, n + 1, n + 1), "W1": (2, 2, 3, 3), "W2": (2, 2, 3, 3)}


# ----------------------------------------------------------------------- shapes and values
def shape_of(op: str, *shapes) -> tuple | None:
    """The output shape of an op, or None where the op does not apply."""
    a = shapes[0]
    if op == "relu":
        return a
    if op == "transpose":
        return (a[1], a[0]) if len(a) == 2 else None
    if op.startswith("split"):
        ax = int(op[5])
        if ax >= len(a) or a[ax] % 2:
            return None
        return tuple(d // 2 if k == ax else d for k, d in enumerate(a))
    b = shapes[1]
    if op in ("add", "mul"):
        return a if a == b else None
    if op == "matmul":
        return (a[0], b[1]) if len(a) == len(b) == 2 and a[1] == b[0] else None
    if op.startswith("concat"):
        ax = int(op[6])
        if len(a) != len(b) or ax >= len(a) or \
                any(x != y for k, (x, y) in enumerate(zip(a, b)) if k != ax):
            return None
        return tuple(x + y if k == ax else x for k, (x, y) in enumerate(zip(a, b)))
    if op == "conv2d":   # image (1, c, h, w) by weights (o, c, 3, 3), padding 1
        if len(a) != 4 or len(b) != 4 or a[0] != 1 or b[2:] != (3, 3) or a[1] != b[1] or \
                b[0] == 1 and a[1] == 1:
            return None
        return (1, b[0], a[2], a[3])
    raise ValueError(f"unknown op {op}")


def _conv2d(x, w):
    """conv2d with padding 1 on numpy arrays of any dtype (object arrays of sympy terms)."""
    _, _, h, wd = x.shape
    pad = np.zeros((x.shape[0], x.shape[1], h + 2, wd + 2), dtype=x.dtype)
    pad[:, :, 1:-1, 1:-1] = x
    out = None
    for kh, kw in itertools.product(range(3), range(3)):
        part = np.tensordot(w[:, :, kh, kw], pad[:, :, kh:kh + h, kw:kw + wd], axes=([1], [1]))
        out = part if out is None else out + part
    return np.transpose(out, (1, 0, 2, 3))


def apply(op: str, *args):
    """An op on numpy arrays (integer, float or object)."""
    a = args[0]
    if op == "relu":
        return np.where(a > 0, a, 0 * a)
    if op == "transpose":
        return a.T
    if op.startswith("split"):
        ax, half = int(op[5]), op[6]
        k = a.shape[ax] // 2
        idx = [slice(None)] * a.ndim
        idx[ax] = slice(0, k) if half == "a" else slice(k, None)
        return a[tuple(idx)]
    b = args[1]
    if op == "add":
        return a + b
    if op == "mul":
        return a * b
    if op == "matmul":
        return np.dot(a, b)
    if op.startswith("concat"):
        return np.concatenate([a, b], axis=int(op[6]))
    if op == "conv2d":
        return _conv2d(a, b)
    raise ValueError(f"unknown op {op}")


def evaluate(term, env: dict):
    if term[0] == "in":
        return env[term[1]]
    return apply(term[0], *(evaluate(t, env) for t in term[1:]))


def shape(term, shapes: dict):
    if term[0] == "in":
        return shapes[term[1]]
    args = [shape(t, shapes) for t in term[1:]]
    if any(a is None for a in args):
        return None
    return shape_of(term[0], *args)


def text(term) -> str:
    if term[0] == "in":
        return term[1]
    return f"{term[0]}({', '.join(text(t) for t in term[1:])})"


def parse(s: str):
    """A term from its text (`text`'s inverse)."""
    s = s.strip()
    if "(" not in s:
        return ("in", s)
    op, rest = s.split("(", 1)
    args, depth, cur = [], 0, ""
    for ch in rest[:-1]:
        if ch == "," and depth == 0:
            args.append(cur)
            cur = ""
            continue
        depth += ch == "("
        depth -= ch == ")"
        cur += ch
    args.append(cur)
    return (op.strip(), *(parse(a) for a in args))


def ops_in(term) -> int:
    return 0 if term[0] == "in" else 1 + sum(ops_in(t) for t in term[1:])


def names(term) -> list[str]:
    if term[0] == "in":
        return [term[1]]
    return [x for t in term[1:] for x in names(t)]


def subterms(term) -> Iterator:
    yield term
    if term[0] != "in":
        for t in term[1:]:
            yield from subterms(t)


# ------------------------------------------------------------------------- enumeration
def enumerate_terms(domain: str, max_ops: int = MAX_OPS) -> list:
    """Every well-shaped term of at most max_ops operators over the domain's inputs
    (commutative ops with their arguments in one order only)."""
    shapes = inputs(domain)
    by_size: dict[int, list] = {0: [(("in", k), s) for k, s in shapes.items()]}
    for size in range(1, max_ops + 1):
        out = []
        for t, s in by_size[size - 1]:
            for op in UNARY[domain]:
                r = shape_of(op, s)
                if r is not None:
                    out.append(((op, t), r))
        for a in range(size):
            b = size - 1 - a
            for (t1, s1), (t2, s2) in itertools.product(by_size[a], by_size[b]):
                for op in BINARY[domain]:
                    if op in COMMUTATIVE and (a, text(t1)) > (b, text(t2)):
                        continue
                    r = shape_of(op, s1, s2)
                    if r is not None:
                        out.append(((op, t1, t2), r))
        by_size[size] = out
    return [t for size in range(max_ops + 1) for t, _ in by_size[size]]


def fingerprint(term, envs: list[dict]) -> str:
    """A hash of the term's values on integer inputs (TASO's fingerprint: exact arithmetic,
    so equal terms collide and unequal ones almost never do)."""
    h = hashlib.sha1()
    for env in envs:
        v = np.asarray(evaluate(term, env))
        h.update(repr(v.shape).encode())
        h.update(np.ascontiguousarray(v, dtype=np.int64).tobytes())
    return h.hexdigest()


def _int_envs(domain: str, count: int = 3, seed: int = 0) -> list[dict]:
    rng = np.random.default_rng(seed)
    return [{k: rng.integers(-7, 8, s).astype(np.int64) for k, s in inputs(domain).items()}
            for _ in range(count)]


# ------------------------------------------------------------------------ verification
@dataclass
class Verdict:
    ok: bool
    how: str             # "sympy" or "random"
    witness: str = ""    # for a refused pair: where the sides differ


def verify(lhs, rhs, domain: str) -> Verdict:
    """Whether lhs == rhs for every input (see the module: sympy for multilinear terms,
    random floats otherwise)."""
    ops = {t[0] for t in itertools.chain(subterms(lhs), subterms(rhs)) if t[0] != "in"}
    if ops <= set(POLYNOMIAL):
        import sympy

        for n in (2, 3):
            env = {}
            for k, s in inputs(domain, n).items():
                syms = sympy.symbols(f"{k}_0:{int(np.prod(s))}")
                env[k] = np.array(syms, dtype=object).reshape(s)
            shapes = {k: v.shape for k, v in env.items()}
            if shape(lhs, shapes) != shape(rhs, shapes) or shape(lhs, shapes) is None:
                return Verdict(False, "sympy", f"shapes differ at size {n}")
            diff = np.asarray(evaluate(lhs, env) - evaluate(rhs, env), dtype=object)
            for idx, d in np.ndenumerate(diff):
                if sympy.expand(d) != 0:
                    return Verdict(False, "sympy", f"at size {n}, element {idx}: lhs - rhs "
                                                   f"= {sympy.expand(d)}")
        return Verdict(True, "sympy")
    rng = np.random.default_rng(12345)
    for seed in range(RANDOM_SEEDS):
        n = 2 + seed % 3
        env = {k: rng.standard_normal(s) for k, s in inputs(domain, n).items()}
        a, b = evaluate(lhs, env), evaluate(rhs, env)
        if a.shape != b.shape or not np.allclose(a, b, rtol=1e-9, atol=1e-9):
            return Verdict(False, "random", f"seed {seed}, size {n}: max |lhs - rhs| = "
                           f"{np.max(np.abs(a - b)) if a.shape == b.shape else 'shapes'}")
    return Verdict(True, "random")


# ----------------------------------------------------------------------------- pruning
def canonical(lhs, rhs) -> str:
    """The rule's text with its inputs renamed in order of first appearance, the smaller
    of its two orientations (renaming is no new rule: TASO's first pruning)."""
    return min(_renamed(lhs, rhs), _renamed(rhs, lhs))


def _renamed(lhs, rhs) -> str:
    order = list(dict.fromkeys(names(lhs) + names(rhs)))
    ren = {k: f"v{i}" for i, k in enumerate(order)}

    def go(t):
        return ("in", ren[t[1]]) if t[0] == "in" else (t[0], *(go(x) for x in t[1:]))
    a, b = text(go(lhs)), text(go(rhs))
    return f"{min(a, b)} == {max(a, b)}"


def _abstract(lhs, rhs):
    """The rule with every non-input subterm common to both sides replaced by a fresh input
    (TASO's second pruning: such a rule is a smaller rule applied inside a context)."""
    common = {text(t) for t in subterms(lhs) if t[0] != "in"} & \
        {text(t) for t in subterms(rhs) if t[0] != "in"}
    if not common:
        return None
    fresh: dict[str, tuple] = {}

    def go(t):
        key = text(t)
        if t[0] != "in" and key in common:
            return fresh.setdefault(key, ("in", f"_c{len(fresh)}"))
        return t if t[0] == "in" else (t[0], *(go(x) for x in t[1:]))
    return go(lhs), go(rhs)


@dataclass
class Stats:
    terms: int = 0
    classes: int = 0
    candidates: int = 0
    verified: int = 0
    refused: int = 0
    pruned_renaming: int = 0
    pruned_common: int = 0


def generate(max_ops: int = MAX_OPS, domains=("matrix", "conv"), progress=None):
    """(rules, stats, refused): the verified rules as dicts {domain, lhs, rhs, how}, the
    counts at each stage, and the refused candidates with their witnesses."""
    rules, refused, stats = [], [], Stats()
    seen: set[str] = set()
    for domain in domains:
        terms = enumerate_terms(domain, max_ops if domain == "matrix" else min(max_ops, 3))
        stats.terms += len(terms)
        envs = _int_envs(domain)
        classes: dict[str, list] = {}
        for t in (progress(terms, domain) if progress else terms):
            classes.setdefault(fingerprint(t, envs), []).append(t)
        pairs = []
        for members in classes.values():
            if len(members) < 2:
                continue
            stats.classes += 1
            members.sort(key=lambda t: (ops_in(t), text(t)))
            rep = members[0]
            pairs.extend((m, rep) for m in members[1:])     # rewrite towards the smallest
        pairs.sort(key=lambda p: (ops_in(p[0]) + ops_in(p[1]), text(p[0])))
        stats.candidates += len(pairs)
        for lhs, rhs in pairs:
            key = canonical(lhs, rhs)
            if key in seen:
                stats.pruned_renaming += 1
                continue
            small = _abstract(lhs, rhs)
            if small is not None and (small[0] == small[1] or canonical(*small) in seen):
                stats.pruned_common += 1
                continue
            v = verify(lhs, rhs, domain)
            if not v.ok:
                stats.refused += 1
                refused.append({"domain": domain, "lhs": text(lhs), "rhs": text(rhs),
                                 "witness": v.witness})
                continue
            stats.verified += 1
            seen.add(key)
            rules.append({"domain": domain, "lhs": text(lhs), "rhs": text(rhs), "how": v.how})
    return rules, stats, refused


def save(rules, stats, path=RULES_PATH, max_ops: int = MAX_OPS) -> None:
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"generator": "tensorlang gen-rules",
                                "max_ops": max_ops, "stats": stats.__dict__,
                                "rules": rules}, indent=1) + "\n")


def load(path=RULES_PATH) -> list[dict]:
    """The shipped rules (each {domain, lhs, rhs, how})."""
    return json.loads(pathlib.Path(path).read_text())["rules"]
