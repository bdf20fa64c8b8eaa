"""The attention-only transformer that the shipped models are trained as.

Weights are stored in the canonical layout of :class:`circuitwidgets.CircuitModel`
(row-vector convention, per-head shapes), so a trained model is loaded for
analysis without any conversion:

``W_E [d_vocab, d_model]``, ``W_pos [n_ctx, d_model]``, ``W_Q, W_K, W_V
[n_layers, n_heads, d_model, d_head]``, ``W_O [n_layers, n_heads, d_head, d_model]``,
``W_U [d_model, d_vocab]``. No biases, no layer norm, no MLP.

Positions follow the paper's scheme (the "shortformer" scheme of TransformerLens):
fixed sinusoids added only to the inputs of queries and keys, never to the
residual stream, so values and the OV circuit see tokens alone.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn


@dataclass(frozen=True)
class AttnOnlyConfig:
    """Shape of an attention-only transformer."""

    n_layers: int
    n_heads: int
    d_model: int
    d_head: int
    d_vocab: int
    n_ctx: int


def sinusoidal_positions(n_ctx: int, d_model: int) -> torch.Tensor:
    """Sinusoidal position vectors ``[n_ctx, d_model]``, each row of norm ``sqrt(d_model)``.

    Rows of norm comparable to the token embeddings are what let attention learn
    positional patterns at all at this scale (see TRAINING_NOTES).
    """
    position = torch.arange(n_ctx, dtype=torch.float64)[:, None]
    freq = torch.exp(-math.log(10_000.0) * torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    pos = torch.zeros(n_ctx, d_model, dtype=torch.float64)
    pos[:, 0::2] = torch.sin(position * freq)
    pos[:, 1::2] = torch.cos(position * freq[: d_model // 2])
    return (pos * math.sqrt(2.0)).float()


class AttnOnlyTransformer(nn.Module):
    """Attention-only transformer with positions on queries and keys only."""

    W_pos: torch.Tensor  # buffer [n_ctx, d_model], registered in __init__

    def __init__(self, cfg: AttnOnlyConfig, generator: torch.Generator | None = None) -> None:
        super().__init__()
        self.cfg = cfg
        L, H, d, dh, V = cfg.n_layers, cfg.n_heads, cfg.d_model, cfg.d_head, cfg.d_vocab

        def init(*shape: int, std: float) -> nn.Parameter:
            return nn.Parameter(torch.randn(*shape, generator=generator) * std)

        # Embedding entries of std 1 (rows of norm ~sqrt(d)) so that attention scores
        # start large enough to move; see TRAINING_NOTES.
        self.W_E = init(V, d, std=1.0)
        self.W_U = init(d, V, std=1.0 / math.sqrt(d))
        self.W_Q = init(L, H, d, dh, std=1.0 / math.sqrt(d))
        self.W_K = init(L, H, d, dh, std=1.0 / math.sqrt(d))
        self.W_V = init(L, H, d, dh, std=1.0 / math.sqrt(d))
        self.W_O = init(L, H, dh, d, std=1.0 / math.sqrt(dh * H))
        self.register_buffer("W_pos", sinusoidal_positions(cfg.n_ctx, d))

    def forward(
        self, tokens: torch.Tensor, return_patterns: bool = False
    ) -> torch.Tensor | tuple[torch.Tensor, list[torch.Tensor]]:
        """Logits ``[batch, pos, d_vocab]`` (and patterns ``[batch, head, dest, src]`` per layer)."""
        n_pos = tokens.shape[-1]
        resid = self.W_E[tokens]
        pos = self.W_pos[:n_pos]
        mask = torch.ones(n_pos, n_pos, dtype=torch.bool, device=tokens.device).tril()
        patterns: list[torch.Tensor] = []
        for layer in range(self.cfg.n_layers):
            qk_in = resid + pos
            q = torch.einsum("bpd,hde->bhpe", qk_in, self.W_Q[layer])
            k = torch.einsum("bpd,hde->bhpe", qk_in, self.W_K[layer])
            v = torch.einsum("bpd,hde->bhpe", resid, self.W_V[layer])
            if return_patterns:
                scores = q @ k.transpose(-1, -2) / math.sqrt(self.cfg.d_head)
                pattern = scores.masked_fill(~mask, float("-inf")).softmax(dim=-1)
                patterns.append(pattern)
                z = pattern @ v
            else:
                # Same mathematics through the fused kernel: training speed only.
                z = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
            resid = resid + torch.einsum("bhpe,hed->bpd", z, self.W_O[layer])
        logits = resid @ self.W_U
        return (logits, patterns) if return_patterns else logits
