"""The `tensorlang` command and the TL_DEBUG levels."""

import subprocess
import sys

import numpy as np
import pytest

import tensorlang as tl
from tensorlang.cli import main


def test_demo_runs_and_checks(capsys):
    assert main(["demo", "--size", "64"]) == 0
    out = capsys.readouterr().out
    assert "for k in range(n):" in out
    assert "check against numpy: OK" in out
    assert "GFLOPS" in out and "numpy" in out
    # it ends on the scheduled matmul beside numpy, naming the CPU and its vector width
    last = out.strip().splitlines()[-1]
    assert last.startswith("tensorlang, scheduled") and "x numpy's speed" in last
    assert "float32 lanes per vector" in out and "-mattr" not in out


def test_console_script_installed():
    r = subprocess.run([sys.executable, "-m", "tensorlang.cli", "--version"],
                       capture_output=True, text=True, check=True)
    assert r.stdout.strip() == tl.__version__


def test_python_dash_m_tensorlang_is_the_command():
    r = subprocess.run([sys.executable, "-m", "tensorlang", "--version"],
                       capture_output=True, text=True, check=True)
    assert r.stdout.strip() == tl.__version__
    bad = subprocess.run([sys.executable, "-m", "tensorlang", "no-such-command"],
                         capture_output=True, text=True)
    assert bad.returncode != 0 and "no-such-command" in bad.stderr


def test_debug_levels_print_passes_loops_ir(monkeypatch, capsys):
    A = tl.placeholder((5,), "float64", name="A")
    C = tl.compute((5,), lambda i: A[i] * 3.0, name="C")
    monkeypatch.setenv("TL_DEBUG", "1")
    tl.build(tl.create_schedule(C), [A, C])
    err = capsys.readouterr().err
    assert "lower:" in err and " ms" in err and "loop nest" not in err
    monkeypatch.setenv("TL_DEBUG", "2")
    tl.build(tl.create_schedule(C), [A, C], name="k2")
    assert "loop nest" in capsys.readouterr().err
    monkeypatch.setenv("TL_DEBUG", "4")
    D = tl.compute((5,), lambda i: A[i] * 4.0, name="D")
    f = tl.build(tl.create_schedule(D), [A, D])
    err = capsys.readouterr().err
    assert "LLVM IR" in err and "isl domains" in err and "isl schedule" in err
    d = np.zeros(5)
    f(np.ones(5), d)
    assert (d == 4).all()


@pytest.mark.parametrize("value, expected", [("", None), ("1", True), ("ON", True),
                                             ("yes", True), ("0", False), ("off", False),
                                             ("False", False), (" no ", False)])
def test_every_switch_reads_its_value_one_way(monkeypatch, value, expected):
    from tensorlang import config

    for name, default in (("TL_FASTMATH", False), ("TL_STRICT", False),
                          ("TL_FP_CONTRACT", True), ("TL_STREAM_STORES", True)):
        monkeypatch.setenv(name, value)
        assert config.flag(name, default) is (default if expected is None else expected)


def test_a_switch_with_another_value_is_a_clear_error(monkeypatch):
    from tensorlang import config

    monkeypatch.setenv("TL_FASTMATH", "maybe")
    with pytest.raises(tl.TensorlangError, match="TL_FASTMATH must be one of .* got 'maybe'"):
        config.fastmath()


def test_tune_gives_its_settings_to_the_script_without_writing_the_environment(
        tmp_path, monkeypatch):
    """`tensorlang tune` passes --log and --budget to the script it runs as arguments
    (`config.tuning`): inside it `tune_log()` and `tune_budget()` answer them ahead of
    TL_TUNE_LOG and TL_TUNE_BUDGET, the environment is left as it was, and after it the
    settings are gone."""
    import json

    from tensorlang.config import tune_budget, tune_log

    monkeypatch.setenv("TL_TUNE_LOG", str(tmp_path / "env.jsonl"))
    monkeypatch.delenv("TL_TUNE_BUDGET", raising=False)
    seen = tmp_path / "seen.json"
    script = tmp_path / "op.py"
    script.write_text(
        "import json, os\n"
        "from tensorlang.config import tune_budget, tune_log\n"
        f"open({str(seen)!r}, 'w').write(json.dumps([tune_log(), tune_budget(1.0), "
        "os.environ.get('TL_TUNE_LOG'), os.environ.get('TL_TUNE_BUDGET')]))\n")
    log = tmp_path / "t.jsonl"
    assert main(["tune", str(script), "--log", str(log), "--budget", "7.5"]) == 0
    assert json.loads(seen.read_text()) == [str(log), 7.5, str(tmp_path / "env.jsonl"), None]
    assert tune_log() == str(tmp_path / "env.jsonl") and tune_budget(3.0) == 3.0


def test_tuning_settings_nest_and_are_checked(tmp_path):
    from tensorlang.config import tune_budget, tune_log, tuning

    with tuning(tmp_path / "a.jsonl", 2):
        with tuning(tmp_path / "b.jsonl", 4.0):
            assert tune_log() == str(tmp_path / "b.jsonl") and tune_budget(1.0) == 4.0
        assert tune_log() == str(tmp_path / "a.jsonl") and tune_budget(1.0) == 2.0
    for bad in (0, float("nan"), "10", True):
        with pytest.raises(tl.TensorlangError, match="budget_s"):
            with tuning(tmp_path / "a.jsonl", bad):
                pass
