"""benchmarks/autoschedule.py runs at tiny sizes: the auto-scheduled kernels match the hand
schedules' results, and the table is printed."""

import pytest
import pathlib
import runpy

SCRIPT = pathlib.Path(__file__).parent.parent.parent / "benchmarks" / "autoschedule.py"


@pytest.mark.slow
def test_autoschedule_benchmark_runs(capsys, tmp_path):
    import json

    rows = runpy.run_path(str(SCRIPT))["main"](["--quick", "--ops", "matmul 512,blur,IIR",
                                                "--samples", str(tmp_path)])
    assert [r["op"] for r in rows] == ["matmul 512", "blur 3x3 1024", "IIR filter 1024x1024"]
    assert all(r["auto_ms"] > 0 and r["hand_ms"] > 0 for r in rows)
    assert "| operator |" in capsys.readouterr().out
    # each operator's random sample is kept: its traces replay, one prediction and two
    # timings each (the declared loop nest, the empty trace, among them)
    kept = json.loads((tmp_path / "blur_3x3_1024.json").read_text())
    n = len(kept["traces"])
    assert n >= 2 and "" in kept["traces"]
    assert all(len(kept[k]) == n for k in ("predicted", "first", "second", "best"))
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "IIR_filter_1024x1024.json", "blur_3x3_1024.json", "matmul_512.json"]
