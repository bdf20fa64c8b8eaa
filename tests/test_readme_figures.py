"""The README's causal figures are the output of one function on one stated prompt set.

``circuitwidgets.causal.induction.induction_test`` computes every causal number the README, notebook 04 and the
report quote; each figure below is formatted from its output (or, for the composition-against-patching plot,
from path patching on the same prompts and metric) and must appear in README.md as written.
"""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import numpy as np
import pytest

import circuitwidgets as cw
from circuitwidgets import causal
from circuitwidgets.causal.induction import InductionTest, induction_prompts, induction_test

README = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")
NAME = "attn-only-2l-12h"

pytestmark = pytest.mark.skipif(NAME not in cw.list_pretrained(), reason="shipped model missing")


def _flat(text: str) -> str:
    """The README's prose with its line breaks as spaces (figures may wrap)."""
    return re.sub(r"\s+", " ", text)


def _signed(value: float) -> str:
    """``+1.52`` / ``−0.68`` (the README writes a true minus sign)."""
    return f"{value:+.2f}".replace("-", "−")


@pytest.fixture(scope="module")
def model() -> cw.CircuitModel:
    return cw.load_pretrained(NAME)


@pytest.fixture(scope="module")
def test(model: cw.CircuitModel) -> InductionTest:
    return induction_test(model)


@pytest.mark.slow
def test_the_patching_map_paragraph_quotes_head_patching_and_its_spread(test: InductionTest) -> None:
    heads = test.heads_a
    top = heads.top(3, absolute=False)
    names = ", ".join("".join(labels) for labels, _ in top[:-1]) + " and " + "".join(top[-1][0])
    values = ", ".join(f"{v:.2f}" for _, v in top[:-1]) + f" and {top[-1][1]:.2f}"
    spread = (
        ", ".join(f"{test.heads_a_sd[int(labels[0][1:]), int(labels[1][1:])]:.2f}" for labels, _ in top[:-1])
        + " and "
        + f"{test.heads_a_sd[int(top[-1][0][0][1:]), int(top[-1][0][1][1:])]:.2f}"
    )
    text = _flat(README)
    assert f"The induction heads {names} restore {values} of it" in text
    assert f"(standard deviations over the prompts {spread}:" in text
    assert test.previous == 11
    assert f"L0H11 alone moves it the other way ({_signed(float(heads.values[0, 11]))})" in text


@pytest.mark.slow
def test_the_attribution_paragraph_quotes_the_same_metric(test: InductionTest) -> None:
    by_head = test.attribution_mean()
    text = _flat(README)
    assert f"ends at the logit the model computed, {by_head.extra['logit']:.3f}." in text
    top = by_head.top(3, absolute=False)
    written = ", ".join(f"{''.join(labels)} ({_signed(v)})" for labels, v in top[:2])
    assert f"{written} and {''.join(top[2][0])} ({_signed(top[2][1])}) write most of it" in text
    order = np.argsort(by_head.values, axis=None)[:2]
    against = [np.unravel_index(int(i), by_head.values.shape) for i in order]
    named = " and ".join(f"L{l}H{h} ({_signed(float(by_head.values[l, h]))})" for l, h in against)
    assert f"{named} write against it" in text
    # the attribution's total is the patching's clean logit difference: one metric
    assert by_head.extra["logit"] == pytest.approx(test.heads_a.clean_value, abs=1e-4)


@pytest.mark.slow
def test_the_snippet_prints_the_quoted_heads(test: InductionTest) -> None:
    top = test.heads_a.top(3, absolute=False)
    comment = ", ".join(f"{''.join(labels)} {v:.2f}" for labels, v in top)
    assert f"# the three induction heads: {comment}" in README


@pytest.mark.slow
def test_the_composition_paragraph_quotes_path_patching_on_the_same_prompts(
    model: cw.CircuitModel, test: InductionTest
) -> None:
    p = induction_prompts(model)
    plot = cw.CompositionVsPatching(
        model, causal.path_patch(model, p.clean, p.corrupt_b, causal.normalised(p.metric), via="k")
    )
    text = _flat(README)
    assert test.paths_k is not None
    effects = [float(test.paths_k.values[1, h]) for h in (5, 7, 9)]
    assert f"effects {effects[0]:.2f}, {effects[1]:.2f} and {effects[2]:.2f} of the clean behaviour" in text
    assert f"(Pearson r = {plot.correlation():.2f} over the {len(plot.pairs())} pairs)" in text


def test_the_readme_trains_the_12_head_model_with_its_cards_command_which_matches_the_logged_history() -> None:
    card = cw.pretrained_card(NAME)
    command = str(card["command"])
    assert command in _flat(README.replace("\\\n", " ")), command
    every = int(re.search(r"--eval-every (\d+)", command).group(1))  # type: ignore[union-attr]
    training = card["training"]
    assert isinstance(training, dict)
    steps = [int(record["step"]) for record in training["log"]]
    assert steps[:3] == [every, 2 * every, 3 * every] and all(b - a == every for a, b in itertools.pairwise(steps))
