"""Q-, K- and V-composition scores between every earlier head and every later head.

The paper's score of earlier head ``h1`` into later head ``h2`` is
``‖W_A W_B‖_F / (‖W_A‖_F ‖W_B‖_F)`` with ``W_A = W_OV^{h1}`` and, in the row-vector
convention,

- Q: ``W_B = W_QK^{h2}`` (``h1``'s output feeds ``h2``'s queries),
- K: ``W_B = (W_QK^{h2})ᵀ`` (``h1``'s output feeds ``h2``'s keys),
- V: ``W_B = W_OV^{h2}`` (``h1``'s output feeds ``h2``'s values).

This is TransformerLens's ``all_composition_scores`` (tested to agree).

Computation, for all pairs and kinds at once, through Gram matrices:
``‖W_A W_B‖_F² = ⟨W_Aᵀ W_A, W_B W_Bᵀ⟩_F``. Each side is a symmetric
``[d_model, d_model]`` matrix of rank ``d_head`` built from the head's factors,
``S = X G Xᵀ`` (``X [d_model, d_head]``, ``G`` a ``d_head × d_head`` Gram matrix;
under grouped-query attention ``X`` of a key or value side is the group's, never
copied per head). The ``d_model × d_model`` plane is cut into ``b × b`` tiles of
its upper triangle (off-diagonal tiles counted twice); for each tile, every
earlier head's ``X[rows] G X[cols]ᵀ`` is formed, flattened, and for each block
of later layers one matrix product, with every kind's later heads side by
side, adds every earlier-later pair's share, so no head's ``[d_model, d_model]``
matrix is ever whole in memory. Cost ``O(N d_model² d_head / 2)`` per side to
build and ``O(P d_model² / 2)`` for ``P`` ordered pairs (the floor: the
``[N, d_model²/2] · [d_model²/2, N]`` product); memory about ``memory_budget``
bytes in all: the heads' Gram matrices, the ``[N, N]`` float64 accumulators and
the result, then panels and tiles (``b`` is chosen from what is left).
Half-precision weights are lifted to float32 one tile at a time.

Baseline: the expected score of random matrices with the same shapes, by Monte
Carlo (see :func:`composition_baseline`). For Q, K and V the shapes are the same
(``[d_model, d_head] × [d_head, d_model]`` on both sides), so one number serves
all three kinds.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Literal

import numpy as np
import torch

from circuitwidgets._checks import check_bool, check_budget, check_choice, check_int, check_model, progress
from circuitwidgets.circuits._precision import compute_dtype, lift
from circuitwidgets.circuits.composition_tiles import Scratch, Side, row_panel, tile, tile_size
from circuitwidgets.circuits.ov_qk import _OV, _QK, check_offset
from circuitwidgets.errors import MemoryBudgetError
from circuitwidgets.model import CircuitModel, ModelConfig

KINDS = ("Q", "K", "V")

#: Default bytes one composition computation holds beyond the model: Gram matrices, accumulators, panels and
#: tiles (571 MB peak extra at Llama-3-8B's 1,024 heads, ``benchmarks/bench_engine.py``).
COMPOSITION_MEMORY_BUDGET = 512 * 2**20

#: Later heads per block of the pair products (at least one layer): a block also pairs heads that are not
#: earlier, up to half a block. One layer of 32 heads (96 columns with the three kinds) beat four layers at
#: Llama-3-8B's shape: 16 % fewer pairs, 8 % slower products.
_RIGHT_BLOCK_HEADS = 32


def _gram(left: torch.Tensor, right: torch.Tensor) -> torch.Tensor:
    """``left @ right`` in the compute dtype (half-precision weights lifted one layer at a time)."""
    if lift(left[:0]).dtype == left.dtype and lift(right[:0]).dtype == right.dtype:
        return left @ right
    return torch.stack([lift(a) @ lift(b) for a, b in zip(left, right, strict=True)])


def _inner_product(left: torch.Tensor, right: torch.Tensor, inner: tuple[int, ...]) -> torch.Tensor:
    """``⟨left, right⟩_F`` of every head's ``d_head × d_head`` matrices, float64 ``[L, H]`` (``inner`` is ``(L, G, H/G)``)."""
    return (left.double() * right.double()).sum((-1, -2)).expand(inner).reshape(inner[0], -1)


def _sides(
    model: CircuitModel, kinds: Sequence[str], offset: int | None
) -> tuple[Side, list[Side], torch.Tensor, list[torch.Tensor]]:
    """``(X, G)`` of ``W_Aᵀ W_A = X G Xᵀ`` (the earlier head's OV) and of ``W_B W_Bᵀ`` per kind, with the heads' norms.

    Four ``d_head × d_head`` Gram matrices serve every side and norm: ``W_Vᵀ W_V`` and
    ``W_Kᵀ W_K`` per key/value head, ``W_O W_Oᵀ`` and ``W_Qᵀ W_Q`` per query head
    (``W_Q R(Δ)`` on rotary layers, ``R`` the QK stack's core). ``X`` are views of the weights.
    """
    ov = _OV(model)
    W_V, W_O = ov._A, ov._B  # [L, G, 1, d, dh], [L, G, H/G, dh, d]
    gram_v, gram_o = _gram(W_V.mT, W_V), _gram(W_O, W_O.mT)
    norm_ov = _inner_product(gram_v, gram_o, ov._inner).clamp_min(0).sqrt()
    sides: dict[str, Side] = {"V": (W_V, gram_o)}
    norms = {"V": norm_ov}
    if any(kind != "V" for kind in kinds):
        qk = _QK(model, offset)
        W_Q, W_Kt, C = qk._A, qk._B, qk._C  # [L, G, H/G, d, dh], [L, G, 1, dh, d], [L, 1, 1, dh, dh]
        gram_q, gram_k = _gram(W_Q.mT, W_Q), _gram(W_Kt, W_Kt.mT)
        # Grams of W_Q R and of (R W_Kᵀ)ᵀ; ‖W_Q R W_Kᵀ‖² = ⟨Rᵀ W_Qᵀ W_Q R, W_Kᵀ W_K⟩ (one rotation, not two)
        rotated_q, rotated_k = (gram_q, gram_k) if C is None else (C.mT @ gram_q @ C, C @ gram_k @ C.mT)
        sides |= {"Q": (W_Q, rotated_k), "K": (W_Kt.mT, rotated_q)}
        norms["Q"] = norms["K"] = _inner_product(rotated_q, gram_k, ov._inner).clamp_min(0).sqrt()
    return (W_O.mT, gram_v), [sides[kind] for kind in kinds], norm_ov, [norms[kind] for kind in kinds]


def _raw_composition_scores(
    model: CircuitModel, kinds: Sequence[str], memory_budget: int, offset: int | None, progress_bar: bool | None = False
) -> np.ndarray:
    """Composition scores without the baseline, float64 ``[len(kinds), L, H, L, H]`` (NaN where ``l1 >= l2``)."""
    cfg = model.cfg
    L, H, d = cfg.n_layers, cfg.n_heads, cfg.d_model
    out = np.full((len(kinds), L, H, L, H), np.nan)
    if L < 2 or not kinds:
        return out
    left, rights, norms_left, norms_right = _sides(model, kinds, offset)
    n = (L - 1) * H
    size = torch.empty((), dtype=compute_dtype(model.dtype)).element_size()
    layers_per_block = max(1, _RIGHT_BLOCK_HEADS // H)
    # the Gram matrices, the float64 accumulators and the result come out of the budget before the tiles
    grams = {id(G): G.numel() * G.element_size() for _, G in (left, *rights)}
    held = sum(grams.values()) + len(kinds) * n * n * 8 + out.nbytes
    b = tile_size(d, cfg.d_head, len(kinds), n, layers_per_block * H, size, max(memory_budget - held, 0))
    squared = torch.zeros(len(kinds), n, n, dtype=torch.float64, device=model.device)
    earlier_layers, later_layers = slice(0, L - 1), slice(1, L)
    row_blocks = range(0, d, b)
    scratch = Scratch(model.device)
    dtype = compute_dtype(model.dtype)
    for i0 in progress(row_blocks, len(row_blocks), "composition row blocks", progress_bar):
        rows = slice(i0, min(i0 + b, d))
        panel_left = row_panel(left, earlier_layers, rows, scratch, "panel")
        panels_right = [row_panel(side, later_layers, rows, scratch, f"panel {k}") for k, side in enumerate(rights)]
        for j0 in range(i0, d, b):
            cols = slice(j0, min(j0 + b, d))
            weight = 1.0 if i0 == j0 else 2.0  # an off-diagonal tile stands for its mirror image too
            entries = (rows.stop - rows.start) * (cols.stop - cols.start)
            tile_left = scratch.take("left", (n, entries), dtype)
            tile(tile_left, panel_left, left, earlier_layers, cols, scratch)
            for first in range(0, L - 1, layers_per_block):
                last = min(first + layers_per_block, L - 1)  # later layers first + 1 .. last
                heads = (last - first) * H
                # every kind's later heads of the block side by side: one product reads the earlier tile once
                right = scratch.take("right", (len(kinds) * heads, entries), dtype)
                for k, (panel, side) in enumerate(zip(panels_right, rights, strict=True)):
                    tile(
                        right[k * heads : (k + 1) * heads],
                        panel[first:last],
                        side,
                        slice(first + 1, last + 1),
                        cols,
                        scratch,
                    )
                product = (tile_left[: last * H] @ right.T).double().view(last * H, len(kinds), heads)
                squared[:, : last * H, first * H : last * H].add_(product.permute(1, 0, 2), alpha=weight)
    earlier = torch.ones(L - 1, L - 1, dtype=torch.bool, device=model.device).triu()  # [l1, l2 - 1]: l1 <= l2 - 1
    for k in range(len(kinds)):
        product = squared[k].clamp_min(0).sqrt().reshape(L - 1, H, L - 1, H)
        scores = product / (norms_left[:-1, :, None, None] * norms_right[k][None, None, 1:, :])
        scores = torch.where(earlier[:, None, :, None], scores, torch.nan)
        out[k, :-1, :, 1:, :] = scores.cpu().numpy()
    _no_path_into_shared_keys(cfg, kinds, out)
    return out


def _no_path_into_shared_keys(cfg: ModelConfig, kinds: Sequence[str], out: np.ndarray) -> None:
    """Zero K- and V-composition into a layer that reuses an earlier layer's keys and values (Gemma 4).

    Layer ``l2`` reading the keys and values of layer ``s < l2`` computes them from
    layer ``s``'s input, which holds no output of layers ``s … l2 − 1``: those
    paths do not exist, whatever the weights' product says.
    """
    for l2, source in enumerate(cfg.kv_sources or ()):
        if source < l2:
            for k, kind in enumerate(kinds):
                if kind in ("K", "V"):
                    out[k, source:l2, :, l2, :] = 0.0


def raw_composition_scores(
    model: CircuitModel,
    kind: Literal["Q", "K", "V"],
    memory_budget: int = COMPOSITION_MEMORY_BUDGET,
    offset: int | None = None,
) -> np.ndarray:
    """Composition scores without the baseline, float64 ``[L, H, L, H]`` (NaN where ``l1 >= l2``).

    Module docstring for the method and cost.
    """
    model = check_model(model, "raw_composition_scores")
    check_choice("kind", kind, KINDS)
    budget = check_budget("memory_budget", memory_budget, model.device)
    offset = check_offset(model, offset) if kind != "V" else None
    scores: np.ndarray = _raw_composition_scores(model, (kind,), budget, offset)[0]
    return scores


#: Monte-Carlo samples drawn per ``standard_normal`` call of the baseline.
BASELINE_GROUP = 16

#: Most samples a baseline may draw (the default 100 gives about 3 significant digits).
MAX_BASELINE_SAMPLES = 100_000

#: Most memory one group of :data:`BASELINE_GROUP` baseline draws may take (float64 factors).
MAX_BASELINE_GROUP_BYTES = 2**31

#: Bytes of draws the baseline computes at once (as many samples as fit, at least one).
BASELINE_BLOCK_BYTES = 256 * 2**20


def _trace_product(left: torch.Tensor, right: torch.Tensor) -> torch.Tensor:
    """``tr(left rightᵀ)`` over the last two axes."""
    return (left * right).sum(dim=(-1, -2))


@functools.lru_cache(maxsize=64)
def _baseline(d_model: int, d_head: int, n_samples: int, seed: int) -> float:
    generator = np.random.default_rng(seed)
    per_sample = 4 * d_model * d_head * 8
    step = max(1, min(n_samples, BASELINE_BLOCK_BYTES // per_sample))
    scores = []
    for start in range(0, n_samples, step):
        # One call per group of samples: the stream is the same as one call per sample (row-major draws).
        group = min(step, n_samples - start)
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
    root of the mean square). Draws: ``numpy.random.default_rng(seed)``, then
    ``standard_normal((n_samples, 4, d_model * d_head))`` in row-major order (drawn
    and scored in groups of :data:`BASELINE_BLOCK_BYTES`, which gives the same
    numbers): sample ``i``'s rows ``0..3`` are ``X₁, Y₁, X₂, Y₂``. The score is
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
    memory_budget: int = COMPOSITION_MEMORY_BUDGET,
    offset: int | None = None,
    progress_bar: bool | None = None,
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
        Bytes held at once beyond the model: the heads' Gram matrices and the
        accumulators, then Gram-matrix tiles (the tile size is chosen from what
        is left; refused beyond the device's memory).
    offset
        For Q and K composition on rotary models: the later head's query
        position minus key position, as in :func:`~circuitwidgets.circuits.W_QK`
        (required there; ignored for V, whose matrices do not rotate).
    progress_bar
        Show a tqdm bar over the row blocks of Gram-matrix tiles (``None``: only when interactive).

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
    budget = check_budget("memory_budget", memory_budget, model.device)
    offset = check_offset(model, offset) if kind != "V" else None
    raw: np.ndarray = _raw_composition_scores(model, (kind,), budget, offset, progress_bar)[0]
    if not baseline:
        return raw
    return raw - composition_baseline(model.cfg.d_model, model.cfg.d_head, n_samples, seed)


def all_composition_scores(
    model: CircuitModel,
    baseline: bool = False,
    *,
    n_samples: int = 100,
    seed: int = 0,
    memory_budget: int = COMPOSITION_MEMORY_BUDGET,
    offset: int | None = None,
    progress_bar: bool | None = None,
) -> np.ndarray:
    """Q, K and V composition scores of every earlier-later pair in one pass, float64 ``[3, L, H, L, H]``.

    Axis 0 in the order of :data:`KINDS`; each slice equals
    :func:`composition_scores` of that kind (same arguments). One pass shares
    the earlier heads' tiles among the three kinds, so it costs about two
    thirds of three separate calls. ``offset`` is required on rotary models;
    ``progress_bar`` as in :func:`composition_scores`.
    """
    model = check_model(model, "all_composition_scores")
    check_bool("baseline", baseline)
    budget = check_budget("memory_budget", memory_budget, model.device)
    raw = _raw_composition_scores(model, KINDS, budget, check_offset(model, offset), progress_bar)
    if not baseline:
        return raw
    return raw - composition_baseline(model.cfg.d_model, model.cfg.d_head, n_samples, seed)
