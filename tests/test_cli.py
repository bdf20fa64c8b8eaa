"""The command line: help that imports nothing heavy, plain text, and defaults that match training."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest

from circuitwidgets.cli import TRAIN_DEFAULTS, build_parser, main

ROOT = Path(__file__).resolve().parent.parent

# Modules that building the parser and printing help must not import.
HEAVY = ("torch", "numpy", "safetensors", "tokenizers", "anywidget", "ipywidgets", "circuitwidgets.training")

_PROBE = """
import contextlib, io, json, sys
from circuitwidgets.cli import main
out = io.StringIO()
with contextlib.redirect_stdout(out):
    try:
        main(sys.argv[1:])
    except SystemExit as e:
        code = e.code
print(json.dumps({"code": code, "help": out.getvalue(), "modules": sorted(sys.modules)}))
"""


def _help_in_fresh_interpreter(*argv: str) -> tuple[int, str, set[str]]:
    import json

    env = {k: v for k, v in os.environ.items() if k != "PYTHONSTARTUP"}
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, *argv],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=120,
        check=True,
    )
    result = json.loads(done.stdout.strip().splitlines()[-1])
    return result["code"], result["help"], set(result["modules"])


@pytest.mark.parametrize("argv", [("--help",), ("report", "--help"), ("train", "--help")], ids=" ".join)
def test_help_imports_neither_torch_nor_the_widgets(argv: tuple[str, ...]) -> None:
    code, text, modules = _help_in_fresh_interpreter(*argv)
    assert code == 0
    assert text.startswith("usage: circuitwidgets")
    loaded = sorted(m for m in modules if any(m == h or m.startswith(h + ".") for h in HEAVY))
    assert not loaded, f"`circuitwidgets {' '.join(argv)}` imported {loaded}"


@pytest.mark.parametrize("argv", [[], ["report"], ["train"]], ids=lambda a: " ".join(a) or "top")
def test_help_is_plain_text(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main([*argv, "--help"])
    assert exit_.value.code == 0
    text = capsys.readouterr().out
    assert "``" not in text and ":class:" not in text and ":func:" not in text and ":mod:" not in text
    assert "usage: circuitwidgets" in text


def test_top_help_names_both_commands(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--help"])
    text = capsys.readouterr().out
    assert "train" in text and "report" in text


def test_train_help_shows_the_defaults_of_train_config(capsys: pytest.CaptureFixture[str]) -> None:
    """The help's defaults are restated (to keep torch out of ``--help``): they must match ``TrainConfig``."""
    from circuitwidgets.training.train import TrainConfig

    config = {f.name: f.default for f in dataclasses.fields(TrainConfig)}
    assert {name: config[name] for name in TRAIN_DEFAULTS} == TRAIN_DEFAULTS
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    train_help = " ".join(capsys.readouterr().out.split())  # argparse wraps lines
    for value in TRAIN_DEFAULTS.values():
        assert f"(default: {value})" in train_help


def test_train_passes_only_the_options_given(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """An option left out reaches ``TrainConfig`` as its own default; one given overrides it."""
    from circuitwidgets.training import train as train_module

    seen = []
    monkeypatch.setattr(
        train_module, "train", lambda cfg, out, cache_dir=None, max_bytes=None: seen.append((cfg, out, cache_dir))
    )
    assert main(["train", "--layers", "1", "--lr", "0.5", "--device", "meta", "-o", str(tmp_path)]) == 0
    ((cfg, out, cache),) = seen
    expected = train_module.TrainConfig(n_layers=1, lr=0.5, device="meta")
    assert cfg == expected and out == tmp_path and cache is None


def test_train_requires_an_output_directory(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["train", "--layers", "1"])
    assert exit_.value.code == 2
    assert "--out" in capsys.readouterr().err


def test_the_restated_size_budget_is_the_training_one() -> None:
    from circuitwidgets.cli import MAX_MODEL_BYTES
    from circuitwidgets.training.train import MAX_MODEL_BYTES as TRAINING_BUDGET

    assert MAX_MODEL_BYTES == TRAINING_BUDGET


def test_train_refuses_a_model_over_the_size_budget_before_training(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import re

    assert main(["train", "--layers", "2", "--d-model", "1024", "-o", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert re.search(r"^circuitwidgets train: error: cfg: .*exports [\d,]+ bytes .* budget of 8,388,608", err), err
    assert not any(tmp_path.iterdir())  # nothing was written: no corpus, no checkpoint


def test_a_bad_model_name_is_one_line_on_stderr_and_a_nonzero_exit(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", "--model", "no-such-model", "-o", "unused.html"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith("circuitwidgets report: error: --model: expected one of the shipped models"), err


def test_report_refuses_a_directory_as_output_before_any_work(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def fail(*args: object, **kwargs: object) -> None:
        raise AssertionError("the report was computed")

    monkeypatch.setattr("circuitwidgets.report.write_report", fail)
    assert main(["report", "-o", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith("circuitwidgets report: error: -o: expected an HTML file to write") and "a directory" in err


def test_report_says_a_local_model_path_does_not_exist(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", "--model", "./no/such/dir", "-o", "unused.html"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no such directory" in err and "model-hub" not in err


def test_version_and_the_shipped_models_in_report_help(capsys: pytest.CaptureFixture[str]) -> None:
    import circuitwidgets as cw
    from circuitwidgets.cli import shipped_models

    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0 and capsys.readouterr().out.strip() == f"circuitwidgets {cw.__version__}"
    assert shipped_models() == cw.list_pretrained()
    with pytest.raises(SystemExit):
        main(["report", "--help"])
    text = " ".join(capsys.readouterr().out.split()).replace("- ", "-")  # argparse may wrap a name at its hyphen
    assert all(name in text for name in shipped_models())


def test_warnings_are_summarised_in_one_line() -> None:
    import warnings

    from circuitwidgets.cli import warning_summary

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            warnings.warn("copying_scores: model 'm' has MLPs; long detail", UserWarning, stacklevel=1)
        warnings.warn("other", DeprecationWarning, stacklevel=1)
    line = warning_summary(caught)
    assert "\n" not in line and line.startswith("4 warnings: UserWarning ×3 (copying_scores: model 'm' has MLPs…)")
    assert "DeprecationWarning ×1" in line
