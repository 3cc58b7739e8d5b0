"""Train the lecture's MLP, relu(x W1) W2 with softmax cross-entropy, on scikit-learn's
digits (8x8 images, bundled with the package) by SGD. Every op of the forward pass, the
backward pass and the update W <- W - lr * dL/dW runs as a tensorlang kernel.

Run: python examples/train_mlp_digits.py [--epochs 30] [--hidden 64]
"""

from __future__ import annotations

import argparse

import numpy as np

import tensorlang.graph as G


def load_digits(seed: int = 0):
    from sklearn.datasets import load_digits as sk_digits

    data = sk_digits()
    x = (data.data / 16.0).astype("float32")
    y = data.target
    order = np.random.default_rng(seed).permutation(len(x))
    x, y = x[order], y[order]
    n_test = len(x) // 5
    return (x[n_test:], y[n_test:]), (x[:n_test], y[:n_test])


def build(n_in: int, hidden: int, n_out: int, batch: int, lr: float):
    """The training step and the inference graph, as graph nodes."""
    x = G.Variable("x", shape=(batch, n_in))
    y = G.Variable("y", shape=(batch, n_out))
    w1 = G.Variable("W1", shape=(n_in, hidden))
    w2 = G.Variable("W2", shape=(hidden, n_out))
    logits = G.relu(x @ w1) @ w2
    loss = G.softmax_cross_entropy(logits, y)
    g1, g2 = G.gradients(loss, [w1, w2])
    step = G.Executor([loss, w1 - lr * g1, w2 - lr * g2])      # theta <- theta - lr * grad
    xt = G.Variable("x_test")                                   # any number of rows
    predict = G.Executor([G.relu(xt @ w1) @ w2])
    return (x, y, w1, w2, xt), step, predict


def train(epochs: int = 30, hidden: int = 64, batch: int = 32, lr: float = 0.2,
          seed: int = 0, quiet: bool = False) -> float:
    (xtr, ytr), (xte, yte) = load_digits(seed)
    n_in, n_out = xtr.shape[1], 10
    (x, y, w1, w2, xt), step, predict = build(n_in, hidden, n_out, batch, lr)
    rng = np.random.default_rng(seed)
    W1 = (rng.standard_normal((n_in, hidden)) * np.sqrt(2.0 / n_in)).astype("float32")
    W2 = (rng.standard_normal((hidden, n_out)) * np.sqrt(1.0 / hidden)).astype("float32")
    onehot = np.eye(n_out, dtype="float32")
    try:
        from tqdm import tqdm
    except ImportError:  # the progress bar is optional
        def tqdm(it, **_):
            return it
    acc = 0.0
    for epoch in range(1, epochs + 1):
        order = rng.permutation(len(xtr))
        losses = []
        batches = range(0, len(xtr) - batch + 1, batch)
        for b in tqdm(batches, desc=f"epoch {epoch}", leave=False, disable=quiet):
            idx = order[b:b + batch]
            loss, W1, W2 = step.run({x: xtr[idx], y: onehot[ytr[idx]], w1: W1, w2: W2})
            losses.append(float(loss))
        (logits,) = predict.run({xt: xte, w1: W1, w2: W2})
        acc = float(np.mean(logits.argmax(axis=1) == yte))
        if not quiet:
            print(f"epoch {epoch:3d}  loss {np.mean(losses):.4f}  test accuracy {acc:.3f}")
    return acc


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=30)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--lr", type=float, default=0.2)
    a = p.parse_args(argv)
    acc = train(a.epochs, a.hidden, a.batch, a.lr)
    print(f"final test accuracy {acc:.3f}")


if __name__ == "__main__":
    main()
