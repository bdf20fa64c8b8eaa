"""cw.link(..., twins=True): views of the SoLU / GELU pair linked by neuron index and by token on the same text,
never by head; NeuronSparsity's rates against neuron_basis.firing_rates."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import torch

import circuitwidgets as cw
from circuitwidgets import features
from circuitwidgets.activations import neuron_basis as nb
from circuitwidgets.errors import ArgumentError, ArgumentTypeError
from circuitwidgets.features.stream import held_out_tokens
from circuitwidgets.widgets import HeadScores, NeuronSparsity
from circuitwidgets.widgets.core.link import LinkWarning

NAMES = ("pair-gelu-1l", "pair-solu-1l")
TEXT = "def add(a, b):\n    return a + b\n"


@pytest.fixture(scope="module")
def models() -> list[cw.CircuitModel]:
    return [cw.load_pretrained(name) for name in NAMES]


@pytest.fixture(scope="module")
def tokens(models: list[cw.CircuitModel]) -> torch.Tensor:
    return torch.tensor(held_out_tokens(models[0])[: 8 * 32].astype(np.int64)).view(8, 32)


def _prompts(models: list[cw.CircuitModel], texts: tuple[str, str] = (TEXT, TEXT)) -> list[cw.PromptFeatures]:
    return [cw.PromptFeatures(m, features.neurons(m, 0), t) for m, t in zip(models, texts, strict=True)]


def test_twins_link_the_neuron_and_the_token_and_say_so(models: list[cw.CircuitModel], tokens: torch.Tensor) -> None:
    dashboards = [
        cw.FeatureDashboard.from_model(m, features.neurons(m, 0), tokens, k=4, samples=2, progress=False)
        for m in models
    ]
    prompts = _prompts(models)
    hist = NeuronSparsity.from_models(models, tokens)
    group = cw.link(*dashboards, *prompts, hist, twins=True)
    assert group.names == ("selected_feature", "selected_dest")
    assert "twin models 'pair-gelu-1l', 'pair-solu-1l'" in group.description
    assert "Heads are not linked" in group.description and "twins" in repr(group)
    dashboards[1].selected_feature = 17
    assert [w.selected_feature for w in (*dashboards, *prompts, hist)] == [17] * 5
    hist.selected_feature = 300
    assert dashboards[0].selected_feature == prompts[1].selected_feature == 300
    prompts[0].selected_dest = 5
    assert prompts[1].selected_dest == 5


def test_twins_link_no_position_between_different_texts(models: list[cw.CircuitModel]) -> None:
    prompts = _prompts(models, (TEXT, "x = 1\ny = 2\nz = 3\n"))
    with pytest.warns(LinkWarning, match="token positions are not linked: the twin views show different tokens"):
        group = cw.link(*prompts, twins=True)
    assert group.names == ("selected_feature",)


def test_without_twins_other_models_are_refused_and_twins_never_link_heads(models: list[cw.CircuitModel]) -> None:
    a, b = _prompts(models)
    with pytest.raises(ArgumentError, match=r"widgets\[1\]: expected a widget of the model 'pair-gelu-1l'"):
        cw.link(a, b)
    with pytest.raises(ArgumentTypeError, match=r"twins: expected a bool, got str 'yes'"):
        cw.link(a, b, twins="yes")  # type: ignore[arg-type]
    rng = np.random.default_rng(0)
    heads = [HeadScores.from_scores(rng.random((1, 4)), name=n) for n in NAMES]
    with pytest.raises(ArgumentError, match=r"widgets: expected widgets with a selection in common"):
        cw.link(heads[0], a, twins=True)
    group = cw.link(*heads, twins=True)
    assert group.names == ()  # (a head of one trained model is not the same head of the other)


def test_twins_of_another_width_are_refused(models: list[cw.CircuitModel], tokens: torch.Tensor) -> None:
    full = NeuronSparsity.from_models(models, tokens[:2])
    half = NeuronSparsity(model_names=["x"], site="L0 neurons", rates=np.zeros((1, 256), np.float32))
    with pytest.raises(
        ArgumentError, match=r"widgets\[1\]: .*n_units=512 like widgets\[0\], got NeuronSparsity with n_units=256"
    ):
        cw.link(full, half, twins=True)


def test_sparsity_rates_are_the_firing_rates(models: list[cw.CircuitModel], tokens: torch.Tensor) -> None:
    hist = NeuronSparsity.from_models(models, tokens, level=0.3)
    for row, m in zip(hist.rates, models, strict=True):
        expected = nb.firing_rates(nb.neuron_activations(m, tokens, 0), 0.3).numpy()
        assert np.allclose(row, expected, atol=1e-7)
    assert hist.site == "L0 neurons" and hist.model_names == list(NAMES) and hist.n_tokens_read == 256
    assert float(np.mean(hist.rates[1])) < float(np.mean(hist.rates[0]))  # SoLU's neurons fire more rarely
    with pytest.raises(ArgumentError, match=r"models\[1\]: expected a model with MLP neurons, as many as models\[0\]"):
        NeuronSparsity.from_models([models[0], cw.load_pretrained("attn-only-1l")], tokens)


def test_a_saved_page_keeps_the_twins_linked(
    models: list[cw.CircuitModel], tokens: torch.Tensor, tmp_path: Path
) -> None:
    prompts = _prompts(models)
    hist = NeuronSparsity.from_models(models, tokens[:2])
    cw.link(*prompts, hist, twins=True)
    page = cw.save_html([*prompts, hist], tmp_path / "twins.html").read_text(encoding="utf-8")
    blocks = re.findall(r'<div class="cw-widget"[^>]*?((?: data-cw-link[-\w]*="[^"]*")*)>', page)
    prompt_link = ' data-cw-link="selected_feature selected_dest" data-cw-link-group="g0"'
    assert blocks == [prompt_link, prompt_link, ' data-cw-link="selected_feature" data-cw-link-group="g0"']
