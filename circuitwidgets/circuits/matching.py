"""Same matching through K-composition: a later head's QK term whose keys were written by an earlier head.

For later head ``h2 = (l2, ·)`` and earlier head ``h1 = (l1, ·)``, ``l1 < l2``, the
term is ``W_E W_QK^{h2} (W_E W_OV^{h1})ᵀ`` ``[query token, token h1 read]``
(:func:`~circuitwidgets.circuits.full_qk_kcomp`): a query built from the
destination token against a key built from ``h1``'s output. An induction head
matches "same token" through its previous-token head: the term has positive
eigenvalues and a positive diagonal.

Its non-zero eigenvalues are those of the ``d_head × d_head`` matrix
``(W_O^{h1} W_K^{h2})ᵀ (W_V^{h1}ᵀ W_Eᵀ W_E W_Q^{h2} R)``, so all pairs cost
``O(V d_model²)`` once (``W_Eᵀ W_E``), ``O(L H d_model² d_head)`` and
``O(P d_model d_head²)`` for ``P`` ordered pairs. The terms of a chosen earlier
head per later head form one ``[n_layers − 1, n_heads]``
:class:`~circuitwidgets.circuits.LowRankStack` (:func:`~circuitwidgets.circuits.kcomp.kcomp_stack`), on which
every copying summary is one batched computation.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import torch

from circuitwidgets._checks import check_choice, check_int, check_model, check_token_ids
from circuitwidgets.circuits._cache import embed_gram
from circuitwidgets.circuits._precision import lift, small_eigvals
from circuitwidgets.circuits._spectra import eigen_score, sorted_by_magnitude
from circuitwidgets.circuits.copying import METHODS, stack_copying_scores
from circuitwidgets.circuits.kcomp import kcomp_stack
from circuitwidgets.circuits.lowrank import DEFAULT_MEMORY_BUDGET
from circuitwidgets.circuits.ov_qk import _rotation_core, check_offset
from circuitwidgets.model import CircuitModel


def kcomp_eigenvalues(model: CircuitModel, offset: int | None = None) -> np.ndarray:
    """Non-trivial eigenvalues of every K-composition term ``W_E W_QK^{h2} (W_E W_OV^{h1})ᵀ``.

    Returns
    -------
    np.ndarray
        complex128 ``[n_layers, n_heads, n_layers, n_heads, d_head]``: entry
        ``[l1, h1, l2, h2]`` is the term of later head ``(l2, h2)`` through earlier
        head ``(l1, h1)``, sorted by decreasing magnitude; NaN where ``l1 >= l2``.

    Notes
    -----
    Computed as the eigenvalues of ``(W_O^{h1} W_K^{h2})ᵀ (W_V^{h1}ᵀ W_Eᵀ W_E W_Q^{h2})``
    ``[d_head, d_head]``, one earlier layer at a time. Cost ``O(V d_model²)`` once,
    then ``O(L H d_model² d_head + P d_head² d_model)`` for ``P`` ordered pairs.
    ``offset``: the later head's query position minus key position, required on
    rotary models (:func:`~circuitwidgets.circuits.W_QK`).
    """
    model = check_model(model, "kcomp_eigenvalues")
    return _kcomp_eigenvalues(model, check_offset(model, offset))


def _kcomp_eigenvalues(model: CircuitModel, offset: int | None) -> np.ndarray:
    cfg = model.cfg
    L, H, dh = cfg.n_layers, cfg.n_heads, cfg.d_head
    out = np.full((L, H, L, H, dh), np.nan, dtype=np.complex128)
    gram = embed_gram(model)
    core = _rotation_core(model, offset)
    kv = model.kv_index
    for l2 in range(1, L):
        queries = lift(model.W_Q[l2]) if core is None else lift(model.W_Q[l2]) @ core[l2, 0, 0]  # [H, d, dh]
        read_queries = gram @ queries
        keys2 = lift(model.W_K[l2])  # [G, d, dh]
        for l1 in range(l2):
            if l1 >= cfg.kv_source(l2):  # keys reused from a layer before l1 (Gemma 4): no such path
                out[l1, :, l2] = 0.0
                continue
            reads = lift(model.W_V[l1]).mT[:, None] @ read_queries[None]  # [G1, H2, dh, dh]
            keys = lift(model.W_O[l1])[:, None] @ keys2[None]  # [H1, G2, dh, dh]
            small = keys[:, kv].mT @ reads[kv]  # [H1, H2, dh, dh]
            out[l1, :, l2] = sorted_by_magnitude(small_eigvals(small).cpu().numpy())
    return out


def same_matching_scores(
    model: CircuitModel,
    method: Literal["eigen", "diagonal", "topk"] = "eigen",
    k: int = 5,
    tokens: list[int] | torch.Tensor | None = None,
    memory_budget: int = DEFAULT_MEMORY_BUDGET,
    progress_bar: bool | None = None,
    offset: int | None = None,
) -> np.ndarray:
    """Same-matching score of every K-composition term, ``[n_layers, n_heads, n_layers, n_heads]``.

    Entry ``[l1, h1, l2, h2]`` summarises (with ``method``, as in
    :func:`~circuitwidgets.circuits.copying_scores`) the QK term ``W_E W_QK^{h2}
    (W_E W_OV^{h1})ᵀ`` of later head ``(l2, h2)`` through earlier head ``(l1, h1)``;
    NaN where ``l1 >= l2``. An induction head scores near +1 through its
    previous-token head.

    Cost: ``"eigen"`` as :func:`kcomp_eigenvalues`; otherwise one batched
    computation over all later heads per earlier head (use ``tokens`` on large
    vocabularies). ``offset``: as in ``copying_scores``, required on rotary
    models. ``progress_bar`` is accepted for compatibility.
    """
    model = check_model(model, "same_matching_scores")
    check_choice("method", method, METHODS)
    k = check_int("k", k, 1)
    ids = None if tokens is None else check_token_ids(model, "tokens", tokens)
    offset = check_offset(model, offset)
    if method == "eigen":
        return eigen_score(_kcomp_eigenvalues(model, offset))
    L, H = model.cfg.n_layers, model.cfg.n_heads
    out = np.full((L, H, L, H), np.nan)
    for l1 in range(L - 1):
        for h1 in range(H):
            sources = np.broadcast_to(np.array([l1, h1]), (L - l1 - 1, H, 2))
            stack = kcomp_stack(model, sources, offset, first_layer=l1 + 1)
            out[l1, h1, l1 + 1 :] = stack_copying_scores(stack, method, k, ids, memory_budget)
    return out
