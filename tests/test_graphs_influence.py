"""Pruning and the replacement/completeness scores, recomputed from the full unpruned matrix by their definitions
(influence as ``w((I − A)⁻¹ − I)`` with a matrix inverse, not the engine's series); feature selection by influence."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from _graphs import mlp_model, random_transcoders

from circuitwidgets.errors import ArgumentError
from circuitwidgets.graphs.attribution import attribution_matrix
from circuitwidgets.graphs.dense import DenseAttribution
from circuitwidgets.graphs.influence import graph_scores, node_influence, prune_by_influence

TOKENS = torch.tensor([[0, 5, 7, 9, 5, 7, 3, 11, 4, 9]])


@pytest.fixture(scope="module")
def graph() -> DenseAttribution:
    model = mlp_model(seed=2)
    return attribution_matrix(model, random_transcoders(model, seed=4), TOKENS, max_feature_nodes=None, batch=32)


def _definitions(g: DenseAttribution) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    adj = g.adjacency.numpy()
    a = np.abs(adj)
    sums = a.sum(1, keepdims=True)
    normalised = np.divide(a, sums, out=np.zeros_like(a), where=sums > 0)
    w = np.zeros(len(adj))
    w[g.logit_start :] = g.logit_probabilities.numpy()
    total = w @ (np.linalg.inv(np.eye(len(adj)) - normalised) - np.eye(len(adj)))
    return normalised, w, total


def test_scores_are_their_definitions(graph: DenseAttribution) -> None:
    normalised, w, total = _definitions(graph)
    np.testing.assert_allclose(node_influence(graph).numpy(), total, rtol=1e-9, atol=1e-12)
    errors, tokens = slice(graph.error_start, graph.token_start), slice(graph.token_start, graph.logit_start)
    replacement = total[tokens].sum() / (total[tokens].sum() + total[errors].sum())
    out = total + w
    completeness = ((1 - normalised[:, errors].sum(1)) * out).sum() / out.sum()
    scores = graph_scores(graph)
    assert scores["replacement"] == pytest.approx(replacement, rel=1e-9)
    assert scores["completeness"] == pytest.approx(completeness, rel=1e-9)
    assert 0 < scores["replacement"] < 1 and 0 < scores["completeness"] < 1


def _keep_top(scores: np.ndarray, fraction: float) -> np.ndarray:
    order = np.argsort(-scores, kind="stable")
    cumulative = np.cumsum(scores[order]) / scores.sum()
    n = min(int(np.searchsorted(cumulative, fraction)), len(scores) - 1)
    return scores >= scores[order][n]


@pytest.mark.parametrize(("node_t", "edge_t"), [(0.8, 0.98), (0.5, 0.9), (1.0, 1.0)])
def test_pruning_is_its_definition(graph: DenseAttribution, node_t: float, edge_t: float) -> None:
    _, w, total = _definitions(graph)
    keep = _keep_top(total, node_t)
    keep[graph.token_start :] = True
    m = graph.adjacency.numpy() * keep[:, None] * keep[None, :]
    a = np.abs(m)
    sums = a.sum(1, keepdims=True)
    nm = np.divide(a, sums, out=np.zeros_like(a), where=sums > 0)
    inf = w @ (np.linalg.inv(np.eye(len(m)) - nm) - np.eye(len(m))) + w
    edge_scores = nm * inf[:, None]
    edges = _keep_top(edge_scores.ravel(), edge_t).reshape(edge_scores.shape)
    for _ in range(len(m)):  # drop nodes without an outgoing (features, errors) or incoming (features) edge
        edges &= keep[:, None] & keep[None, :]
        new = keep.copy()
        new[: graph.token_start] &= edges[:, : graph.token_start].any(0)
        new[: graph.n_features] &= edges[: graph.n_features].any(1)
        if (new == keep).all():
            break
        keep = new
    got = prune_by_influence(graph, node_t, edge_t)
    np.testing.assert_array_equal(got.nodes.numpy(), keep)
    np.testing.assert_array_equal(got.edges.numpy(), edges)
    assert 0 < keep[: graph.n_features].sum() <= graph.n_features
    if node_t < 1:
        assert keep[: graph.n_features].sum() < graph.n_features


def test_thresholds_outside_zero_one_are_refused(graph: DenseAttribution) -> None:
    for bad in (0, -0.1, 1.5, float("nan"), "0.8"):
        with pytest.raises(ArgumentError, match="node_threshold"):
            prune_by_influence(graph, node_threshold=bad)  # type: ignore[arg-type]
        with pytest.raises(ArgumentError, match="edge_threshold"):
            prune_by_influence(graph, edge_threshold=bad)  # type: ignore[arg-type]


def test_fewer_feature_nodes_keep_the_full_graphs_edges_among_them(graph: DenseAttribution) -> None:
    model = mlp_model(seed=2)
    small = attribution_matrix(model, random_transcoders(model, seed=4), TOKENS, max_feature_nodes=15, batch=4)
    assert small.n_features == 15 and graph.n_features > 15
    full_rows = {tuple(f): i for i, f in enumerate(graph.features.tolist())}
    feats = [full_rows[tuple(f)] for f in small.features.tolist()]
    index = torch.tensor(feats + list(range(graph.n_features, graph.adjacency.shape[0])))
    rows = torch.cat([torch.arange(small.n_features), torch.arange(small.logit_start, small.adjacency.shape[0])])
    torch.testing.assert_close(small.adjacency[rows], graph.adjacency[index[rows]][:, index])
    # chosen by influence: the selected features carry more of the full graph's influence than the rest, on average
    total = node_influence(graph)[: graph.n_features]
    chosen = torch.zeros(graph.n_features, dtype=torch.bool)
    chosen[feats] = True
    assert total[chosen].mean() > total[~chosen].mean()
