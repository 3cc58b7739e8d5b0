"""The graph executor's compiled kernels: each distinct fused group compiled once per
machine, its machine code kept on disk for later processes, the misses of a plan compiled
by several processes at once, with a progress bar.

Three levels, tried in turn for each group of a plan:
1. this process's kernels (`executor._KERNELS`, by group, shapes, dtypes, target and
   schedules);
2. the kernel cache on disk (`backends/disk_cache.py`, `config.kernel_cache_dir`): the
   machine code and signature of a host kernel under a key of everything that decides
   them (`group_digest`) — the group's ops, attributes and wiring, the input shapes and
   dtypes, the schedule mode, the target with its CPU, features and machine facts, the
   thread pool's size, every TL_* setting that can change code, and the versions of
   tensorlang (a hash of its sources), llvmlite, LLVM, islpy and numpy. A schedule taken
   from the tuning log depends on the log too: the entry records the group's tuning-log
   key and a digest of its records there, and is used only while they are unchanged (a
   later `tensorlang tune` record makes it stale: compiled again and replaced);
3. compiled: by `config.compile_jobs()` processes forked from this one when there are
   several groups to compile (each returns the machine code; this process loads it), else
   here.

Nothing in the cache is ever trusted beyond its key: an entry that fails its checksum or
does not load is compiled again (TL_DEBUG=1 says so), and a cache that cannot be used
(TL_KERNEL_CACHE=0, a folder that cannot be written, a GPU target) is no cache, said at
TL_DEBUG=1.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import sys
import threading

import numpy as np

import tensorlang as tl

from ..autoschedule.tuning_log import ranked_records
from ..backends.disk_cache import open_store
from ..backends.llvm import KernelObject
from ..backends.llvm.pool import ensure_pool, pool_threads
from ..backends.llvm.target import new_target_machine
from ..config import (compile_jobs, debug_print, kernel_cache_bytes, kernel_cache_dir,
                      settings_fingerprint)
from ..driver import Module, build_host_object, load_host_object, module_entry
from ..target import GPU_KINDS, Target, backend_kind
from ..errors import TensorlangError

# what an entry holds, and how its key is made: a change of either makes older entries
# foreign (they are never found, and age out of the folder)
FORMAT = 2

# groups below this many to compile are compiled in this process (starting workers costs
# more than it saves)
PARALLEL_MIN = 3

_FINGERPRINT: list[str] = []
_FINGERPRINT_LOCK = threading.Lock()

# what each level served, for tests and TL_DEBUG: this process's kernels are counted by
# the executor; "disk" hits, "compiled" kernels (here or in a worker), "workers" among them
COUNTS = {"disk": 0, "compiled": 0, "workers": 0}


def code_fingerprint() -> str:
    """A digest of what compiles a kernel apart from its inputs: tensorlang's sources (any
    edit, any version) and the versions of the libraries that take part in it."""
    with _FINGERPRINT_LOCK:
        if _FINGERPRINT:
            return _FINGERPRINT[0]
        import islpy
        import llvmlite
        import llvmlite.binding as llvm

        h = hashlib.sha256()
        root = os.path.dirname(os.path.abspath(tl.__file__))
        for folder, dirs, files in os.walk(root):
            dirs.sort()
            for name in sorted(files):
                if name.endswith(".py"):
                    path = os.path.join(folder, name)
                    h.update(os.path.relpath(path, root).encode() + b"\0")
                    with open(path, "rb") as f:
                        h.update(f.read() + b"\0")
        versions = (tl.__version__, llvmlite.__version__, llvm.llvm_version_info,
                    islpy.__version__, np.__version__, sys.version_info[:2], sys.platform)
        h.update(repr(versions).encode())
        _FINGERPRINT.append(h.hexdigest())
        return _FINGERPRINT[0]


def machine_fingerprint() -> tuple:
    """The host target as code generation sees it: its triple, CPU and features (LLVM's view
    of this CPU too), its machine facts (the schedules' cost model reads them), and the
    thread pool's size (parallel loops are split for it)."""
    tgt = Target.parse("llvm")
    threads = pool_threads() or ensure_pool(new_target_machine(tgt))
    return (str(tgt), repr(tgt), repr(tgt.cpu_model), _llvm_host(), threads)


@functools.cache
def _llvm_host() -> tuple[str, str]:
    """LLVM's name and features of this CPU (fixed for the process's life)."""
    import llvmlite.binding as llvm

    return llvm.get_host_cpu_name(), llvm.get_host_cpu_features().flatten()


def group_digest(members: tuple, shapes: tuple, dtypes: tuple, mode: str) -> str | None:
    """The disk key of a host kernel: a hex digest of everything that decides its machine
    code (see the module), or None when the group's description does not print as plain
    data (an attribute whose repr names an object's address: no key is safe for it)."""
    text = repr((FORMAT, members, shapes, dtypes, mode))
    if " at 0x" in text:
        return None
    whole = repr((text, code_fingerprint(), machine_fingerprint(), settings_fingerprint()))
    return hashlib.sha256(whole.encode()).hexdigest()


def records_digest(log: str | None, program_key: str | None, model: bool) -> str:
    """A digest of the tuning log's records for one program: the entry of a schedule read
    from the log is good while this is unchanged."""
    if log is None or program_key is None:
        return ""
    recs = ranked_records(log, program_key, model=model)
    return hashlib.sha256(json.dumps(recs, sort_keys=True).encode()).hexdigest()


def store():
    """The disk store of this process's settings, or None (off or unusable: said at
    TL_DEBUG=1 by `open_store`)."""
    folder = kernel_cache_dir()
    if folder is None:
        debug_print(1, "kernel cache: off (TL_KERNEL_CACHE=0)")
        return None
    return open_store(folder, kernel_cache_bytes())


def host_cacheable(target: str) -> bool:
    """Whether the group kernels of `target` go through the disk cache: host LLVM kernels
    ("llvm"); a GPU target's, and a CPU target named otherwise ("llvm -mcpu=x86-64"), are
    compiled in each process for that target (said at TL_DEBUG=1)."""
    if backend_kind(target) in GPU_KINDS or str(target).strip() != "llvm":
        debug_print(1, f"kernel cache: {target} kernels are not kept on disk; compiling")
        return False
    return True


def entry_payload(entry: dict, code: KernelObject) -> tuple[dict, bytes]:
    if code.externs:        # a graph op's kernel calls no extern stage; another process
        raise TensorlangError(  # would not have their libraries or Python callbacks
            f"internal: kernel {code.name} calls extern symbols {sorted(code.externs)}; "
            "it cannot go into the kernel cache")
    meta = dict(entry, recorded=code.recorded, parallel=code.parallel, name=code.name,
                undefined=list(code.undefined))
    return meta, code.obj


def load_entry(meta: dict, obj: bytes, rebuild) -> Module:
    """The module of a disk entry or a worker's result, loaded here."""
    code = KernelObject(meta["name"], obj, bool(meta["recorded"]), bool(meta["parallel"]),
                        tuple(meta["undefined"]))
    return load_host_object(meta, code, rebuild)


def compile_host(members, shapes, dtypes, schedules, scheduler) -> tuple[dict, KernelObject,
                                                                         Module]:
    """Schedule and compile one group for the host without loading it: (the entry's
    metadata without the machine code, the machine code, the module without its kernel).
    `scheduler(members, shapes,
    dtypes, target, schedules)` is the executor's: (schedule, inputs, output, the tuning
    log, the program's key there or None, the resolved mode)."""
    s, ins, out, log, pkey, mode = scheduler(members, shapes, dtypes, "llvm", schedules)
    read = {id(t.op) for t in s.placeholders}
    used = tuple(k for k, t in enumerate(ins) if id(t.op) in read)  # "like" inputs: shape only
    name = "graph_" + "_".join(dict.fromkeys(m[0] for m in members))[:48]
    module, code = build_host_object(s, [*(ins[k] for k in used), out], name=name)
    entry = dict(module_entry(module), used=list(used), log=log, program_key=pkey,
                 records=records_digest(log, pkey, mode == "model"))
    return entry, code, module


def _worker(job):
    """A forked worker's compile of one group: ("ok", metadata, machine code, its stderr) or
    ("error", text, its stderr): the parent compiles a failed group itself, so that its
    error is raised there as it would be without workers. What the compile prints
    (TL_DEBUG) goes back to the parent, which prints it where its own stderr goes."""
    import contextlib
    import io

    members, shapes, dtypes, schedules, scheduler, settings = job
    if settings != settings_fingerprint():      # the key was made for other settings
        return "error", "the worker's settings differ from its parent's", ""
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            entry, code, _ = compile_host(members, shapes, dtypes, schedules, scheduler)
    except BaseException as e:      # noqa: BLE001 (reported to the parent, which retries)
        return "error", f"{type(e).__name__}: {e}", err.getvalue()
    meta, obj = entry_payload(entry, code)
    return "ok", meta, obj, err.getvalue()


def can_fork(n: int) -> bool:
    """Whether `n` groups are compiled by forked workers: several to compile, more than one
    job allowed, fork available, and this the only Python thread (a lock another thread
    held at the fork would never be released in the child)."""
    if n < PARALLEL_MIN or compile_jobs() < 2:
        return False
    if not hasattr(os, "fork"):
        return False
    if threading.active_count() > 1:
        debug_print(1, f"kernel cache: {n} kernels compiled in this process (other Python "
                       "threads run: no worker processes are forked)")
        return False
    return True


def compile_forked(jobs: list, progress) -> list:
    """Each job's `_worker` result, computed by `compile_jobs()` forked processes; a job is
    (members, shapes, dtypes, schedules, scheduler) as `compile_host` takes them."""
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor, as_completed

    n = min(compile_jobs(), len(jobs))
    results = [None] * len(jobs)
    # the slowest first (convolutions and matmuls, then larger groups), so that no worker
    # starts a long one when the others are done
    order = sorted(range(len(jobs)), key=lambda k: -_weight(jobs[k][0]))
    with ProcessPoolExecutor(n, mp_context=mp.get_context("fork")) as ex:
        settings = settings_fingerprint()
        futures = {ex.submit(_worker, (*jobs[k], settings)): k for k in order}
        for f in as_completed(futures):
            try:
                got = f.result()
            except Exception as e:      # noqa: BLE001 (a worker that died: retried here)
                got = ("error", f"{type(e).__name__}: {e}", "")
            if got[-1]:
                sys.stderr.write(got[-1])
            results[futures[f]] = got
            progress()
    return results


def _weight(members: tuple) -> int:
    """A rough rank of a group's compile time: a convolution or matmul heads it, then its
    size."""
    heavy = any(op in ("conv2d", "conv", "matmul") for op, _, _ in members)
    return 1000 * heavy + len(members)


def progress_bar(total: int):
    """A tqdm bar of `total` kernels on a terminal (none in a log or without tqdm): its
    update function and its close function."""
    if total < 1 or not sys.stderr.isatty():
        return (lambda: None), (lambda: None)
    try:
        from tqdm import tqdm
    except ImportError:   # the bar is optional
        return (lambda: None), (lambda: None)
    bar = tqdm(total=total, desc="compiling kernels", unit="kernel", leave=False)
    return (lambda: bar.update(1)), bar.close
