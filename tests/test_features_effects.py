"""Logit effects and virtual weights of features, checked in float64 against logit attribution and perturbed runs."""

from __future__ import annotations

import pytest
import torch
from test_features_examples import mlp_model

from circuitwidgets import causal
from circuitwidgets.errors import ArgumentError, ShapeError
from circuitwidgets.features.dictionary import Dictionary
from circuitwidgets.features.effects import (
    direct_logit_effects,
    logit_effects,
    output_directions,
    top_tokens,
)
from circuitwidgets.features.sites import mlp_input
from circuitwidgets.features.virtual_weights import feature_to_feature, head_to_feature
from circuitwidgets.model import CircuitModel
from circuitwidgets.model.run import freeze_norms_hooks

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def model() -> CircuitModel:
    return mlp_model(seed=3)


def test_a_neurons_direct_effect_is_its_logit_attribution(model: CircuitModel) -> None:
    tokens = torch.randint(0, 40, (3, 9), generator=torch.Generator().manual_seed(1))
    answers = torch.tensor([4, 17, 30])
    _, cache = model.run_with_cache(tokens, names=["mlp_post"])
    for layer in range(2):
        effects = direct_logit_effects(
            model, tokens, cache["mlp_post", layer], output_directions(model, layer), answers
        )
        for pos in (3, 8):
            dla = causal.logit_attribution(model, tokens, answers, by="neuron", pos=pos, reduce="none")
            torch.testing.assert_close(effects[:, pos], torch.as_tensor(dla.values[:, layer]), rtol=1e-10, atol=1e-12)


def test_logit_effects_are_the_direction_through_the_final_norm_and_unembedding(model: CircuitModel) -> None:
    d = Dictionary.random("transcoder", "relu", 12, 10, layer=0, dtype=torch.float64, seed=1)
    effects = logit_effects(model, output_directions(model, d), scale=2.0)
    for i in (0, 7):
        w = d.W_dec[i].detach()
        slow = torch.stack([((w - w.mean()) / 2.0) @ model.W_U[:, t] for t in range(40)])
        torch.testing.assert_close(effects[i], slow, rtol=1e-12, atol=1e-12)
    up, up_v, down, down_v = top_tokens(effects, 3)
    assert up_v[0].tolist() == sorted(effects[0].tolist(), reverse=True)[:3]
    assert down_v[0].tolist() == sorted(effects[0].tolist())[:3]
    assert effects[0, up[0, 0]] == effects[0].max() and effects[0, down[0, 0]] == effects[0].min()


def _pre_activation_change(
    model: CircuitModel, tokens: torch.Tensor, target: Dictionary, site: str, layer: int, add: torch.Tensor
) -> torch.Tensor:
    """Change of ``target``'s pre-activations when ``add`` is added at ``(site, layer)``, the norms frozen from the
    clean run, times the frozen scale where the target reads through the norm (the virtual weight's units)."""
    _, clean = model.run_with_cache(tokens)

    def hook(value: torch.Tensor) -> torch.Tensor:
        return value + add

    _, moved = model.run_with_cache(tokens, hooks={**freeze_norms_hooks(model.cfg, clean), (site, layer): hook})
    L = target.layer
    if target.in_site == "mlp_in":
        scale = clean["scale_mlp", L]
        before = mlp_input(model.cfg, clean["resid_mid", L], scale)
        after = mlp_input(model.cfg, moved["resid_mid", L], scale)
        return (target.pre_activations(after) - target.pre_activations(before)) * scale
    return target.pre_activations(moved[target.in_site, L]) - target.pre_activations(clean[target.in_site, L])


@pytest.mark.parametrize(
    ("source", "target"),
    [
        (("transcoder", None, 0), ("sae", "resid_post", 0)),  # writes mlp_out 0, read right after it
        (("sae", "resid_mid", 0), ("transcoder", None, 0)),  # writes resid_mid 0, read through the LayerNorm
    ],
)
def test_feature_to_feature_weights_are_the_direct_linear_effect(
    model: CircuitModel, source: tuple[str, str | None, int], target: tuple[str, str | None, int]
) -> None:
    src = Dictionary.random(source[0], "relu", 12, 6, layer=source[2], in_site=source[1], dtype=torch.float64, seed=4)
    tgt = Dictionary.random(target[0], "relu", 12, 5, layer=target[2], in_site=target[1], dtype=torch.float64, seed=5)
    weights = feature_to_feature(model, src, tgt)  # [6, 5]
    tokens = torch.randint(0, 40, (1, 7), generator=torch.Generator().manual_seed(2))
    for i in (0, 5):
        change = _pre_activation_change(model, tokens, tgt, src.out_site, src.layer, 1e-3 * src.W_dec[i].detach())
        for pos in (0, 6):
            torch.testing.assert_close(change[0, pos] / 1e-3, weights[i], rtol=1e-7, atol=1e-9)


def test_head_to_feature_weights_are_the_direct_linear_effect_of_each_heads_z(model: CircuitModel) -> None:
    tgt = Dictionary.random("transcoder", "relu", 12, 5, layer=1, dtype=torch.float64, seed=6)
    matrices, norms = head_to_feature(model, tgt)
    assert matrices.shape == (2, 3, 4, 5) and norms.shape == (2, 3, 5)
    tokens = torch.randint(0, 40, (1, 7), generator=torch.Generator().manual_seed(3))
    # layer 1's head 2, z coordinate 1 (layer 0's heads also pass through layer 0's MLP, so only layer 1 is direct)
    add = torch.zeros(1, 7, 3, 4, dtype=torch.float64)
    add[..., 2, 1] = 1e-3
    change = _pre_activation_change(model, tokens, tgt, "z", 1, add)
    torch.testing.assert_close(change[0, 4] / 1e-3, matrices[1, 2, 1], rtol=1e-7, atol=1e-9)
    torch.testing.assert_close(norms, matrices.norm(dim=2))


def test_a_later_writer_is_refused(model: CircuitModel) -> None:
    late = Dictionary.random("transcoder", "relu", 12, 4, layer=1, dtype=torch.float64)
    early = Dictionary.random("transcoder", "relu", 12, 4, layer=0, dtype=torch.float64)
    with pytest.raises(ArgumentError, match=r"source: expected a dictionary writing the stream before L0\.tc"):
        feature_to_feature(model, late, early)
    sae = Dictionary.random("sae", "relu", 12, 4, layer=0, in_site="resid_pre", dtype=torch.float64)
    with pytest.raises(ArgumentError, match="before any attention layer"):
        head_to_feature(model, sae)


def test_bad_arguments_of_the_effects_are_named(model: CircuitModel) -> None:
    tokens = torch.zeros(1, 3, dtype=torch.long)
    acts = torch.zeros(1, 3, 24, dtype=torch.float64)
    with pytest.raises(ShapeError, match=r"directions: expected \[24, 12\]"):
        direct_logit_effects(model, tokens, acts, torch.zeros(24, 5), [1])
    with pytest.raises(ShapeError, match=r"activations: expected \[1, 3, n_units\]"):
        direct_logit_effects(model, tokens, acts[:, :2], output_directions(model, 0), [1])
    with pytest.raises(ArgumentError, match=r"answers: expected token ids in \[0, 40\)"):
        direct_logit_effects(model, tokens, acts, output_directions(model, 0), [40])
    with pytest.raises(ShapeError, match=r"directions: expected a \[n_units, 12\] tensor"):
        logit_effects(model, torch.zeros(3, 7))
    post = Dictionary.random("sae", "relu", 24, 4, layer=0, in_site="mlp_post", dtype=torch.float64)
    with pytest.raises(ArgumentError, match="a residual-stream write"):
        output_directions(model, post)
    with pytest.raises(ArgumentError, match=r"units \(a layer\): expected an int in \[0, 2\)"):
        output_directions(model, 2)
