"""Small random models with MLPs and random transcoders for the attribution-graph tests (float64, no files)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from circuitwidgets.model import CircuitModel, ModelConfig
from circuitwidgets.tokenizer import VocabTokenizer


@dataclass
class RandomTranscoder:
    """A ReLU (or JumpReLU, with ``threshold``) transcoder with the attributes attribution graphs read."""

    layer: int
    W_enc: torch.Tensor
    b_enc: torch.Tensor
    W_dec: torch.Tensor
    b_dec: torch.Tensor
    W_skip: torch.Tensor | None = None
    threshold: torch.Tensor | None = None
    in_site: str = "mlp_in"
    out_site: str = "mlp_out"

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        pre = x @ self.W_enc + self.b_enc
        if self.threshold is not None:
            return pre * (pre > self.threshold)
        return torch.relu(pre)

    def decode(self, f: torch.Tensor, x: torch.Tensor | None = None) -> torch.Tensor:
        out = f @ self.W_dec + self.b_dec
        return out + x @ self.W_skip if self.W_skip is not None and x is not None else out


def mlp_model(
    n_layers: int = 2,
    d_model: int = 16,
    n_heads: int = 2,
    d_vocab: int = 40,
    n_ctx: int = 32,
    seed: int = 0,
    dtype: torch.dtype = torch.float64,
    normalization: str = "ln_pre",
    positions: str = "standard",
) -> CircuitModel:
    """A pre-norm model with GELU MLPs and every bias, random Gaussian weights; token 0 is BOS."""
    g = torch.Generator().manual_seed(seed)
    L, H, d, V, dh, m = n_layers, n_heads, d_model, d_vocab, d_model // n_heads, 4 * d_model

    def r(*shape: int, std: float = 1.0) -> torch.Tensor:
        return (torch.randn(*shape, generator=g, dtype=torch.float64) * std).to(dtype)

    weights = {
        "W_E": r(V, d), "W_Q": r(L, H, d, dh, std=d**-0.5), "W_K": r(L, H, d, dh, std=d**-0.5),
        "W_V": r(L, H, d, dh, std=d**-0.5), "W_O": r(L, H, dh, d, std=(H * dh) ** -0.5),
        "b_Q": r(L, H, dh, std=0.1), "b_K": r(L, H, dh, std=0.1), "b_V": r(L, H, dh, std=0.1), "b_O": r(L, d, std=0.1),
        "W_in": r(L, d, m, std=d**-0.5), "b_in": r(L, m, std=0.1), "W_out": r(L, m, d, std=m**-0.5),
        "b_out": r(L, d, std=0.1), "W_U": r(d, V, std=d**-0.5), "b_U": r(V, std=0.1),
    }  # fmt: skip
    if positions != "rotary":
        weights["W_pos"] = r(n_ctx, d, std=0.5)
    cfg = ModelConfig(
        L, H, d, dh, V, n_ctx, positional_embedding_type=positions, normalization=normalization, has_mlp=True,
        d_mlp=m, act_fn="gelu", bos_token_id=0, rotary_dim=dh if positions == "rotary" else None,
    )  # fmt: skip
    tokenizer = VocabTokenizer(["<bos>", *[f"t{i}" for i in range(1, V)]], bos_token_id=0)
    return CircuitModel(cfg, weights, tokenizer=tokenizer, name=f"mlp-{L}l-seed{seed}")


def random_transcoders(
    model: CircuitModel, d_sae: int = 24, seed: int = 1, skip: bool = False, jump: bool = False, in_site: str = "mlp_in"
) -> list[RandomTranscoder]:
    """One random transcoder per layer (about a third of features active on a random prompt)."""
    g = torch.Generator().manual_seed(seed)
    d, dtype = model.cfg.d_model, model.dtype

    def r(*shape: int, std: float = 1.0) -> torch.Tensor:
        return (torch.randn(*shape, generator=g, dtype=torch.float64) * std).to(dtype)

    scale = 1.0 if in_site == "mlp_in" else 0.3
    return [
        RandomTranscoder(
            layer,
            r(d, d_sae, std=scale * d**-0.5),
            r(d_sae, std=0.3) - 0.3,
            r(d_sae, d, std=d_sae**-0.5),
            r(d, std=0.1),
            r(d, d, std=0.2 * d**-0.5) if skip else None,
            (r(d_sae, std=0.1).abs() if jump else None),
            in_site,
        )
        for layer in range(model.cfg.n_layers)
    ]


def decoder_model(
    n_layers: int = 3, d_model: int = 16, seed: int = 0, window: int = 4, dtype: torch.dtype = torch.float64,
    family: str = "gemma2",
) -> CircuitModel:  # fmt: skip
    """A Gemma-2-like model: RMS norms before and after each sublayer (random multipliers), gated tanh-GELU MLPs,
    rotary, grouped-query attention (4 heads, 2 key/value heads), attention and final soft-caps, a sliding window on
    even layers, a query scale other than √d_head, no biases; token 0 is BOS.

    ``family="olmo2"``: OLMo 2's placement instead (norms after each sublayer and at the end only) with its QK-norm
    over all heads, no soft-caps or window; ``"llama"``: pre-norms only, gated SiLU, no soft-caps or window."""
    g = torch.Generator().manual_seed(seed)
    L, H, G, d, V, dh, m = n_layers, 4, 2, d_model, 40, 8, 3 * d_model

    def r(*shape: int, std: float = 1.0, mean: float = 0.0) -> torch.Tensor:
        return (mean + torch.randn(*shape, generator=g, dtype=torch.float64) * std).to(dtype)

    weights = {
        "W_E": r(V, d), "W_Q": r(L, H, d, dh, std=d**-0.5), "W_K": r(L, G, d, dh, std=d**-0.5),
        "W_V": r(L, G, d, dh, std=d**-0.5), "W_O": r(L, H, dh, d, std=(H * dh) ** -0.5),
        "W_in": r(L, d, m, std=d**-0.5), "W_gate": r(L, d, m, std=d**-0.5), "W_out": r(L, m, d, std=m**-0.5),
        "W_U": r(d, V, std=d**-0.5),
    }  # fmt: skip
    gemma = family == "gemma2"
    if family != "llama":
        weights |= {"post_attn_norm": r(L, d, std=0.3, mean=1.0), "post_mlp_norm": r(L, d, std=0.3, mean=1.0)}
    if family == "olmo2":
        weights |= {"q_norm": r(L, H, dh, std=0.3, mean=1.0), "k_norm": r(L, G, dh, std=0.3, mean=1.0)}
    cfg = ModelConfig(
        L, H, d, dh, V, 64, positional_embedding_type="rotary", normalization="rms_post" if family == "olmo2" else
        "rms_pre", has_mlp=True, d_mlp=m, act_fn="gelu_tanh" if gemma else "silu", bos_token_id=0, rotary_dim=dh,
        n_kv_heads=G, post_norm=gemma, gated_mlp=True, qk_norm="all" if family == "olmo2" else None,
        attn_softcap=2.0 if gemma else None, final_softcap=5.0 if gemma else None, attn_scale=3.0 if gemma else None,
        ln_eps=1e-6, sliding_windows=tuple(window if gemma and layer % 2 == 0 else None for layer in range(L)),
    )  # fmt: skip
    tokenizer = VocabTokenizer(["<bos>", *[f"t{i}" for i in range(1, V)]], bos_token_id=0)
    return CircuitModel(cfg, weights, tokenizer=tokenizer, name=f"{family}-like-{L}l-seed{seed}")
