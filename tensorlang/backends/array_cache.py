"""A caching allocator for the arrays the graph executor returns.

`G.Executor.run(feed)` without `out=` hands the caller a new array per output per run. A
large one is a new mapping of memory each time (glibc maps every block above 32 MiB
afresh), and the page faults of its first write cost as much as the kernel that writes
it (E = D + (A+B)*C over 2^24 floats: 64 MiB). As torch's caching allocator does, the
memory of an array the caller has let go of goes back to a cache and serves the next
array of its size, its pages already mapped.

How an array's memory comes back: the returned array views a block through a small lease
object (numpy's `__array_interface__`), which becomes the array's `base`. Every view of the
array holds the array, so the lease lives until the array and every view of it are gone;
its finalizer then puts the block back. The returned arrays are ordinary, independent
numpy arrays: a block serves one live array at a time.

Blocks come in size classes, four per power of two (at most 25% larger than asked for,
and at least 64 bytes apart), each 64-byte aligned as the executor's buffers are (a
vector of a row in one cache line). Freed blocks are kept, most recently freed first,
while they total at most `limit()` bytes (TL_ARRAY_CACHE_MB, `config.array_cache_bytes`;
default the smaller of 1 GiB and an eighth of the machine's memory); past that the least
recently freed go back to the system. `empty_cache()` lets every cached block go,
`set_limit(n)` changes the cap, `info()` reports the cache. A cap of 0 turns the cache
off (every array new, as `aligned_empty` makes them).

Threads: one lock guards the cache. A block freed while the lock is taken (by another
thread, or by this one when the garbage collector runs a finalizer inside the cache's own
code) waits in a queue that the next call empties, so a finalizer never blocks. After
fork() the child gets a new lock (a thread that held the parent's does not exist there);
its cached blocks are its own copies and stay valid.
"""

from __future__ import annotations

import collections
import math
import os
import threading

import numpy as np

from ..config import array_cache_bytes
from ..errors import TensorlangError
from .runtime import aligned_empty

ALIGN = 64


def size_class(nbytes: int) -> int:
    """The block size that serves an array of `nbytes` (> 0): rounded up to a quarter of
    its power of two, and to a multiple of 64 bytes."""
    step = max(ALIGN, 1 << max(nbytes.bit_length() - 3, 0))
    return -(-nbytes // step) * step


class _Block:
    """Cached memory: `raw` owns it, `addr` is its first 64-byte aligned byte."""

    __slots__ = ("raw", "addr", "size")

    def __init__(self, size: int):
        self.raw = np.empty(size + ALIGN, np.uint8)
        base = self.raw.ctypes.data
        self.addr = base + (-base) % ALIGN
        self.size = size


class _Lease:
    """The base of an array the cache handed out; gone with the last view of the array,
    when its block goes back to the cache."""

    __slots__ = ("__array_interface__", "block", "cache")

    def __init__(self, block: _Block, cache: ArrayCache, shape: tuple, dtype: np.dtype):
        self.block, self.cache = block, cache
        self.__array_interface__ = {"data": (block.addr, False), "shape": shape,
                                    "typestr": dtype.str, "descr": dtype.descr,
                                    "version": 3}

    def __del__(self):
        self.cache._give_back(self.block)


class ArrayCache:
    """Freed blocks by size class, with the cap on their total (see the module's text)."""

    def __init__(self, limit: int | None = None):
        self._lock = threading.Lock()
        self._limit = limit
        self._free: dict[int, list[_Block]] = {}        # size -> blocks, last freed last
        self._order: collections.OrderedDict[int, _Block] = collections.OrderedDict()
        self._returned: collections.deque[_Block] = collections.deque()
        self._cached = 0
        self._kinds: dict[tuple, tuple[int, tuple, np.dtype]] = {}
        self.hits = self.misses = 0

    # ---------------------------------------------------------------- the public side
    def limit(self) -> int:
        """The cap on cached bytes (TL_ARRAY_CACHE_MB when first asked, unless set)."""
        if self._limit is None:
            self._limit = default_limit()
        return self._limit

    def set_limit(self, nbytes: int) -> None:
        """Cap the cached bytes at `nbytes` (0: cache nothing), letting the least recently
        freed blocks go until they fit."""
        if isinstance(nbytes, bool) or not isinstance(nbytes, (int, np.integer)) or \
                nbytes < 0:
            raise TensorlangError(f"set_array_cache_limit: nbytes must be an int >= 0, got "
                                  f"{nbytes!r}")
        with self._lock:
            self._limit = int(nbytes)
            self._drain()
            self._trim()

    def empty(self, shape, dtype) -> np.ndarray:
        """An uninitialised C-contiguous array on a 64-byte boundary, from a cached block
        when one of its size class is free."""
        kind = self._kinds.get((shape, dtype)) if type(shape) is tuple else None
        if kind is None:
            kind = self._kind(shape, dtype)
        size, shape, dtype = kind
        if size == 0 or self.limit() == 0:
            return aligned_empty(shape, dtype, ALIGN)
        block = None
        with self._lock:
            if self._returned:
                self._drain()
            blocks = self._free.get(size)
            if blocks:
                block = blocks.pop()
                del self._order[id(block)]
                self._cached -= size
                self.hits += 1
            else:
                self.misses += 1
        if block is None:
            block = _Block(size)
        if dtype.kind == "V":
            # ml_dtypes' types (bfloat16, float8) have no array-interface type string of
            # their own ("<V2"): the block as unsigned integers of their size, viewed
            bits = np.dtype(f"u{dtype.itemsize}")
            return np.asarray(_Lease(block, self, shape, bits)).view(dtype)
        return np.asarray(_Lease(block, self, shape, dtype))

    def _kind(self, shape, dtype) -> tuple[int, tuple, np.dtype]:
        """(size class, shape, dtype) of an array, remembered for the next ask (an
        executor asks for the same few shapes every run)."""
        dt = np.dtype(dtype)
        dims = tuple(int(s) for s in (shape if isinstance(shape, (tuple, list)) else (shape,)))
        if any(d < 0 for d in dims):
            raise TensorlangError(f"array cache: shape must not be negative, got {dims}")
        nbytes = math.prod(dims) * dt.itemsize
        kind = (size_class(nbytes) if nbytes else 0, dims, dt)
        if type(shape) is tuple and len(self._kinds) < 1024:
            self._kinds[(shape, dtype)] = kind
        return kind

    def empty_cache(self) -> None:
        """Let every cached block go back to the system (arrays in use keep theirs, which
        come back to the cache when they are freed)."""
        with self._lock:
            self._drain()
            self._free.clear()
            self._order.clear()
            self._cached = 0

    def info(self) -> dict[str, int]:
        """`cached_bytes` and `cached_blocks` (free, kept for reuse), `limit`, and `hits`
        and `misses` (arrays served from the cache, and newly allocated)."""
        with self._lock:
            self._drain()
            return {"cached_bytes": self._cached, "cached_blocks": len(self._order),
                    "limit": self.limit(), "hits": self.hits, "misses": self.misses}

    # -------------------------------------------------------------------- the inside
    def _give_back(self, block: _Block) -> None:
        if self._lock.acquire(blocking=False):
            try:
                self._put(block)
            finally:
                self._lock.release()
        else:       # taken: by another thread, or by this one (a finalizer run by the GC)
            self._returned.append(block)

    def _drain(self) -> None:
        while self._returned:
            self._put(self._returned.popleft())

    def _put(self, block: _Block) -> None:
        if block.size > self.limit():
            return                               # the block goes back to the system
        self._free.setdefault(block.size, []).append(block)
        self._order[id(block)] = block
        self._cached += block.size
        self._trim()

    def _trim(self) -> None:
        while self._cached > self.limit():
            _, old = self._order.popitem(last=False)     # the least recently freed
            self._free[old.size].remove(old)
            self._cached -= old.size

    def _after_fork_in_child(self) -> None:
        self._lock = threading.Lock()


DEFAULT_LIMIT = 1 << 30


def default_limit() -> int:
    """TL_ARRAY_CACHE_MB when set; else the smaller of DEFAULT_LIMIT (1 GiB) and an eighth
    of the machine's physical memory (where the OS says how much: POSIX sysconf)."""
    set_ = array_cache_bytes()
    if set_ is not None:
        return set_
    if hasattr(os, "sysconf") and "SC_PHYS_PAGES" in os.sysconf_names:
        return min(DEFAULT_LIMIT, os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 8)
    return DEFAULT_LIMIT


CACHE = ArrayCache()
if hasattr(os, "register_at_fork"):        # POSIX
    os.register_at_fork(after_in_child=CACHE._after_fork_in_child)


def empty(shape, dtype) -> np.ndarray:
    """An uninitialised C-contiguous 64-byte aligned array from the process's cache."""
    return CACHE.empty(shape, dtype)


def data_address(a: np.ndarray) -> int | None:
    """The address of the data of an array `empty` returned (its lease's block: no
    numpy `ctypes` object needed), None for any other array (a view of one included)."""
    base = a.base
    return base.block.addr if type(base) is _Lease else None


def empty_cache() -> None:
    """Free every block the array cache keeps (arrays in use are not touched)."""
    CACHE.empty_cache()


def info() -> dict[str, int]:
    """The array cache's `cached_bytes`, `cached_blocks`, `limit`, `hits` and `misses`."""
    return CACHE.info()


def set_limit(nbytes: int) -> None:
    """Cap the bytes the array cache keeps (0: keep none); overrides TL_ARRAY_CACHE_MB."""
    CACHE.set_limit(nbytes)
