"""``LogitAttribution(model, tokens, answers=...)`` builds as ``LogitLens(model, tokens)`` does: the same view as
from the result of ``causal.logit_attribution``, and bad arguments named."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import circuitwidgets as cw
from circuitwidgets import causal
from circuitwidgets.errors import ArgumentTypeError


@pytest.fixture(scope="module")
def model() -> cw.CircuitModel:
    return cw.load_pretrained("attn-only-2l")


def test_a_model_tokens_and_answers_give_the_view_of_the_result(model: cw.CircuitModel) -> None:
    tokens = torch.tensor([[0, 5, 9, 17, 5, 9, 17, 5]])
    answers = (9, 17)
    built = cw.LogitAttribution(model, tokens, answers=answers)
    expected = cw.LogitAttribution(causal.logit_attribution(model, tokens, answers, by="head"))
    assert built.by == "head" and built.labels == expected.labels and built.metric == expected.metric
    np.testing.assert_allclose(built.values, expected.values)
    assert built.total == pytest.approx(built.logit, abs=1e-6)
    by_layer = cw.LogitAttribution(model, tokens, answers=9, by="layer", pos=3)
    assert by_layer.by == "layer" and by_layer.metric == "logit of the answer"


def test_a_model_without_tokens_or_answers_and_tokens_without_a_model_are_named(model: cw.CircuitModel) -> None:
    with pytest.raises(ArgumentTypeError, match="tokens, answers"):
        cw.LogitAttribution(model, [0, 1, 2])
    with pytest.raises(ArgumentTypeError, match="sweep: expected a CircuitModel"):
        cw.LogitAttribution(None, [0, 1, 2], answers=3)
