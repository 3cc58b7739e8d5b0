"""Train a one-layer transformer on scikit-learn's digits: each 8x8 image is a sequence of 8
tokens (its rows, 8 pixels each). Token embedding plus a learned position embedding,
single-head self-attention (Q, K, V, output projection), layer norm, a relu MLP, layer norm
again, the mean over tokens and a linear classifier, with softmax cross-entropy. The
forward and backward passes run as tensorlang kernels (`G.Executor`); Adam updates the
weights in numpy.

Run: python examples/train_transformer_digits.py [--epochs 8] [--dim 32]
"""

from __future__ import annotations

import argparse

import numpy as np

import tensorlang.graph as G

TOKENS = FEATURES = 8


def load_digits(seed: int = 0):
    from sklearn.datasets import load_digits as sk_digits

    data = sk_digits()
    x = (data.data / 16.0).astype("float32").reshape(-1, TOKENS, FEATURES)
    order = np.random.default_rng(seed).permutation(len(x))
    x, y = x[order], data.target[order]
    n_test = len(x) // 5
    return (x[n_test:], y[n_test:]), (x[:n_test], y[:n_test])


def block(x, p: dict, dim: int):
    """The transformer's logits for token sequences x (batch, tokens, features)."""
    h = x @ p["embed"] + p["pos"]
    q, k, v = h @ p["wq"], h @ p["wk"], h @ p["wv"]
    scores = (q @ G.transpose(k, (0, 2, 1))) * (1.0 / np.sqrt(dim))
    att = G.softmax(scores, axis=-1) @ v
    h = G.layer_norm(h + att @ p["wo"])
    h = G.layer_norm(h + G.relu(h @ p["w1"]) @ p["w2"])
    return G.mean(h, axis=1) @ p["out"]


def shapes(dim: int) -> dict:
    return {"embed": (FEATURES, dim), "pos": (TOKENS, dim), "wq": (dim, dim),
            "wk": (dim, dim), "wv": (dim, dim), "wo": (dim, dim), "w1": (dim, 2 * dim),
            "w2": (2 * dim, dim), "out": (dim, 10)}


def build(dim: int, batch: int):
    """(inputs, parameters, the training step's executor, the predictor's executor)."""
    x = G.Variable("x", (batch, TOKENS, FEATURES))
    y = G.Variable("y", (batch, 10))
    p = {k: G.Variable(k, s) for k, s in shapes(dim).items()}
    loss = G.softmax_cross_entropy(block(x, p, dim), y)
    grads = G.gradients(loss, list(p.values()))
    step = G.Executor([loss, *grads])
    xt = G.Variable("x_test")
    predict = G.Executor([block(xt, p, dim)])
    return x, y, xt, p, step, predict


def train(epochs: int = 8, dim: int = 32, batch: int = 32, lr: float = 3e-3,
          seed: int = 0, quiet: bool = False) -> float:
    (xtr, ytr), (xte, yte) = load_digits(seed)
    x, y, xt, p, step, predict = build(dim, batch)
    rng = np.random.default_rng(seed)
    values = {k: (rng.standard_normal(s) / np.sqrt(s[0])).astype("float32")
              for k, s in shapes(dim).items()}
    m = {k: np.zeros_like(v) for k, v in values.items()}
    s2 = {k: np.zeros_like(v) for k, v in values.items()}
    onehot = np.eye(10, dtype="float32")
    b1, b2, t, acc = 0.9, 0.999, 0, 0.0
    for epoch in range(1, epochs + 1):
        order = rng.permutation(len(xtr))
        losses = []
        for b in range(0, len(xtr) - batch + 1, batch):
            idx = order[b:b + batch]
            feed = {x: xtr[idx], y: onehot[ytr[idx]], **{p[k]: values[k] for k in p}}
            loss, *grads = step.run(feed)
            losses.append(float(loss))
            t += 1
            for k, g in zip(p, grads):              # Adam
                m[k] = b1 * m[k] + (1 - b1) * g
                s2[k] = b2 * s2[k] + (1 - b2) * g * g
                mh, sh = m[k] / (1 - b1 ** t), s2[k] / (1 - b2 ** t)
                values[k] = (values[k] - lr * mh / (np.sqrt(sh) + 1e-8)).astype("float32")
        (logits,) = predict.run({xt: xte, **{p[k]: values[k] for k in p}})
        acc = float(np.mean(logits.argmax(axis=1) == yte))
        if not quiet:
            print(f"epoch {epoch:3d}  loss {np.mean(losses):.4f}  test accuracy {acc:.3f}")
    return acc


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=8)
    ap.add_argument("--dim", type=int, default=32)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=3e-3)
    a = ap.parse_args(argv)
    acc = train(a.epochs, a.dim, a.batch, a.lr)
    print(f"final test accuracy {acc:.3f}")


if __name__ == "__main__":
    main()
