"""The K-composition terms of later heads through earlier ones, as one stack: what copying and matching share.

:func:`best_earlier_heads` picks, for each head, the earlier head with the
largest raw K-composition into it; :func:`kcomp_stack` forms the terms
``W_E W_QK^{h2} (W_E W_OV^{h1})ᵀ`` of chosen pairs as one
:class:`~circuitwidgets.circuits.LowRankStack`. :mod:`.copying` summarises such
a stack (``copying_scores(model, "kcomp")``) and :mod:`.matching` scores every
pair (``same_matching_scores``), so both import this module, and neither the other.
"""

from __future__ import annotations

import numpy as np
import torch

from circuitwidgets.circuits._precision import lift
from circuitwidgets.circuits.composition import _raw_composition_scores
from circuitwidgets.circuits.lowrank import DEFAULT_MEMORY_BUDGET
from circuitwidgets.circuits.ov_qk import _per_head, _rotation_core
from circuitwidgets.circuits.stack import LowRankStack
from circuitwidgets.model import CircuitModel

__all__ = ["best_earlier_heads", "kcomp_stack"]


def best_earlier_heads(
    model: CircuitModel, offset: int | None, memory_budget: int = DEFAULT_MEMORY_BUDGET
) -> np.ndarray:
    """For each head, ``(l1, h1)`` of the earlier head with the largest raw K-composition into it, int64 ``[L, H, 2]``.

    ``-1`` in layer 0 (no earlier head). Cost: one K-composition computation
    (:func:`~circuitwidgets.circuits.composition_scores`).
    """
    L, H = model.cfg.n_layers, model.cfg.n_heads
    best = np.full((L, H, 2), -1, dtype=np.int64)
    if L < 2:
        return best
    scores = _raw_composition_scores(model, ("K",), memory_budget, offset)[0]
    for l2 in range(1, L):
        column = np.nan_to_num(scores[:l2, :, l2, :].reshape(l2 * H, H), nan=-np.inf)
        flat = column.argmax(axis=0)
        best[l2, :, 0], best[l2, :, 1] = flat // H, flat % H
    return best


def kcomp_stack(model: CircuitModel, sources: np.ndarray, offset: int | None, first_layer: int = 1) -> LowRankStack:
    """The K-composition terms of layers ``first_layer..L-1`` through ``sources``, a ``[L - first_layer, H]`` stack.

    ``sources`` int ``[L - first_layer, H, 2]`` (or ``[L, H, 2]`` with ``first_layer=1``,
    its layer-0 rows ignored) gives each later head's earlier head ``(l1, h1)``,
    ``l1`` before the later head's layer. Each matrix is ``W_E · W_Q^{h2} R(offset) ·
    (W_V^{h1} W_O^{h1} W_K^{h2})ᵀ · W_Eᵀ``; the key side ``[d_model, d_head]`` is
    formed per later head (``O(L H d_model d_head²)``, in the compute dtype).
    """
    cfg = model.cfg
    later = range(first_layer, cfg.n_layers)
    pairs = torch.as_tensor(np.array(sources[-len(later) :], dtype=np.int64), device=model.device)
    l1, h1 = pairs[..., 0], pairs[..., 1]
    l2 = torch.as_tensor(list(later), device=model.device)[:, None].expand_as(l1)
    g2 = model.kv_index[None].expand_as(l1)
    mixing = lift(model.W_O[l1, h1]) @ lift(model.W_K[l2, g2])  # [n, H, d_head, d_head]
    keys = lift(model.W_V[l1, model.kv_index[h1]]) @ mixing  # [n, H, d_model, d_head]
    W_Q = _per_head(model, model.W_Q)[first_layer:]
    core = _rotation_core(model, offset)
    n = len(later)
    B = keys.mT.reshape(n, cfg.kv_heads, cfg.group_size, cfg.d_head, cfg.d_model)
    stack = LowRankStack._trusted(W_Q, B, core=None if core is None else core[first_layer:], merge=True)
    return stack._with_outer(model.W_E, model.W_E.T)
