"""How well one graph's edge weights agree with another's on the same edges (an estimate against exact patching)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from circuitwidgets.errors import ArgumentError, ArgumentTypeError
from circuitwidgets.graphs.graph import Graph


@dataclass(frozen=True)
class Agreement:
    """``rank_correlation``: Spearman's ρ of the weights over the shared edges; ``abs_rank_correlation`` the same
    of ``|weight|``; ``top_overlap``: the fraction of the reference's ``k`` strongest edges among the estimate's ``k``
    strongest; ``edges``: how many edges were compared."""

    rank_correlation: float
    abs_rank_correlation: float
    top_overlap: float
    k: int
    edges: int


def _ranks(x: np.ndarray) -> np.ndarray:
    """Ranks with ties averaged (Spearman's convention)."""
    order = np.argsort(x, kind="stable")
    ranks = np.empty(len(x))
    ranks[order] = np.arange(len(x), dtype=np.float64)
    for value in np.unique(x):
        tied = x == value
        if tied.sum() > 1:
            ranks[tied] = ranks[tied].mean()
    return ranks


def spearman(x: np.ndarray, y: np.ndarray) -> float:
    """Spearman's rank correlation of two equally long arrays."""
    rx, ry = _ranks(np.asarray(x, dtype=np.float64)), _ranks(np.asarray(y, dtype=np.float64))
    rx, ry = rx - rx.mean(), ry - ry.mean()
    denom = float(np.sqrt((rx * rx).sum() * (ry * ry).sum()))
    return float((rx * ry).sum() / denom) if denom > 0 else float("nan")


def agreement(estimate: Graph, reference: Graph, k: int = 20) -> Agreement:
    """Agreement of ``estimate`` (e.g. ``edge_attribution``) with ``reference`` (e.g. ``edge_patch``) over the
    reference's edges, matched by (sender, receiver) labels (an edge the estimate lacks is an error naming it)."""
    if not isinstance(estimate, Graph) or not isinstance(reference, Graph):
        raise ArgumentTypeError("estimate, reference: expected two Graphs")
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ArgumentTypeError(f"k: expected a positive int, got {k!r}")
    weight = {(s, r): w for s, r, w in estimate.top(len(estimate.edges))}
    pairs = reference.top(len(reference.edges))
    missing = [(s, r) for s, r, _ in pairs if (s, r) not in weight]
    if missing:
        raise ArgumentError(f"estimate: has no edge {missing[0][0]!r} → {missing[0][1]!r} of the reference")
    x = np.array([weight[(s, r)] for s, r, _ in pairs])
    y = np.array([w for _, _, w in pairs])
    top_ref = {(s, r) for s, r, _ in pairs[:k]}
    shared = {(s, r) for s, r, _ in pairs}
    top_est = [(s, r) for s, r, _ in estimate.top(len(estimate.edges)) if (s, r) in shared][:k]
    overlap = len(top_ref & set(top_est)) / max(1, min(k, len(pairs)))
    return Agreement(spearman(x, y), spearman(np.abs(x), np.abs(y)), overlap, k, len(pairs))
