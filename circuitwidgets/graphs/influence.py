"""Influence, pruning and the replacement and completeness scores of an attribution graph (circuit-tracer's definitions).

With ``A`` the adjacency (rows: targets) with each row's absolute values
normalised to sum to 1, a node's influence is how much of the logits'
probability-weighted attribution flows through it over paths of every length:
``w (A + A² + …)`` with ``w`` the logit probabilities.
"""

from __future__ import annotations

import torch


def normalise_rows(matrix: torch.Tensor) -> torch.Tensor:
    """``|matrix|`` with each row divided by its sum (rows of zeros stay zero)."""
    out = matrix.abs()
    return out / out.sum(dim=1, keepdim=True).clamp(min=1e-10)


def influence(normalised: torch.Tensor, weights: torch.Tensor, max_iter: int = 1000) -> torch.Tensor:
    """``weights (A + A² + …)`` for an acyclic ``A`` (the series ends after the graph's depth)."""
    current = weights @ normalised
    total = current.clone()
    for _ in range(max_iter):
        if not bool(current.any()):
            return total
        current = current @ normalised
        total += current
    raise RuntimeError(f"influence: the series did not end after {max_iter} steps; the graph has a cycle")


def partial_influences(rows: torch.Tensor, logit_p: torch.Tensor, row_node: torch.Tensor) -> torch.Tensor:
    """Influence over all nodes ``[n_nodes]`` from the rows computed so far (``rows[i]`` is node ``row_node[i]``'s).

    Used to choose which features to compute next: the logits' rows are first,
    then each step adds the rows of the most influential features so far.
    """
    normalised = normalise_rows(rows)
    total = torch.zeros(rows.shape[1], dtype=rows.dtype)
    current = torch.zeros(rows.shape[1], dtype=rows.dtype)
    current[-len(logit_p) :] = logit_p
    for _ in range(1000):
        current = current[row_node] @ normalised
        if not bool(current.any()):
            return total
        total += current
    raise RuntimeError("influence: the series did not end after 1000 steps; the graph has a cycle")
