"""The model cards' "Repeated random tokens" sections quote ``report.lens.repetition`` as it measures today."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

import circuitwidgets as cw
from circuitwidgets.report.lens import repetition, repetition_markdown

PRETRAINED = Path(cw.__file__).resolve().parent / "pretrained"


@pytest.mark.slow
@pytest.mark.parametrize("name", ["attn-only-2l-12h", "gelu-2l"])
def test_the_card_quotes_the_repetition_table_and_its_gain_and_gap(name: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (gelu-2l's weight-space warnings: not used here)
        r = repetition(cw.load_pretrained(name))
    card = (PRETRAINED / name / "README.md").read_text(encoding="utf-8")
    assert repetition_markdown(r) in card
    text = " ".join(card.split())
    gain = r.logit_second[0] - r.logit_first[0]
    gap = r.top_logit[0] - r.logit_second[0]
    assert f"raises a uniformly random token's logit by {gain:.2f} on average" in text
    assert f"stays {gap:.2f} below the largest logit" in text
    assert f"only {r.top1[0]:.0%} of the time" in text and f"top {r.top1[2]:.0%} of the time" in text
