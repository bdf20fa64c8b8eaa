"""The shipped dictionaries of gelu-2l: they load, fit the model, and their card's numbers are recomputed.

The card's ``ci_metrics`` were measured by ``circuitwidgets.features.publish`` on the first
held-out windows of the corpus with the shipped float16 weights; here they are measured again
from the files (reading the card is not the test: the numbers must come out of the dictionaries).
"""

from __future__ import annotations

import pytest
import torch

import circuitwidgets as cw
from circuitwidgets.features.evaluate import evaluate
from circuitwidgets.features.pretrained import dictionary_card, list_pretrained_dictionaries, load_pretrained

NAMES = ["L0.resid_post", "L0.tc", "L1.tc"]


@pytest.fixture(scope="module")
def model() -> cw.CircuitModel:
    return cw.load_pretrained("gelu-2l")


def test_shipped_dictionaries_load_and_fit(model: cw.CircuitModel) -> None:
    assert list_pretrained_dictionaries("gelu-2l") == NAMES
    dictionaries = cw.features.load_pretrained("gelu-2l")
    assert list(dictionaries) == NAMES
    tokens = model.to_tokens("def f(x):\n    return x + 1\n")
    for name, d in dictionaries.items():
        d.check_model(model)
        f = d.features(model, tokens)
        assert f.shape == (1, tokens.shape[1], d.d_sae) and bool((f >= 0).all())
        assert d.label(3) == f"{name}/3"


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_card_metrics_are_recomputed_from_the_files(model: cw.CircuitModel, name: str) -> None:
    card = dictionary_card("gelu-2l")
    entry = card["dictionaries"][name]
    d = load_pretrained("gelu-2l")[name]
    got = evaluate(d, model, torch.tensor(card["evaluation"]["ci_tokens"]))
    for metric, value in entry["ci_metrics"].items():
        assert got[metric] == pytest.approx(value, abs=2e-4), metric
    assert entry["metrics"]["l0"] <= d.k  # at L0 <= 32, as the targets ask
    torch.testing.assert_close(torch.tensor(got["l0"]), torch.tensor(float(d.k)), atol=1.0, rtol=0)
