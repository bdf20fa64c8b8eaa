"""Findings on the shipped SoLU / GELU pair (``pair-solu-1l``, ``pair-gelu-1l``: same shape, seed and batches).

On held-out standard-library code (48 windows of 128 tokens from the corpus's validation files); the figures
measured at publication are in the comments and on the cards.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import circuitwidgets as cw
from circuitwidgets.activations import neuron_basis as nb
from circuitwidgets.training.corpus import load_stdlib_corpus

NAMES = ("pair-gelu-1l", "pair-solu-1l")


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
