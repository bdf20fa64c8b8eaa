"""The causal planner's calibration on disk (causal/calibration.py): a fresh process's first sweep measures nothing
(its cost curve and path choice read from the file the first process wrote), the same values; the folder follows
``CIRCUITWIDGETS_CACHE_DIR`` / ``XDG_CACHE_HOME``; a bad, foreign or unwritable file is ignored; it can be cleared
from Python and from the command line. (conftest points every test at a fresh folder.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from conftest import make_random_model

from circuitwidgets import causal
from circuitwidgets.causal import calibration, one_pass, passes
from circuitwidgets.cli import main

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def _forget(monkeypatch: pytest.MonkeyPatch) -> None:
    """What a fresh process has in memory: no curve, no choice, no file read."""
    monkeypatch.setattr(passes, "_CURVES", {})
    monkeypatch.setattr(one_pass, "_CHOICES", {})
    monkeypatch.setattr(calibration, "_MEMORY", {})


def _timings(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts each timed call of the planner (a cost-curve pass)."""
    seen: list[int] = []
    real = passes.measure_curve

    def measure(key: Any, time_pass: Any, *args: Any) -> Any:
        def counted(*a: Any) -> float:
            seen.append(1)
            return float(time_pass(*a))

        return real(key, counted, *args)

    monkeypatch.setattr(passes, "measure_curve", measure)
    monkeypatch.setattr("circuitwidgets.causal.planning.measure_curve", measure)
    return seen


@pytest.fixture(scope="module")
def setup() -> tuple[Any, torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(1)
    clean, corrupted = torch.randint(0, 40, (2, 6), generator=gen), torch.randint(0, 40, (2, 6), generator=gen)
    return make_random_model(d_vocab=40, seed=4), clean, corrupted


@pytest.mark.parametrize(("site", "by"), [("resid_pre", ("layer", "pos")), ("z", ("layer", "head"))])
def test_a_second_process_measures_nothing_and_gives_the_same_values(
    setup: tuple[Any, torch.Tensor, torch.Tensor], monkeypatch: pytest.MonkeyPatch, site: str, by: tuple[str, ...]
) -> None:
    model, clean, corrupted = setup
    _forget(monkeypatch)
    seen = _timings(monkeypatch)
    metric = causal.logit_diff(5, 9)
    first = causal.patch(model, clean, corrupted, metric, site=site, by=by, memory_budget=2**18)
    assert seen  # the first process on this machine measured the curve
    (file,) = calibration.calibration_dir().glob("*.json")
    stored = json.loads(file.read_text())
    assert stored["machine"] == calibration.machine()
    assert any(k.startswith("curve:") for k in stored["entries"])
    _forget(monkeypatch)
    seen.clear()
    again = causal.patch(model, clean, corrupted, metric, site=site, by=by, memory_budget=2**18)
    assert not seen
    assert np.array_equal(first.values, again.values)


def test_a_fresh_python_process_reads_the_file(tmp_path: Path) -> None:
    """Two real processes: the second's sweep times no pass (its planner's curve comes from the first's file)."""
    script = """
import json, sys, torch
sys.path.insert(0, sys.argv[1])
from conftest import make_random_model
from circuitwidgets import causal
from circuitwidgets.causal import planning
timed = []
real = planning.wall
planning.wall = lambda fn: timed.append(1) or real(fn)
gen = torch.Generator().manual_seed(1)
clean, corrupted = torch.randint(0, 40, (2, 6), generator=gen), torch.randint(0, 40, (2, 6), generator=gen)
r = causal.patch(make_random_model(d_vocab=40, seed=4), clean, corrupted, causal.logit_diff(5, 9), memory_budget=2**18)
print(json.dumps({"timed": len(timed), "values": r.values.tolist()}))
"""
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "CIRCUITWIDGETS_CACHE_DIR": str(tmp_path), "PYTHONPATH": str(root)}
    runs = [
        json.loads(
            subprocess.run(
                [sys.executable, "-c", script, str(root / "tests")], env=env, capture_output=True, text=True, check=True
            )
            .stdout.strip()
            .splitlines()[-1]
        )
        for _ in range(2)
    ]
    assert runs[0]["timed"] > 0 and runs[1]["timed"] == 0
    assert runs[0]["values"] == runs[1]["values"]


def test_the_folder_follows_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("CIRCUITWIDGETS_CACHE_DIR", str(tmp_path / "mine"))
    assert calibration.calibration_dir() == tmp_path / "mine" / "calibration"
    monkeypatch.delenv("CIRCUITWIDGETS_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert calibration.calibration_dir() == tmp_path / "xdg" / "circuitwidgets" / "calibration"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert calibration.calibration_dir() == tmp_path / "home" / ".cache" / "circuitwidgets" / "calibration"


def test_a_bad_or_foreign_file_is_ignored_and_an_unwritable_folder_is_no_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(calibration, "_MEMORY", {})
    path = calibration._path()
    path.parent.mkdir(parents=True)
    path.write_text("{not json")
    assert calibration.load("curve", ("k",)) is None
    calibration.store("curve", ("k",), {"rows": [1]})  # replaces the unreadable file
    monkeypatch.setattr(calibration, "_MEMORY", {})
    assert calibration.load("curve", ("k",)) == {"rows": [1]}
    other = json.loads(path.read_text())
    other["machine"]["cpu"] = "another machine"
    path.write_text(json.dumps(other))
    monkeypatch.setattr(calibration, "_MEMORY", {})
    assert calibration.load("curve", ("k",)) is None  # a file from another machine (or version) is not trusted
    monkeypatch.setattr(passes, "_CURVES", {})
    monkeypatch.setattr(calibration, "_MEMORY", {})
    calibration.store("curve", ("broken",), {"rows": "x"})
    assert passes._stored_curve(("broken",)) is None
    blocked = tmp_path / "file"
    blocked.write_text("")
    monkeypatch.setenv("CIRCUITWIDGETS_CACHE_DIR", str(blocked))  # its calibration folder cannot be made
    calibration.store("choice", ("k",), True)
    assert calibration.load("choice", ("k",)) is True  # kept in memory


def test_clearing_from_python_and_from_the_command_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(calibration, "_MEMORY", {})
    calibration.store("choice", ("k",), False)
    assert main(["calibration"]) == 0
    assert capsys.readouterr().out.strip() == str(calibration.calibration_dir())
    assert main(["calibration", "--clear"]) == 0
    assert capsys.readouterr().out.startswith("removed 1 calibration file(s)")
    assert not list(calibration.calibration_dir().glob("*.json"))
    assert calibration.load("choice", ("k",)) is None
    calibration.store("choice", ("k",), False)
    assert causal.clear_calibration() == 1 and causal.clear_calibration() == 0
