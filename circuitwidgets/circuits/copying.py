"""Copying (OV) and matching (QK) summaries of every head's full circuit.

For a head's full OV circuit ``M = W_E W_OV W_U`` (``[source token, out token]``)
or full QK circuit ``M = W_E W_QK W_Eᵀ`` (``[query token, key token]``) the paper
offers three summaries of "copying" (OV) or "same matching" (QK):

``"eigen"``
    ``Σλ / Σ|λ|`` over the non-zero eigenvalues of ``M``: +1 for pure copying or
    matching, −1 for anti-copying. The non-zero eigenvalues come from
    ``λ(AB) = λ(BA)`` as the eigenvalues of a ``d_head × d_head`` matrix:
    ``W_O (W_U W_E) W_V`` for OV and ``W_Kᵀ (W_Eᵀ W_E) W_Q`` for QK (``W_U W_E``
    and ``W_Eᵀ W_E`` are computed once per model). Zero eigenvalues add nothing
    to either sum; a head whose eigenvalues are all zero scores NaN.
``"diagonal"``
    Diagonal positivity: the fraction of tokens ``t`` with ``M[t, t] > 0``
    (attending to ``t`` raises ``t``'s own logit; a query ``t`` scores key ``t``
    above zero).
``"topk"``
    Top-k rate: the fraction of tokens ``t`` whose own entry ``M[t, t]`` is among
    the ``k`` largest of row ``t`` (fewer than ``k`` entries of the row are
    strictly larger, so ties count for ``t``).

``circuit="qk_kcomp"`` summarises, for each head in layer ≥ 1, the QK
K-composition term through one earlier head (:func:`~circuitwidgets.circuits.
ov_qk.full_qk_kcomp`): the earlier head with the largest raw K-composition
score into it. :func:`same_matching_scores` gives the score through every
earlier head. Layer-0 heads have no such term and score NaN.

Costs for ``V = d_vocab``: ``"eigen"`` ``O(V d_model²)`` once plus ``O(L H d_model²
d_head)``; ``"diagonal"`` ``O(L H V d_model d_head)``; ``"topk"`` ``O(L H n V d_head)``
for ``n`` evaluated tokens (all ``V`` by default: pass ``tokens`` to sample).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np
import torch

from circuitwidgets.circuits._cache import embed_gram, unembed_embed
from circuitwidgets.circuits._checks import check_choice, check_int, check_model, check_token_ids, progress
from circuitwidgets.circuits.lowrank import DEFAULT_MEMORY_BUDGET, LowRankMatrix
from circuitwidgets.circuits.ov_qk import all_query_weights, check_offset, full_ov, full_qk, full_qk_kcomp
from circuitwidgets.model import CircuitModel

CIRCUITS = ("ov", "qk", "qk_kcomp")
METHODS = ("eigen", "diagonal", "topk")


def _sorted_by_magnitude(eigs: np.ndarray) -> np.ndarray:
    order = np.argsort(-np.abs(eigs), axis=-1, kind="stable")
    return np.take_along_axis(eigs, order, axis=-1)


def eigen_score(eigs: np.ndarray) -> np.ndarray:
    """``Σλ / Σ|λ|`` over the last axis of complex eigenvalues (NaN where all are zero)."""
    total = eigs.sum(axis=-1).real
    magnitude = np.abs(eigs).sum(axis=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(magnitude > 0, total / np.where(magnitude > 0, magnitude, 1.0), np.nan)


def eigenvalues(model: CircuitModel, circuit: Literal["ov", "qk"] = "ov", offset: int | None = None) -> np.ndarray:
    """Non-trivial eigenvalues of every head's full OV or QK circuit.

    Parameters
    ----------
    model
        The model.
    circuit
        ``"ov"`` for ``W_E W_OV W_U`` or ``"qk"`` for ``W_E W_QK W_Eᵀ``.
    offset
        For ``"qk"`` on rotary models: query position minus key position
        (:func:`~circuitwidgets.circuits.W_QK`); required there.

    Returns
    -------
    np.ndarray
        complex128 ``[n_layers, n_heads, d_head]``, each head's eigenvalues sorted
        by decreasing magnitude. The remaining ``d_vocab - d_head`` eigenvalues of
        the ``[d_vocab, d_vocab]`` circuit are zero.

    Notes
    -----
    Cost ``O(V d_model²)`` once per model for ``W_U W_E`` (or ``W_Eᵀ W_E``), then
    ``O(L H d_model² d_head)`` in the weights' dtype and ``L H`` float64
    ``d_head × d_head`` eigenvalue problems.
    """
    model = check_model(model, "eigenvalues")
    check_choice("circuit", circuit, ("ov", "qk"))
    if circuit == "ov":
        small = model.W_O @ unembed_embed(model) @ model.per_query_head(model.W_V)
    else:
        queries = all_query_weights(model, check_offset(model, offset))
        small = model.per_query_head(model.W_K).transpose(-1, -2) @ embed_gram(model) @ queries
    eigs = torch.linalg.eigvals(small.double()).cpu().numpy()
    return _sorted_by_magnitude(eigs)


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
    ``[d_head, d_head]``. Cost ``O(V d_model²)`` once, then ``O(P d_head² d_model)``
    for ``P`` ordered pairs. ``offset``: the later head's query position minus
    key position, required on rotary models (:func:`~circuitwidgets.circuits.W_QK`).
    """
    model = check_model(model, "kcomp_eigenvalues")
    cfg = model.cfg
    L, H, dh = cfg.n_layers, cfg.n_heads, cfg.d_head
    out = np.full((L, H, L, H, dh), np.nan, dtype=np.complex128)
    queries = all_query_weights(model, check_offset(model, offset))
    W_K = model.per_query_head(model.W_K)
    value_side = model.per_query_head(model.W_V).transpose(-1, -2) @ embed_gram(model)  # [L, H, dh, d]
    for l2 in range(1, L):
        # [l1 H, H2, dh, dh] for every earlier head (l1 < l2) and every head of layer l2.
        reads = torch.einsum("aed,gdf->agef", value_side[:l2].reshape(-1, dh, cfg.d_model), queries[l2])
        keys = torch.einsum("aed,gdf->agef", model.W_O[:l2].reshape(-1, dh, cfg.d_model), W_K[l2])
        small = keys.transpose(-1, -2) @ reads
        eigs = torch.linalg.eigvals(small.double()).cpu().numpy()
        out[:l2, :, l2] = _sorted_by_magnitude(eigs).reshape(l2, H, H, dh)
    return out


def _circuit_matrix(
    model: CircuitModel, circuit: str, layer: int, head: int, earlier: tuple[int, int] | None, offset: int | None
) -> LowRankMatrix:
    if circuit == "ov":
        return full_ov(model, layer, head)
    if circuit == "qk":
        return full_qk(model, layer, head, offset=offset)
    assert earlier is not None
    return full_qk_kcomp(model, layer, head, earlier[0], earlier[1], offset=offset)


def matrix_copying_score(
    matrix: LowRankMatrix,
    method: Literal["eigen", "diagonal", "topk"] = "eigen",
    k: int = 5,
    tokens: torch.Tensor | None = None,
    memory_budget: int = DEFAULT_MEMORY_BUDGET,
) -> float:
    """One copying summary (see the module docstring) of a square low-rank matrix.

    ``tokens`` restricts ``"diagonal"`` and ``"topk"`` to those rows (default all).
    Cost: ``"eigen"`` ``O(r² n)``, ``"diagonal"`` ``O(n r)``, ``"topk"`` ``O(|tokens| n r)``.
    """
    check_choice("method", method, METHODS)
    if method == "eigen":
        return float(eigen_score(matrix.eigenvalues().cpu().numpy()))
    ids = torch.arange(matrix.shape[0], device=matrix.device) if tokens is None else tokens
    rows = matrix[ids, :]
    assert isinstance(rows, LowRankMatrix)
    if method == "diagonal":
        own = rows[:, ids]
        assert isinstance(own, LowRankMatrix)
        return float((own.diagonal(memory_budget) > 0).double().mean())
    ranks = rows.rank_in_rows(ids, memory_budget, progress_bar=False)
    return float((ranks < k).double().mean())


def _best_earlier_heads(model: CircuitModel, offset: int | None) -> np.ndarray:
    """For each head, ``(l1, h1)`` of the earlier head with the largest raw K-composition into it ``[L, H, 2]``."""
    from circuitwidgets.circuits.composition import composition_scores

    scores = composition_scores(model, "K", offset=offset)
    L, H = model.cfg.n_layers, model.cfg.n_heads
    best = np.full((L, H, 2), -1, dtype=np.int64)
    for l2 in range(1, L):
        for h2 in range(H):
            column = np.nan_to_num(scores[:l2, :, l2, h2], nan=-np.inf)
            l1, h1 = np.unravel_index(int(np.argmax(column)), column.shape)
            best[l2, h2] = (l1, h1)
    return best


def copying_scores(
    model: CircuitModel,
    circuit: Literal["ov", "qk", "qk_kcomp"] = "ov",
    method: Literal["eigen", "diagonal", "topk"] = "eigen",
    k: int = 5,
    tokens: Sequence[int] | torch.Tensor | None = None,
    memory_budget: int = DEFAULT_MEMORY_BUDGET,
    progress_bar: bool | None = None,
    offset: int | None = None,
) -> np.ndarray:
    """Copying (OV) or same-matching (QK) score of every head, ``[n_layers, n_heads]``.

    Parameters
    ----------
    model
        The model.
    circuit
        ``"ov"`` (full OV circuit), ``"qk"`` (full QK circuit) or ``"qk_kcomp"``
        (the K-composition term through the earlier head with the largest raw
        K-composition score; NaN for layer 0).
    method
        ``"eigen"``, ``"diagonal"`` or ``"topk"`` (module docstring).
    k
        ``k`` of the top-k rate.
    tokens
        Token ids over which ``"diagonal"`` and ``"topk"`` average (default all).
    memory_budget
        Bytes per dense row block in ``"topk"``.
    progress_bar
        Show a tqdm bar (``None``: only when interactive).
    offset
        For the QK circuits of rotary models: query position minus key position
        (:func:`~circuitwidgets.circuits.W_QK`); required there, ignored for ``"ov"``.

    Returns
    -------
    np.ndarray
        float64 ``[n_layers, n_heads]``.
    """
    model = check_model(model, "copying_scores")
    check_choice("circuit", circuit, CIRCUITS)
    check_choice("method", method, METHODS)
    k = check_int("k", k, 1)
    ids = None if tokens is None else check_token_ids(model, "tokens", tokens)
    offset = check_offset(model, offset) if circuit != "ov" else None
    L, H = model.cfg.n_layers, model.cfg.n_heads
    if method == "eigen" and circuit in ("ov", "qk"):
        return eigen_score(eigenvalues(model, circuit, offset=offset))
    out = np.full((L, H), np.nan)
    earlier = _best_earlier_heads(model, offset) if circuit == "qk_kcomp" else None
    heads = [(lay, hd) for lay in range(1 if earlier is not None else 0, L) for hd in range(H)]
    for lay, hd in progress(heads, len(heads), f"{circuit} {method} scores", progress_bar):
        pair = None if earlier is None else (int(earlier[lay, hd, 0]), int(earlier[lay, hd, 1]))
        matrix = _circuit_matrix(model, circuit, lay, hd, pair, offset)
        out[lay, hd] = matrix_copying_score(matrix, method, k, ids, memory_budget)
    return out


def same_matching_scores(
    model: CircuitModel,
    method: Literal["eigen", "diagonal", "topk"] = "eigen",
    k: int = 5,
    tokens: Sequence[int] | torch.Tensor | None = None,
    memory_budget: int = DEFAULT_MEMORY_BUDGET,
    progress_bar: bool | None = None,
    offset: int | None = None,
) -> np.ndarray:
    """Same-matching score of every K-composition term, ``[n_layers, n_heads, n_layers, n_heads]``.

    Entry ``[l1, h1, l2, h2]`` summarises (with ``method``, as in
    :func:`copying_scores`) the QK term ``W_E W_QK^{h2} (W_E W_OV^{h1})ᵀ`` of later
    head ``(l2, h2)`` through earlier head ``(l1, h1)``; NaN where ``l1 >= l2``. An
    induction head scores near +1 through its previous-token head.

    Cost: ``"eigen"`` as :func:`kcomp_eigenvalues`; otherwise one full-circuit
    computation per ordered pair (use ``tokens`` on large vocabularies).
    ``offset``: as in :func:`copying_scores`, required on rotary models.
    """
    model = check_model(model, "same_matching_scores")
    check_choice("method", method, METHODS)
    k = check_int("k", k, 1)
    ids = None if tokens is None else check_token_ids(model, "tokens", tokens)
    offset = check_offset(model, offset)
    if method == "eigen":
        return eigen_score(kcomp_eigenvalues(model, offset=offset))
    L, H = model.cfg.n_layers, model.cfg.n_heads
    out = np.full((L, H, L, H), np.nan)
    pairs = [(l1, h1, l2, h2) for l2 in range(L) for h2 in range(H) for l1 in range(l2) for h1 in range(H)]
    for l1, h1, l2, h2 in progress(pairs, len(pairs), f"same matching {method}", progress_bar):
        matrix = full_qk_kcomp(model, l2, h2, l1, h1, offset=offset)
        out[l1, h1, l2, h2] = matrix_copying_score(matrix, method, k, ids, memory_budget)
    return out
