"""Helpers of the features tests: a small random MLP model with LayerNorm, and random dictionaries."""

from __future__ import annotations

import torch

from circuitwidgets.features.dictionary import Dictionary
from circuitwidgets.model import CircuitModel, ModelConfig


def mlp_model(
    n_layers: int = 2,
    d_model: int = 12,
    d_mlp: int = 20,
    d_vocab: int = 40,
    seed: int = 0,
    dtype: torch.dtype = torch.float64,
) -> CircuitModel:
    """A random LayerNorm model with GELU MLPs and biases (float64 by default)."""
    g = torch.Generator().manual_seed(seed)
    L, H, d, dh, V, n_ctx = n_layers, 2, d_model, 4, d_vocab, 32

    def r(*shape: int, std: float = 1.0) -> torch.Tensor:
        return (torch.randn(*shape, generator=g, dtype=torch.float64) * std).to(dtype)

    weights = {
        "W_E": r(V, d),
        "W_pos": r(n_ctx, d),
        "W_Q": r(L, H, d, dh, std=d**-0.5),
        "W_K": r(L, H, d, dh, std=d**-0.5),
        "W_V": r(L, H, d, dh, std=d**-0.5),
        "W_O": r(L, H, dh, d, std=(H * dh) ** -0.5),
        "W_in": r(L, d, d_mlp, std=d**-0.5),
        "b_in": r(L, d_mlp, std=0.1),
        "W_out": r(L, d_mlp, d, std=d_mlp**-0.5),
        "b_out": r(L, d, std=0.1),
        "W_U": r(d, V, std=d**-0.5),
    }
    cfg = ModelConfig(L, H, d, dh, V, n_ctx, normalization="ln_pre", has_mlp=True, d_mlp=d_mlp, act_fn="gelu")
    return CircuitModel(cfg, weights, name="mlp-random")


def random_dictionary(
    kind: str = "transcoder",
    activation: str = "topk",
    d_in: int = 12,
    d_sae: int = 30,
    k: int | None = 4,
    layer: int = 0,
    in_site: str | None = None,
    seed: int = 0,
    dtype: torch.dtype = torch.float64,
) -> Dictionary:
    """A dictionary with Gaussian weights and biases (so every term of encode/decode matters)."""
    g = torch.Generator().manual_seed(seed)

    def r(*shape: int, std: float = 1.0) -> torch.Tensor:
        return (torch.randn(*shape, generator=g, dtype=torch.float64) * std).to(dtype)

    d_out = d_in
    return Dictionary(
        kind,
        activation,
        W_enc=r(d_in, d_sae, std=d_in**-0.5),
        b_enc=r(d_sae, std=0.3),
        W_dec=r(d_sae, d_out, std=d_sae**-0.5),
        b_dec=r(d_out, std=0.3),
        W_skip=r(d_in, d_out, std=d_in**-0.5) if kind == "skip-transcoder" else None,
        threshold=r(d_sae).abs() * 0.3 if activation == "jumprelu" else None,
        layer=layer,
        in_site=in_site or ("resid_post" if kind == "sae" else None),
        k=k if activation in ("topk", "batchtopk") else None,
    )
