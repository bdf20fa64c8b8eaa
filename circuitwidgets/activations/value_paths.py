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


def logit_effects(model: CircuitModel, cache: Any, ids: torch.Tensor) -> NDArray[np.float32]:
    """Each head's direct effect on the logit of the next token: float32 ``[n_layers, n_heads, pos]``.

    ``(r_i W_O W_U)[t_{i+1}]`` where ``r_i`` is the head's mixed value at
    position ``i`` (``cache["z", layer]``); NaN at the last position. Leaves
    out the final normalisation scale and ``b_U``.
    Cost: O(n_layers · pos · n_heads · d_head · d_model).
    """
    n = int(ids.shape[-1])
    out = np.full((model.cfg.n_layers, model.cfg.n_heads, n), np.nan, dtype=np.float32)
    if n < 2:
        return out
    unembed = model.W_U[:, ids[1:].to(model.W_U.device)]  # [d_model, pos-1]
    for layer in range(model.cfg.n_layers):
        z = cache["z", layer][0, :-1]  # [pos-1, H, dh]
        result = torch.einsum("phe,hed->phd", z, model.W_O[layer])
        effect = torch.einsum("phd,dp->hp", result, unembed)
        out[layer, :, :-1] = effect.to("cpu", torch.float32).numpy()
    return out
