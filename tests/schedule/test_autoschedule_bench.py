"""benchmarks/autoschedule.py runs at tiny sizes: the auto-scheduled kernels match the hand
schedules' results, and the table is printed."""

import pathlib
import runpy

SCRIPT = pathlib.Path(__file__).parent.parent.parent / "benchmarks" / "autoschedule.py"


def test_autoschedule_benchmark_runs(capsys):
    rows = runpy.run_path(str(SCRIPT))["main"](["--quick", "--ops", "matmul 512,blur,IIR"])
    assert [r["op"] for r in rows] == ["matmul 512", "blur 3x3 1024", "IIR filter 1024x1024"]
    assert all(r["auto_ms"] > 0 and r["hand_ms"] > 0 for r in rows)
    assert "| operator |" in capsys.readouterr().out
