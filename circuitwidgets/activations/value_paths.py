"""Per-position attention quantities from a forward pass: value norms, value-weighted patterns, logit effects.

These weight an attention pattern by what each head actually moves, and
measure each head's direct effect on the next token's logit (DESIGN.md;
the paper's "value-weighted" attention and direct logit attribution).
:class:`~circuitwidgets.widgets.AttentionPatterns` draws them.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from numpy.typing import NDArray

from circuitwidgets.activations.writes import final_read, written_by_heads
from circuitwidgets.errors import ArgumentError, ShapeError
from circuitwidgets.model import CircuitModel

__all__ = ["logit_effects", "value_norms", "value_weighted"]


def value_weighted(attention: NDArray[np.float32], norms: NDArray[np.float32]) -> NDArray[np.float32]:
    """Value-weighted pattern of one head, normalised per row.

    ``w_ij = A_ij n_j / Σ_k A_ik n_k`` with ``n_j = ‖v_j W_O‖`` (:func:`value_norms`);
    a row whose products are all zero stays zero.

    Parameters
    ----------
    attention
        ``[dest, src]`` weights.
    norms
        ``[src]`` norms.
    """
    w = attention * norms[None, :].astype(np.float32)
    sums = w.sum(-1, keepdims=True)
    np.divide(w, sums, out=w, where=sums > 0)
    w[(sums <= 0)[:, 0]] = 0.0
    return w


def value_norms(model: CircuitModel, cache: Any) -> NDArray[np.float32]:
    """``‖v_j W_O^h‖`` for every layer, head and position: float32 ``[n_layers, n_heads, pos]``.

    Computed as ``sqrt(v (W_O W_Oᵀ) vᵀ)`` (a ``d_head × d_head`` Gram matrix per
    head), from ``cache["v", layer]`` ``[1, pos, n_heads, d_head]``.
    Cost: O(n_layers · n_heads · pos · d_head²).
    """
    out = []
    for layer in range(model.cfg.n_layers):
        v = cache["v", layer][0]
        W_O = model.W_O[layer]
        gram = W_O @ W_O.transpose(-1, -2)  # [H, dh, dh]
        sq = torch.einsum("phe,hef,phf->hp", v, gram, v).clamp_min(0)
        out.append(sq.sqrt().to("cpu", torch.float32).numpy())
    return np.stack(out)


def logit_effects(model: CircuitModel, cache: Any, ids: torch.Tensor, seq: int | None = None) -> NDArray[np.float32]:
    """Each head's exact direct effect on the logit of the next token: float32 ``[n_layers, n_heads, pos]``.

    The head's write (``result = z W_O``, through its layer's output norm and any
    later layer scalars: :func:`~circuitwidgets.activations.writes.written_by_heads`)
    read by the unembedding through the final norm with the run's per-token scale
    frozen and its centring applied (:func:`~circuitwidgets.activations.writes.final_read`),
    at ``W_U[:, t_{i+1}]``: the head's share of the logit the model computed, as in
    direct logit attribution (``circuitwidgets.causal.logit_attribution``; the
    unembedding's bias is no head's). Before a final soft-cap. NaN at the last position.

    ``cache`` needs ``z`` and, on a model with norms, ``scale_final`` (``run_with_cache``
    keeps it by default); ``seq`` picks the sequence of a batched cache (required then).
    Cost: O(n_layers · pos · n_heads · d_head · d_model).
    """
    batch = int(cache["z", 0].shape[0]) if model.cfg.n_layers else 1
    if seq is None:
        if batch != 1:
            raise ShapeError(f"seq: the cache holds {batch} sequences; pass seq=<index> to choose one, got None")
        seq = 0
    if isinstance(seq, bool) or not isinstance(seq, int) or not 0 <= seq < batch:
        raise ArgumentError(f"seq: expected a sequence index in [0, {batch}), got {seq!r}")
    n = int(ids.shape[-1])
    out = np.full((model.cfg.n_layers, model.cfg.n_heads, n), np.nan, dtype=np.float32)
    if n < 2:
        return out
    if "scale_final" in cache:
        scale = cache["scale_final"][seq, :-1]
    elif model.cfg.normalization == "none":
        scale = torch.ones(n - 1, 1, device=model.device)
    else:
        raise ArgumentError(
            "cache: logit effects read the final norm's per-token scale; run the model keeping 'scale_final' "
            "(model.run_with_cache(tokens, names=[..., 'z', 'scale_final']))"
        )
    unembed = model.W_U[:, ids[1:].to(model.W_U.device)].double()  # [d_model, pos-1]
    W_O = model.weight("W_O")
    assert W_O is not None
    for layer in range(model.cfg.n_layers):
        z = cache["z", layer][seq, :-1]  # [pos-1, H, dh]
        heads, _ = written_by_heads(model, torch.einsum("phe,hed->phd", z, W_O[layer]), layer)
        read = final_read(model, heads, scale[:, None])  # [pos-1, H, d]
        out[layer, :, :-1] = torch.einsum("phd,dp->hp", read, unembed).to("cpu", torch.float32).numpy()
    return out
