"""FeatureDashboard and PromptFeatures: their data is the engine's, selections validate, link by site and come back
from the view."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import traitlets
from _comm import from_view
from test_features_examples import mlp_model

import circuitwidgets as cw
from circuitwidgets import features
from circuitwidgets.errors import ArgumentError, ArgumentTypeError
from circuitwidgets.features.dictionary import Dictionary
from circuitwidgets.features.effects import logit_effects, output_directions
from circuitwidgets.model import CircuitModel
from circuitwidgets.tokenizer import VocabTokenizer
from circuitwidgets.widgets.features import data as features_data
from circuitwidgets.widgets.features.data import typical_scale

VOCAB = [f"t{i}" for i in range(39)] + ["\u202eevil"]  # (one bidi override: shown as text, escaped by the view)


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def model() -> CircuitModel:
    base = mlp_model(seed=7)
    return CircuitModel(base.cfg, base.weights(), tokenizer=VocabTokenizer(VOCAB, bos_token_id=0), name="tiny-mlp")


@pytest.fixture(scope="module")
def corpus() -> torch.Tensor:
    tokens = torch.randint(1, 40, (12, 16), generator=torch.Generator().manual_seed(2))
    tokens[:, 0] = 0
    return tokens


@pytest.fixture(scope="module")
def dictionary() -> Dictionary:
    return Dictionary.random("transcoder", "topk", 12, 20, layer=1, k=3, dtype=torch.float64, seed=3)


@pytest.fixture(scope="module")
def dashboard(model: CircuitModel, corpus: torch.Tensor, dictionary: Dictionary) -> cw.FeatureDashboard:
    return cw.FeatureDashboard.from_model(model, dictionary, corpus, k=4, samples=3, batch_size=5, progress=False)


def test_the_dashboard_holds_every_feature_compactly_and_as_the_engine_found_it(
    model: CircuitModel, corpus: torch.Tensor, dictionary: Dictionary, dashboard: cw.FeatureDashboard
) -> None:
    ex = features.max_activating(
        model, corpus, features.dictionary_features(model, dictionary), k=4, samples=3, progress=False
    )
    assert dashboard.n_units == 20 and dashboard.n_examples == 7 and dashboard.site == "L1.tc"
    assert dashboard.ctx_tokens.dtype == np.uint16 and dashboard.ctx_shade.dtype == np.uint8
    np.testing.assert_allclose(dashboard.ex_value[:, :4], ex.top_value.astype(np.float32))
    for unit in (0, 13):
        contexts = dashboard.top_contexts(unit)
        ids = ex.window_tokens(ex.top_index[unit])
        assert [c[0] for c in contexts] == pytest.approx([float(v) for v in ex.top_value[unit] if not np.isnan(v)])
        assert contexts[0][1] == [VOCAB[int(i)] for i in ids[0] if i >= 0]
        # shades: the window's activations over the unit's largest, quantised to 1/255
        window = ex.top_context[unit, 0].astype(np.float64)
        expect = np.rint(np.clip(np.nan_to_num(window / dashboard.unit_max[unit]), 0, 1) * 255)
        np.testing.assert_array_equal(dashboard.ctx_shade[unit, 0], expect)
    # promoted tokens: the engine's logit effects at the corpus's mean final-norm scale
    effects = logit_effects(model, output_directions(model, dictionary), typical_scale(model, corpus))
    best = effects[5].topk(10)
    assert dashboard.promoted(5) == [
        (VOCAB[int(i)], pytest.approx(float(v), rel=1e-5)) for i, v in zip(best.indices, best.values, strict=True)
    ]
    # nearby: decoder cosine
    W = dictionary.W_dec.detach()
    cos = (W @ W.T) / (W.norm(dim=1)[:, None] * W.norm(dim=1)[None])
    cos.fill_diagonal_(-2)
    assert int(dashboard.nearby[2, 0]) == int(cos[2].argmax())


def test_search_by_token_finds_the_units_whose_top_token_or_promoted_token_matches(
    dashboard: cw.FeatureDashboard,
) -> None:
    centre = dashboard.vocab[int(dashboard.ctx_tokens[4, 0, dashboard.centre])]
    assert 4 in dashboard.search(centre)
    assert dashboard.search("no such token") == []
    # each hit carries the token that matched: its top token when that matches, else the promoted one
    for unit, token in dashboard.search_tokens("t1"):
        own = dashboard.vocab[int(dashboard.ctx_tokens[unit, 0, dashboard.centre])]
        assert "t1" in token and (token == own or ("t1" not in own and token in dict(dashboard.promoted(unit))))


def test_dense_units_are_those_above_the_share_in_both_views(
    model: CircuitModel, dictionary: Dictionary, dashboard: cw.FeatureDashboard
) -> None:
    assert dashboard.dense_share == features_data.DENSE_SHARE
    assert dashboard.dense == [
        u for u in range(dashboard.n_units) if float(dashboard.density[u]) > dashboard.dense_share
    ]
    prompt = cw.PromptFeatures(model, dictionary, [0, 3, 9], k=3, density=dashboard.density, dense_share=0.3)
    assert list(prompt.dense) == [u for u in range(dashboard.n_units) if float(dashboard.density[u]) > 0.3]
    assert cw.PromptFeatures(model, dictionary, [0, 3, 9], k=3).dense_share == 0.0  # (no density: nothing marked)
    with pytest.raises(ArgumentError, match="density: expected 20 values"):
        cw.PromptFeatures(model, dictionary, [0, 3], density=np.zeros(3))
    with pytest.raises(ArgumentError, match="dense_share"):
        cw.PromptFeatures(model, dictionary, [0, 3], density=dashboard.density, dense_share=1.5)


def test_a_click_in_the_prompt_view_selects_the_feature_in_the_linked_dashboard(
    model: CircuitModel, dictionary: Dictionary, dashboard: cw.FeatureDashboard
) -> None:
    prompt = cw.PromptFeatures(model, dictionary, [0, 3, 9, 27, 39, 5], k=3)
    acts = dictionary.features(model, torch.tensor([[0, 3, 9, 27, 39, 5]]))[0]
    first = int(acts[2].argmax())
    assert prompt.features_at(2)[0] == (f"L1.tc/{first}", pytest.approx(float(acts[2].max()), rel=1e-6))
    group = cw.link(dashboard, prompt)
    assert "selected_feature" in group.names
    from_view(prompt, selected_feature=first, selected_dest=2)  # (as the view sends a chip's click)
    assert dashboard.selected_feature == first and prompt.selected_dest == 2
    dashboard.selected_feature = 11
    assert prompt.selected_feature == 11
    group.unlink()


def test_features_of_another_site_are_not_linked(model: CircuitModel, dashboard: cw.FeatureDashboard) -> None:
    neurons = cw.PromptFeatures(model, features.neurons(model, 1), [0, 1, 2], k=2)
    attention = cw.AttentionPatterns(model, torch.tensor([0, 1, 2]))
    group = cw.link(dashboard, neurons, attention)
    assert "selected_feature" not in group.names and "selected_dest" in group.names
    group.unlink()


def test_bad_selections_and_arguments_are_named(model: CircuitModel, dashboard: cw.FeatureDashboard) -> None:
    with pytest.raises(traitlets.TraitError, match="selected_feature"):
        dashboard.selected_feature = 20
    with pytest.raises(ArgumentTypeError, match="units"):
        cw.PromptFeatures(model, "L1.tc", [0, 1])  # type: ignore[arg-type]
    ex = features.max_activating(model, torch.zeros(2, 3, dtype=torch.long), features.neurons(model, 0), progress=False)
    with pytest.raises(ArgumentTypeError, match="model"):
        cw.FeatureDashboard(ex, None)


def test_a_dashboard_of_heads_has_contexts_and_no_single_output_direction(
    model: CircuitModel, corpus: torch.Tensor
) -> None:
    heads = cw.FeatureDashboard.from_model(
        model, features.head_outputs(model, 1), corpus, k=3, samples=2, progress=False
    )
    assert heads.site == "L1 heads" and heads.kind == "head" and heads.label(2) == "L1H2"
    assert heads.logit_up.shape == (3, 0) and heads.nearby.shape == (3, 0)  # (a head writes a subspace)
    assert len(heads.top_contexts(0)) == 3
