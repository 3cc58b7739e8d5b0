"""The thread pool (backends/llvm/pool.py): parallel loops give numpy's results whatever the
extent; a launch wakes sleeping workers; idle workers sleep (no CPU); many short launches
from several threads neither hang nor go wrong; threads building their first parallel
kernels at once start one pool. Each scenario runs in a subprocess with TL_NUM_THREADS=3
(workers even on a one-core machine) and a timeout, so a hang fails the test instead of
stopping the suite."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

COMMON = textwrap.dedent('''
    import json, os, sys, threading, time
    import numpy as np
    import tensorlang as tl
    from tensorlang.backends.llvm.pool import pool_stats, pool_threads


    def kernel(cols=64, scale=2.0):
        n = tl.var("n")
        A = tl.placeholder((n, cols), "float32", name="A")
        B = tl.compute((n, cols), lambda i, j: A[i, j] * scale + 1.0, name="B")
        s = tl.create_schedule(B)
        s[B].parallel(B.op.axis[0])
        return tl.build(s, [A, B])


    def heavy():
        """About a millisecond a row-block on one core: exp of every element, 40 times."""
        n = tl.var("n")
        A = tl.placeholder((n, 4096), "float32", name="A")
        k = tl.reduce_axis((0, 40), name="k")
        B = tl.compute((n, 4096), lambda i, j: tl.sum(tl.exp(A[i, j] * 1e-3 * k.astype(
            "float32")), axis=k), name="B")
        s = tl.create_schedule(B)
        s[B].parallel(B.op.axis[0])
        return tl.build(s, [A, B])


    def wait_asleep(timeout=20.0):
        end = time.time() + timeout
        while pool_stats()["sleeping"] < pool_stats()["workers"]:
            assert time.time() < end, pool_stats()
            time.sleep(0.01)
''')


def run_script(tmp_path, body: str, env: dict | None = None, timeout: int = 300) -> dict:
    script = tmp_path / "pool_script.py"
    script.write_text(COMMON + textwrap.dedent(body))
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                       timeout=timeout,
                       env={**os.environ, "TL_NUM_THREADS": "3", **(env or {})})
    assert r.returncode == 0, r.stdout + r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_parallel_loops_match_numpy_for_every_extent(tmp_path):
    got = run_script(tmp_path, '''
        f = kernel()
        rng = np.random.default_rng(0)
        bad = []
        for rows in (1, 2, 3, 4, 5, 7, 11, 12, 13, 24, 64, 257, 1000):
            for _ in range(20):
                a = rng.standard_normal((rows, 64)).astype("float32")
                b = np.full_like(a, np.nan)
                f(a, b)
                if not np.array_equal(b, a * 2 + 1):
                    bad.append(rows)
        print(json.dumps({"bad": bad, "threads": pool_threads(), **pool_stats()}))
    ''')
    assert got["bad"] == [] and got["threads"] == 3 and got["workers"] == 2
    assert got["regions"] > 0


def test_a_launch_wakes_sleeping_workers_and_idle_workers_sleep(tmp_path):
    """With every worker asleep on the futex, a long parallel loop is joined by a worker
    (in at least one of five tries: a loaded machine may run a woken worker late); after
    it the workers fall asleep again, and the idle pool uses next to no CPU time."""
    got = run_script(tmp_path, '''
        g = heavy()
        a = np.random.default_rng(1).random((64, 4096), dtype=np.float32)
        want = np.zeros_like(a)
        for k in range(40):
            want += np.exp(a * np.float32(1e-3 * k))
        joined, ok = [], True
        for _ in range(5):
            wait_asleep()
            before = pool_stats()
            b = np.zeros_like(a)
            g(a, b)
            ok = ok and bool(np.allclose(b, want, rtol=1e-5))
            joined.append(pool_stats()["entries"] - before["entries"])
        wait_asleep()
        cpu0, t0 = time.process_time(), time.perf_counter()
        time.sleep(0.5)
        idle_cpu = time.process_time() - cpu0
        print(json.dumps({"joined": joined, "ok": ok, "idle_cpu": idle_cpu,
                          "idle_wall": time.perf_counter() - t0}))
    ''')
    assert got["ok"]
    assert max(got["joined"]) >= 1, got
    assert got["idle_cpu"] < 0.05, got          # two workers spinning: ~1 s of CPU


def test_many_short_launches_from_threads(tmp_path):
    """Four threads launch thousands of small parallel loops at once (a region already
    running makes the others run inline) while the main thread launches larger ones;
    every result is right and nothing hangs."""
    got = run_script(tmp_path, '''
        f, g = kernel(), kernel(cols=256, scale=4.0)   # (exact products: no fma rounding)
        errors = []

        def launches(seed, kern, cols, scale, count):
            rng = np.random.default_rng(seed)
            for it in range(count):
                rows = int(rng.integers(1, 40))
                a = rng.standard_normal((rows, cols)).astype("float32")
                b = np.empty_like(a)
                kern(a, b)
                if not np.array_equal(b, a * np.float32(scale) + 1):
                    errors.append((seed, it))

        threads = [threading.Thread(target=launches, args=(s, f, 64, 2.0, 3000))
                   for s in range(4)]
        for t in threads:
            t.start()
        launches(99, g, 256, 4.0, 500)
        for t in threads:
            t.join()
        print(json.dumps({"errors": errors[:5], **pool_stats()}))
    ''', timeout=240)
    assert got["errors"] == [] and got["regions"] > 0


def test_threads_building_their_first_parallel_kernels_at_once(tmp_path):
    """Four threads build their first parallel kernels at the same moment: one pool starts
    (two would each start workers, and the engine dropped would free the code its workers
    run: a segfault), and every kernel runs right."""
    for _ in range(2):
        got = run_script(tmp_path, '''
            results, start = {}, threading.Barrier(4)

            def first_build(k):
                start.wait()
                f = kernel(scale=float(k + 2))
                a = np.ones((300, 64), np.float32)
                b = np.zeros_like(a)
                for _ in range(50):
                    f(a, b)
                results[k] = bool(np.all(b == k + 3))

            threads = [threading.Thread(target=first_build, args=(k,)) for k in range(4)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            print(json.dumps({"results": results, "threads": pool_threads(), **pool_stats()}))
        ''', timeout=180)
        assert got["results"] == {str(k): True for k in range(4)}
        assert got["threads"] == 3 and got["workers"] == 2


def test_no_spinning_at_all_and_a_bad_spin_setting(tmp_path):
    got = run_script(tmp_path, '''
        f = kernel()
        a = np.random.default_rng(2).standard_normal((1000, 64)).astype("float32")
        b = np.empty_like(a)
        ok = True
        for _ in range(200):
            f(a, b)
            ok = ok and bool(np.array_equal(b, a * 2 + 1))
        print(json.dumps({"ok": ok, **pool_stats()}))
    ''', env={"TL_SPIN_US": "0"})
    assert got["ok"] and got["workers"] == 2
    script = tmp_path / "bad_spin.py"
    script.write_text(COMMON + "kernel()\n")
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                       timeout=120, env={**os.environ, "TL_SPIN_US": "-5"})
    assert r.returncode != 0 and "TL_SPIN_US must be" in r.stderr


@pytest.mark.parametrize("threads", ["1", "2"])
def test_pool_of_one_or_two_threads(tmp_path, threads):
    """TL_NUM_THREADS=1 starts no workers (loops run on the calling thread); 2 one."""
    got = run_script(tmp_path, '''
        f = kernel()
        a = np.arange(64 * 300, dtype=np.float32).reshape(300, 64)
        b = np.empty_like(a)
        f(a, b)
        print(json.dumps({"ok": bool(np.array_equal(b, a * 2 + 1)), "threads": pool_threads(),
                          **pool_stats()}))
    ''', env={"TL_NUM_THREADS": threads})
    assert got["ok"] and got["threads"] == int(threads)
    assert got["workers"] == int(threads) - 1


ONE_CORE = textwrap.dedent('''
    import os
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})   # the workers inherit it
''') + COMMON + textwrap.dedent('''
    f = kernel()
    a = np.ones((256, 64), np.float32)
    b = np.empty_like(a)
    for _ in range(100):
        f(a, b)
    t0 = time.perf_counter()
    for i in range(2000):
        f(a, b)
        sum(range(200))                 # the caller's own work between launches
    print(json.dumps({"wall": time.perf_counter() - t0, "ok": bool(np.all(b == 3))}))
''')


def test_workers_sharing_the_launching_threads_core_do_not_slow_it(tmp_path):
    """The whole process on one core, the pool's two workers with it: 2000 short parallel
    loops with the caller's own work between them take at most a few times as long as on
    one thread (a wake-up a loop), not the 10 ms a loop that workers spinning on the
    launching thread's core cost (20 s against 0.01)."""
    script = tmp_path / "one_core.py"
    script.write_text(ONE_CORE)
    walls = {}
    for threads in ("3", "1", "3", "1"):
        r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                           timeout=120, env={**os.environ, "TL_NUM_THREADS": threads})
        assert r.returncode == 0, r.stdout + r.stderr
        got = json.loads(r.stdout.strip().splitlines()[-1])
        assert got["ok"]
        walls[threads] = min(walls.get(threads, 1e9), got["wall"])
    assert walls["3"] < 3 * walls["1"] + 0.1, walls
