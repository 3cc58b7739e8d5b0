"""float32 GEMM C = A·B: the graph executor's register-blocked matmul kernel (cache_write
tile accumulators, see graph/cpu_schedules._block_matmul) against numpy (OpenBLAS) and torch
(when installed), side by side in one process.

Each size is timed in several rounds, systems taken in turn; the figure is the median over
rounds of each round's median call time, as GFLOPS = 2·m·k·n / t.
Usage: python benchmarks/gemm.py [--rounds 5] [--sizes 512,1024,128x784x256,127x781x253]
"""

import argparse
import statistics
import time

import numpy as np

from tensorlang.graph.executor import compile_op


def median_s(fn, min_calls: int = 10, min_s: float = 0.2) -> float:
    fn()
    times = []
    t_end = time.perf_counter() + min_s
    while len(times) < min_calls or time.perf_counter() < t_end:
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def parse(size: str) -> tuple[int, int, int]:
    dims = [int(x) for x in size.split("x")]
    return (dims[0],) * 3 if len(dims) == 1 else tuple(dims)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--sizes", default="512,1024,128x784x256,127x781x253")
    opts = p.parse_args()
    try:
        import torch
    except ImportError:
        torch = None
    print(f"GFLOPS, float32, median of {opts.rounds} rounds (m x k x n)")
    header = f"{'size':>16} {'tensorlang':>11} {'numpy':>8}" + (f" {'torch':>8}" if torch else "")
    print(header + "   build (s)")
    for size in opts.sizes.split(","):
        m, k, n = parse(size)
        runs, build_s = measure(m, k, n, opts.rounds, torch)
        cells = " ".join(f"{statistics.median(v):{w}.1f}" for v, w in zip(runs.values(),
                                                                          (11, 8, 8)))
        print(f"{f'{m}x{k}x{n}':>16} {cells}   {build_s:.2f}")


def measure(m: int, k: int, n: int, rounds: int, torch) -> tuple[dict, float]:
    rng = np.random.default_rng(0)
    a = rng.standard_normal((m, k)).astype("float32")
    b = rng.standard_normal((k, n)).astype("float32")
    c = np.zeros((m, n), "float32")
    t0 = time.perf_counter()
    mod, _ = compile_op("matmul", (("ta", False), ("tb", False)), ((m, k), (k, n)),
                        ("float32", "float32"))
    build_s = time.perf_counter() - t0
    mod(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-3, atol=1e-3 * np.sqrt(k))
    cf, ptrs = mod.kernel.cfunc, [x.ctypes.data for x in (a, b, c)]
    systems = {"tensorlang": lambda: cf(*ptrs), "numpy": lambda: np.matmul(a, b, out=c)}
    if torch is not None:
        ta, tb, tc = (torch.from_numpy(x) for x in (a, b, c))
        systems["torch"] = lambda: torch.mm(ta, tb, out=tc)
    runs = {name: [] for name in systems}
    for _ in range(rounds):
        for name, fn in systems.items():
            runs[name].append(2 * m * k * n / median_s(fn) / 1e9)
    return runs, build_s


if __name__ == "__main__":
    main()
