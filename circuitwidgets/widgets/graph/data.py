"""The trait values of an :class:`~circuitwidgets.AttributionGraph` view, from a :class:`~circuitwidgets.graphs.Graph`.

Edges are sent strongest first (by ``|weight|``), so a circuit of ``size`` edges
is the first ``size`` of them; the view drops the dangling ones as
:func:`~circuitwidgets.graphs.prune` does. Node labels and prompt tokens are
untrusted text: the view sets them as text, escaping invisible and bidi characters.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from circuitwidgets.errors import ArgumentError, ArgumentTypeError
from circuitwidgets.graphs import Curve, Graph, prune
from circuitwidgets.graphs.graph import live_edges
from circuitwidgets.widgets.graph.reading import (
    edge_order_and_shares,
    node_shares,
    refinements_line,
    scores_line,
    spine,
)

#: What an edge's sign means, per convention (negative, positive); the legend writes each after the sign words of
#: every view (js/src/lib/colour.ts SIGN_WORDS: red positive, blue negative; docs/style.md).
EAP_SIGNS = ("removing it lowers the metric", "removing it raises the metric")
ATTRIBUTION_SIGNS = ("the sender lowers the receiver (direct effect)", "the sender raises the receiver (direct effect)")
#: A scrubbed hypothesis's edges are the paths it keeps, each weighted by the share of the metric it recovers.
SCRUB_SIGNS = ("the hypothesis does worse than resampling", "a kept path (weight: the share of the metric recovered)")


def graph_view_data(graph: Graph, curve: Curve | None = None, size: int | None = None) -> dict[str, Any]:
    """Checked trait values for ``graph`` (and its faithfulness ``curve``), showing ``size`` edges (default: every
    edge of an attribution graph; else the curve's smallest circuit reaching 0.8 faithfulness, else 20)."""
    if not isinstance(graph, Graph):
        raise ArgumentTypeError(f"graph: expected a circuitwidgets.graphs.Graph, got {type(graph).__name__}")
    if curve is not None and not isinstance(curve, Curve):
        raise ArgumentTypeError(
            f"curve: expected a faithfulness Curve (graphs.faithfulness_curve) or None, got {type(curve).__name__}"
        )
    # pruned by influence where the graph carries its nodes' cumulative influence (built here, or read from
    # circuit-tracer's JSON); else by edge count, as component graphs are
    attribution = graph.method == "attribution" and isinstance(graph.extra.get("cumulative_influence"), list)
    order, shares = edge_order_and_shares(graph) if attribution else (graph.order(), np.zeros(len(graph.edges)))
    n_edges = len(order)
    if size is None:
        # (an attribution graph is already pruned by influence; its edge weights mix scales, feature inputs and
        # centred logits, so the strongest few by |weight| need not reach a logit: show them all)
        size = n_edges if graph.method == "attribution" else _default_size(curve, n_edges)
    if isinstance(size, bool) or not isinstance(size, int) or not 0 <= size <= n_edges:
        raise ArgumentError(f"size: expected an int in [0, {n_edges}] (edges kept), got {size!r}")
    nodes = graph.nodes
    heads = [int(i) for i, k in zip(nodes.index, nodes.kind, strict=True) if k.startswith("head")]
    layers = [int(x) for x in nodes.layer if x >= 0]
    exact = graph.method == "exact"
    scrub = graph.method == "causal scrubbing"
    signs = SCRUB_SIGNS if scrub else EAP_SIGNS if graph.convention.startswith("weight ") else ATTRIBUTION_SIGNS
    out: dict[str, Any] = {
        "node_kind": list(nodes.kind),
        "node_label": list(nodes.label),
        "node_layer": nodes.layer.astype(np.int32),
        "node_pos": nodes.pos.astype(np.int32),
        "node_index": nodes.index.astype(np.int32),
        "edge_src": graph.edges.src[order].astype(np.int32),
        "edge_dst": graph.edges.dst[order].astype(np.int32),
        "edge_weight": np.nan_to_num(graph.edges.weight[order]).astype(np.float32),
        "size": size,
        "prompt": list(graph.prompt),
        "model_n_layers": int(
            graph.extra.get("n_layers", max(layers, default=-1) + (0 if "logit" in nodes.kind else 1))
        ),
        "model_n_heads": int(graph.extra.get("n_heads", max(heads, default=-1) + 1)),
        "title": _title(graph.method, exact),
        "metric": graph.metric,
        "caption": "; ".join(x for x in (graph.convention, refinements_line(graph)) if x),
        "negative_note": signs[0],
        "positive_note": signs[1],
        "model_name": str(graph.extra.get("model", "")),
        "edge_share": shares.astype(np.float32),
        "node_share": node_shares(graph) if attribution else np.zeros(len(nodes), np.float32),
        "scores_line": scores_line(graph),
        # (the view opens at the graph's own thresholds: circuit-tracer's defaults unless it was built otherwise)
        "node_threshold": _threshold(graph, "node_threshold", 0.8),
        "edge_threshold": _threshold(graph, "edge_threshold", 0.98),
    }
    out.update(_curve_traits(curve))
    out.update(_strongest_head(graph, order[:size]))
    return out


def _title(method: str, exact: bool) -> str:
    if method == "attribution":
        return "Attribution graph"
    if method == "causal scrubbing":
        return "Hypothesis (causal scrubbing): the paths it keeps"
    return f"{'Exact edge patching' if exact else 'Edge attribution'} ({method})"


def _threshold(graph: Graph, name: str, default: float) -> float:
    value = graph.extra.get(name, default)
    return float(value) if isinstance(value, (int, float)) and 0 < value <= 1 else default


def _strongest_head(graph: Graph, rows: np.ndarray) -> dict[str, int]:
    """The selection a view starts on: the head with most ``|weight|`` on the shown edges (with its inputs'),
    so that linked views start on the same head."""
    nodes = graph.nodes
    load: dict[tuple[int, int], float] = {}
    for row in rows:
        for i in (int(graph.edges.src[row]), int(graph.edges.dst[row])):
            if nodes.kind[i].startswith("head"):
                key = (int(nodes.layer[i]), int(nodes.index[i]))
                load[key] = load.get(key, 0.0) + abs(float(graph.edges.weight[row]))
    if not load:
        return {"selected_layer": 0, "selected_head": 0 if "head" in nodes.kind else -1, "selected_node": -1}
    layer, head = max(load, key=lambda k: load[k])
    node = next(
        i for i, k in enumerate(nodes.kind) if k == "head" and nodes.layer[i] == layer and nodes.index[i] == head
    )
    return {"selected_layer": layer, "selected_head": head, "selected_node": node}


def _default_size(curve: Curve | None, n_edges: int) -> int:
    if curve is not None:
        for taken, value in zip(curve.sizes, curve.values, strict=True):
            if value >= 0.8:
                return min(int(taken), n_edges)
    return min(20, n_edges)


def _curve_traits(curve: Curve | None) -> dict[str, Any]:
    if curve is None:
        return {"curve_edges": [], "curve_values": [], "curve_note": ""}
    note = (
        f"faithfulness over circuit sizes ({curve.ablation} ablation): CPR {curve.cpr:.3f} (area under the curve), "
        f"CMD {curve.cmd:.3f} (area between it and 1), over MIB's fractions of edges"
    )
    return {
        "curve_edges": [int(e) for e in curve.sizes],
        "curve_values": [float(v) for v in curve.values],
        "curve_note": note,
    }


def pruned(graph: Graph, size: int, node_threshold: float = 1.0, edge_threshold: float = 1.0) -> Graph:
    """The circuit the view shows at ``size``: the ``size`` strongest edges, without dangling ones.

    An attribution graph is pruned by influence as its view is: nodes within ``node_threshold`` of the cumulative
    influence (tokens and logits always), edges within ``edge_threshold`` of the edges' (strongest first, at most
    ``size``), then only edges on a path from a token or error to a logit, and always each logit's strongest path
    back to a token or error (:func:`~circuitwidgets.widgets.graph.reading.spine`)."""
    if graph.method != "attribution" or not isinstance(graph.extra.get("cumulative_influence"), list):
        return prune(graph, edges=size)
    order, shares = edge_order_and_shares(graph)
    keep_node = node_shares(graph) < node_threshold
    rows = order[: min(size, int(np.searchsorted(shares, edge_threshold, side="left")))]
    rows = rows[keep_node[graph.edges.src[rows]] & keep_node[graph.edges.dst[rows]]]
    rows = np.sort(rows)
    rows = np.union1d(rows[live_edges(graph, rows)], spine(graph, order))  # (never without a path to a logit)
    return graph.with_edges(rows)
