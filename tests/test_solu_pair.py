"""Findings on the shipped SoLU / GELU pair (``pair-solu-1l``, ``pair-gelu-1l``: same shape, seed and batches).

On held-out standard-library code (48 windows of 128 tokens from the corpus's validation files); the figures
measured at publication are in the comments and on the cards.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

import circuitwidgets as cw
from circuitwidgets import circuits
from circuitwidgets.activations import neuron_basis as nb
from circuitwidgets.features import load_pretrained as load_dictionaries
from circuitwidgets.features.evaluation import evaluate
from circuitwidgets.features.pretrained import dictionary_card
from circuitwidgets.training.corpus import load_stdlib_corpus
from circuitwidgets.training.publish import _loss_halves

NAMES = ("pair-gelu-1l", "pair-solu-1l")
PRETRAINED = Path(cw.__file__).resolve().parent / "pretrained"


@pytest.fixture(scope="module")
def models() -> dict[str, cw.CircuitModel]:
    return {name: cw.load_pretrained(name) for name in NAMES}


@pytest.fixture(scope="module")
def tokens(models: dict[str, cw.CircuitModel]) -> torch.Tensor:
    tok = models["pair-gelu-1l"].tokenizer
    ids = torch.tensor([i for text in load_stdlib_corpus().val for i in tok.encode(text)], dtype=torch.long)
    starts = torch.linspace(0, len(ids) - 130, 48).long().tolist()
    return torch.stack([torch.cat([torch.zeros(1, dtype=torch.long), ids[s : s + 127]]) for s in starts])


@pytest.fixture(scope="module")
def acts(models: dict[str, cw.CircuitModel], tokens: torch.Tensor) -> dict[str, torch.Tensor]:
    return {name: nb.neuron_activations(m, tokens, 0) for name, m in models.items()}


def test_the_pair_is_a_pair(models: dict[str, cw.CircuitModel]) -> None:
    gelu, solu = models["pair-gelu-1l"], models["pair-solu-1l"]
    assert gelu.cfg.act_fn == "gelu" and solu.cfg.act_fn == "solu_ln"
    for key in ("n_layers", "n_heads", "d_model", "d_head", "d_mlp", "d_vocab", "n_ctx"):
        assert getattr(gelu.cfg, key) == getattr(solu.cfg, key), key
    gc, sc = cw.pretrained_card("pair-gelu-1l"), cw.pretrained_card("pair-solu-1l")
    assert gc["command"].replace("--act gelu", "--act solu").replace("pair-gelu", "pair-solu") == sc["command"]


def test_solu_matches_gelus_held_out_loss(models: dict[str, cw.CircuitModel], tokens: torch.Tensor) -> None:
    gelu = nb.next_token_loss(models["pair-gelu-1l"], tokens)  # 4.333
    solu = nb.next_token_loss(models["pair-solu-1l"], tokens)  # 4.332
    assert abs(gelu - solu) < 0.05


def test_solu_neurons_fire_more_sparsely(acts: dict[str, torch.Tensor]) -> None:
    gelu = float(nb.firing_rates(acts["pair-gelu-1l"]).mean())  # 0.0489
    solu = float(nb.firing_rates(acts["pair-solu-1l"]).mean())  # 0.0067
    assert solu < 0.5 * gelu


def test_solu_neurons_top_activations_are_purer(acts: dict[str, torch.Tensor], tokens: torch.Tensor) -> None:
    gelu = nb.top_token_purity(acts["pair-gelu-1l"], tokens, 20).numpy()  # mean 0.326
    solu = nb.top_token_purity(acts["pair-solu-1l"], tokens, 20).numpy()  # mean 0.373
    assert solu.mean() > gelu.mean() + 0.02
    assert np.median(solu) >= np.median(gelu)


def test_solu_inhibits_laterally_and_gelu_does_not(models: dict[str, cw.CircuitModel], tokens: torch.Tensor) -> None:
    for neuron in (0, 1, 2):
        assert nb.lateral_inhibition(models["pair-gelu-1l"], tokens[:8], 0, neuron, 5.0) == 0.0
        assert nb.lateral_inhibition(models["pair-solu-1l"], tokens[:8], 0, neuron, 5.0) < -1e-3  # about -0.0045


def test_solu_leans_on_its_layernorm(models: dict[str, cw.CircuitModel], tokens: torch.Tensor) -> None:
    before, after = nb.loss_with_average_ln_scale(models["pair-solu-1l"], tokens)  # 4.332 -> 4.496
    assert after > before + 0.1


def test_solu_transcoder_features_are_more_neuron_aligned(models: dict[str, cw.CircuitModel]) -> None:
    # The shipped transcoders (1,024 TopK-16 features, L0.tc of each model, trained with the same command on the
    # same rows): per feature, the largest cosine of its encoder direction with a neuron's W_in column and of its
    # decoder row with a neuron's W_out row. Random directions give the floor (medians about 0.26 and 0.28).
    medians = {}
    for name, model in models.items():
        tc = load_dictionaries(name)["L0.tc"]
        reads, writes = nb.feature_neuron_alignment(model, 0, tc.W_enc.detach(), tc.W_dec.detach())
        g = torch.Generator().manual_seed(0)
        floor = nb.feature_neuron_alignment(
            model, 0, torch.randn(tc.W_enc.shape, generator=g), torch.randn(tc.W_dec.shape, generator=g)
        )
        assert reads.median() > floor[0].median() + 0.05 and writes.median() > floor[1].median() + 0.05
        medians[name] = (float(reads.median()), float(writes.median()))
        card = " ".join((PRETRAINED / name / "README.md").read_text(encoding="utf-8").split())
        assert f"encoder {medians[name][0]:.3f}, decoder {medians[name][1]:.3f}" in card
    gelu, solu = medians["pair-gelu-1l"], medians["pair-solu-1l"]  # encoder 0.367 vs 0.479; decoder 0.405 vs 0.665
    assert solu[0] > gelu[0] + 0.05
    assert solu[1] > gelu[1] + 0.15


@pytest.mark.parametrize("name", NAMES)
def test_the_pair_transcoders_card_metrics_are_recomputed_from_the_files(
    models: dict[str, cw.CircuitModel], name: str
) -> None:
    card = dictionary_card(name)
    entry = card["dictionaries"]["L0.tc"]
    got = evaluate(load_dictionaries(name)["L0.tc"], models[name], torch.tensor(card["evaluation"]["ci_tokens"]))
    for metric, value in entry["ci_metrics"].items():
        assert got[metric] == pytest.approx(value, rel=1e-6, abs=2e-4), metric
    assert entry["d_sae"] == 1024 and entry["k"] == 16


@pytest.mark.parametrize("name", NAMES)
def test_the_pair_cards_head_findings_are_measured_at_their_context(
    models: dict[str, cw.CircuitModel], name: str
) -> None:
    # measure_findings shortens the repeated halves to fit a context of 128 (63 tokens, not 100)
    model = models[name]
    findings = json.loads((PRETRAINED / name / "card.json").read_text(encoding="utf-8"))["findings"]
    card = " ".join((PRETRAINED / name / "README.md").read_text(encoding="utf-8").split())
    prev = circuits.head_scores(model, kind="previous_token")[0]
    induction = circuits.head_scores(model, kind="induction")[0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (the weight-space MLP-exclusion note)
        ov = circuits.copying_scores(model, circuit="ov", method="eigen")[0]
    first, second = _loss_halves(model)
    assert np.allclose(findings["head_previous_token"][0], prev, atol=1e-3)
    assert np.allclose(findings["head_induction"][0], induction, atol=1e-3)
    assert findings["repeated_random_loss"] == {"first_half": round(first, 3), "second_half": round(second, 3)}
    assert f"previous-token score: {', '.join(f'{x:.3f}' for x in prev)}" in card
    assert f"induction score: {', '.join(f'{x:.3f}' for x in induction)}" in card
    assert f"eigenvalues): {', '.join(f'{x:.3f}' for x in ov)}" in card
    assert f"first half {first:.3f}, second half {second:.3f}" in card
    assert second > first - 0.5  # one layer: no induction, the repeat is not predicted
