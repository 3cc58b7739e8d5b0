"""The array cache (backends/array_cache.py): a freed array's block serves the next array of
its size class, never while the array or a view of it lives; the cap holds; threads and
fork() are safe. Each test makes its own ArrayCache, so the process's cache (the
executor's) is not disturbed."""

import gc
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

import tensorlang as tl
from tensorlang.backends import array_cache
from tensorlang.backends.array_cache import ArrayCache, size_class


def test_size_classes_are_quarters_of_a_power_of_two_on_64_bytes():
    assert [size_class(n) for n in (1, 64, 65, 1000, 1024, 1025, 1 << 24)] == \
        [64, 64, 128, 1024, 1024, 1280, 1 << 24]
    for n in np.random.default_rng(0).integers(1, 1 << 30, 2000):
        c = size_class(int(n))
        assert n <= c < max(1.25 * n + 1, n + 64) and c % 64 == 0


def test_a_freed_array_serves_the_next_one_of_its_size():
    cache = ArrayCache(limit=1 << 30)
    a = cache.empty((1000, 100), "float32")
    addr = a.ctypes.data
    assert addr % 64 == 0 and a.flags.c_contiguous and a.flags.writeable
    del a
    b = cache.empty((1000, 100), "float32")
    assert b.ctypes.data == addr
    c = cache.empty((50, 2000), "float32")           # same bytes, another shape: b is alive
    assert c.ctypes.data != addr and c.shape == (50, 2000)
    del c
    d = cache.empty((100_000,), "int32")            # a different dtype of the same size
    assert d.ctypes.data != addr and d.dtype == np.int32
    info = cache.info()
    assert (info["hits"], info["misses"]) == (2, 2)


VIEWS = {"slice": lambda a: a[3:5], "transpose": lambda a: a.T,
         "reshape": lambda a: a.reshape(-1), "bytes": lambda a: a.view(np.uint8),
         "asarray": np.asarray, "memoryview": memoryview}


@pytest.mark.parametrize("kind", VIEWS)
def test_no_reuse_while_a_view_lives(kind):
    cache = ArrayCache(limit=1 << 30)
    a = cache.empty((64, 64), "float64")
    a[...] = 7.0
    addr = a.ctypes.data
    view = VIEWS[kind](a)
    del a
    gc.collect()
    b = cache.empty((64, 64), "float64")
    assert b.ctypes.data != addr
    b[...] = -1.0
    seen = np.ascontiguousarray(view).view(np.uint8).reshape(-1)
    assert np.array_equal(seen, np.full(seen.size // 8, 7.0).view(np.uint8))   # untouched
    del view, seen
    assert cache.empty((64, 64), "float64").ctypes.data == addr   # gone: reused


def test_a_kept_array_keeps_its_data_across_many_allocations():
    cache = ArrayCache(limit=1 << 30)
    kept = []
    for k in range(50):
        a = cache.empty((257,), "float32")
        a[...] = k
        if k % 7 == 0:
            kept.append((k, a))
        del a
    for k, a in kept:
        assert np.all(a == k)


def test_the_cap_holds_and_evicts_the_least_recently_freed():
    cache = ArrayCache(limit=3 << 20)
    arrays = [cache.empty((1 << 20,), np.uint8) for _ in range(5)]
    first = arrays[0].ctypes.data
    last = arrays[4].ctypes.data
    while arrays:                       # freed first to last
        del arrays[0]
    info = cache.info()
    assert info["cached_bytes"] <= 3 << 20 and info["cached_blocks"] == 3
    assert cache.empty((1 << 20,), np.uint8).ctypes.data == last   # most recently freed
    got = [cache.empty((1 << 20,), np.uint8).ctypes.data for _ in range(2)]
    assert first not in got                                         # evicted
    big = cache.empty((4 << 20,), np.uint8)                         # larger than the cap
    del big
    assert cache.info()["cached_bytes"] <= 3 << 20
    cache.set_limit(0)
    assert cache.info()["cached_bytes"] == 0
    a = cache.empty((1000,), np.float32)        # a cap of 0: plain aligned arrays
    assert a.ctypes.data % 64 == 0 and a.base is not None
    del a
    assert cache.info()["cached_blocks"] == 0
    with pytest.raises(tl.TensorlangError, match="set_array_cache_limit: nbytes"):
        cache.set_limit(-1)
    with pytest.raises(tl.TensorlangError, match="set_array_cache_limit: nbytes"):
        cache.set_limit(1.5)


def test_empty_cache_lets_every_block_go():
    cache = ArrayCache(limit=1 << 30)
    arrays = [cache.empty((100, 100), "float32") for _ in range(4)]
    del arrays
    assert cache.info()["cached_blocks"] == 4
    cache.empty_cache()
    assert cache.info() | {"hits": 0, "misses": 0} == {
        "cached_bytes": 0, "cached_blocks": 0, "limit": 1 << 30, "hits": 0, "misses": 0}


def test_zero_sized_and_scalar_arrays():
    cache = ArrayCache(limit=1 << 30)
    for shape, dtype in (((0, 5), "float32"), ((), "float64"), ((3,), "bool"),
                         ((2, 3), "float16"), ((4,), "int64")):
        a = cache.empty(shape, dtype)
        assert a.shape == shape and a.dtype == np.dtype(dtype) and a.flags.c_contiguous
        assert a.size == 0 or a.ctypes.data % 64 == 0


def test_a_block_freed_inside_the_cache_waits_for_the_next_call():
    """A finalizer that runs while the cache's lock is held (the garbage collector inside
    the cache's own code, or another thread) queues its block instead of blocking."""
    cache = ArrayCache(limit=1 << 30)
    a = cache.empty((1000,), "float32")
    addr = a.ctypes.data
    with cache._lock:
        del a                            # the finalizer cannot take the lock: queued
        assert len(cache._returned) == 1
    assert cache.empty((1000,), "float32").ctypes.data == addr


def test_threads_share_the_cache():
    cache = ArrayCache(limit=64 << 20)
    errors = []

    def work(seed):
        rng = np.random.default_rng(seed)
        live = []
        for it in range(400):
            n = int(rng.integers(1, 50_000))
            a = cache.empty((n,), "float32")
            a[...] = seed * 1000 + it
            live.append((seed * 1000 + it, a))
            if len(live) > 5:
                v, old = live.pop(int(rng.integers(0, len(live))))
                if not np.all(old == v):
                    errors.append((seed, it))
        for v, old in live:
            if not np.all(old == v):
                errors.append((seed, "end"))

    threads = [threading.Thread(target=work, args=(s,)) for s in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    info = cache.info()
    assert info["hits"] > 0 and info["cached_bytes"] <= 64 << 20


FORK = textwrap.dedent('''
    import os, threading
    import numpy as np
    from tensorlang.backends import array_cache

    stop = False
    def churn():                   # holds the cache's lock now and then, as fork() comes
        while not stop:
            a = array_cache.empty((4096,), "float32")
            a[...] = 1
            del a
    t = threading.Thread(target=churn)
    t.start()
    kept = array_cache.empty((1000,), "float64")
    kept[...] = 5
    for _ in range(20):
        pid = os.fork()
        if pid == 0:
            ok = bool(np.all(kept == 5))
            for k in range(50):
                b = array_cache.empty((4096,), "float32")
                b[...] = k
                ok = ok and bool(np.all(b == k))
                del b
            os._exit(0 if ok else 3)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0, status
    stop = True
    t.join()
    print("OK")
''')


def test_fork_while_another_thread_uses_the_cache(tmp_path):
    script = tmp_path / "fork_cache.py"
    script.write_text(FORK)
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0 and "OK" in r.stdout, r.stdout + r.stderr


def test_the_limit_comes_from_TL_ARRAY_CACHE_MB(monkeypatch):
    monkeypatch.setenv("TL_ARRAY_CACHE_MB", "2.5")
    assert ArrayCache().limit() == int(2.5 * (1 << 20))
    monkeypatch.setenv("TL_ARRAY_CACHE_MB", "0")
    assert ArrayCache().limit() == 0
    for bad in ("-1", "lots", "inf", "nan"):
        monkeypatch.setenv("TL_ARRAY_CACHE_MB", bad)
        with pytest.raises(tl.TensorlangError, match="TL_ARRAY_CACHE_MB"):
            ArrayCache().empty((10,), "float32")
    monkeypatch.delenv("TL_ARRAY_CACHE_MB")
    assert 0 < ArrayCache().limit() <= array_cache.DEFAULT_LIMIT
