"""Parallel kernels keep working in children made by fork (multiprocessing's default start
method on Linux before Python 3.14, data-loader workers, pre-forking servers) and spawn.
Each scenario runs in a subprocess with a timeout, so a hang fails the test instead of
stopping the suite."""

import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent('''
    import multiprocessing as mp
    import os
    import sys

    import numpy as np
    import tensorlang as tl


    def kernel(rows):
        n = tl.var("n")
        A = tl.placeholder((n, 64), "float32", name="A")
        B = tl.compute((n, 64), lambda i, j: A[i, j] * 2.0 + 1.0, name="B")
        s = tl.create_schedule(B)
        s[B].parallel(B.op.axis[0])
        return tl.build(s, [A, B])


    def work(seed):
        f = kernel(64)                         # the parent's kernel (cached) ...
        a = np.random.default_rng(seed).random((257, 64), dtype=np.float32)
        b = np.zeros_like(a)
        for _ in range(20):
            f(a, b)
        n = tl.var("m")                        # ... and one built in the child
        X = tl.placeholder((n,), "float64", name="X")
        Y = tl.compute((n,), lambda i: X[i] + 3.0, name="Y")
        s = tl.create_schedule(Y)
        s[Y].parallel(s[Y].split(Y.op.axis[0], factor=16)[0])
        g = tl.build(s, [X, Y])
        x = np.arange(1000.0)
        y = np.zeros(1000)
        g(x, y)
        return bool(np.allclose(b, a * 2 + 1) and np.array_equal(y, x + 3))


    if __name__ == "__main__":
        method = sys.argv[1]
        f = kernel(64)
        a = np.ones((300, 64), np.float32)
        b = np.zeros_like(a)
        f(a, b)                                # the pool is running in the parent
        assert np.all(b == 3.0)
        ctx = mp.get_context(method)
        with ctx.Pool(2) as p:
            results = p.map(work, range(4))
        assert all(results), results
        pid = os.fork() if method == "fork" else None
        if pid == 0:                           # a bare fork, no multiprocessing
            os._exit(0 if work(9) else 3)
        if pid:
            _, status = os.waitpid(pid, 0)
            assert os.waitstatus_to_exitcode(status) == 0, status
        f(a, b)                                # the parent's pool still works
        assert np.all(b == 3.0)
        print("OK", method)
''')


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_parallel_kernels_after_fork_and_spawn(method, tmp_path):
    script = tmp_path / "fork_script.py"
    script.write_text(SCRIPT)
    env_threads = {"TL_NUM_THREADS": "3"}  # workers even on a 1-core machine
    import os

    r = subprocess.run([sys.executable, str(script), method], capture_output=True, text=True,
                       timeout=180, env={**os.environ, **env_threads})
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"OK {method}" in r.stdout
