"""Influence, pruning and the replacement and completeness scores of an attribution graph (circuit-tracer's definitions).

With ``A`` the adjacency (rows: targets) with each row's absolute values
normalised to sum to 1, a node's influence is how much of the logits'
probability-weighted attribution flows through it over paths of every length:
``w (A + A² + …)`` with ``w`` the logit probabilities.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from circuitwidgets.errors import ArgumentError
from circuitwidgets.graphs.dense import DenseAttribution


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


def _apply(
    matrix: torch.Tensor, weights: torch.Tensor, ends: torch.Tensor | None = None, block: int = 512
) -> torch.Tensor:
    """``weights @ |matrix|`` a block of rows at a time (no absolute copy of ``matrix``), over the rows of non-zero
    weight only, and with ``ends`` ``[rows]`` (each row's columns from its end on are zero) over those ends only."""
    out = torch.zeros(matrix.shape[1], dtype=matrix.dtype)
    live = weights != 0 if ends is None else (weights != 0) & (ends > 0)
    index = torch.nonzero(live)[:, 0]
    if ends is not None:  # rows of similar extent together
        index = index[torch.argsort(ends[index], stable=True)]
    for part in torch.split(index, block) if len(index) else ():
        end = matrix.shape[1] if ends is None else int(ends[part].max())
        out[:end] += weights[part] @ matrix[part, :end].abs_()
    return out


def _series(matrix: torch.Tensor, weights: torch.Tensor, max_iter: int = 1000) -> torch.Tensor:
    """:func:`influence` of ``normalise_rows(matrix)``, without holding the normalised copy."""
    scale = 1 / torch.linalg.vector_norm(matrix, ord=1, dim=1).clamp(min=1e-10)
    current = _apply(matrix, weights * scale)
    total = current.clone()
    for _ in range(max_iter):
        if not bool(current.any()):
            return total
        current = _apply(matrix, current * scale)
        total += current
    raise RuntimeError(f"influence: the series did not end after {max_iter} steps; the graph has a cycle")


def partial_influences(
    rows: torch.Tensor, row_sums: torch.Tensor, logit_p: torch.Tensor, row_node: torch.Tensor, row_ends: torch.Tensor
) -> torch.Tensor:
    """Influence over the features ``[n_features]`` from the rows computed so far.

    ``rows`` ``[r, n_features]`` are the computed rows' feature columns (``rows[i]``
    is node ``row_node[i]``'s; the logits' rows come first, the logits are the
    last nodes), ``row_sums`` their absolute sums over all columns, ``row_ends`` where
    each one's non-zero feature columns end. Used to choose
    which features to compute next: each step adds the rows of the most influential
    features so far.
    """
    n = rows.shape[1]
    scale = 1 / row_sums.clamp(min=1e-8)  # circuit-tracer's floor here
    current = torch.zeros(int(row_node.max()) + 1, dtype=rows.dtype)
    current[-len(logit_p) :] = logit_p
    total = torch.zeros(n, dtype=rows.dtype)
    for _ in range(1000):
        step = _apply(rows, current[row_node] * scale, row_ends)
        if not bool(step.any()):
            return total
        total += step
        current = torch.zeros_like(current)
        current[:n] = step
    raise RuntimeError("influence: the series did not end after 1000 steps; the graph has a cycle")


def check_threshold(name: str, value: object) -> float:
    """A cumulative-influence threshold in (0, 1] (typed error naming ``name`` otherwise)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
        raise ArgumentError(f"{name}: expected a fraction of influence in (0, 1], got {value!r}")
    return float(value)


def node_influence(graph: DenseAttribution) -> torch.Tensor:
    """Each node's influence on the logits ``[n]`` (module docstring)."""
    return _series(graph.adjacency, graph.logit_weights())


def _cut(scores: torch.Tensor, fraction: float, n_total: int | None = None) -> torch.Tensor:
    """The smallest score kept when keeping the largest scores that hold ``fraction`` of their total.

    ``scores`` are non-negative; with ``n_total`` they are the non-zero ones of that many (the zeros are not
    sorted: the cut is the same, a zero only where the cumulative share never reaches ``fraction``)."""
    n_total = len(scores) if n_total is None else n_total
    ordered = torch.sort(scores, descending=True).values
    if len(ordered) == 0:
        return scores.new_zeros(())
    cumulative = torch.cumsum(ordered, dim=0) / ordered.sum()
    index = int(torch.searchsorted(cumulative, torch.tensor(fraction, dtype=cumulative.dtype)))
    if index >= len(ordered):
        return scores.new_zeros(()) if n_total > len(ordered) else ordered[-1]
    return ordered[index]


@dataclass
class Pruned:
    """Which nodes and edges survive pruning: ``nodes [n]``, ``edges [n, n]`` (rows targets) boolean masks, and
    ``cumulative [n]``: each node's cumulative share of influence when nodes are taken in order of influence."""

    nodes: torch.Tensor
    edges: torch.Tensor
    cumulative: torch.Tensor


def prune_by_influence(
    graph: DenseAttribution,
    node_threshold: float = 0.8,
    edge_threshold: float = 0.98,
    *,
    scores: torch.Tensor | None = None,
) -> Pruned:
    """circuit-tracer's pruning: keep the nodes holding ``node_threshold`` of the influence (tokens and logits
    always), then the edges holding ``edge_threshold`` of the edge influence among them, then drop features and
    errors left without an outgoing edge, and features without an incoming one, until nothing changes.

    ``scores``: :func:`node_influence` of ``graph`` when already computed. The edge
    step runs on the kept nodes' block of the adjacency (the other rows and columns
    are zero there), so it costs the kept nodes², not all nodes².
    """
    node_threshold = check_threshold("node_threshold", node_threshold)
    edge_threshold = check_threshold("edge_threshold", edge_threshold)
    weights = graph.logit_weights()
    scores = node_influence(graph) if scores is None else scores
    keep = scores >= _cut(scores, node_threshold)
    keep[graph.token_start :] = True
    idx = torch.nonzero(keep)[:, 0]
    normalised = normalise_rows(graph.adjacency[idx][:, idx])
    edge_scores = normalised * (influence(normalised, weights[idx]) + weights[idx])[:, None]
    positive = edge_scores[edge_scores > 0]
    block = edge_scores >= _cut(positive, edge_threshold, len(scores) ** 2)
    alive = torch.ones(len(idx), dtype=torch.bool)
    inner, feature = idx < graph.token_start, idx < graph.n_features
    while True:
        before = alive.clone()
        block[~alive] = False
        block[:, ~alive] = False
        alive[inner] &= block[:, inner].any(0)
        alive[feature] &= block[feature].any(1)
        if bool((alive == before).all()):
            break
    keep[:] = False
    keep[idx[alive]] = True
    edges = torch.zeros(len(scores), len(scores), dtype=torch.bool)
    edges[idx[:, None], idx[None, :]] = block
    order = torch.sort(scores, descending=True)
    cumulative = torch.zeros_like(scores)
    cumulative[order.indices] = torch.cumsum(order.values, dim=0) / order.values.sum()
    return Pruned(keep, edges, cumulative)


def graph_scores(graph: DenseAttribution, *, scores: torch.Tensor | None = None) -> dict[str, float]:
    """circuit-tracer's two scores of how much of the logits the features explain, from the unpruned graph.

    ``replacement``: of the influence that starts at tokens or errors, the share
    that starts at tokens (paths into the logits through features only);
    ``completeness``: each node's share of incoming (normalised) attribution not
    from error nodes, averaged with weights influence + logit probability.
    ``scores``: :func:`node_influence` of ``graph`` when already computed.
    """
    weights = graph.logit_weights()
    adjacency = graph.adjacency
    scores = node_influence(graph) if scores is None else scores
    errors = slice(graph.error_start, graph.token_start)
    tokens = slice(graph.token_start, graph.logit_start)
    from_tokens, from_errors = scores[tokens].sum(), scores[errors].sum()
    replacement = from_tokens / (from_tokens + from_errors)
    row_sums = torch.linalg.vector_norm(adjacency, ord=1, dim=1).clamp(min=1e-10)
    non_error = 1 - torch.linalg.vector_norm(adjacency[:, errors], ord=1, dim=1) / row_sums
    output = scores + weights
    completeness = (non_error * output).sum() / output.sum()
    return {"replacement": float(replacement), "completeness": float(completeness)}
