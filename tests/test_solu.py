"""SoLU + LN in the canonical model: the trainer's module, the loaded model and TransformerLens's SoLU agree on
the same weights (logits and the ``pre``/``mid``/``post`` activations), and ``--act`` is checked."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from circuitwidgets.cli import main
from circuitwidgets.errors import ArgumentError
from circuitwidgets.model import CircuitModel
from circuitwidgets.model.config import ModelConfig
from circuitwidgets.training.transformer import ToyConfig, ToyTransformer


def _toy(act: str, seed: int = 0) -> ToyTransformer:
    cfg = ToyConfig(2, 2, 16, 8, 50, 12, d_mlp=24, act_fn=act, norm="layernorm")
    model = ToyTransformer(cfg, generator=torch.Generator().manual_seed(seed)).double()
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():  # norms away from their initial ones and zeros, so folding and the SoLU LN are exercised
        for name, p in model.named_parameters():
            if name.startswith("ln") or name.startswith("b_"):
                p.add_(0.3 * torch.randn(p.shape, generator=g, dtype=p.dtype))
    return model


def _loaded(model: ToyTransformer) -> CircuitModel:
    return CircuitModel(ModelConfig.from_dict(model.model_config(0)), model.canonical_weights())


def test_solu_model_loads_with_the_trainers_logits_and_activations() -> None:
    toy = _toy("solu_ln")
    ours = _loaded(toy)
    tokens = torch.randint(0, 50, (3, 12), generator=torch.Generator().manual_seed(0))
    logits, cache = ours.run_with_cache(tokens)
    assert torch.allclose(logits.double(), toy(tokens), atol=1e-10)  # type: ignore[arg-type]
    pre, mid, post = cache["mlp_pre", 1], cache["mlp_mid", 1], cache["mlp_post", 1]
    assert torch.allclose(mid, pre * pre.softmax(dim=-1), atol=1e-12)  # SoLU: x · softmax(x) over the neurons
    normed = (mid - mid.mean(-1, keepdim=True)) / (mid.var(-1, unbiased=False, keepdim=True) + 1e-5).sqrt()
    assert torch.allclose(post, normed * toy.ln_mlp_w[1] + toy.ln_mlp_b[1], atol=1e-10)


def test_a_solu_twin_starts_from_the_gelu_models_weights() -> None:
    gelu, solu = _toy("gelu", seed=4), _toy("solu_ln", seed=4)
    g_state, s_state = gelu.state_dict(), solu.state_dict()
    assert set(s_state) - set(g_state) == {"ln_mlp_w", "ln_mlp_b"}
    fresh_g = ToyTransformer(gelu.cfg, generator=torch.Generator().manual_seed(9)).state_dict()
    fresh_s = ToyTransformer(solu.cfg, generator=torch.Generator().manual_seed(9)).state_dict()
    for name, t in fresh_g.items():
        assert torch.equal(t, fresh_s[name]), name


def _tl_solu() -> Any:
    """TransformerLens's own SoLU + LN model (a native bridge, built offline), with random weights."""
    tl = pytest.importorskip("transformer_lens")
    if not hasattr(tl.TransformerBridge, "boot_native"):
        pytest.skip("this TransformerLens cannot build a bridge offline (no boot_native)")
    from transformer_lens.config import TransformerBridgeConfig

    cfg = TransformerBridgeConfig(
        d_model=16, d_head=4, n_heads=4, n_layers=2, n_ctx=12, d_vocab=37, seed=0, d_mlp=32, act_fn="solu_ln"
    )
    bridge = tl.TransformerBridge.boot_native(cfg)
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in bridge.original_model.named_parameters():
            noise = torch.randn(p.shape, generator=g, dtype=p.dtype)
            is_gain = p.ndim == 1 and name.endswith(".w")
            p.copy_(1.0 + 0.3 * noise if is_gain else 0.3 * noise)
    return bridge.eval()


def test_solu_equals_transformer_lens_on_the_same_weights() -> None:
    from circuitwidgets.sources.transformer_lens import from_transformer_lens

    tl_model = _tl_solu()
    ours = from_transformer_lens(tl_model)
    assert ours.cfg.act_fn == "solu_ln"
    tokens = torch.randint(0, 37, (2, 12), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        tl_logits, tl_cache = tl_model.run_with_cache(tokens)
    logits, cache = ours.run_with_cache(tokens)
    assert torch.allclose(logits.float(), tl_logits, atol=1e-4)
    for layer in range(2):
        # The bridge records SoLU's ``mid`` as the input of the MLP's LayerNorm (HookedTransformer: ``hook_mid``).
        for ours_name, tl_name in (("mlp_pre", "hook_pre"), ("mlp_mid", "ln.hook_in"), ("mlp_post", "hook_post")):
            theirs = tl_cache[f"blocks.{layer}.mlp.{tl_name}"]
            assert torch.allclose(cache[ours_name, layer].float(), theirs, atol=1e-4), (layer, ours_name)
    # TransformerLens's hook name reaches the same activation in a hooked run.
    seen: list[torch.Tensor] = []
    ours.run_with_hooks(tokens, {"blocks.0.mlp.hook_mid": lambda v: seen.append(v)})
    assert torch.allclose(seen[0], cache["mlp_mid", 0], atol=1e-6)


def test_cli_act_is_checked_and_solu_is_accepted(tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["train", "--act", "swish", "-o", str(tmp_path / "run")])
    assert code != 0
    assert (
        "--act: expected one of ('gelu', 'gelu_new', 'relu', 'solu', 'solu_ln'), got 'swish'" in capsys.readouterr().err
    )


def test_unknown_trainer_activation_is_refused() -> None:
    with pytest.raises(ArgumentError, match="act_fn: expected one of"):
        ToyConfig(1, 1, 8, 8, 10, 4, d_mlp=8, act_fn="solu")
