"""The small transformers the shipped models are trained as: attention-only, or with LayerNorm and MLPs.

Weights are stored in the canonical layout of :class:`circuitwidgets.CircuitModel`
(row-vector convention, per-head shapes), so a trained model is loaded for
analysis without any conversion beyond folding its norms:

``W_E [d_vocab, d_model]``, ``W_pos [n_ctx, d_model]``, ``W_Q, W_K, W_V
[n_layers, n_heads, d_model, d_head]``, ``W_O [n_layers, n_heads, d_head, d_model]``,
``W_U [d_model, d_vocab]``. The attention-only models have nothing else: no
biases, no norm, no MLP. With ``norm="layernorm"`` every sublayer input and the
final output pass through a LayerNorm (``ln1_w, ln1_b, ln2_w, ln2_b [L, d_model]``,
``lnf_w, lnf_b [d_model]``) and the attention output has a bias ``b_O [L, d_model]``;
with ``d_mlp > 0`` each layer has an MLP ``W_in [L, d_model, d_mlp]``, ``b_in [L, d_mlp]``,
``W_out [L, d_mlp, d_model]``, ``b_out [L, d_model]`` after its attention.

Positions follow the paper's scheme (the "shortformer" scheme of TransformerLens):
fixed sinusoids added only to the inputs of queries and keys, never to the
residual stream, so values and the OV circuit see tokens alone. Under a
LayerNorm the positions join the *normalised* stream before the norm's gain and
bias, ``(n(x) + pos) · w + b``: folding ``w`` and ``b`` into ``W_Q, W_K`` is then
exact, and the folded model is TransformerLens's ``LNPre`` shortformer block.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from circuitwidgets.errors import ArgumentError

#: Norms a trained model may have.
NORMS = ("none", "layernorm")
#: MLP nonlinearities a trained model may have (the names of ``circuitwidgets.model.ACTIVATIONS``).
TRAIN_ACTIVATIONS = ("gelu", "gelu_new", "relu", "solu_ln")
LN_EPS = 1e-5


@dataclass(frozen=True)
class ToyConfig:
    """Shape of a trained transformer; the defaults of the last three fields give the attention-only models."""

    n_layers: int
    n_heads: int
    d_model: int
    d_head: int
    d_vocab: int
    n_ctx: int
    d_mlp: int = 0
    act_fn: str = "gelu"
    norm: str = "none"

    def __post_init__(self) -> None:
        if self.norm not in NORMS:
            raise ArgumentError(f"norm: expected one of {NORMS}, got {self.norm!r}")
        if self.act_fn not in TRAIN_ACTIVATIONS:
            raise ArgumentError(f"act_fn: expected one of {TRAIN_ACTIVATIONS}, got {self.act_fn!r}")
        if isinstance(self.d_mlp, bool) or not isinstance(self.d_mlp, int) or self.d_mlp < 0:
            raise ArgumentError(f"d_mlp: expected an int >= 0 (0: no MLP), got {self.d_mlp!r}")

    @property
    def attention_only(self) -> bool:
        """No MLP and no norm: the paper's attention-only model."""
        return self.d_mlp == 0 and self.norm == "none"


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


def _activation(name: str, x: torch.Tensor) -> torch.Tensor:
    if name == "solu_ln":  # the LayerNorm's gain and bias are applied by the caller
        return nn.functional.layer_norm(x * x.softmax(dim=-1), (x.shape[-1],), None, None, LN_EPS)
    if name == "gelu":
        return nn.functional.gelu(x)
    if name == "gelu_new":
        return nn.functional.gelu(x, approximate="tanh")
    return torch.relu(x)


class ToyTransformer(nn.Module):
    """Transformer with positions on queries and keys only; optional LayerNorm and MLPs (module docstring)."""

    W_pos: torch.Tensor  # buffer [n_ctx, d_model], registered in __init__
    # Present with a LayerNorm only (see the module docstring).
    ln1_w: nn.Parameter
    ln1_b: nn.Parameter
    ln2_w: nn.Parameter
    ln2_b: nn.Parameter
    lnf_w: nn.Parameter
    lnf_b: nn.Parameter

    def __init__(self, cfg: ToyConfig, generator: torch.Generator | None = None) -> None:
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
        # Drawn after the attention weights, so an attention-only model's
        # initialisation (and so the shipped models) is unchanged bit for bit.
        if cfg.d_mlp:
            self.W_in = init(L, d, cfg.d_mlp, std=1.0 / math.sqrt(d))
            self.W_out = init(L, cfg.d_mlp, d, std=1.0 / math.sqrt(cfg.d_mlp * 2 * max(L, 1)))
            self.b_in = nn.Parameter(torch.zeros(L, cfg.d_mlp))
            self.b_out = nn.Parameter(torch.zeros(L, d))
        if cfg.d_mlp and cfg.act_fn == "solu_ln":
            # SoLU's LayerNorm over the neurons; not random, so a SoLU model and its GELU twin of the
            # same seed start from the same weights everywhere else.
            self.ln_mlp_w = nn.Parameter(torch.ones(L, cfg.d_mlp))
            self.ln_mlp_b = nn.Parameter(torch.zeros(L, cfg.d_mlp))
        if cfg.norm == "layernorm":
            self.b_O = nn.Parameter(torch.zeros(L, d))
            self.ln1_w, self.ln1_b = nn.Parameter(torch.ones(L, d)), nn.Parameter(torch.zeros(L, d))
            self.ln2_w, self.ln2_b = nn.Parameter(torch.ones(L, d)), nn.Parameter(torch.zeros(L, d))
            self.lnf_w, self.lnf_b = nn.Parameter(torch.ones(d)), nn.Parameter(torch.zeros(d))

    def _normed(self, x: torch.Tensor) -> torch.Tensor:
        """``n(x) = (x − mean) / sqrt(var + eps)`` (no gain or bias), or ``x`` without a norm."""
        if self.cfg.norm == "none":
            return x
        return nn.functional.layer_norm(x, (x.shape[-1],), None, None, LN_EPS)

    def _affine(self, n: torch.Tensor, name: str, layer: int | None) -> torch.Tensor:
        if self.cfg.norm == "none":
            return n
        w: torch.Tensor = getattr(self, f"{name}_w")
        b: torch.Tensor = getattr(self, f"{name}_b")
        return n * w[layer] + b[layer] if layer is not None else n * w + b

    def forward(
        self, tokens: torch.Tensor, return_patterns: bool = False, components: dict[str, torch.Tensor] | None = None
    ) -> torch.Tensor | tuple[torch.Tensor, list[torch.Tensor]]:
        """Logits ``[batch, pos, d_vocab]`` (and patterns ``[batch, head, dest, src]`` per layer).

        ``components``, when given, receives what each part writes into the
        residual stream (``embed``, ``attn.{l}`` with ``b_O``, ``mlp.{l}`` with
        ``b_out``) and the final stream ``resid_final``: the raw material of the
        direct logit attribution the training log records.
        """
        n_pos = tokens.shape[-1]
        resid = self.W_E[tokens]
        if components is not None:
            components["embed"] = resid
        pos = self.W_pos[:n_pos]
        mask = torch.ones(n_pos, n_pos, dtype=torch.bool, device=tokens.device).tril()
        patterns: list[torch.Tensor] = []
        for layer in range(self.cfg.n_layers):
            n = self._normed(resid)
            qk_in = self._affine(n + pos, "ln1", layer)
            v_in = self._affine(n, "ln1", layer) if self.cfg.norm != "none" else resid
            q = torch.einsum("bpd,hde->bhpe", qk_in, self.W_Q[layer])
            k = torch.einsum("bpd,hde->bhpe", qk_in, self.W_K[layer])
            v = torch.einsum("bpd,hde->bhpe", v_in, self.W_V[layer])
            if return_patterns:
                scores = q @ k.transpose(-1, -2) / math.sqrt(self.cfg.d_head)
                pattern = scores.masked_fill(~mask, float("-inf")).softmax(dim=-1)
                patterns.append(pattern)
                z = pattern @ v
            else:
                # Same mathematics through the fused kernel: training speed only.
                z = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
            attn_out = torch.einsum("bhpe,hed->bpd", z, self.W_O[layer])
            if self.cfg.norm != "none":
                attn_out = attn_out + self.b_O[layer]
            resid = resid + attn_out
            if components is not None:
                components[f"attn.{layer}"] = attn_out
            if self.cfg.d_mlp:
                x = self._affine(self._normed(resid), "ln2", layer)
                hidden = _activation(self.cfg.act_fn, x @ self.W_in[layer] + self.b_in[layer])
                if self.cfg.act_fn == "solu_ln":
                    hidden = hidden * self.ln_mlp_w[layer] + self.ln_mlp_b[layer]
                mlp_out = hidden @ self.W_out[layer] + self.b_out[layer]
                resid = resid + mlp_out
                if components is not None:
                    components[f"mlp.{layer}"] = mlp_out
        if components is not None:
            components["resid_final"] = resid
        logits = self._affine(self._normed(resid), "lnf", None) @ self.W_U
        return (logits, patterns) if return_patterns else logits

    @torch.no_grad()
    def canonical_weights(self) -> dict[str, torch.Tensor]:
        """The weights as :class:`~circuitwidgets.CircuitModel` holds them: norms' gains and biases folded.

        An attention-only model's are its own tensors (detached). Folding (see
        :func:`circuitwidgets.sources._convert.fold_layer_norms`): ``ln1`` into
        ``W_Q, W_K, W_V`` and their biases, ``ln2`` into ``W_in, b_in``, ``lnf``
        into ``W_U`` and ``b_U``.
        """
        from circuitwidgets.sources._convert import Norm, RawModel, fold_layer_norms

        names = ["W_E", "W_pos", "W_Q", "W_K", "W_V", "W_O", "W_U"]
        if self.cfg.d_mlp:
            names += ["W_in", "b_in", "W_out", "b_out"]
            names += ["ln_mlp_w", "ln_mlp_b"] if self.cfg.act_fn == "solu_ln" else []
        if self.cfg.norm != "none":
            names.append("b_O")
        raw = {name: getattr(self, name).detach() for name in names}
        if self.cfg.norm == "none":
            return raw
        L = self.cfg.n_layers
        ln1: list[Norm] = [(self.ln1_w[i].detach(), self.ln1_b[i].detach()) for i in range(L)]
        ln2: list[Norm] | None = (
            [(self.ln2_w[i].detach(), self.ln2_b[i].detach()) for i in range(L)] if self.cfg.d_mlp else None
        )
        return fold_layer_norms(RawModel(raw, ln1, ln2, (self.lnf_w.detach(), self.lnf_b.detach())))

    def model_config(self, bos_token_id: int | None) -> dict[str, object]:
        """The ``config.json`` of the exported model (:class:`circuitwidgets.model.ModelConfig` fields)."""
        cfg = self.cfg
        out: dict[str, object] = {
            "n_layers": cfg.n_layers,
            "n_heads": cfg.n_heads,
            "d_model": cfg.d_model,
            "d_head": cfg.d_head,
            "d_vocab": cfg.d_vocab,
            "n_ctx": cfg.n_ctx,
            "architecture": "attn-only" if cfg.attention_only else "toy",
            "positional_embedding_type": "shortformer",
            "normalization": "ln_pre" if cfg.norm == "layernorm" else "none",
            "has_mlp": bool(cfg.d_mlp),
            "bos_token_id": bos_token_id,
        }
        if cfg.d_mlp:
            out |= {"d_mlp": cfg.d_mlp, "act_fn": cfg.act_fn}
        if cfg.norm != "none" or (cfg.d_mlp and cfg.act_fn == "solu_ln"):
            out["ln_eps"] = LN_EPS
        return out
