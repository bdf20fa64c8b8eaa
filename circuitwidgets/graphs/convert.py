"""An attribution graph's dense matrix as the shared :class:`~circuitwidgets.graphs.Graph` result, pruned.

Node kinds and columns (SPECS, :class:`~circuitwidgets.graphs.NodeTable`):
``feature`` (layer, position, feature index, activation), ``error`` (layer,
position), ``embedding`` (layer -1, position, token id), ``logit`` (layer
``n_layers``, the last position, token id, activation = its probability). A
node's ``influence`` is its influence on the logits in the unpruned graph;
``extra["cumulative_influence"]`` the cumulative share circuit-tracer's files
carry. Labels: ``L1 f123 @5``, ``L0 error @5``, ``emb 'the' @5``, ``logit 'cat' (1234)``.
"""

from __future__ import annotations

import numpy as np
import torch

from circuitwidgets._text import visible_token
from circuitwidgets.graphs.dense import DenseAttribution
from circuitwidgets.graphs.graph import EdgeTable, Graph, NodeTable
from circuitwidgets.graphs.influence import graph_scores, node_influence, prune_by_influence

#: What an edge weight means, in words (Graph.convention).
CONVENTION = (
    "direct effect in the local replacement model (transcoders in place of MLPs, attention patterns and norm "
    "scales frozen from the run): target change per source's whole write; feature targets are pre-activations "
    "minus the encoder bias, logit targets the logit minus the mean logit (biases aside); the first position is "
    "not a node (circuit-tracer 0.5)"
)


def node_rows(
    dense: DenseAttribution, prompt: list[str], logit_strs: list[str], scores: torch.Tensor | None = None
) -> NodeTable:
    """Every node of ``dense`` as a node table (influence and activation filled; ``scores``: the nodes' influence
    when already computed)."""
    L, P = dense.n_layers, dense.n_pos
    rows: list[tuple[str, int, int, int, str]] = []
    rows += [("feature", lyr, p, f, f"L{lyr} f{f} @{p}") for lyr, p, f in dense.features.tolist()]
    rows += [("error", lyr, p, -1, f"L{lyr} error @{p}") for lyr in range(L) for p in range(P)]
    rows += [("embedding", -1, p, t, f"emb {visible_token(prompt[p])!r} @{p}") for p, t in enumerate(dense.tokens)]
    labels = dense.extra.get("target_labels")
    if not isinstance(labels, list) or len(labels) != dense.n_logits:
        labels = [
            f"logit {visible_token(s)!r} ({t})" for t, s in zip(dense.logit_tokens.tolist(), logit_strs, strict=True)
        ]
    rows += [("logit", L, P - 1, t, str(lab)) for t, lab in zip(dense.logit_tokens.tolist(), labels, strict=True)]
    kind, layer, pos, index, label = (list(c) for c in zip(*rows, strict=True))
    activation = np.full(len(kind), np.nan)
    activation[: dense.n_features] = dense.activations.double().numpy()
    shown = dense.extra.get("target_probabilities")  # a logit difference or a direction has no probability: NaN
    activation[dense.logit_start :] = (
        np.asarray(shown, dtype=np.float64) if isinstance(shown, list) else dense.logit_probabilities.double().numpy()
    )
    influence = (node_influence(dense) if scores is None else scores).double().numpy()
    return NodeTable(
        [str(k) for k in kind], np.array(layer), np.array(pos), np.array(index), [str(x) for x in label],
        activation, influence,
    )  # fmt: skip


def _metric(dense: DenseAttribution, nodes: NodeTable) -> str:
    """What the logit node(s) measure, in words."""
    kind = dict(dense.extra.get("target") or {}).get("kind", "top")
    label = nodes.label[-1] if dense.n_logits else ""
    if kind == "pair":
        return f"logit difference: {label}"
    if kind == "direction":
        return f"direction at the unembedding's input: {label}"
    if kind == "token":
        return f"one logit (centred): {label}"
    return "logits (probability-weighted, centred)"


def to_graph(
    dense: DenseAttribution,
    logit_strs: list[str],
    node_threshold: float = 0.8,
    edge_threshold: float = 0.98,
) -> Graph:
    """``dense`` pruned as circuit-tracer prunes (thresholds of cumulative influence), as a :class:`Graph`.

    Scores are computed on the unpruned matrix (as circuit-tracer does). With both
    thresholds 1.0 every node with influence and every non-zero edge among them is kept.
    """
    scores = node_influence(dense)  # once, for the pruning, the node table and the scores
    kept = prune_by_influence(dense, node_threshold, edge_threshold, scores=scores)
    nodes = node_rows(dense, dense.prompt, logit_strs, scores)
    ids = torch.nonzero(kept.nodes)[:, 0].numpy()
    dst, src = torch.nonzero(kept.edges).T
    weight = dense.adjacency[dst, src]
    dst, src, weight = dst[weight != 0].numpy(), src[weight != 0].numpy(), weight[weight != 0]
    edges = EdgeTable(src, dst, weight.double().numpy())
    extra = {k: v for k, v in dense.extra.items() if k not in ("target_labels", "target_probabilities")}
    extra |= {
        "n_layers": dense.n_layers, "n_active_features": dense.n_active, "node_threshold": node_threshold,
        "edge_threshold": edge_threshold, "cumulative_influence": kept.cumulative.double().tolist(),
        "logit_strings": {str(t): s for t, s in zip(dense.logit_tokens.tolist(), logit_strs, strict=True)},
    }  # fmt: skip
    full = Graph(
        nodes, edges, graph_scores(dense, scores=scores), list(dense.prompt), list(dense.tokens), CONVENTION, "attribution",
        _metric(dense, nodes), extra,
    )  # fmt: skip
    sub = full.subgraph(ids)
    sub.extra["cumulative_influence"] = [extra["cumulative_influence"][i] for i in ids]
    return sub
