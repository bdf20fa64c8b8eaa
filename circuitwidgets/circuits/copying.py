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

Every score is computed for all heads at once from the ``[n_layers, n_heads]``
stacks of full circuits (:class:`~circuitwidgets.circuits.LowRankStack`), block
by block, where the weights live. Costs for ``V = d_vocab`` and ``G`` key/value
heads per layer: ``"eigen"`` ``O(V d_model²)`` once (the floor: one ``[d_model, V]
· [V, d_model]`` product) plus ``O(L G d_model² d_head + L H d_model d_head²)``;
``"diagonal"`` ``O(L H V d_model d_head)``; ``"topk"`` ``O(L H n V d_head)`` for ``n``
evaluated tokens (all ``V`` by default: pass ``tokens`` to sample).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np
import torch

from circuitwidgets._checks import check_choice, check_int, check_model, check_token_ids
from circuitwidgets.circuits._spectra import eigen_score, sorted_by_magnitude
from circuitwidgets.circuits._stack_factors import row_reductions
from circuitwidgets.circuits.kcomp import best_earlier_heads, kcomp_stack
from circuitwidgets.circuits.lowrank import DEFAULT_MEMORY_BUDGET, LowRankMatrix
from circuitwidgets.circuits.ov_qk import _full_OV, _full_QK, check_offset
from circuitwidgets.circuits.stack import LowRankStack
from circuitwidgets.model import CircuitModel

__all__ = [
    "CIRCUITS",
    "METHODS",
    "copying_scores",
    "eigen_score",
    "eigenvalues",
    "matrix_copying_score",
    "stack_copying_scores",
]

CIRCUITS = ("ov", "qk", "qk_kcomp")
METHODS = ("eigen", "diagonal", "topk")


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
    The eigenvalues of ``(W_E W_V)(W_O W_U)`` are those of ``W_O (W_U W_E) W_V``:
    cost ``O(V d_model²)`` once per model for ``W_U W_E`` (or ``W_Eᵀ W_E``; the
    floor), then ``O(L G d_model² d_head)`` (``W_U W_E W_V`` per key/value head) and
    ``O(L H d_model d_head²)``, in float32 blocks for half-precision weights, and
    ``L H`` float64 ``d_head × d_head`` eigenvalue problems.
    """
    model = check_model(model, "eigenvalues")
    check_choice("circuit", circuit, ("ov", "qk"))
    return _eigenvalues(model, circuit, check_offset(model, offset) if circuit == "qk" else None)


def _eigenvalues(model: CircuitModel, circuit: str, offset: int | None) -> np.ndarray:
    stack = _full_OV(model) if circuit == "ov" else _full_QK(model, offset)
    return sorted_by_magnitude(stack.eigenvalues().cpu().numpy())


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


def stack_copying_summaries(
    stack: LowRankStack,
    methods: Sequence[str],
    k: int,
    diagonal_tokens: torch.Tensor | None,
    topk_tokens: torch.Tensor | None,
    memory_budget: int,
) -> dict[str, np.ndarray]:
    """:func:`matrix_copying_score` of every matrix of a square stack, per method: float64 ``[*batch_shape]`` each.

    ``"diagonal"`` averages over ``diagonal_tokens`` and ``"topk"`` over ``topk_tokens``
    (``None``: every token); both come from one pass over the stack (each block's
    ``B · right`` serves both).
    """
    out: dict[str, np.ndarray] = {}
    if "eigen" in methods:
        out["eigen"] = eigen_score(stack.eigenvalues(memory_budget).cpu().numpy())
    every = torch.arange(stack.matrix_shape[0], device=stack.device)
    diagonal = (slice(None) if diagonal_tokens is None else diagonal_tokens) if "diagonal" in methods else None
    ids = (every if topk_tokens is None else topk_tokens) if "topk" in methods else None
    if diagonal is not None or ids is not None:
        ranked = None if ids is None else (ids, ids)
        entries, within = row_reductions(stack, diagonal, ranked, k, memory_budget)
        if entries is not None:
            out["diagonal"] = (entries > 0).double().mean(-1).cpu().numpy()
        if within is not None:
            out["topk"] = within.double().mean(-1).cpu().numpy()
    return out


def stack_copying_scores(
    stack: LowRankStack, method: str, k: int, tokens: torch.Tensor | None, memory_budget: int
) -> np.ndarray:
    """One summary (:func:`stack_copying_summaries`) of every matrix of a square stack, float64 ``[*batch_shape]``."""
    return stack_copying_summaries(stack, (method,), k, tokens, tokens, memory_budget)[method]


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
        Bytes of blocks and tiles at once.
    progress_bar
        Accepted for compatibility; all heads are computed at once.
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
    return _copying_scores(model, circuit, method, k, ids, memory_budget, offset)


def _copying_scores(
    model: CircuitModel,
    circuit: str,
    method: str,
    k: int,
    ids: torch.Tensor | None,
    memory_budget: int,
    offset: int | None,
) -> np.ndarray:
    if circuit == "ov":
        return stack_copying_scores(_full_OV(model), method, k, ids, memory_budget)
    if circuit == "qk":
        return stack_copying_scores(_full_QK(model, offset), method, k, ids, memory_budget)
    L, H = model.cfg.n_layers, model.cfg.n_heads
    out = np.full((L, H), np.nan)
    if L >= 2:
        sources = best_earlier_heads(model, offset)
        out[1:] = stack_copying_scores(kcomp_stack(model, sources, offset), method, k, ids, memory_budget)
    return out
