"""The local replacement model of one prompt: transcoders in place of MLPs, attention and norms frozen.

One run of the model records what the replacement model freezes (attention
patterns, every norm's per-token scale, a sublayer-output norm's too) and what it is made of (each
transcoder's input and active features, and the error node: the MLP's output
minus the transcoder's prediction). With those frozen, everything between the
nodes (features, errors, token embeddings) and the targets (feature
pre-activations, centred logits) is linear, and
:class:`~circuitwidgets.graphs.transposed.TransposedReplacement` applies that
map's transpose, so that one pass back from a target gives its direct effect
from every node at once (circuit-tracer's definition; Ameisen et al., 2025).
The run itself is the model's forward pass; the linear map is checked against
the model's forward pass with freezing hooks in the tests.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from circuitwidgets.graphs.transcoders import TranscoderLike, transcoder_input
from circuitwidgets.model import ActivationCache, CircuitModel

#: What the base run keeps (and, for a model with sublayer-output norms, the attention output norm's scale).
FROZEN_NAMES = ("pattern", "scale", "scale_mlp", "scale_final", "resid_mid", "mlp_out")
POST_ATTN_SCALE = "scale_attn_post"


@dataclass
class FrozenRun:
    """One prompt's run: what the replacement model freezes, and its nodes.

    ``active`` ``[n, 3]`` (layer, pos, feature) sorted, with ``values`` ``[n]``
    their activations; ``errors`` ``[n_layers, pos, d_model]`` (each MLP's output
    minus its transcoder's prediction). The first position's features and error are not nodes
    (circuit-tracer 0.5 zeroes them: that position is the attention sink, usually
    BOS); their writes stay as constants.
    """

    tokens: torch.Tensor
    last_logits: torch.Tensor
    cache: ActivationCache
    active: torch.Tensor
    values: torch.Tensor
    errors: torch.Tensor

    @property
    def n_pos(self) -> int:
        """Positions of the prompt."""
        return int(self.tokens.shape[1])


def _skip(tc: TranscoderLike, x: torch.Tensor) -> torch.Tensor:
    """The transcoder's linear skip path ``x W_skip`` (zeros without one)."""
    if tc.W_skip is None:
        return torch.zeros(*x.shape[:-1], tc.W_dec.shape[-1], dtype=x.dtype, device=x.device)
    return x @ tc.W_skip.to(x.dtype)


def run_frozen(model: CircuitModel, transcoders: Sequence[TranscoderLike], tokens: torch.Tensor) -> FrozenRun:
    """Run ``tokens`` ``[1, pos]`` and collect the replacement model's frozen values and nodes."""
    post = [POST_ATTN_SCALE] if model.weight("post_attn_norm") is not None else []
    logits, cache = model.run_with_cache(tokens, names=[*FROZEN_NAMES, *post])
    cfg = model.cfg
    active, values, errors = [], [], []
    with torch.no_grad():
        for layer, tc in enumerate(transcoders):
            x = transcoder_input(cfg, tc.in_site, cache["resid_mid", layer], cache["scale_mlp", layer])[0]
            x = x.to(tc.W_enc.dtype)
            f = tc.encode(x)
            recon = f @ tc.W_dec + tc.b_dec + _skip(tc, x)
            mlp_out = cache["mlp_out", layer][0].to(recon.dtype)
            error = mlp_out - recon
            f = f.clone()
            f[0] = 0
            error[0] = 0
            where = torch.nonzero(f)
            active.append(torch.cat([torch.full_like(where[:, :1], layer), where], dim=1))
            values.append(f[where[:, 0], where[:, 1]])
            errors.append(error)
    return FrozenRun(tokens, logits[0, -1].clone(), cache, torch.cat(active), torch.cat(values), torch.stack(errors))


def final_input(model: CircuitModel, resid_final: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """The unembedding's input (the final norm with its scale ``scale`` frozen; its weight is folded into ``W_U``)."""
    if model.cfg.normalization == "ln_pre":
        return (resid_final - resid_final.mean(-1, keepdim=True)) / scale
    if model.cfg.normalization == "none":
        return resid_final
    return resid_final / scale


def normalised(model: CircuitModel, resid: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """A sublayer's input with its norm's per-token ``scale`` frozen (LayerNorm's centring kept: it is linear)."""
    kind = model.cfg.normalization
    if kind == "ln_pre":
        return (resid - resid.mean(-1, keepdim=True)) / scale
    if kind == "rms_pre":
        return resid / scale
    return resid
