"""Publishing a grokking run: a run stopped past step N is shipped as it was at N, equal to a run of N steps."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from circuitwidgets.errors import ArgumentError
from circuitwidgets.training.grokking import find_phases, load_checkpoint, progress_measures, train
from circuitwidgets.training.grokking.card import card_measured
from circuitwidgets.training.grokking.shipped import RUN_NAME, load_pretrained, publish

SMALL = {"d_model": 16, "n_heads": 2, "d_head": 8, "d_mlp": 24, "eval_every": 5, "checkpoint_every": 10, "seed": 4}


def test_a_run_stopped_later_publishes_as_the_run_of_that_many_steps(tmp_path: Path) -> None:
    train(11, 0.5, steps=40, out_dir=tmp_path / "run", **SMALL)  # type: ignore[arg-type]
    short = train(11, 0.5, steps=20, **SMALL)  # type: ignore[arg-type]  # the card's command with --steps 20
    _, step, stopped = load_checkpoint(tmp_path / "run" / "checkpoints" / "step_000020.safetensors")
    assert step == 20
    for name, t in short.checkpoints[20].items():
        assert torch.equal(stopped[name], t), name  # bit for bit: the learning rate is constant, steps only stops
    publish(tmp_path / "run", "the command", every=10, dest=tmp_path / "pkg" / RUN_NAME, steps=20)
    shipped = load_pretrained(root=tmp_path / "pkg")
    assert shipped.final_step == 20 and sorted(shipped.checkpoints) == [0, 10, 20]
    assert shipped.steps.tolist() == short.steps.tolist()
    assert np.allclose(shipped.test_loss, short.test_loss, rtol=1e-6)
    for name, t in short.checkpoints[20].items():
        assert torch.allclose(shipped.checkpoints[20][name], t, rtol=1e-3, atol=1e-3), name  # (float16 on disk)
    with pytest.raises(ArgumentError, match=r"steps: expected a measured step of the run .* got 23"):
        publish(tmp_path / "run", "the command", dest=tmp_path / "pkg2" / RUN_NAME, steps=23)


def test_the_card_section_has_a_row_per_phase_and_the_end() -> None:
    run = train(13, 0.5, steps=30, **SMALL)  # type: ignore[arg-type]
    measures = progress_measures(run)
    text = card_measured(run, measures, find_phases(run, measures))
    rows = [line for line in text.splitlines() if line.startswith("| ") and not line.startswith("| step")]
    assert rows[0].startswith("| 0 | memorisation |") and rows[-1].startswith("| 30 | end |")
    final = measures.sum_squared_weights[-1]
    assert f"falls to {final:,.0f}." in text and f"| {run.test_accuracy[-1]:.3f} |" in rows[-1]
