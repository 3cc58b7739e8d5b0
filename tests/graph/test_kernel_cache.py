"""The executor's kernel cache on disk (`graph/kernel_cache.py`, `backends/disk_cache.py`):
a second process compiles nothing, a damaged entry is compiled again, processes that write
at once leave whole entries, an unusable folder is no cache, and the key tells apart what
changes the code. Every test uses a folder of its own (TL_CACHE_DIR)."""

import json
import multiprocessing as mp
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from tensorlang import graph as G
from tensorlang.backends import disk_cache as DC
from tensorlang.graph import executor as E
from tensorlang.graph import kernel_cache as KC

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# three kernels (a matmul with its relu, a softmax, a row sum): a plan's worth of groups,
# enough for the forked workers (PARALLEL_MIN)
SCRIPT = textwrap.dedent('''
    import json, sys
    import numpy as np
    from tensorlang import graph as G
    from tensorlang.graph import kernel_cache as KC

    rng = np.random.default_rng(0)
    x = G.Variable("x", (16, 24), "float32")
    wv = rng.standard_normal((24, 8)).astype(np.float32)
    y = G.relu(G.matmul(x, G.constant(wv)))
    z = G.sum(G.softmax(y), axis=1)
    xv = rng.standard_normal((16, 24)).astype(np.float32)
    got = G.Executor([y, z]).run({x: xv})
    want = np.maximum(xv @ wv, 0)
    e = np.exp(want - want.max(axis=1, keepdims=True))
    ok = np.allclose(got[0], want, atol=1e-5) and np.allclose(
        got[1], (e / e.sum(axis=1, keepdims=True)).sum(axis=1), atol=1e-5)
    print(json.dumps(dict(KC.COUNTS, ok=bool(ok))))
''')


def _env(folder, **extra) -> dict:
    env = dict(os.environ, TL_CACHE_DIR=str(folder), TL_KERNEL_CACHE="1",
               PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.update(extra)
    return env


def _run(folder, **extra) -> dict:
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                         env=_env(folder, **extra), timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return dict(json.loads(out.stdout.strip().splitlines()[-1]), stderr=out.stderr)


def _entries(folder) -> list:
    d = folder / "kernels"
    return sorted(p for p in d.iterdir() if p.suffix == DC.SUFFIX)


def test_a_second_process_compiles_nothing(tmp_path):
    first = _run(tmp_path)
    assert first["ok"] and first["disk"] == 0 and first["compiled"] >= 3
    assert len(_entries(tmp_path)) == first["compiled"]
    if (os.cpu_count() or 1) > 1:       # compiled side by side by forked workers
        assert first["workers"] == first["compiled"]
    second = _run(tmp_path)
    assert second["ok"] and second["compiled"] == 0 and second["disk"] == first["compiled"]
    # another setting that changes code (fast math) shares nothing with them
    third = _run(tmp_path, TL_FASTMATH="1")
    assert third["ok"] and third["disk"] == 0 and third["compiled"] == first["compiled"]


def test_the_cache_off_or_in_an_unusable_folder_compiles_and_says_why(tmp_path):
    off = _run(tmp_path, TL_KERNEL_CACHE="0", TL_DEBUG="1")
    assert off["ok"] and off["disk"] == 0 and "kernel cache: off" in off["stderr"]
    assert not (tmp_path / "kernels").exists()
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    got = _run(blocker, TL_DEBUG="1")       # the kernels' folder would be inside a file
    assert got["ok"] and got["disk"] == 0 and got["compiled"] >= 3
    assert "kernel cache: no cache in" in got["stderr"]


def _small_graph():
    x = G.Variable("x", (8, 12), "float32")
    wv = np.arange(96, dtype=np.float32).reshape(12, 8) / 50
    y = G.tanh(G.matmul(x, G.constant(wv)))
    xv = np.linspace(-1, 1, 96, dtype=np.float32).reshape(8, 12)
    return [y], {x: xv}, np.tanh(xv @ wv)


@pytest.fixture
def cache_here(tmp_path, monkeypatch):
    """The kernel cache on, in this test's folder, and no kernel compiled in this process."""
    monkeypatch.setenv("TL_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("TL_KERNEL_CACHE", "1")
    monkeypatch.setattr(E, "_KERNELS", type(E._KERNELS)())
    return tmp_path


@pytest.mark.parametrize("damage", ["truncate", "flip", "empty", "foreign"])
def test_a_damaged_entry_is_compiled_again_and_said(cache_here, monkeypatch, capsys, damage):
    nodes, feed, want = _small_graph()
    np.testing.assert_allclose(G.Executor(nodes).run(feed)[0], want, rtol=1e-5, atol=1e-6)
    (entry,) = _entries(cache_here)
    data = entry.read_bytes()
    if damage == "truncate":
        entry.write_bytes(data[:len(data) // 2])
    elif damage == "flip":
        entry.write_bytes(data[:-5] + bytes([data[-5] ^ 1]) + data[-4:])
    elif damage == "empty":
        entry.write_bytes(b"")
    else:       # a whole entry of another key, copied over this one
        other = DC.DiskCache(str(cache_here / "kernels"), 1 << 30)
        other.put("0" * 64, {"x": 1}, b"code")
        os.replace(other.path("0" * 64), entry)
    E._KERNELS.clear()
    monkeypatch.setenv("TL_DEBUG", "1")
    before = dict(KC.COUNTS)
    np.testing.assert_allclose(G.Executor(nodes).run(feed)[0], want, rtol=1e-5, atol=1e-6)
    assert KC.COUNTS["compiled"] == before["compiled"] + 1
    assert KC.COUNTS["disk"] == before["disk"]
    err = capsys.readouterr().err
    assert f"kernel cache: {entry}" in err and "compiling the kernel again" in err
    # the entry was written again, whole: the next process (here: an empty memory) hits it
    E._KERNELS.clear()
    np.testing.assert_allclose(G.Executor(nodes).run(feed)[0], want, rtol=1e-5, atol=1e-6)
    assert KC.COUNTS["disk"] == before["disk"] + 1


def test_a_cached_module_checks_its_arguments_and_shows_its_loops(cache_here):
    nodes, feed, want = _small_graph()
    G.Executor(nodes).run(feed)
    E._KERNELS.clear()
    ex = G.Executor(nodes)
    np.testing.assert_allclose(ex.run(feed)[0], want, rtol=1e-5, atol=1e-6)
    (k,) = ex.kernels
    mod = k.module
    assert type(mod).__name__ == "CachedModule"
    with pytest.raises(Exception, match="shape"):
        mod(np.zeros((8, 13), np.float32), np.zeros((12, 8), np.float32),
            np.zeros((8, 8), np.float32))
    assert "for " in mod.get_source("loops")       # compiled again on demand
    assert mod.get_source("ll")


def test_a_read_only_store_degrades_to_no_cache(cache_here, monkeypatch, capsys):
    def refuse(*a, **k):
        raise PermissionError("read-only file system")
    monkeypatch.setattr(DC.tempfile, "mkstemp", refuse)
    monkeypatch.setenv("TL_DEBUG", "1")
    nodes, feed, want = _small_graph()
    np.testing.assert_allclose(G.Executor(nodes).run(feed)[0], want, rtol=1e-5, atol=1e-6)
    assert "kernel cache: cannot write in" in capsys.readouterr().err
    assert not _entries(cache_here)


def _writer(folder: str, k: int, rounds: int) -> None:
    store = DC.DiskCache(folder, 1 << 30)
    for r in range(rounds):
        key = f"{r % 3:064x}"            # three keys, written by every process
        payload = bytes([r % 3]) * (50_000 + 7 * (r % 3))
        store.put(key, {"writer": k, "round": r}, payload)
        got = store.get(key)
        assert got is not None and got[1] == bytes([r % 3]) * (50_000 + 7 * (r % 3))


def test_processes_writing_at_once_leave_whole_entries(tmp_path):
    folder = str(tmp_path)
    ctx = mp.get_context("fork")
    procs = [ctx.Process(target=_writer, args=(folder, k, 60)) for k in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0] * 4
    store = DC.DiskCache(folder, 1 << 30)
    for r in range(3):
        meta, payload = store.get(f"{r:064x}")
        assert payload == bytes([r]) * (50_000 + 7 * r)
    assert not [n for n in os.listdir(folder) if n.startswith(".tmp-")]


def test_two_processes_compiling_one_graph_at_once(tmp_path):
    procs = [subprocess.Popen([sys.executable, "-c", SCRIPT], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True,
                              env=_env(tmp_path, TL_COMPILE_JOBS="1")) for _ in range(2)]
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err[-3000:]
        assert json.loads(out.strip().splitlines()[-1])["ok"]
    after = _run(tmp_path)
    assert after["ok"] and after["compiled"] == 0


def test_the_store_keeps_under_its_cap(tmp_path):
    store = DC.DiskCache(str(tmp_path), 100_000)
    for k in range(12):
        store.put(f"{k:064x}", {}, b"x" * 20_000)
    total = sum(size for _, size, _ in store.entries())
    assert total <= 100_000
    assert store.get(f"{11:064x}") is not None         # the newest stays
    n = len(store.entries())
    assert store.clear() == n and not store.entries()


def test_the_key_changes_with_what_changes_the_code(monkeypatch):
    members = (("matmul", (("ta", False), ("tb", False)), (("in", 0), ("in", 1))),)
    shapes, dtypes = ((8, 12), (12, 8)), ("float32", "float32")
    base = KC.group_digest(members, shapes, dtypes, "hand")
    assert base == KC.group_digest(members, shapes, dtypes, "hand")
    others = [
        KC.group_digest(members, ((8, 12), (12, 9)), dtypes, "hand"),
        KC.group_digest(members, shapes, ("float64", "float64"), "hand"),
        KC.group_digest(members, shapes, dtypes, "model"),
        KC.group_digest((("matmul", (("ta", False), ("tb", True)),
                          (("in", 0), ("in", 1))),), shapes, dtypes, "hand"),
    ]
    monkeypatch.setenv("TL_FP_CONTRACT", "0")
    others.append(KC.group_digest(members, shapes, dtypes, "hand"))
    monkeypatch.delenv("TL_FP_CONTRACT")
    monkeypatch.setattr(KC, "_llvm_host", lambda: ("skylake-avx512", "+avx512f"))
    others.append(KC.group_digest(members, shapes, dtypes, "hand"))
    monkeypatch.undo()
    monkeypatch.setattr(KC, "_FINGERPRINT", ["another tensorlang"])
    others.append(KC.group_digest(members, shapes, dtypes, "hand"))
    assert len({base, *others}) == len(others) + 1
    monkeypatch.setenv("TL_DEBUG", "3")          # what is printed is not code
    monkeypatch.setattr(KC, "_FINGERPRINT", [])
    assert KC.group_digest(members, shapes, dtypes, "hand") == base


def test_a_schedule_from_changed_tuning_records_is_not_served(cache_here, monkeypatch,
                                                              capsys):
    """An entry whose schedule came from the tuning log is used only while the log's
    records of its program are those it was made with (a later `tensorlang tune` record
    gives another schedule)."""
    log = str(cache_here / "tuning.jsonl")
    meta = {"log": log, "program_key": "k1", "records": KC.records_digest(log, "k1", True)}
    monkeypatch.setattr(E, "_auto_log", lambda: log)
    key = ((("relu", (), (("in", 0),)),), ((4,),), ("float32",), "llvm", "model")
    rec = {"key": "k1", "target": "llvm", "trace": [], "time": 1e-3, "mode": "auto"}
    with open(log, "w") as f:
        f.write(json.dumps(rec) + "\n")
    assert KC.records_digest(log, "k1", True) != meta["records"]
    monkeypatch.setenv("TL_DEBUG", "1")
    assert E._from_entry(key, "model", meta, b"") is None
    assert "changed since its entry was made" in capsys.readouterr().err


def test_the_suite_does_not_write_the_users_cache():
    assert os.environ["TL_CACHE_DIR"] != os.path.join(os.path.expanduser("~"), ".cache",
                                                      "tensorlang")


def test_the_cache_command_shows_and_clears(cache_here, capsys):
    from tensorlang.cli import main

    nodes, feed, _ = _small_graph()
    G.Executor(nodes).run(feed)
    assert main(["cache", "info"]) == 0
    assert f"{cache_here / 'kernels'}: 1 kernels" in capsys.readouterr().out
    assert main(["cache", "clear"]) == 0
    assert "1 kernels removed" in capsys.readouterr().out
    assert not _entries(cache_here)


def test_a_progress_bar_on_a_terminal_only(monkeypatch, capsys):
    update, close = KC.progress_bar(3)          # the tests' stderr is no terminal
    update()
    close()
    assert capsys.readouterr().err == ""
    pytest.importorskip("tqdm")
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True, raising=False)
    update, close = KC.progress_bar(3)
    for _ in range(3):
        update()
    close()
    assert "compiling kernels" in capsys.readouterr().err
