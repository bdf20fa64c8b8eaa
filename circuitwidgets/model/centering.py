"""Centring a model's weights as TransformerLens does by default (``center_writing_weights``, ``center_unembed``).

Under LayerNorm every reader of the residual stream sees it centred, so the
mean over ``d_model`` of anything written into it is invisible: subtracting it
from each writing weight (``W_E``, learned ``W_pos``, ``W_O``, ``b_O``, ``W_out``,
``b_out``) changes no output, only how the stream splits between components
(direct logit attribution, composition and eigenvalue scores on the centred
weights then equal TransformerLens's defaults). Subtracting each row's mean over
the vocabulary from ``W_U`` (and ``b_U``'s mean) shifts every logit of a
position by the same amount: log-probabilities and logit differences are unchanged.
"""

from __future__ import annotations

import torch

from circuitwidgets.errors import UnsupportedArchitectureError
from circuitwidgets.model.config import ModelConfig

#: Weights that write into the residual stream, and the axis of ``d_model`` in each.
WRITING_WEIGHTS = ("W_E", "W_O", "b_O", "W_out", "b_out")


def centred_weights(cfg: ModelConfig, weights: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``weights`` with writing weights centred over ``d_model`` (LayerNorm models) and the unembedding over the vocabulary.

    Refused, with the reason, where centring would change the model: writing weights
    of a model without LayerNorm (RMSNorm keeps the mean), with output norms or
    per-layer residual scalars; the unembedding under a final soft-cap.
    """
    out = dict(weights)
    if cfg.normalization == "ln_pre":
        if cfg.post_norm or "layer_scalar" in weights or cfg.d_per_layer:
            raise UnsupportedArchitectureError(
                "center: this model's stream passes through output norms or per-layer scalars, which see the mean "
                "of what is written; centring its writing weights would change it"
            )
        names = [*WRITING_WEIGHTS, *(("W_pos",) if cfg.positional_embedding_type == "standard" else ())]
        for name in names:
            w = out.get(name)
            if w is not None:
                out[name] = w - w.mean(-1, keepdim=True)
    elif cfg.normalization != "none":
        raise UnsupportedArchitectureError(
            f"center: a model with normalization={cfg.normalization!r} does not remove the stream's mean, so centring "
            "its writing weights would change it; only LayerNorm models (ln_pre) are centred"
        )
    if cfg.final_softcap is not None:
        raise UnsupportedArchitectureError(
            "center: a final soft-cap is not shift-invariant, so centring the unembedding would change the model"
        )
    out["W_U"] = out["W_U"] - out["W_U"].mean(-1, keepdim=True)
    if "b_U" in out:
        out["b_U"] = out["b_U"] - out["b_U"].mean()
    return out
