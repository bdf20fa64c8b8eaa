"""The SoLU-vs-GELU neuron measures on small random models, each against a slow definition (float64)."""

from __future__ import annotations

import pytest
import torch

from circuitwidgets.activations.neuron_basis import (
    feature_neuron_alignment,
    firing_rates,
    lateral_inhibition,
    loss_with_average_ln_scale,
    neuron_activations,
    next_token_loss,
    top_token_purity,
)
from circuitwidgets.errors import ArgumentError
from circuitwidgets.model import CircuitModel
from circuitwidgets.model.config import ModelConfig
from circuitwidgets.training.transformer import ToyConfig, ToyTransformer


def _model(act: str) -> CircuitModel:
    toy = ToyTransformer(
        ToyConfig(1, 2, 16, 8, 40, 16, d_mlp=24, act_fn=act, norm="layernorm"),
        generator=torch.Generator().manual_seed(0),
    ).double()
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, p in toy.named_parameters():
            if name.startswith("ln") or name.startswith("b_"):
                p.add_(0.3 * torch.randn(p.shape, generator=g, dtype=p.dtype))
    return CircuitModel(ModelConfig.from_dict(toy.model_config(0)), toy.canonical_weights())


TOKENS = torch.randint(0, 40, (4, 16), generator=torch.Generator().manual_seed(2))


def test_firing_rates_against_a_loop() -> None:
    acts = torch.randn(50, 6, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    rates = firing_rates(acts, level=0.3)
    for j in range(6):
        col = acts[:, j].tolist()
        med, top = sorted(col)[(len(col) - 1) // 2], max(col)
        assert rates[j] == pytest.approx(sum(a > med + 0.3 * (top - med) for a in col) / len(col))
    with pytest.raises(ArgumentError, match="level"):
        firing_rates(acts, level=1.5)


def test_top_token_purity_against_a_loop() -> None:
    g = torch.Generator().manual_seed(3)
    acts = torch.randn(60, 5, generator=g, dtype=torch.float64)
    ids = torch.randint(0, 4, (60,), generator=g)
    purity = top_token_purity(acts, ids, k=7)
    for j in range(5):
        top = sorted(range(60), key=lambda i: -float(acts[i, j]))[:7]
        counts = [sum(int(ids[i]) == t for i in top) for t in range(4)]
        assert purity[j] == pytest.approx(max(counts) / 7)
    one_token = top_token_purity(acts, torch.zeros(60, dtype=torch.long), k=7)
    assert torch.all(one_token == 1.0)


def test_lateral_inhibition_is_zero_for_gelu_and_negative_for_solu() -> None:
    gelu, solu = _model("gelu"), _model("solu_ln")
    assert lateral_inhibition(gelu, TOKENS, 0, 3, 4.0) == pytest.approx(0.0, abs=1e-12)
    effect = lateral_inhibition(solu, TOKENS, 0, 3, 4.0)
    # Slow definition: SoLU + LN by hand on the raised pre-activations.
    _, cache = solu.run_with_cache(TOKENS, names=["mlp_pre", "mlp_post"])
    pre = cache["mlp_pre", 0].clone()
    pre[..., 3] += 4.0
    mid = pre * pre.softmax(-1)
    w, b = solu.weight("ln_mlp_w"), solu.weight("ln_mlp_b")
    assert w is not None and b is not None
    post = torch.nn.functional.layer_norm(mid, (24,), w[0], b[0], 1e-5)
    others = [i for i in range(24) if i != 3]
    slow = float((post - cache["mlp_post", 0])[..., others].mean())
    assert effect == pytest.approx(slow, abs=1e-10)
    assert effect < 0


def test_average_ln_scale_against_its_definition() -> None:
    solu = _model("solu_ln")
    before, after = loss_with_average_ln_scale(solu, TOKENS)
    assert before == pytest.approx(next_token_loss(solu, TOKENS))
    _, cache = solu.run_with_cache(TOKENS, names=["mlp_mid"])
    mid = cache["mlp_mid", 0]
    scale = (mid.var(-1, unbiased=False) + 1e-5).sqrt().mean()
    w, b = solu.weight("ln_mlp_w"), solu.weight("ln_mlp_b")
    assert w is not None and b is not None
    post = (mid - mid.mean(-1, keepdim=True)) / scale * w[0] + b[0]
    logits = solu.run_with_hooks(TOKENS, {("mlp_post", 0): lambda v: post})
    slow = float(torch.nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1), TOKENS[:, 1:].flatten()))
    assert after == pytest.approx(slow, abs=1e-10)
    assert after != pytest.approx(before, abs=1e-6)
    with pytest.raises(ArgumentError, match="expected a SoLU model"):
        loss_with_average_ln_scale(_model("gelu"), TOKENS)


def test_neuron_activations_shape() -> None:
    assert neuron_activations(_model("gelu"), TOKENS, 0).shape == (64, 24)


def test_feature_neuron_alignment_against_a_loop() -> None:
    model = _model("solu_ln")
    g = torch.Generator().manual_seed(3)
    enc = torch.randn(16, 10, generator=g, dtype=torch.float64)
    dec = torch.randn(10, 16, generator=g, dtype=torch.float64)
    enc[:, 4] = 2.5 * model.weight("W_in")[0, :, 7]  # type: ignore[index]  # feature 4 reads neuron 7 exactly
    dec[6] = -0.5 * model.weight("W_out")[0, 3]  # type: ignore[index]  # feature 6 writes neuron 3's negative
    reads, writes = feature_neuron_alignment(model, 0, enc, dec)
    w_in, w_out = model.weight("W_in")[0].double(), model.weight("W_out")[0].double()  # type: ignore[index]
    for f in range(10):
        cos_in = [float(enc[:, f] @ w_in[:, n] / (enc[:, f].norm() * w_in[:, n].norm())) for n in range(24)]
        cos_out = [abs(float(dec[f] @ w_out[n] / (dec[f].norm() * w_out[n].norm()))) for n in range(24)]
        assert reads[f].item() == pytest.approx(max(cos_in), abs=1e-12)
        assert writes[f].item() == pytest.approx(max(cos_out), abs=1e-12)
    assert reads[4].item() == pytest.approx(1.0) and writes[6].item() == pytest.approx(1.0)


def test_feature_neuron_alignment_refuses_directions_of_another_width() -> None:
    model = _model("gelu")
    with pytest.raises(ArgumentError, match=r"encoder: expected .*d_model 16.* got shape \(12, 10\)"):
        feature_neuron_alignment(model, 0, torch.zeros(12, 10), torch.zeros(10, 16))
    with pytest.raises(ArgumentError, match=r"decoder: expected one row per encoder column \(10\), got 9"):
        feature_neuron_alignment(model, 0, torch.ones(16, 10), torch.ones(9, 16))
