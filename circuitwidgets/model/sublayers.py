"""The sublayers of the canonical forward pass: input norms, attention, MLP, output norms.

A mixin of :class:`~circuitwidgets.CircuitModel`, apart so that the model's
file holds its weights and its public API, and this one the computation of
one layer (DESIGN.md §3, §3a). It reads the stored tensors through
``self._buffers`` / ``self.weight``: the forward pass applies norm multipliers
after the per-token scalars, as the source models do.
"""

from __future__ import annotations

from typing import Any

import torch

from circuitwidgets.model.config import ModelConfig
from circuitwidgets.model.forward import activation, attention_mask, layer_norm_scale, rms_scale, soft_cap
from circuitwidgets.model.rotary import rotate


class Sublayers:
    """One layer's computations (mixed into :class:`~circuitwidgets.CircuitModel`)."""

    cfg: ModelConfig
    _buffers: dict[str, torch.Tensor | None]

    def weight(self, name: str) -> torch.Tensor | None:
        """The stored tensor ``name`` or ``None`` (defined by the model)."""
        raise NotImplementedError

    def rotary_freq(self, layer: int) -> torch.Tensor | None:
        """Rotary inverse frequencies of ``layer`` (defined by the model)."""
        raise NotImplementedError

    def _normalize(self, x: torch.Tensor, final: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """The per-token part of the norm before a sublayer (or, with ``final``, before the unembedding)."""
        kind = self.cfg.normalization
        if kind == "none" or (kind == "rms_post" and not final):
            return x, torch.ones_like(x[..., :1])
        if kind == "ln_pre":
            return layer_norm_scale(x, self.cfg.ln_eps)
        return rms_scale(x, self.cfg.ln_eps)

    def _output_norm(self, out: torch.Tensor, layer: int, multiplier: str) -> torch.Tensor:
        """A sublayer's output norm (Gemma 2/3, OLMo 2/3), or ``out`` unchanged."""
        weight = self.weight(multiplier)
        if weight is None:
            return out
        return rms_scale(out, self.cfg.ln_eps)[0] * weight[layer]

    def _qk_norm(self, x: torch.Tensor, layer: int, multiplier: str) -> torch.Tensor:
        """QK-norm of queries or keys ``[batch, pos, heads, d_head]`` (per head, or over all heads at once)."""
        weight = self.weight(multiplier)
        if weight is None:
            return x
        if self.cfg.qk_norm == "all":
            flat = x.flatten(-2)
            normed = rms_scale(flat, self.cfg.ln_eps)[0].view_as(x)
        else:
            normed = rms_scale(x, self.cfg.ln_eps)[0]
        return normed * weight[layer]

    def _attention(
        self,
        layer: int,
        resid: torch.Tensor,
        pos: torch.Tensor | None,
        frozen: torch.Tensor | None,
        replaced: torch.Tensor | None,
        record: Any,
    ) -> torch.Tensor:
        cfg = self.cfg
        x, scale = self._normalize(resid)
        record("scale", layer, scale)
        qk_in = x + pos if cfg.positional_embedding_type == "shortformer" and pos is not None else x
        q = torch.einsum("bpd,hde->bphe", qk_in, self._buffers["W_Q"][layer])  # type: ignore[index]
        k = torch.einsum("bpd,hde->bphe", qk_in, self._buffers["W_K"][layer])  # type: ignore[index]
        v = torch.einsum("bpd,hde->bphe", x, self._buffers["W_V"][layer])  # type: ignore[index]
        for name, tensor in (("b_Q", q), ("b_K", k), ("b_V", v)):
            bias = self.weight(name)
            if bias is not None:
                tensor += bias[layer]
        q, k = self._qk_norm(q, layer, "q_norm"), self._qk_norm(k, layer, "k_norm")
        freq = self.rotary_freq(layer)
        if freq is not None:
            positions = torch.arange(resid.shape[1], device=resid.device)
            q, k = rotate(q, freq, positions, pos_dim=1), rotate(k, freq, positions, pos_dim=1)
        if cfg.group_size > 1:
            k, v = k.repeat_interleave(cfg.group_size, dim=2), v.repeat_interleave(cfg.group_size, dim=2)
        record("q", layer, q)
        record("k", layer, k)
        record("v", layer, v)
        if frozen is None:
            scores = soft_cap(torch.einsum("bqhe,bkhe->bhqk", q, k) / cfg.scale, cfg.attn_softcap)
            mask = attention_mask(resid.shape[1], cfg.window(layer), resid.device)
            scores = scores.masked_fill(~mask, float("-inf"))
            record("attn_scores", layer, scores)
            pattern = scores.softmax(dim=-1)
        else:
            pattern = frozen.to(v.dtype)
        record("pattern", layer, pattern)
        z = torch.einsum("bhqk,bkhe->bqhe", pattern, v)
        record("z", layer, z)
        result = torch.einsum("bqhe,hed->bqhd", z, self._buffers["W_O"][layer])  # type: ignore[index]
        record("result", layer, result)
        written = replaced.to(result.dtype) if replaced is not None else result
        out = written.sum(dim=2)
        b_O = self.weight("b_O")
        if b_O is not None:
            out = out + b_O[layer]
        out = self._output_norm(out, layer, "post_attn_norm")
        record("attn_out", layer, out)
        return out

    def _mlp(self, layer: int, resid: torch.Tensor, record: Any) -> torch.Tensor:
        cfg = self.cfg
        assert cfg.act_fn is not None
        x, _ = self._normalize(resid)

        def project(name: str, bias: str) -> torch.Tensor:
            out = x @ self._buffers[name][layer]  # type: ignore[index]
            b = self.weight(bias)
            return out + b[layer] if b is not None else out

        hidden = activation(cfg.act_fn, project("W_gate", "b_gate")) * project("W_in", "b_in") if cfg.gated_mlp else activation(cfg.act_fn, project("W_in", "b_in"))
        out = hidden @ self._buffers["W_out"][layer]  # type: ignore[index]
        b_out = self.weight("b_out")
        if b_out is not None:
            out = out + b_out[layer]
        out = self._output_norm(out, layer, "post_mlp_norm")
        record("mlp_out", layer, out)
        return out
