"""The training-history view: curves from a card, the phase change marked, a head chosen → its curves."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import circuitwidgets as cw
from circuitwidgets.training.history import history_from_card


def test_the_shipped_two_layer_model_shows_its_history_with_the_phase_change() -> None:
    w = cw.TrainingHistory.from_pretrained("attn-only-2l")
    history, _ = history_from_card(cw.pretrained_card("attn-only-2l"))
    assert history is not None and w.absent == ""
    np.testing.assert_array_equal(w.steps, history.steps)
    np.testing.assert_allclose(w.induction, history.induction, atol=1e-6)
    formation = history.formation()
    assert formation is not None and w.formation == [formation["start"], formation["step"], formation["end"]]
    # the strongest induction head at the end of training is chosen first
    assert (w.selected_layer, w.selected_head) == tuple(np.unravel_index(np.nanargmax(history.induction[-1]), (2, 4)))


def test_from_model_of_a_shipped_model_and_of_any_other() -> None:
    assert cw.TrainingHistory.from_model(cw.load_pretrained("attn-only-2l")).steps.size > 0
    from conftest import make_random_model

    other = cw.TrainingHistory.from_model(make_random_model())
    assert other.steps.size == 0 and "not trained by circuitwidgets" in other.absent


@pytest.mark.parametrize("card", [None, {}, {"training": {"log": "corrupt"}}, {"training": {"log": [{"step": 1}]}}])
def test_a_missing_or_malformed_history_still_builds_a_view_that_says_so(card: object) -> None:
    w = cw.TrainingHistory.from_card(card)
    assert w.steps.size == 0 and w.absent


def test_a_training_run_log_gives_its_curves(tmp_path: Path) -> None:
    log = tmp_path / "log.jsonl"  # as circuitwidgets train writes it
    log.write_text("\n".join(json.dumps(r) for r in cw.pretrained_card("attn-only-2l")["training"]["log"]))
    records = [json.loads(line) for line in log.read_text().splitlines()]
    w = cw.TrainingHistory.from_log(records, model_name="my run")
    assert w.model_name == "my run" and w.steps.size == len(records)


def test_choosing_a_head_is_shared_with_linked_views() -> None:
    model = cw.load_pretrained("attn-only-2l")
    history = cw.TrainingHistory.from_model(model)
    scatter = cw.EigenScatter(model)
    cw.link(history, scatter)
    scatter.selected_layer, scatter.selected_head = 0, 2
    assert (history.selected_layer, history.selected_head) == (0, 2)


def test_the_view_says_which_measure_its_head_scores_are() -> None:
    # The logged detectors (16 × 127 tokens repeated) read lower than circuits.head_scores (8 × 50): say so.
    view = cw.TrainingHistory.from_pretrained("attn-only-2l-12h")
    assert "127 random tokens repeated" in view.measure and "circuits.head_scores" in view.measure
    assert cw.TrainingHistory.from_log([]).measure == ""
