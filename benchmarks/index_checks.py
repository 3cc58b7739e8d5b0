"""The cost of run-time index checks on data-dependent reads (goal: <= 10%).

Two kernels, each built with checks (the default) and with `checks=False`, timed in
alternating rounds in one process (median of the rounds):
- gather: B[i] = A[I[i]], 2^22 random indices into 2^20 floats, split by 16, vectorized
  (an AVX-512 gather) and parallel;
- embedding lookup: O[t, d] = E[T[t], d], 8192 tokens from a 50,000 x 256 table, d
  vectorized (the index check is one scalar compare per token) and tokens in parallel.
Usage: python benchmarks/index_checks.py [--rounds 7] [--small]
"""

import argparse
import statistics
import time

import numpy as np

import tensorlang as tl


def gather(checks: bool):
    n, m = tl.var("n"), tl.var("m")
    A = tl.placeholder((m,), "float32", name="A")
    Idx = tl.placeholder((n,), "int32", name="I")
    B = tl.compute((n,), lambda i: A[Idx[i]], name="B")
    s = tl.create_schedule(B)
    o, i = s[B].split(B.op.axis[0], factor=16)
    s[B].vectorize(i)
    s[B].parallel(o)
    return tl.build(s, [A, Idx, B], checks=checks)


def embedding(checks: bool, dim: int):
    n, V = tl.var("n"), tl.var("V")
    E = tl.placeholder((V, dim), "float32", name="E")
    T = tl.placeholder((n,), "int64", name="T")
    O = tl.compute((n, dim), lambda t, d: E[T[t], d], name="O")
    s = tl.create_schedule(O)
    _, di = s[O].split(O.op.axis[1], factor=16)
    s[O].vectorize(di)
    s[O].parallel(O.op.axis[0])
    return tl.build(s, [E, T, O], checks=checks)


def best_of(f, args, reps):
    f(*args)
    t0 = time.perf_counter()
    for _ in range(reps):
        f(*args)
    return (time.perf_counter() - t0) / reps


def compare(name, make, args, reps, rounds, nbytes):
    on, off = make(True), make(False)
    times = {"checked": [], "unchecked": []}
    for _ in range(rounds):
        times["checked"].append(best_of(on, args, reps))
        times["unchecked"].append(best_of(off, args, reps))
    t_on, t_off = statistics.median(times["checked"]), statistics.median(times["unchecked"])
    for label, t in (("checks", t_on), ("checks=False", t_off)):
        print(f"  {name:10s} {label:13s} {1e3 * t:8.3f} ms  {nbytes / t / 1e9:6.1f} GB/s")
    print(f"  {name:10s} cost of the checks: {100 * (t_on / t_off - 1):+.1f}% (goal <= 10%)")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--small", action="store_true", help="tiny sizes (CI: it runs)")
    a = ap.parse_args()
    rng = np.random.default_rng(0)
    n, m = (1 << 12, 1 << 10) if a.small else (1 << 22, 1 << 20)
    src = rng.random(m, dtype=np.float32)
    idx = rng.integers(0, m, n).astype(np.int32)
    out = np.zeros(n, np.float32)
    reps = 3 if a.small else 20
    print(f"index checks, {tl.Target.parse('llvm').cpu}, median of {a.rounds} rounds")
    compare("gather", gather, (src, idx, out), reps, a.rounds, n * 12)
    np.testing.assert_array_equal(out, src[idx])
    tokens, vocab, dim = (64, 100, 32) if a.small else (8192, 50_000, 256)
    table = rng.random((vocab, dim), dtype=np.float32)
    tok = rng.integers(0, vocab, tokens)
    emb = np.zeros((tokens, dim), np.float32)
    compare("embedding", lambda c: embedding(c, dim), (table, tok, emb), reps, a.rounds,
            tokens * dim * 8)
    np.testing.assert_array_equal(emb, table[tok])


if __name__ == "__main__":
    main()
