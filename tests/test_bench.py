"""`tensorlang bench` at tiny sizes: every kernel runs and is checked against numpy in a
process of its own, the table and the chart are written, a missing peer is a blank cell
and an unknown kernel a clear error. (Speed is measured by running it, never in tests.)"""

import os
import subprocess
import sys

import pytest

from tensorlang.benchmarking import bench


@pytest.mark.slow
def test_bench_writes_a_table_and_a_chart(tmp_path):
    r = subprocess.run([sys.executable, "-m", "tensorlang.cli", "bench", str(tmp_path),
                        "--quick", "--kernels", "elementwise,softmax,conv2d,mlp"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    table = (tmp_path / "RESULTS.md").read_text()
    assert "FMA peak" in table and "stream bandwidth" in table
    header = next(line for line in table.splitlines() if line.startswith("| kernel |"))
    columns = [c.strip() for c in header.split("|")]
    for name in ("E = D + (A+B)*C", "softmax rows", "conv2d 3x3", "MLP SGD step"):
        row = next(line for line in table.splitlines() if line.startswith(f"| {name} |"))
        cells = [c.strip() for c in row.split("|")]
        for system in ("tensorlang (out=)", "tensorlang (new outputs)", "numpy"):
            assert float(cells[columns.index(system)]) > 0, (system, row)
        assert "error" not in row, row
    assert (tmp_path / "bench.png").stat().st_size > 1000


def test_a_worker_checks_its_result_and_reports_missing_systems():
    for system in ("tensorlang", "tensorlang_new"):      # run(..., out=) and run(feed)
        got = bench.worker("matmul 127x781x253", system, quick=True)
        assert got["value"] > 0
    missing = [s for s in ("torch", "tvm", "halide") if bench._absent(s)]
    for s in missing:
        assert bench.worker("E = D + (A+B)*C", s, quick=True)["skip"].startswith(
            "not installed")
    assert bench.worker("MLP SGD step", "tvm", quick=True)["skip"].startswith("no tvm version")


def test_peak_is_measured_and_unknown_kernels_are_refused(tmp_path):
    flops, bits = bench.peak_flops(0.02)
    assert flops > 1e9 and bits in (128, 256, 512)
    with pytest.raises(ValueError, match="unknown kernel"):
        bench.run(str(tmp_path), quick=True, kernels=["fft"], progress=lambda *_: None)
    assert os.cpu_count() >= 1


def test_the_paired_ratio_is_the_median_of_each_rounds_ratio():
    """Round by round: tensorlang / the best other of that round, the median of those; a
    system with a round missing leaves it blank rather than pairing different rounds."""
    n = "E = D + (A+B)*C"
    results = {(n, "tensorlang"): [100.0, 80.0, 90.0], (n, "tvm"): [50.0, 100.0, 60.0],
               (n, "halide"): [90.0, 70.0, 95.0]}
    # rounds: 100/90, 80/100, 90/95 -> 1.11, 0.80, 0.95: the median 0.95 (best-of: 1.00)
    assert bench._paired(results, n) == "0.95"
    # new outputs paired alike, never with the out= figures
    results[(n, "tensorlang_new")] = [45.0, 110.0, 95.0]   # 0.5, 1.1, 1.0 -> 1.00
    assert bench._paired(results, n, "tensorlang_new") == "1.00"
    assert bench._paired(results, n) == "0.95"
    results[(n, "halide")] = [90.0, 70.0]
    assert bench._paired(results, n) == "—"
    assert bench._paired({(n, "tensorlang"): [1.0, 2.0]}, n) == "—"


def test_the_harness_runs_as_a_script_where_tensorlang_cannot_be_imported():
    """`--peer-python`'s interpreter runs bench.py as a script (no package): it finds the
    peers' module beside it and imports nothing of tensorlang for a peer's kernel. With
    Halide absent the worker reaches the peer's own import (were peers.py not found, the
    skip would name it instead)."""
    if not bench._absent("halide"):
        pytest.skip("halide is installed here: its kernel would run")
    code = ("import runpy, sys\n"
            "sys.modules['tensorlang'] = None\n"        # any import of tensorlang fails
            f"path = {bench.__file__!r}\n"
            "sys.path.insert(0, __import__('os').path.dirname(path))\n"
            "sys.argv = [path, '--worker', 'E = D + (A+B)*C', 'halide', '--quick']\n"
            "runpy.run_path(path, run_name='__main__')\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip().splitlines()[-1] == '{"skip": "not installed (halide)"}'
