"""Compiled kernels on disk, shared between processes: the store under the graph executor's
kernel cache (`graph/kernel_cache.py` makes the keys and decides what an entry holds).

An entry is one file, `<folder>/<key>.tlk`, named by the hex digest of its key:

    MAGIC | sha256 of the rest (32 bytes) | length of the header (4 bytes, little endian)
          | the header (JSON: the key's digest, the caller's metadata) | the payload

Writes go to a temporary file in the same folder and are renamed over the entry
(`os.replace` is atomic on POSIX), so a reader sees a whole old entry, a whole new one or
none, whatever other processes write at the same time; two processes that compile the same
kernel write the same entry and the last rename wins. A file that is not a whole entry (a
truncated copy, a disk error, a hand edit) fails its checksum: `get` says so at TL_DEBUG=1,
removes it and answers None, and the caller compiles the kernel again. A folder that cannot
be made or written is no cache (`open_store` answers None and says why at TL_DEBUG=1).

The folder is kept under a size cap (`config.kernel_cache_bytes`): after a write that
takes it past the cap, the least recently used entries (a hit touches its entry's time)
are removed until it is back under nine tenths of the cap.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import tempfile
import threading

from ..config import debug_print

MAGIC = b"TLKCACH1"
SUFFIX = ".tlk"
_HEAD = len(MAGIC) + 32 + 4


class DiskCache:
    """The entries of one folder (see the module)."""

    def __init__(self, folder: str, max_bytes: int):
        self.folder = folder
        self.max_bytes = max_bytes
        self.hits = 0
        self.writes = 0
        self._since_trim = 0
        self._lock = threading.Lock()

    def path(self, digest: str) -> str:
        return os.path.join(self.folder, digest + SUFFIX)

    def get(self, digest: str) -> tuple[dict, bytes] | None:
        """The metadata and payload stored under `digest`, or None (no entry, or one that
        is not whole: removed, said at TL_DEBUG=1)."""
        p = self.path(digest)
        try:
            with open(p, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return None
        except OSError as e:
            debug_print(1, f"kernel cache: cannot read {p} ({e}); compiling the kernel")
            return None
        problem = _problem(data, digest)
        if problem is not None:
            debug_print(1, f"kernel cache: {p} {problem}; removed, compiling the kernel again")
            _remove(p)
            return None
        (n,) = struct.unpack_from("<I", data, len(MAGIC) + 32)
        meta = json.loads(data[_HEAD:_HEAD + n].decode())["meta"]
        try:
            os.utime(p)     # recently used: trimmed last
        except OSError:
            pass
        self.hits += 1
        return meta, data[_HEAD + n:]

    def put(self, digest: str, meta: dict, payload: bytes) -> bool:
        """Store an entry (atomically: see the module); False, said at TL_DEBUG=1, when the
        folder refuses it (the kernel is then simply not cached)."""
        header = json.dumps({"key": digest, "meta": meta}, sort_keys=True).encode()
        rest = struct.pack("<I", len(header)) + header + payload
        data = MAGIC + hashlib.sha256(rest).digest() + rest
        try:
            fd, tmp = tempfile.mkstemp(dir=self.folder, prefix=".tmp-", suffix=SUFFIX)
        except OSError as e:
            debug_print(1, f"kernel cache: cannot write in {self.folder} ({e}); kernel not "
                           "cached")
            return False
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, self.path(digest))
        except OSError as e:
            debug_print(1, f"kernel cache: cannot write {self.path(digest)} ({e}); kernel "
                           "not cached")
            _remove(tmp)
            return False
        self.writes += 1
        with self._lock:
            self._since_trim += len(data)
            due = self._since_trim > self.max_bytes // 16
            if due:
                self._since_trim = 0
        if due:
            self.trim()
        return True

    def entries(self) -> list[tuple[str, int, float]]:
        """(path, bytes, last use) of every entry."""
        out = []
        try:
            names = os.listdir(self.folder)
        except OSError:
            return out
        for name in names:
            if not name.endswith(SUFFIX) or name.startswith(".tmp-"):
                continue
            p = os.path.join(self.folder, name)
            try:
                st = os.stat(p)
            except OSError:
                continue
            out.append((p, st.st_size, st.st_mtime))
        return out

    def trim(self, max_bytes: int | None = None) -> int:
        """Remove the least recently used entries while the folder holds more than
        `max_bytes` (default the cap), down to nine tenths of it; the entries removed."""
        cap = self.max_bytes if max_bytes is None else max_bytes
        entries = self.entries()
        total = sum(size for _, size, _ in entries)
        if total <= cap:
            return 0
        removed = 0
        for p, size, _ in sorted(entries, key=lambda e: e[2]):
            if total <= cap * 9 // 10:
                break
            if _remove(p):
                total -= size
                removed += 1
        debug_print(1, f"kernel cache: {removed} least recently used entries removed from "
                       f"{self.folder} (cap {cap >> 20} MiB)")
        return removed

    def clear(self) -> int:
        """Remove every entry (and stale temporary files); how many entries went."""
        n = 0
        try:
            names = os.listdir(self.folder)
        except OSError:
            return 0
        for name in names:
            if name.endswith(SUFFIX) and _remove(os.path.join(self.folder, name)):
                n += not name.startswith(".tmp-")
        return n


def _problem(data: bytes, digest: str) -> str | None:
    """Why `data` is not a whole entry for `digest`, or None."""
    if len(data) < _HEAD or not data.startswith(MAGIC):
        return "is not a kernel cache entry (wrong header or truncated)"
    if hashlib.sha256(data[len(MAGIC) + 32:]).digest() != data[len(MAGIC):len(MAGIC) + 32]:
        return "fails its checksum (truncated or damaged)"
    (n,) = struct.unpack_from("<I", data, len(MAGIC) + 32)
    try:
        header = json.loads(data[_HEAD:_HEAD + n].decode())
    except ValueError:
        return "has a damaged header"
    if not isinstance(header, dict) or header.get("key") != digest or \
            not isinstance(header.get("meta"), dict):
        return "belongs to another key"
    return None


def _remove(path: str) -> bool:
    try:
        os.unlink(path)
        return True
    except OSError:
        return False


_STORES: dict[tuple[str, int], DiskCache] = {}
_STORES_LOCK = threading.Lock()


def open_store(folder: str | None, max_bytes: int) -> DiskCache | None:
    """The store in `folder` (made if missing), or None — no folder (the cache is off), or
    one that cannot be made or written: said at TL_DEBUG=1, and kernels are compiled in
    every process."""
    if folder is None:
        return None
    with _STORES_LOCK:
        got = _STORES.get((folder, max_bytes))
        if got is not None:
            return got
        try:
            os.makedirs(folder, exist_ok=True)
            if not os.access(folder, os.W_OK | os.X_OK):
                raise PermissionError("not writable")
        except OSError as e:
            debug_print(1, f"kernel cache: no cache in {folder} ({e}); every kernel is "
                           "compiled")
            return None
        got = _STORES[(folder, max_bytes)] = DiskCache(folder, max_bytes)
        return got
