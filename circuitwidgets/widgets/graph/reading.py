"""What makes an attribution graph readable in its view: influence shares to prune by, a label per feature, the
scores.

- Pruning, as circuit-tracer's front end does, by cumulative influence: a node's share is the cumulative
  influence of the nodes before it (``extra["cumulative_influence"]``, nodes taken in order of influence on the
  logits); an edge's the cumulative share of the scores ``|w| / Σ|w into its target| × (influence of its target +
  its logit weight)`` of the edges before it (strongest first), scaled so that the graph's own edges hold its
  ``edge_threshold``. A threshold ``t`` keeps what starts below it (so the node or edge that crosses ``t`` stays,
  as circuit-tracer's cut does, and the graph as built shows whole at its own thresholds); never raw edge size.
- Labels (circuit-tracer's ``clerp``): ``extra["clerps"]`` ``{node label: text}`` when the graph has them, else
  an automatic one: the tokens a feature's decoder raises most through the unembedding (with a model and its
  transcoders), else its dashboard's top activating token, else ``L1 f123``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from circuitwidgets._text import visible_token
from circuitwidgets.graphs import Graph

__all__ = ["auto_labels", "edge_order_and_shares", "node_shares", "scores_line", "spine"]

#: Longest label, in characters (a label is text: the view never reads it as markup).
MAX_CLERP = 120


def node_shares(graph: Graph) -> np.ndarray:
    """float32 ``[n_nodes]``: the cumulative share of influence before each node (0 for tokens and logits: kept)."""
    n = len(graph.nodes)
    raw = graph.extra.get("cumulative_influence")
    out = np.zeros(n, np.float32)
    if isinstance(raw, list) and len(raw) == n:
        cum = np.nan_to_num(np.asarray(raw, np.float64), nan=1.0)
        ladder = np.unique(cum)  # the share before a node: the next smaller cumulative share (0 for the first)
        before = np.concatenate([[0.0], ladder])[np.searchsorted(ladder, cum)]
        out[:] = before
    kinds = graph.nodes.kind
    out[[i for i, k in enumerate(kinds) if k in ("embedding", "logit")]] = 0.0
    return out


def edge_order_and_shares(graph: Graph) -> tuple[np.ndarray, np.ndarray]:
    """Edge rows strongest first by influence score, and the cumulative share of the edges before each (float32)."""
    e = graph.edges
    n = len(graph.nodes)
    if not len(e):
        return np.zeros(0, np.int64), np.zeros(0, np.float32)
    w = np.abs(np.nan_to_num(e.weight))
    into = np.zeros(n)
    np.add.at(into, e.dst, w)
    influence = np.nan_to_num(graph.nodes.influence)
    logit_w = np.where(np.asarray(graph.nodes.kind) == "logit", np.nan_to_num(graph.nodes.activation, nan=1.0), 0.0)
    score = w / np.maximum(into[e.dst], 1e-30) * (influence[e.dst] + logit_w[e.dst])
    order = np.argsort(-score, kind="stable")
    total = float(score.sum())
    cum = np.cumsum(score[order]) / total if total > 0 else np.linspace(0, 1, len(order))
    held = graph.extra.get("edge_threshold", 1.0)
    held = float(held) if isinstance(held, (int, float)) and 0 < held <= 1 else 1.0
    shares = np.concatenate([[0.0], cum[:-1]]) * held
    return order, shares.astype(np.float32)


def spine(graph: Graph, order: np.ndarray) -> np.ndarray:
    """Edge rows that keep every logit reachable at any threshold: from each logit back along its strongest
    incoming edge (first in ``order``, the influence order), then that edge's source's, until a token or error."""
    rank = np.empty(len(order), np.int64)
    rank[order] = np.arange(len(order))
    e = graph.edges
    best: dict[int, int] = {}
    for row in order[::-1]:  # weakest first, so the strongest incoming edge of each node is written last
        best[int(e.dst[row])] = int(row)
    out: list[int] = []
    kinds = graph.nodes.kind
    for start in (i for i, k in enumerate(kinds) if k == "logit"):
        node, seen = start, set()
        while node in best and node not in seen and kinds[node] not in ("embedding", "error"):
            seen.add(node)
            out.append(best[node])
            node = int(e.src[best[node]])
    return np.unique(np.asarray(out, np.int64))


def _decoder_tokens(model: Any, transcoders: Sequence[Any], layer: int, feature: int, k: int = 2) -> list[str]:
    tc = transcoders[layer]
    with torch.no_grad():
        row = tc.W_dec[feature].to(model.W_U.dtype) @ model.W_U
    return [model.tokenizer.token_str(int(t)) for t in torch.topk(row, k).indices.tolist()]


def auto_labels(
    graph: Graph, dashboards: Mapping[int, Any] | None = None, model: Any = None, transcoders: Any = None
) -> list[str]:
    """A short label per node (plain text): a feature's saved ``clerp``, else its top output tokens (``model``
    and ``transcoders``) or its dashboard's top activating token, else ``L1 f123``; other nodes: ``""``."""
    raw = graph.extra.get("clerps")
    saved: dict[str, Any] = raw if isinstance(raw, dict) else {}
    nodes = graph.nodes
    tcs: list[Any] | None = None
    if model is not None and transcoders is not None:
        from circuitwidgets.features.transcoders import check_transcoders

        tcs = check_transcoders(model, transcoders)
    out = []
    for i, kind in enumerate(nodes.kind):
        if kind != "feature":
            out.append("")
            continue
        label, layer, index = nodes.label[i], int(nodes.layer[i]), int(nodes.index[i])
        text = saved.get(label)
        if isinstance(text, str):
            out.append(text[:MAX_CLERP])
            continue
        if tcs is not None:
            words = _decoder_tokens(model, tcs, layer, index)
            out.append("→ " + " ".join(repr(visible_token(w)) for w in words))
            continue
        board = (dashboards or {}).get(layer)
        if board is not None and 0 <= index < board.n_units and board.n_top and not np.isnan(board.ex_value[index, 0]):
            t = int(board.ctx_tokens[index, 0, board.centre])
            if t < len(board.vocab):
                out.append(f"on {visible_token(board.vocab[t])!r}")
                continue
        out.append(f"L{layer} f{index}")
    return out


def scores_line(graph: Graph) -> str:
    """``Replacement 0.62 · Completeness 0.85`` (attribution graphs), else ``""``."""
    s = graph.scores
    if "replacement" not in s or "completeness" not in s:
        return ""
    return f"Replacement {s['replacement']:.2f} · Completeness {s['completeness']:.2f}"


def refinements_line(graph: Graph) -> str:
    """A scrubbed hypothesis's refinements with the share of the metric each recovers
    (``recovered: all paths 100.0 % → induction 92.4 % [91.8, 92.9]``), else ``""``."""
    refinements = graph.extra.get("refinements") if graph.method == "causal scrubbing" else None
    if not isinstance(refinements, list) or not refinements:
        return ""
    return "recovered: " + " → ".join(_refinement(r) for r in refinements if isinstance(r, dict))


def _refinement(r: dict[str, object]) -> str:
    """``name 92.4 % [91.8, 92.9]``: one refinement of a scrubbed hypothesis (its interval where it has one)."""
    recovered, interval = r.get("recovered"), r.get("interval")
    text = f"{r.get('hypothesis', '?')} {100 * float(recovered):.1f} %" if isinstance(recovered, float) else "?"
    if isinstance(interval, list) and len(interval) == 2:
        low, high = f"{100 * float(interval[0]):.1f}", f"{100 * float(interval[1]):.1f}"
        text += f" [{low}, {high}]" if low != high else ""  # (the full hypothesis: no spread to show)
    return text
