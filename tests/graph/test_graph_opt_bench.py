"""benchmarks/graph_opt.py runs at tiny sizes: optimised and unoptimised agree, and the
optimised plans have fewer kernels (the conv + batch norm block collapses to two)."""

import pytest
import pathlib
import runpy

SCRIPT = pathlib.Path(__file__).parent.parent.parent / "benchmarks" / "graph_opt.py"


@pytest.mark.slow
def test_graph_opt_benchmark_runs_and_reduces_kernels(capsys):
    rows = runpy.run_path(str(SCRIPT))["main"](["--quick"])
    assert len(rows) == 3
    for r in rows:
        before, after = r["kernels"]
        assert after < before, r
    resnet = rows[2]
    assert resnet["kernels"][1] == 2 and resnet["rules"].get("conv_shift", 0) >= 2
    assert "| workload |" in capsys.readouterr().out
