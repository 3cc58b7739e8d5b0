"""Every tutorial runs (small) as part of the test suite."""

import pathlib
import runpy

import pytest

TUTORIALS = sorted((pathlib.Path(__file__).parent.parent / "tutorials").glob("[0-9]*.py"))


@pytest.mark.parametrize("path", TUTORIALS, ids=[p.stem for p in TUTORIALS])
def test_tutorial_runs(path, monkeypatch, capsys):
    monkeypatch.setenv("TL_TUTORIAL_N", "50")
    runpy.run_path(str(path), run_name="__main__")
    assert "OK" in capsys.readouterr().out
