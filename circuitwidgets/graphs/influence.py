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


def partial_influences(
    rows: torch.Tensor, row_sums: torch.Tensor, logit_p: torch.Tensor, row_node: torch.Tensor, block: int = 512
) -> torch.Tensor:
    """Influence over the features ``[n_features]`` from the rows computed so far.

    ``rows`` ``[r, n_features]`` are the computed rows' feature columns (``rows[i]``
    is node ``row_node[i]``'s; the logits' rows come first, the logits are the
    last nodes), ``row_sums`` their absolute sums over all columns. Used to choose
    which features to compute next: each step adds the rows of the most influential
    features so far. Each power of the normalised matrix is applied a block of rows
    at a time, so no normalised copy of the rows is held.
    """
    n = rows.shape[1]
    scale = 1 / row_sums.clamp(min=1e-8)  # circuit-tracer's floor here
    n_logits = len(logit_p)
    n_nodes = int(row_node.max()) + 1
    total = torch.zeros(n, dtype=rows.dtype)
    current = torch.zeros(n_nodes, dtype=rows.dtype)
    current[-n_logits:] = logit_p
    for _ in range(1000):
        weights = current[row_node] * scale
        step = torch.zeros(n, dtype=rows.dtype)
        for c in range(0, len(rows), block):
            w = weights[c : c + block]
            if bool(w.any()):
                step += w @ rows[c : c + block].abs()
        if not bool(step.any()):
            return total
        total += step
        current = torch.zeros(n_nodes, dtype=rows.dtype)
        current[:n] = step
    raise RuntimeError("influence: the series did not end after 1000 steps; the graph has a cycle")


def check_threshold(name: str, value: object) -> float:
    """A cumulative-influence threshold in (0, 1] (typed error naming ``name`` otherwise)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
        raise ArgumentError(f"{name}: expected a fraction of influence in (0, 1], got {value!r}")
    return float(value)


def node_influence(graph: DenseAttribution) -> torch.Tensor:
    """Each node's influence on the logits ``[n]`` (module docstring)."""
    return influence(normalise_rows(graph.adjacency), graph.logit_weights())


def _cut(scores: torch.Tensor, fraction: float) -> torch.Tensor:
    """The smallest score kept when keeping the largest scores that hold ``fraction`` of their total."""
    ordered = torch.sort(scores, descending=True).values
    cumulative = torch.cumsum(ordered, dim=0) / ordered.sum()
    index = min(int(torch.searchsorted(cumulative, torch.tensor(fraction, dtype=cumulative.dtype))), len(ordered) - 1)
    return ordered[index]


@dataclass
class Pruned:
    """Which nodes and edges survive pruning: ``nodes [n]``, ``edges [n, n]`` (rows targets) boolean masks, and
    ``cumulative [n]``: each node's cumulative share of influence when nodes are taken in order of influence."""

    nodes: torch.Tensor
    edges: torch.Tensor
    cumulative: torch.Tensor


def prune_by_influence(graph: DenseAttribution, node_threshold: float = 0.8, edge_threshold: float = 0.98) -> Pruned:
    """circuit-tracer's pruning: keep the nodes holding ``node_threshold`` of the influence (tokens and logits
    always), then the edges holding ``edge_threshold`` of the edge influence among them, then drop features and
    errors left without an outgoing edge, and features without an incoming one, until nothing changes."""
    node_threshold = check_threshold("node_threshold", node_threshold)
    edge_threshold = check_threshold("edge_threshold", edge_threshold)
    weights = graph.logit_weights()
    scores = node_influence(graph)
    keep = scores >= _cut(scores, node_threshold)
    keep[graph.token_start :] = True
    matrix = graph.adjacency.clone()
    matrix[~keep] = 0
    matrix[:, ~keep] = 0
    normalised = normalise_rows(matrix)
    edge_scores = normalised * (influence(normalised, weights) + weights)[:, None]
    edges = edge_scores >= _cut(edge_scores.flatten(), edge_threshold)
    inner, n_feat = graph.token_start, graph.n_features
    while True:
        before = keep.clone()
        edges[~keep] = False
        edges[:, ~keep] = False
        keep[:inner] &= edges[:, :inner].any(0)
        keep[:n_feat] &= edges[:n_feat].any(1)
        if bool((keep == before).all()):
            break
    order = torch.sort(scores, descending=True)
    cumulative = torch.zeros_like(scores)
    cumulative[order.indices] = torch.cumsum(order.values, dim=0) / order.values.sum()
    return Pruned(keep, edges, cumulative)


def graph_scores(graph: DenseAttribution) -> dict[str, float]:
    """circuit-tracer's two scores of how much of the logits the features explain, from the unpruned graph.

    ``replacement``: of the influence that starts at tokens or errors, the share
    that starts at tokens (paths into the logits through features only);
    ``completeness``: each node's share of incoming (normalised) attribution not
    from error nodes, averaged with weights influence + logit probability.
    """
    weights = graph.logit_weights()
    normalised = normalise_rows(graph.adjacency)
    scores = influence(normalised, weights)
    errors = slice(graph.error_start, graph.token_start)
    tokens = slice(graph.token_start, graph.logit_start)
    from_tokens, from_errors = scores[tokens].sum(), scores[errors].sum()
    replacement = from_tokens / (from_tokens + from_errors)
    non_error = 1 - normalised[:, errors].sum(dim=-1)
    output = scores + weights
    completeness = (non_error * output).sum() / output.sum()
    return {"replacement": float(replacement), "completeness": float(completeness)}
