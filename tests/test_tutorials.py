"""Every tutorial runs (small) as part of the test suite."""

import pathlib
import runpy

import pytest

TUTORIALS = sorted((pathlib.Path(__file__).parent.parent / "tutorials").glob("[0-9]*.py"))
# the longest (15-25 s each on 2 cores) run in CI's second step, with the other slow tests
SLOW = ("06_cuda", "08_autodiff", "09_graph_optimization", "10_auto_schedule",
        "12_new_hardware_units")


@pytest.mark.parametrize("path", [pytest.param(p, id=p.stem, marks=[pytest.mark.slow]
                                               if p.stem in SLOW else [])
                                  for p in TUTORIALS])
def test_tutorial_runs(path, monkeypatch, capsys):
    monkeypatch.setenv("TL_TUTORIAL_N", "50")
    runpy.run_path(str(path), run_name="__main__")
    assert "OK" in capsys.readouterr().out


def test_tutorial_05s_last_schedule_is_the_executors(monkeypatch):
    """Tutorial 05's last step, fifteen lines of schedule a user writes, lowers to the loop
    nest of the graph executor's own matmul at 512^3 (the kernel `tensorlang bench`
    measures against TVM and Halide) — up to the names of the axes and tensors."""
    import re

    import numpy as np

    import tensorlang as tl
    import tensorlang.graph as G
    from tensorlang.graph import executor as E

    monkeypatch.setenv("TL_TUTORIAL_N", "512")
    t05 = runpy.run_path(str(next(p for p in TUTORIALS if p.stem.startswith("05"))))
    s, args = t05["blocked"]()
    mine = str(tl.lower(s, args))
    from tensorlang.graph import kernel_cache as KC

    seen = []
    build = KC.build_host_object        # how the executor builds a host kernel

    def spy(sched, a, **kw):
        seen.append((sched.trace_text(), str(tl.lower(sched, a))))
        return build(sched, a, **kw)
    monkeypatch.setattr(KC, "build_host_object", spy)
    E._KERNELS.clear()
    x, y = G.Variable("a", (512, 512), "float32"), G.Variable("b", (512, 512), "float32")
    # the hand schedule (the model-only search's seed): a record another test leaves in the
    # tuning log would otherwise choose the executor's kernel
    G.Executor([x @ y], schedules="hand").run({x: np.ones((512, 512), "f4"),
                                               y: np.ones((512, 512), "f4")})
    ((trace, theirs),) = seen
    if '"in1_packed"].compute_at' not in trace:
        pytest.skip("the executor multiplies B in place or unblocked on this host's L2")
    names = {"in0": "A", "in1": "B", "out": "C", "i0": "i", "i1": "j"}
    theirs = re.sub(r"\b(in0|in1|out|i0|i1)(?=\b|_)", lambda m: names[m.group(1)], theirs)
    assert mine == theirs
