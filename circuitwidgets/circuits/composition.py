"""Q-, K- and V-composition scores between every earlier head and every later head.

The paper's score of earlier head ``h1`` into later head ``h2`` is
``‖W_A W_B‖_F / (‖W_A‖_F ‖W_B‖_F)`` with ``W_A = W_OV^{h1}`` and, in the row-vector
convention,

- Q: ``W_B = W_QK^{h2}`` (``h1``'s output feeds ``h2``'s queries),
- K: ``W_B = (W_QK^{h2})ᵀ`` (``h1``'s output feeds ``h2``'s keys),
- V: ``W_B = W_OV^{h2}`` (``h1``'s output feeds ``h2``'s values).

This is TransformerLens's ``all_composition_scores`` (tested to agree).

Computation (all pairs at once, nothing ``[d_model, d_model]`` per pair):
``‖W_A W_B‖_F² = ⟨W_Aᵀ W_A, W_B W_Bᵀ⟩_F``. With ``W_A = V₁ O₁`` and ``W_B = A₂ B₂``,
``W_Aᵀ W_A = O₁ᵀ (V₁ᵀ V₁) O₁`` and ``W_B W_Bᵀ = A₂ (B₂ B₂ᵀ) A₂ᵀ`` are symmetric
``[d_model, d_model]`` matrices built from ``d_head × d_head`` Gram matrices, one per
head; their upper triangles (off-diagonal entries counted twice) make one
``[heads, d_model (d_model + 1) / 2]`` matrix per side, and one matrix product per
later layer gives every pair's squared norm. Cost ``O(L H d_model² d_head)`` to
build the sides plus ``O(P d_model²/2)`` for ``P`` ordered pairs; memory two
``[L H, d_model²/2]`` arrays (≈ 300 MB in float32 for GPT-2 small) plus one
block of ``memory_budget`` bytes.

Baseline: the expected score of random matrices with the same shapes, by Monte
Carlo (see :func:`composition_baseline`). For Q, K and V the shapes are the same
(``[d_model, d_head] × [d_head, d_model]`` on both sides), so one number serves
all three kinds.
"""

from __future__ import annotations

import functools
from typing import Literal

import numpy as np
import torch

from circuitwidgets.circuits._checks import check_bool, check_budget, check_choice, check_int, check_model
from circuitwidgets.circuits.lowrank import DEFAULT_MEMORY_BUDGET
from circuitwidgets.circuits.ov_qk import all_query_weights, check_offset
from circuitwidgets.errors import MemoryBudgetError
from circuitwidgets.model import CircuitModel

KINDS = ("Q", "K", "V")


def _sides(
    model: CircuitModel, kind: str, offset: int | None
) -> tuple[tuple[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]:
    """``((X, G) of W_Aᵀ W_A = X G Xᵀ, (X, G) of W_B W_Bᵀ)`` with ``X [L, H, d, dh]``, ``G [L, H, dh, dh]``.

    Rotary heads use ``W_Q R(offset)`` for ``W_Q`` (``W_QK(Δ) = W_Q R(Δ) W_Kᵀ``);
    grouped-query heads their key/value head's ``W_K``, ``W_V``.
    """
    W_O_t = model.W_O.transpose(-1, -2)
    W_K, W_V = model.per_query_head(model.W_K), model.per_query_head(model.W_V)
    left = (W_O_t, W_V.transpose(-1, -2) @ W_V)
    if kind == "V":
        return left, (W_V, model.W_O @ W_O_t)
    W_Q = all_query_weights(model, offset)
    if kind == "Q":
        return left, (W_Q, W_K.transpose(-1, -2) @ W_K)
    return left, (W_K, W_Q.transpose(-1, -2) @ W_Q)


def _packed_grams(X: torch.Tensor, G: torch.Tensor, memory_budget: int, double_off_diagonal: bool) -> torch.Tensor:
    """Upper triangles of ``X G Xᵀ`` for a stack ``X [N, d, dh]``, ``G [N, dh, dh]`` → ``[N, d (d + 1) / 2]``.

    With ``double_off_diagonal`` the off-diagonal entries are doubled, so the dot
    product of a doubled and a plain packing is the Frobenius inner product of the
    full symmetric matrices. Cost ``O(N d² dh)``; ``memory_budget`` bytes of scratch.
    """
    n, d, _ = X.shape
    rows, cols = torch.triu_indices(d, d, device=X.device)
    flat = rows * d + cols
    weight = torch.where(rows == cols, 1.0, 2.0 if double_off_diagonal else 1.0).to(X.dtype)
    step = max(1, memory_budget // max(1, d * d * X.element_size()))
    out = X.new_empty(n, flat.numel())
    for start in range(0, n, step):
        block = (X[start : start + step] @ G[start : start + step]) @ X[start : start + step].transpose(-1, -2)
        out[start : start + step] = block.reshape(block.shape[0], d * d)[:, flat] * weight
    return out


def _squared_norms(X: torch.Tensor, G: torch.Tensor) -> torch.Tensor:
    """``tr(X G Xᵀ) = tr(G XᵀX)`` for stacks ``[..., d, dh]``, ``[..., dh, dh]``."""
    return ((X.transpose(-1, -2) @ X) * G.transpose(-1, -2)).sum(dim=(-1, -2))


def raw_composition_scores(
    model: CircuitModel, kind: Literal["Q", "K", "V"], memory_budget: int = DEFAULT_MEMORY_BUDGET, offset: int | None = None
) -> np.ndarray:
    """Composition scores without the baseline, float64 ``[L, H, L, H]`` (NaN where ``l1 >= l2``).

    Computed in the weights' dtype (module docstring for the method and cost).
    """
    cfg = model.cfg
    L, H, d, dh = cfg.n_layers, cfg.n_heads, cfg.d_model, cfg.d_head
    out = np.full((L, H, L, H), np.nan)
    if L < 2:
        return out
    (X_a, G_a), (X_b, G_b) = _sides(model, kind, offset)
    left = _packed_grams(X_a[:-1].reshape(-1, d, dh), G_a[:-1].reshape(-1, dh, dh), memory_budget, True)
    right = _packed_grams(X_b[1:].reshape(-1, d, dh), G_b[1:].reshape(-1, dh, dh), memory_budget, False)
    norms_a = _squared_norms(X_a, G_a).double().clamp_min(0).sqrt()  # [L, H]
    norms_b = _squared_norms(X_b, G_b).double().clamp_min(0).sqrt()
    for l2 in range(1, L):
        squared = left[: l2 * H] @ right[(l2 - 1) * H : l2 * H].T  # [l2 H, H]
        product = squared.double().clamp_min(0).sqrt().reshape(l2, H, H)
        scores = product / (norms_a[:l2, :, None] * norms_b[l2][None, None, :])
        out[:l2, :, l2, :] = scores.cpu().numpy()
    return out


#: Monte-Carlo samples drawn per ``standard_normal`` call of the baseline.
BASELINE_GROUP = 16

#: Most samples a baseline may draw (the default 100 gives about 3 significant digits).
MAX_BASELINE_SAMPLES = 100_000

#: Most memory one group of baseline draws may take (float64 factors).
MAX_BASELINE_GROUP_BYTES = 2**31


def _trace_product(left: torch.Tensor, right: torch.Tensor) -> torch.Tensor:
    """``tr(left rightᵀ)`` over the last two axes."""
    return (left * right).sum(dim=(-1, -2))


@functools.lru_cache(maxsize=64)
def _baseline(d_model: int, d_head: int, n_samples: int, seed: int) -> float:
    generator = np.random.default_rng(seed)
    scores = []
    for start in range(0, n_samples, BASELINE_GROUP):
        group = min(BASELINE_GROUP, n_samples - start)
        z = torch.from_numpy(generator.standard_normal((group, 4, d_model * d_head)))
        X1, X2 = z[:, 0].view(group, d_model, d_head), z[:, 2].view(group, d_model, d_head)
        Y1, Y2 = z[:, 1].view(group, d_head, d_model), z[:, 3].view(group, d_head, d_model)
        gram_x1, gram_x2 = X1.transpose(1, 2) @ X1, X2.transpose(1, 2) @ X2  # [group, dh, dh]
        gram_y1, gram_y2 = Y1 @ Y1.transpose(1, 2), Y2 @ Y2.transpose(1, 2)
        middle = Y1 @ X2
        # ‖X1 Y1 X2 Y2‖² = tr(Gx1 M Gy2 Mᵀ); ‖X1 Y1‖² = tr(Gx1 Gy1); ‖X2 Y2‖² = tr(Gx2 Gy2)
        product = _trace_product(gram_x1 @ middle, middle @ gram_y2)
        norms = _trace_product(gram_x1, gram_y1) * _trace_product(gram_x2, gram_y2)
        scores.append((product / norms).sqrt())
    return float(torch.cat(scores).mean())


def composition_baseline(d_model: int, d_head: int, n_samples: int = 100, seed: int = 0) -> float:
    """Expected composition score of random matrices with a head's shapes (Monte Carlo).

    Each sample draws four independent standard-Gaussian factors ``X₁ [d_model,
    d_head]``, ``Y₁ [d_head, d_model]``, ``X₂ [d_model, d_head]``, ``Y₂ [d_head,
    d_model]`` and scores ``‖X₁Y₁X₂Y₂‖_F / (‖X₁Y₁‖_F ‖X₂Y₂‖_F)`` exactly (float64,
    from ``d_head × d_head`` Gram matrices); the result is the mean score (not the
    root of the mean square). Draws: ``numpy.random.default_rng(seed)``, then per
    group of up to 16 samples one ``standard_normal((group, 4, d_model * d_head))``
    whose rows ``0..3`` are ``X₁, Y₁, X₂, Y₂`` in row-major order. The score is
    invariant to scaling each matrix, so the variance does not matter. Results
    are cached per arguments. Cost ``O(n_samples d_model d_head²)``; at most
    :data:`MAX_BASELINE_SAMPLES` samples, and shapes whose group of draws fits in
    :data:`MAX_BASELINE_GROUP_BYTES`.
    """
    d_model = check_int("d_model", d_model, 1)
    d_head = check_int("d_head", d_head, 1)
    n_samples = check_int("n_samples", n_samples, 1, MAX_BASELINE_SAMPLES + 1)
    seed = check_int("seed", seed, 0)
    group_bytes = BASELINE_GROUP * 4 * d_model * d_head * 8
    if group_bytes > MAX_BASELINE_GROUP_BYTES:
        raise MemoryBudgetError(
            f"d_model, d_head: a baseline for heads of shape [{d_model}, {d_head}] draws {group_bytes:,} bytes at a time, "
            f"more than the {MAX_BASELINE_GROUP_BYTES:,} allowed"
        )
    return _baseline(d_model, d_head, n_samples, seed)


def composition_scores(
    model: CircuitModel,
    kind: Literal["Q", "K", "V"] = "K",
    baseline: bool = False,
    *,
    n_samples: int = 100,
    seed: int = 0,
    memory_budget: int = DEFAULT_MEMORY_BUDGET,
    offset: int | None = None,
) -> np.ndarray:
    """Composition scores of every earlier head into every later head.

    Parameters
    ----------
    model
        The model (paths through MLPs are not part of the score).
    kind
        ``"Q"``, ``"K"`` or ``"V"`` (module docstring for the matrices).
    baseline
        Subtract :func:`composition_baseline` (``n_samples``, ``seed``), as the
        paper's diagram does.
    n_samples, seed
        Monte-Carlo size and seed of the baseline.
    memory_budget
        Bytes of scratch for building the packed Gram matrices.
    offset
        For Q and K composition on rotary models: the later head's query
        position minus key position, as in :func:`~circuitwidgets.circuits.W_QK`
        (required there; ignored for V, whose matrices do not rotate).

    Returns
    -------
    np.ndarray
        float64 ``[n_layers, n_heads, n_layers, n_heads]``; entry ``[l1, h1, l2, h2]``
        scores earlier head ``(l1, h1)`` into later head ``(l2, h2)``; NaN where
        ``l1 >= l2`` (and for heads whose matrices are zero).
    """
    model = check_model(model, "composition_scores")
    check_choice("kind", kind, KINDS)
    check_bool("baseline", baseline)
    check_budget("memory_budget", memory_budget)
    offset = check_offset(model, offset) if kind != "V" else None
    raw = raw_composition_scores(model, kind, memory_budget, offset)
    if not baseline:
        return raw
    return raw - composition_baseline(model.cfg.d_model, model.cfg.d_head, n_samples, seed)
