"""The graph view: :class:`AttributionGraph` (edge attribution's component graphs, attribution graphs)."""

from __future__ import annotations

from circuitwidgets.widgets.graph.data import graph_view_data
from circuitwidgets.widgets.graph.widget import AttributionGraph

__all__ = ["AttributionGraph", "graph_view_data"]
