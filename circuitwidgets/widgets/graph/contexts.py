"""Top contexts of an attribution graph's feature nodes, compactly, for the view's hover card.

They come from the feature dashboards of the graph's dictionaries (one
:class:`~circuitwidgets.FeatureDashboard` per layer, made from
``features.max_activating``), but only for the features that are nodes of the
graph and only their first few examples: token windows as indices into one
small vocabulary (uint16 where it fits) and the activation at each window's
centre token. A node with no dashboard, or a feature with fewer examples, has
``NaN`` values there and draws nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from circuitwidgets.errors import ArgumentError, ArgumentTypeError
from circuitwidgets.graphs import Graph
from circuitwidgets.widgets.features.widget import FeatureDashboard

__all__ = ["by_layer", "context_traits", "empty_contexts"]


def by_layer(dashboards: object, n_layers: int) -> dict[int, FeatureDashboard]:
    """``{layer: dashboard}`` from a mapping or a sequence indexed by layer (``None`` entries skipped)."""
    if dashboards is None:
        return {}
    if isinstance(dashboards, Mapping):
        items = list(dashboards.items())
    elif isinstance(dashboards, Sequence) and not isinstance(dashboards, str):
        items = list(enumerate(dashboards))
    else:
        raise ArgumentTypeError(
            f"dashboards: expected {{layer: FeatureDashboard}} or a list by layer, got {type(dashboards).__name__}"
        )
    out = {}
    for layer, dashboard in items:
        if dashboard is None:
            continue
        if isinstance(layer, bool) or not isinstance(layer, int) or not 0 <= layer < n_layers:
            raise ArgumentError(f"dashboards: expected layers in 0..{n_layers - 1}, got {layer!r}")
        if not isinstance(dashboard, FeatureDashboard):
            raise ArgumentTypeError(
                f"dashboards[{layer}]: expected a FeatureDashboard of that layer's features, got {type(dashboard).__name__}"
            )
        if dashboard.kind != "feature":
            raise ArgumentError(f"dashboards[{layer}]: expected a dashboard of features, got one of {dashboard.kind}s")
        out[layer] = dashboard
    return out


def empty_contexts() -> dict[str, Any]:
    """The context traits of a view with no dashboards."""
    return {
        "ctx_vocab": [],
        "ctx_tokens": np.zeros((0, 0, 0), np.uint16),
        "ctx_value": np.zeros((0, 0), np.float32),
        "ctx_centre": 0,
    }


def context_traits(graph: Graph, dashboards: Mapping[int, FeatureDashboard], n_contexts: int) -> dict[str, Any]:
    """``ctx_tokens [n_nodes, n_contexts, width]`` (indices into ``ctx_vocab``; ``len(ctx_vocab)`` is no token),
    ``ctx_value [n_nodes, n_contexts]`` (NaN: none) and ``ctx_centre`` (the window's own token)."""
    if isinstance(n_contexts, bool) or not isinstance(n_contexts, int) or n_contexts < 1:
        raise ArgumentError(f"n_contexts: expected an int >= 1, got {n_contexts!r}")
    if not dashboards:
        return empty_contexts()
    widths = {int(d.ctx_tokens.shape[2]) for d in dashboards.values()}
    centres = {int(d.centre) for d in dashboards.values()}
    if len(widths) > 1 or len(centres) > 1:
        raise ArgumentError(f"dashboards: expected windows of one width and centre, got widths {sorted(widths)}")
    width, centre = widths.pop(), centres.pop()
    k = min(n_contexts, max(int(d.n_top) for d in dashboards.values()))
    nodes = graph.nodes
    words: dict[str, int] = {}
    rows = np.full((len(nodes), k, width), -1, np.int64)
    values = np.full((len(nodes), k), np.nan, np.float32)
    for i, kind in enumerate(nodes.kind):
        dashboard = dashboards.get(int(nodes.layer[i])) if kind == "feature" else None
        unit = int(nodes.index[i])
        if dashboard is None or not 0 <= unit < dashboard.n_units:
            continue
        vocab = dashboard.vocab
        for slot in range(min(k, int(dashboard.n_top))):
            value = float(dashboard.ex_value[unit, slot])
            if np.isnan(value):
                break
            values[i, slot] = value
            for j, t in enumerate(dashboard.ctx_tokens[unit, slot]):
                if int(t) < len(vocab):
                    rows[i, slot, j] = words.setdefault(vocab[int(t)], len(words))
    pad = len(words)
    wire = np.uint16 if pad < 2**16 - 1 else np.uint32
    return {
        "ctx_vocab": list(words),
        "ctx_tokens": np.where(rows >= 0, rows, pad).astype(wire),
        "ctx_value": values,
        "ctx_centre": centre,
    }
