"""Generated substitutions (graph/substitutions.py, TASO-style): the generator enumerates,
fingerprints, verifies and prunes; the shipped rules are verified and contain the classic
identities; the verifier refuses wrong rules with a witness, including fingerprint
collisions that only integers share."""

import json

import numpy as np
import pytest

from tensorlang.cli import main
from tensorlang.graph import substitutions as S

CLASSICS = [
    ("matrix", "matmul(A, add(B, C))", "add(matmul(A, B), matmul(A, C))"),   # distributivity
    ("matrix", "concat1(matmul(A, B), matmul(A, C))", "matmul(A, concat1(B, C))"),  # QKV
    ("matrix", "transpose(matmul(A, B))", "matmul(transpose(B), transpose(A))"),
    ("conv", "concat1(conv2d(x, W1), conv2d(x, W2))", "conv2d(x, concat0(W1, W2))"),
]


@pytest.fixture(scope="module")
def shipped():
    return S.load()


@pytest.mark.parametrize("domain,lhs,rhs", CLASSICS)
def test_shipped_rules_rediscover_the_classics(shipped, domain, lhs, rhs):
    keys = {S.canonical(S.parse(r["lhs"]), S.parse(r["rhs"])) for r in shipped
            if r["domain"] == domain}
    assert S.canonical(S.parse(lhs), S.parse(rhs)) in keys
    assert S.verify(S.parse(lhs), S.parse(rhs), domain).ok


def test_shipped_rules_verify_again(shipped):
    rng = np.random.default_rng(0)
    for k in rng.choice(len(shipped), 25, replace=False):
        r = shipped[k]
        v = S.verify(S.parse(r["lhs"]), S.parse(r["rhs"]), r["domain"])
        assert v.ok and v.how == r["how"], r


@pytest.mark.parametrize("domain,lhs,rhs,how", [
    ("matrix", "matmul(A, B)", "matmul(B, A)", "sympy"),                # planted: commutes
    ("matrix", "transpose(matmul(A, B))", "matmul(transpose(A), transpose(B))", "sympy"),
    ("matrix", "relu(add(A, B))", "add(relu(A), relu(B))", "random"),
    ("matrix", "relu(add(A, mul(A, A)))", "add(A, mul(A, A))", "random"),  # a*(a+1) >= 0 on ints
    ("conv", "conv2d(x, add(W1, W2))", "conv2d(x, W1)", "sympy"),
])
def test_verifier_refuses_wrong_rules_with_a_witness(domain, lhs, rhs, how):
    v = S.verify(S.parse(lhs), S.parse(rhs), domain)
    assert not v.ok and v.how == how and v.witness


def test_integer_fingerprints_collide_where_floats_differ():
    envs = S._int_envs("matrix")
    a, b = S.parse("relu(add(A, mul(A, A)))"), S.parse("add(A, mul(A, A))")
    assert S.fingerprint(a, envs) == S.fingerprint(b, envs)     # hence the verifier


def test_generator_small_run_and_command(tmp_path, capsys):
    rules, stats, refused = S.generate(max_ops=2, domains=("matrix",))
    assert stats.verified == len(rules) > 10 and stats.pruned_renaming > 0
    keys = {S.canonical(S.parse(r["lhs"]), S.parse(r["rhs"])) for r in rules}
    assert S.canonical(S.parse("transpose(transpose(A))"), S.parse("A")) in keys
    assert S.canonical(S.parse("add(A, B)"), S.parse("add(B, A)")) not in keys  # one order
    out = tmp_path / "rules.json"
    assert main(["gen-rules", "--max-ops", "2", "--out", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["max_ops"] == 2 and data["rules"] and "verified" in capsys.readouterr().out


def test_terms_print_and_parse_back():
    for t in S.enumerate_terms("conv", 2)[:200]:
        assert S.parse(S.text(t)) == t
