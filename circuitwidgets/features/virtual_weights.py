"""Virtual weights with features as endpoints (A Mathematical Framework's virtual weights, DESIGN.md §3d).

Two components talk through the residual stream: what one writes, the other
reads. Along that direct path (no layer in between counted) the map is linear,
so the weight from a writer's direction ``w`` to a reader's encoder column
``e`` is ``w · C e``, where ``C`` is the reader's norm's centring (LayerNorm
readers of ``mlp_in``; the identity otherwise). The norm's per-token scale is
left out, as in the paper's appendix: the effect at a position is the weight
divided by that position's scale.

- :func:`feature_to_feature`: ``[source.d_sae, target.d_sae]`` from one
  dictionary's decoder rows to a later one's encoder columns;
- :func:`head_to_feature`: each head's output space to each feature,
  ``W_O^h C W_enc`` ``[d_head, d_sae]`` per head, and its norm per (layer, head, feature).

A writer must write before the reader reads: the stream points are ordered
``resid_pre(l) < attn_out(l) = resid_mid(l) = mlp_in(l) < mlp_out(l) = resid_post(l) < resid_pre(l + 1)``.
"""

from __future__ import annotations

import torch

from circuitwidgets.errors import ArgumentError
from circuitwidgets.features.dictionary import Dictionary
from circuitwidgets.features.effects import check_dictionary, output_directions
from circuitwidgets.model import CircuitModel

__all__ = ["encoder_directions", "feature_to_feature", "head_to_feature", "stream_point"]

#: Where each site sits on the residual stream within a layer (writes become visible there; reads happen there).
_POINT = {"resid_pre": 0, "attn_out": 1, "resid_mid": 1, "mlp_in": 1, "mlp_out": 2, "resid_post": 2}


def stream_point(layer: int, site: str) -> int:
    """The position of ``site`` of ``layer`` along the residual stream (module docstring)."""
    if site not in _POINT:
        raise ArgumentError(f"site: expected one of {sorted(_POINT)} (a residual-stream site), got {site!r}")
    return 3 * layer + _POINT[site]


def encoder_directions(model: CircuitModel, target: Dictionary) -> torch.Tensor:
    """``[d_model, d_sae]``: what each feature of ``target`` reads from the residual stream, ``C W_enc``."""
    target = check_dictionary("target", target)
    target.check_model(model)
    stream_point(target.layer, target.in_site)  # (a residual-stream reader)
    W_enc = target.W_enc.detach().to(model.dtype)
    if target.in_site == "mlp_in" and model.cfg.normalization == "ln_pre":
        return W_enc - W_enc.mean(0, keepdim=True)  # C W_enc, C = I − 11ᵀ/d symmetric
    return W_enc


def feature_to_feature(model: CircuitModel, source: Dictionary, target: Dictionary) -> torch.Tensor:
    """``[source.d_sae, target.d_sae]`` direct virtual weights: ``W_dec^source C W_enc^target``.

    Raises :class:`ArgumentError` unless ``source`` writes the stream at or
    before the point ``target`` reads it.
    """
    source = check_dictionary("source", source)
    written = stream_point(source.layer, source.out_site)
    read = stream_point(target.layer, target.in_site)
    if written > read:
        raise ArgumentError(
            f"source: expected a dictionary writing the stream before {target.name} reads it "
            f"(layer {target.layer} {target.in_site}), got {source.name} writing layer {source.layer} {source.out_site}"
        )
    return output_directions(model, source) @ encoder_directions(model, target)


def head_to_feature(model: CircuitModel, target: Dictionary) -> tuple[torch.Tensor, torch.Tensor]:
    """``(matrices [L', n_heads, d_head, d_sae], norms [L', n_heads, d_sae])`` for the ``L'`` layers before ``target`` reads.

    ``matrices[l, h] = W_O^{l,h} C W_enc``: the feature's pre-activation per unit
    of the head's ``z`` (its value-weighted mix of values); ``norms`` their
    Euclidean norm over ``d_head``, one number per (head, feature).
    """
    enc = encoder_directions(model, target)
    read = stream_point(target.layer, target.in_site)
    n_layers = sum(stream_point(layer, "attn_out") <= read for layer in range(model.cfg.n_layers))
    if n_layers == 0:
        raise ArgumentError(f"target: {target.name} reads the stream before any attention layer writes it")
    matrices = torch.einsum("lhdm,mf->lhdf", model.W_O[:n_layers], enc)
    return matrices, matrices.norm(dim=2)
