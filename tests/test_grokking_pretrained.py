"""Findings on the shipped grokking run (``load_pretrained()``: p = 113, 30 % of pairs, AdamW, weight decay 1).

Each test checks one claim of Nanda et al. on the shipped checkpoints; the
measured figures are in the comments and in the run's card.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from circuitwidgets.training.grokking import (
    GrokHistory,
    Phases,
    ProgressMeasures,
    find_phases,
    load_pretrained,
    progress_measures,
)
from circuitwidgets.training.grokking.card import card_measured
from circuitwidgets.training.grokking.shipped import PRETRAINED, RUN_NAME

FOLDER = PRETRAINED / RUN_NAME


@pytest.fixture(scope="module")
def run() -> GrokHistory:
    return load_pretrained()


@pytest.fixture(scope="module")
def measures(run: GrokHistory) -> ProgressMeasures:
    return progress_measures(run)


@pytest.fixture(scope="module")
def phases(run: GrokHistory, measures: ProgressMeasures) -> Phases:
    return find_phases(run, measures)


def _at(steps: np.ndarray, step: int) -> int:
    return int(np.searchsorted(steps, step))


def test_the_run_memorises_first_then_generalises(run: GrokHistory) -> None:
    assert run.config.p == 113 and run.config.fraction == 0.3
    memorised = (run.train_accuracy >= 1.0) & (run.test_accuracy < 0.5)
    assert memorised.any()
    assert run.grokked_at() is not None
    assert run.test_accuracy[-1] >= 0.99 and run.train_accuracy[-1] == 1.0


def test_the_three_phases_come_in_order(run: GrokHistory, phases: Phases) -> None:
    assert phases.memorised is not None and phases.cleanup is not None and phases.grokked is not None
    assert 0 < phases.memorised < phases.cleanup < phases.grokked <= run.final_step
    # During circuit formation the model keeps its training pairs and still fails the test pairs.
    i = _at(run.steps, phases.cleanup)
    assert run.train_accuracy[i] == 1.0 and run.test_accuracy[i] < 0.5


def test_restricted_loss_falls_and_excluded_loss_rises_during_circuit_formation(
    measures: ProgressMeasures, phases: Phases
) -> None:
    assert phases.memorised is not None and phases.cleanup is not None
    start = _at(measures.steps, phases.memorised)
    end = _at(measures.steps, phases.cleanup)
    assert measures.restricted_loss[end] < measures.restricted_loss[start] - 1.0
    assert measures.excluded_loss[end] > measures.excluded_loss[start]
    assert measures.restricted_loss[-1] < 0.1  # the key frequencies alone fit the training pairs at the end


def test_weight_decay_cleans_up_the_weights(measures: ProgressMeasures, phases: Phases) -> None:
    assert phases.cleanup is not None and phases.grokked is not None
    peak = measures.sum_squared_weights[: _at(measures.steps, phases.cleanup) + 1].max()
    assert measures.sum_squared_weights[-1] < 0.75 * peak


def test_a_handful_of_key_frequencies_carry_the_embedding(measures: ProgressMeasures) -> None:
    keys = measures.key_frequencies
    assert 2 <= len(keys) <= 8
    power = measures.fourier_norms**2
    share = power[:, keys].sum(axis=1) / power[:, 1:].sum(axis=1)
    assert share[0] < 0.25  # at initialisation the key frequencies are like any others
    assert share[-1] > 0.5


def test_neurons_read_one_key_frequency(run: GrokHistory, measures: ProgressMeasures) -> None:
    final = measures.neuron_frequency[-1]  # [neuron, frequency]
    live = final.sum(axis=1) > 0
    best = final[live].argmax(axis=1)
    assert np.isin(best, measures.key_frequencies).mean() > 0.9
    assert np.median(final[live].max(axis=1)) > 0.5


def _size(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def test_the_shipped_run_is_small_and_its_card_has_the_command(run: GrokHistory) -> None:
    size = _size(FOLDER)
    together = size + _size(PRETRAINED / "pair-gelu-1l") + _size(PRETRAINED / "pair-solu-1l")
    assert together <= 20_000_000  # the budget for the grokking run and the SoLU pair together
    card = " ".join((FOLDER / "README.md").read_text(encoding="utf-8").split())
    meta = json.loads((FOLDER / "run.json").read_text())
    assert meta["command"] in card and "python -m circuitwidgets.training.grokking" in meta["command"]
    assert f"--steps {run.final_step} " in meta["command"] and "--lr 0.001 " in meta["command"]
    assert f"{len(run.checkpoints)} checkpoints, {size / 1e6:.1f} MB" in card and f"{together / 1e6:.1f} MB" in card
    assert f"{run.train_seconds:,.0f} s of training for {run.final_step:,} steps" in card
    assert f"stopped at step {run.final_step:,}" in card


def test_the_cards_table_and_frequencies_are_measured_from_the_shipped_files(
    run: GrokHistory, measures: ProgressMeasures, phases: Phases
) -> None:
    card = (FOLDER / "README.md").read_text(encoding="utf-8")
    assert card_measured(run, measures, phases) in card
