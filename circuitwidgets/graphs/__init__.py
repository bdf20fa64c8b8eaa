"""Graphs of a model's computation: one :class:`Graph` result, made by edge attribution (EAP, EAP-IG) over
components, checked by exact edge patching, pruned, and scored by faithfulness (DESIGN.md §3e).

Attribution graphs over transcoder features (issue 41) share the same result and view.
"""

from __future__ import annotations

from circuitwidgets.graphs.graph import EdgeTable, Graph, NodeTable, prune

__all__ = ["EdgeTable", "Graph", "NodeTable", "prune"]
