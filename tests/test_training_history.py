"""The training history read from a card: the curves behind the phase-change view."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import circuitwidgets as cw
from circuitwidgets.training.history import history_from_card, history_from_log


def _record(step: int, induction: float, k: float | None = 0.1) -> dict[str, Any]:
    record: dict[str, Any] = {
        "step": step,
        "val_loss": 4.0 - step / 1000,
        "icl_score": -induction,
        "previous_token": [[0.9, 0.1], [0.0, 0.0]],
        "induction": [[0.0, 0.0], [induction, induction / 2]],
        "ov_copying": [[0.5, 0.5], [0.9, 0.1]],
    }
    if k is not None:
        record["k_composition"] = [[[k, 0.0], [0.0, k / 2]]]
    return record


def test_the_formation_step_is_where_the_best_induction_score_rises_fastest() -> None:
    log = [_record(100 * i, score) for i, score in enumerate([0.0, 0.01, 0.1, 0.3, 0.55, 0.6], start=1)]
    history, why = history_from_log(log)
    assert history is not None and why == ""
    assert history.formation() == {"start": 300, "step": 400, "end": 500}
    np.testing.assert_allclose(history.best_induction(), [0.0, 0.01, 0.1, 0.3, 0.55, 0.6])
    # strongest K-composition into each layer-1 head, from any layer-0 head
    np.testing.assert_allclose(history.k_composition[-1, 1], [0.1, 0.05])
    assert np.isnan(history.k_composition[-1, 0]).all()


def test_a_slow_late_climb_does_not_move_the_phase_change() -> None:
    # a sharp rise at steps 1,000-1,500, then a slow one (an annealed learning rate) to twice the height
    scores = [0.0] * 10 + [0.05, 0.2, 0.35, 0.4, 0.42] + [0.42 + 0.01 * i for i in range(40)]
    history, _ = history_from_log([_record(100 * (i + 1), score) for i, score in enumerate(scores)])
    assert history is not None
    formation = history.formation()
    assert formation is not None and 1_000 <= formation["start"] < formation["step"] < formation["end"] <= 1_600, (
        formation
    )


def test_a_score_that_never_rises_has_no_phase_change() -> None:
    history, _ = history_from_log([_record(100 * (i + 1), 0.3 - 0.01 * i) for i in range(10)])
    assert history is not None and history.formation() is None


def test_older_logs_without_composition_or_icl_still_load() -> None:
    log = [{k: v for k, v in _record(step, 0.5, k=None).items() if k != "icl_score"} for step in (500, 1000)]
    history, why = history_from_log(log)
    assert history is not None, why
    assert np.isnan(history.icl_score).all() and np.isnan(history.k_composition).all()


@pytest.mark.parametrize(
    ("card", "reason"),
    [
        (None, "no model card"),
        ({}, "no training record"),
        ({"training": {"log": []}}, "no training log"),
        ({"training": {"log": [{"step": 1}]}}, "no per-head detector scores"),
        ({"training": {"log": [_record(200, 0.1), _record(100, 0.2)]}}, "not increasing"),
        (
            {"training": {"log": [{**_record(100, 0.1), "induction": [[0.1, 0.2, 0.3]]}, _record(200, 0.2)]}},
            "malformed",
        ),
        ({"training": {"log": [{**_record(100, 0.1), "induction": "high"}]}}, "malformed|shape"),
    ],
)
def test_a_missing_or_malformed_history_gives_a_reason_not_an_error(card: Any, reason: str) -> None:
    history, why = history_from_card(card)
    assert history is None
    assert __import__("re").search(reason, why), why


def test_the_shipped_two_layer_card_has_a_history_with_a_phase_change() -> None:
    history, why = history_from_card(cw.pretrained_card("attn-only-2l"))
    assert history is not None, why
    formation = history.formation()
    assert formation is not None and formation["start"] < formation["step"] <= formation["end"]
