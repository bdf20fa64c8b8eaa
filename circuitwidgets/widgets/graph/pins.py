"""Pinned nodes and supernodes of an :class:`~circuitwidgets.AttributionGraph`: checked traits and the subgraph.

A user pins nodes (rows of the graph's node table) into a subgraph and groups
some of them into **supernodes** under a label of their own (circuit-tracer's
front end and Neuronpedia's graph pages do the same). Both are traits the view
and a cell can set, saved with the widget's state, so they survive an export.
A supernode is ``{"label": str, "nodes": [row, ...]}``; its label is
user-supplied text: the view shows it as text, escaped like token strings.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import traitlets

from circuitwidgets.errors import ArgumentError
from circuitwidgets.graphs import Graph
from circuitwidgets.widgets.core.spec import shown, trait_error
from circuitwidgets.widgets.core.traits import Checked, Integer

__all__ = ["MAX_LABEL", "NodeRows", "Supernodes", "pinned_subgraph", "pins_of", "resolve_nodes"]

#: Longest supernode label, in characters.
MAX_LABEL = 120


class NodeRows(Checked, traitlets.List):  # type: ignore[type-arg]
    """Distinct node rows, each in ``0..n_nodes - 1`` (the pinned nodes)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(Integer(), default_value=[], **kwargs)

    def check(self, obj: Any, view: Any, value: Any) -> list[int]:
        n = int(view.n_nodes)
        rows = [int(v) for v in value]
        bad = [r for r in rows if not 0 <= r < n]
        if bad:
            raise trait_error(obj, self.name, f"node rows in 0..{n - 1}", str(bad[0]))
        if len(set(rows)) != len(rows):
            raise trait_error(obj, self.name, "distinct node rows", shown(rows))
        return rows


class Supernodes(Checked, traitlets.List):  # type: ignore[type-arg]
    """Groups ``{"label": str, "nodes": [row, ...]}``: a non-empty label of at most :data:`MAX_LABEL`
    characters, at least one node, no node in two groups."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(traitlets.Dict(), default_value=[], **kwargs)

    def check(self, obj: Any, view: Any, value: Any) -> list[dict[str, Any]]:
        n = int(view.n_nodes)
        seen: set[int] = set()
        out = []
        for k, group in enumerate(value):
            where = f"{self.name}[{k}]"
            label, nodes = group.get("label"), group.get("nodes")
            if set(group) != {"label", "nodes"}:
                raise trait_error(obj, where, "a dict with keys 'label' and 'nodes'", shown(sorted(group)))
            if not isinstance(label, str) or not 0 < len(label) <= MAX_LABEL:
                raise trait_error(obj, where, f"a label of 1..{MAX_LABEL} characters", shown(label))
            if not isinstance(nodes, list) or not nodes:
                raise trait_error(obj, where, "a non-empty list of node rows", shown(nodes))
            rows = []
            for r in nodes:
                if isinstance(r, bool) or not isinstance(r, int) or not 0 <= r < n:
                    raise trait_error(obj, where, f"node rows in 0..{n - 1}", shown(r))
                if r in seen:
                    raise trait_error(obj, where, "each node in at most one supernode", f"node {r} twice")
                seen.add(r)
                rows.append(int(r))
            out.append({"label": label, "nodes": rows})
        return out


def resolve_nodes(graph_labels: Sequence[str], nodes: Sequence[int | str], argument: str) -> list[int]:
    """Node rows of ``nodes`` (rows, or labels such as ``"L1 f123 @5"``), typed errors naming ``argument``."""
    index = {label: i for i, label in enumerate(graph_labels)}
    rows = []
    for k, node in enumerate(nodes):
        if isinstance(node, str):
            if node not in index:
                raise ArgumentError(f"{argument}[{k}]: no node called {node!r} (e.g. {list(graph_labels[:3])!r})")
            rows.append(index[node])
        elif isinstance(node, (int, np.integer)) and not isinstance(node, bool) and 0 <= node < len(graph_labels):
            rows.append(int(node))
        else:
            raise ArgumentError(
                f"{argument}[{k}]: expected a node row in 0..{len(graph_labels) - 1} or a label, got {node!r:.80}"
            )
    return rows


def pinned_subgraph(graph: Graph, pinned: Sequence[int], supernodes: Sequence[dict[str, Any]]) -> Graph:
    """The pinned nodes and the grouped ones, with every edge of ``graph`` between them.

    ``extra["pinned"]`` lists the pinned nodes' labels and ``extra["supernodes"]``
    the groups as ``{"label": ..., "nodes": [node labels]}``, so both survive
    :meth:`~circuitwidgets.graphs.Graph.save` and circuit-tracer's JSON.
    """
    grouped = [r for group in supernodes for r in group["nodes"]]
    rows = sorted(set(pinned) | set(grouped))
    sub = graph.subgraph(rows)
    labels = graph.nodes.label
    sub.extra["pinned"] = [labels[r] for r in pinned]
    sub.extra["supernodes"] = [{"label": g["label"], "nodes": [labels[r] for r in g["nodes"]]} for g in supernodes]
    return sub


def pins_of(graph: Graph) -> dict[str, Any]:
    """The ``pinned`` and ``supernodes`` trait values a graph carries in ``extra`` (a saved subgraph, a
    circuit-tracer file's ``qParams``): labels resolved to rows, unknown ones and repeats left out."""
    row = {label: i for i, label in enumerate(graph.nodes.label)}
    pinned = list(dict.fromkeys(row[x] for x in graph.extra.get("pinned", []) if isinstance(x, str) and x in row))
    seen: set[int] = set()
    groups = []
    for g in graph.extra.get("supernodes", []):
        if not isinstance(g, dict) or not isinstance(g.get("label"), str) or not isinstance(g.get("nodes"), list):
            continue
        members = [row[x] for x in g["nodes"] if isinstance(x, str) and x in row and row[x] not in seen]
        members = list(dict.fromkeys(members))
        seen.update(members)
        if members and g["label"]:
            groups.append({"label": g["label"][:MAX_LABEL], "nodes": members})
    return {"pinned": pinned, "supernodes": groups}
