"""Data of the eigenvalue scatter: every head's copying scores, eigenvalues and detector scores.

The widget (:mod:`circuitwidgets.widgets.eigen.widget`) shows it; this module builds it
from the engine's batched computations: the ``[n_layers, n_heads]`` stacks of
full OV circuits, full QK circuits and each head's K-composition term
(:mod:`circuitwidgets.circuits.matching`), each summarised once per score
definition, all heads at once. See the widget module for the layout.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
import torch
from numpy.typing import ArrayLike, NDArray

from circuitwidgets._checks import check_int, check_model
from circuitwidgets.activations.detectors import random_token_scores
from circuitwidgets.circuits._spectra import eigen_score, sorted_by_magnitude
from circuitwidgets.circuits.copying import stack_copying_summaries
from circuitwidgets.circuits.kcomp import best_earlier_heads, kcomp_stack
from circuitwidgets.circuits.ov_qk import _full_OV, _full_QK
from circuitwidgets.circuits.stack import LowRankStack
from circuitwidgets.errors import ArgumentError, ArgumentTypeError, ShapeError
from circuitwidgets.model import CircuitModel
from circuitwidgets.widgets.core.arrays import user_array
from circuitwidgets.widgets.core.offset import engine_offset, resolve_offset

__all__ = [
    "CIRCUITS",
    "DETECTORS",
    "INDUCTION_MIN",
    "METHODS",
    "METHOD_NOTES",
    "build_eigen_scatter",
    "complex_heads",
    "detector_arrays",
    "eigen_scatter_data",
    "pack_complex",
    "strongest_induction",
]

#: Score definitions, in the order of ``scores``' first axis.
METHODS = ("eigen", "diagonal", "topk")
#: Circuits, in the order of ``scores``' second axis.
CIRCUITS: tuple[Literal["ov", "qk", "qk_kcomp"], ...] = ("ov", "qk", "qk_kcomp")
#: What a score definition measures, where it does not depend on options.
METHOD_NOTES = {"eigen": "Σλ / Σ|λ| over the eigenvalues of the full circuit (+1 copying, −1 anti-copying)"}
#: Head detectors, in the order of ``detectors``' first axis.
DETECTORS: tuple[Literal["previous_token", "induction", "duplicate_token"], ...] = (
    "previous_token",
    "induction",
    "duplicate_token",
)
#: Below this induction score no head counts as an induction head (random heads score ~1/n).
INDUCTION_MIN = 0.2
#: Bytes of blocks and tiles the diagonal and top-k summaries hold at once.
SUMMARY_MEMORY_BUDGET = 128 * 2**20


def _sample_tokens(model: CircuitModel, max_tokens: int, seed: int) -> torch.Tensor | None:
    """All tokens (``None``) when the vocabulary is small, else ``max_tokens`` ids drawn without replacement."""
    V = model.cfg.d_vocab
    if V <= max_tokens:
        return None
    generator = torch.Generator().manual_seed(seed)
    ids: torch.Tensor = torch.randperm(V, generator=generator)[:max_tokens].sort().values
    return ids.to(model.device)


def pack_complex(values: NDArray[np.complex128]) -> NDArray[np.float32]:
    """Complex ``[...]`` as float32 ``[..., 2]`` (real, imaginary)."""
    return np.stack([values.real, values.imag], axis=-1).astype(np.float32)


def strongest_induction(detectors: NDArray[np.float32], ov_scores: NDArray[Any] | None = None) -> dict[str, int]:
    """``selected_layer`` / ``selected_head`` to open on: the strongest induction head, else the strongest copying head.

    A head counts as an induction head from :data:`INDUCTION_MIN`; without one (a
    one-layer model) the head with the largest OV copying score ``ov_scores``
    ``[n_layers, n_heads]`` is chosen, never an anti-copying head picked by noise.
    Returns {} when neither is known.
    """
    induction = detectors[DETECTORS.index("induction")]
    if induction.size and not np.isnan(induction).all() and np.nanmax(induction) >= INDUCTION_MIN:
        layer, head = np.unravel_index(int(np.nanargmax(induction)), induction.shape)
        return {"selected_layer": int(layer), "selected_head": int(head)}
    if ov_scores is not None and ov_scores.size and not np.isnan(ov_scores).all():
        layer, head = np.unravel_index(int(np.nanargmax(ov_scores)), ov_scores.shape)
        return {"selected_layer": int(layer), "selected_head": int(head)}
    if induction.size and not np.isnan(induction).all():
        layer, head = np.unravel_index(int(np.nanargmax(induction)), induction.shape)
        return {"selected_layer": int(layer), "selected_head": int(head)}
    return {}


def complex_heads(name: str, values: ArrayLike, like: tuple[int, ...] | None = None) -> NDArray[np.complex128]:
    """``values`` as complex ``[n_layers, n_heads, d]`` (numpy or torch), or a typed error naming ``name``."""
    arr = user_array(name, values, "complex128", "eigenvalues [n_layers, n_heads, d]")
    if arr.ndim != 3 or 0 in arr.shape[:2]:
        raise ShapeError(f"{name}: expected eigenvalues [n_layers, n_heads, d], got shape {tuple(arr.shape)}")
    if like is not None and arr.shape[:2] != like[:2]:
        raise ShapeError(f"{name}: expected [{like[0]}, {like[1]}, d] like ov, got shape {tuple(arr.shape)}")
    return arr


def detector_arrays(detectors: dict[str, ArrayLike] | None, shape: tuple[int, int]) -> NDArray[np.float32]:
    """``[3, n_layers, n_heads]`` in the order of :data:`DETECTORS` (NaN where not given)."""
    out = np.full((len(DETECTORS), *shape), np.nan, dtype=np.float32)
    if detectors is None:
        return out
    if not isinstance(detectors, dict):
        raise ArgumentTypeError(
            f"detectors: expected a dict of {DETECTORS} → [n_layers, n_heads], got {type(detectors).__name__}"
        )
    for kind, values in detectors.items():
        if kind not in DETECTORS:
            raise ArgumentError(f"detectors: expected keys from {DETECTORS}, got {kind!r:.80}")
        arr = user_array(f"detectors[{kind!r}]", values, "float32", "head scores [n_layers, n_heads]")
        if arr.shape != shape:
            raise ShapeError(
                f"detectors[{kind!r}]: expected shape {list(shape)} [n_layers, n_heads], got {list(arr.shape)}"
            )
        out[DETECTORS.index(kind)] = arr
    return out


def eigen_scatter_data(
    model: CircuitModel,
    *,
    methods: Sequence[str] = METHODS,
    k: int = 5,
    max_tokens: int = 1024,
    seed: int = 0,
    offset: int | None = None,
) -> dict[str, Any]:
    """Trait values of an :class:`~circuitwidgets.widgets.EigenScatter` for ``model``.

    Parameters
    ----------
    model
        The model.
    methods
        Score definitions to precompute (a subset of :data:`METHODS`, in any order).
    k
        ``k`` of the ``"topk"`` rate.
    max_tokens
        ``"topk"`` averages over all tokens when ``d_vocab <= max_tokens``, else over
        ``max_tokens`` tokens drawn without replacement (seeded); its cost is
        ``O(L H n d_vocab d_head)`` for ``n`` evaluated tokens, three circuits.
    seed
        Seed of the token sample and of the detectors' random sequences.
    offset
        Rotary models: the offset ``Δ = i − j`` at which QK circuits are read
        (default 0, shown in the view; :mod:`circuitwidgets.widgets.core.offset`).

    Returns
    -------
    dict
        ``methods``, ``method_notes``, ``scores``, ``eigenvalues``, ``kcomp_source``,
        ``detectors``, ``model_name``, ``qk_offset`` (widget module docstring for shapes).

    Notes
    -----
    Each circuit is one ``[n_layers, n_heads]`` stack summarised by every method in
    one pass (:func:`~circuitwidgets.circuits.copying.stack_copying_summaries`);
    the K-composition sources come from one all-pairs K-composition computation.
    """
    model = check_model(model, "eigen_scatter_data")
    return build_eigen_scatter(model, methods=methods, k=k, max_tokens=max_tokens, seed=seed, offset=offset)


def _check_methods(methods: object) -> list[str]:
    if isinstance(methods, str) or not isinstance(methods, Sequence):
        raise ArgumentTypeError(f"methods: expected a list of names from {METHODS}, got {type(methods).__name__}")
    chosen = list(methods)
    if not chosen or any(not isinstance(m, str) or m not in METHODS for m in chosen) or len(set(chosen)) != len(chosen):
        raise ArgumentError(f"methods: expected distinct names from {METHODS}, got {chosen!r:.200}")
    return chosen


def _method_notes(methods: list[str], k: int, n_eval: int, d_vocab: int, sampled: bool) -> list[str]:
    notes = []
    for method in methods:
        if method == "eigen":
            notes.append(METHOD_NOTES["eigen"])
        elif method == "diagonal":
            notes.append("fraction of tokens t whose own entry M[t, t] is positive")
        else:
            over = f"{n_eval:,} sampled tokens of {d_vocab:,}" if sampled else f"all {n_eval:,} tokens"
            notes.append(f"fraction of tokens t with M[t, t] among the {k} largest of row t, over {over}")
    return notes


def build_eigen_scatter(
    model: CircuitModel,
    *,
    methods: Sequence[str] = METHODS,
    k: int = 5,
    max_tokens: int = 1024,
    seed: int = 0,
    offset: int | None = None,
) -> dict[str, Any]:
    """:func:`eigen_scatter_data` of a model already checked (the widget's builder: no warning, no re-check)."""
    chosen = _check_methods(methods)
    k = check_int("k", k, 1, model.cfg.d_vocab + 1)
    max_tokens = check_int("max_tokens", max_tokens, 1)
    seed = check_int("seed", seed, 0, 2**63)
    qk_offset = resolve_offset(model, offset)
    at = engine_offset(qk_offset)
    cfg = model.cfg
    L, H, dh = cfg.n_layers, cfg.n_heads, cfg.d_head
    sample = _sample_tokens(model, max_tokens, seed)
    sources = best_earlier_heads(model, at)
    stacks: list[LowRankStack | None] = [
        _full_OV(model),
        _full_QK(model, at),
        kcomp_stack(model, sources, at) if L >= 2 else None,
    ]
    scores = np.full((len(chosen), len(CIRCUITS), L, H), np.nan, dtype=np.float64)
    eigs = np.full((len(CIRCUITS), L, H, dh), np.nan, dtype=np.complex128)
    for j, stack in enumerate(stacks):
        if stack is None:
            continue
        rows = slice(1, None) if CIRCUITS[j] == "qk_kcomp" else slice(None)
        eigs[j, rows] = sorted_by_magnitude(stack.eigenvalues().cpu().numpy())
        summaries = stack_copying_summaries(
            stack, [m for m in chosen if m != "eigen"], k, None, sample, SUMMARY_MEMORY_BUDGET
        )
        for i, method in enumerate(chosen):
            scores[i, j, rows] = eigen_score(eigs[j, rows]) if method == "eigen" else summaries[method]
    detectors = random_token_scores(model, DETECTORS, None, 8, seed)  # one forward pass for the three kinds
    n_eval = cfg.d_vocab if sample is None else int(sample.numel())
    return {
        "methods": chosen,
        "method_notes": _method_notes(chosen, k, n_eval, cfg.d_vocab, sample is not None),
        "scores": scores.astype(np.float32),
        "eigenvalues": np.stack([pack_complex(e) for e in eigs]),
        "kcomp_source": sources.astype(np.int32),
        "detectors": detectors.astype(np.float32),
        "model_name": model.name,
        "qk_offset": qk_offset,
    }
