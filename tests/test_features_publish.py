"""Shipping dictionary runs: which run each shipped dictionary comes from, and what its card says of it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from circuitwidgets.errors import ArgumentError
from circuitwidgets.features.publish import _run_record, _sources


def _run(path: Path, specs: list[dict[str, object]], hardware: bool = True) -> Path:
    path.mkdir()
    (path / "train_config.json").write_text(json.dumps({"specs": specs, "passes": 1, "tokens": 4096, "lr": 1e-3}))
    (path / "state.json").write_text(json.dumps({"step": 2, "tokens": 4096, "seconds": 1.5}))
    if hardware:
        stretches = [{"from_step": 0, "device": "cuda", "cuda_device": "GPU A"}, {"from_step": 1, "device": "cpu"}]
        (path / "hardware.json").write_text(json.dumps(stretches))
    return path


TC0 = {"kind": "transcoder", "layer": 0, "site": None}
TC1 = {"kind": "transcoder", "layer": 1, "site": None}
SAE = {"kind": "sae", "layer": 0, "site": "resid_post"}


def test_every_dictionary_ships_from_its_run_and_a_name_in_two_runs_must_be_picked(tmp_path: Path) -> None:
    a, b = _run(tmp_path / "a", [TC0, SAE]), _run(tmp_path / "b", [TC0, TC1])
    assert _sources([(a, "cmd a")], None) == {"L0.tc": 0, "L0.resid_post": 0}
    with pytest.raises(ArgumentError, match=r"pick: \['L0.tc'\] trained in several runs"):
        _sources([(a, "cmd a"), (b, "cmd b")], None)
    assert _sources([(a, "cmd a"), (b, "cmd b")], {"L0.tc": 1, "L0.resid_post": 0}) == {"L0.tc": 1, "L0.resid_post": 0}
    with pytest.raises(ArgumentError, match=r"pick: 'L1\.tc' was not trained in run 0"):
        _sources([(a, "cmd a"), (b, "cmd b")], {"L1.tc": 0})


def test_a_card_records_the_command_rows_and_where_the_run_last_trained(tmp_path: Path) -> None:
    record = _run_record(_run(tmp_path / "a", [TC0]), "circuitwidgets train-dictionary …")
    assert record["command"] == "circuitwidgets train-dictionary …"
    assert record["training"]["rows"] == 4096 and record["training"]["train_seconds"] == 1.5
    assert "specs" not in record["training"]["config"]
    assert record["hardware"] == {"from_step": 1, "device": "cpu"}
    older = _run_record(_run(tmp_path / "b", [TC0], hardware=False), "cmd")
    assert older["hardware"]["recorded_at_publish"] is True  # a run from before the record says so
