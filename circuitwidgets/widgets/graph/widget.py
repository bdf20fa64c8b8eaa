"""AttributionGraph: a :class:`~circuitwidgets.graphs.Graph` drawn as nodes by layer and edges by weight.

One view for both kinds of graph: component graphs from edge attribution
(embeddings, heads with their q/k/v inputs as ports, MLPs, logits, by layer ×
head) and attribution graphs (nodes per position, by layer × position). A
size slider keeps the strongest edges (``size``, a trait a cell can read and
set; :attr:`circuit` is that pruned graph); beside it, the faithfulness curve
over circuit sizes, with the chosen size marked. A click on a node selects it
(``selected_node``); a head (or one of its inputs) also selects the head
(``selected_layer`` / ``selected_head``), which :func:`circuitwidgets.link`
shares with the attention, composition and patching views.
"""

from __future__ import annotations

from typing import Any, ClassVar

import traitlets

from circuitwidgets.graphs import Curve, Graph
from circuitwidgets.widgets.core.arrays import NDArrayTrait
from circuitwidgets.widgets.core.base import CircuitWidget
from circuitwidgets.widgets.core.spec import NONE, Size, head_selection, view_data, view_setting
from circuitwidgets.widgets.core.traits import SelectionIndex
from circuitwidgets.widgets.graph.data import graph_view_data, pruned

__all__ = ["AttributionGraph"]


class AttributionGraph(CircuitWidget):
    """A graph of a model's computation, pruned by a size slider, beside its faithfulness curve.

    Parameters
    ----------
    graph
        A :class:`~circuitwidgets.graphs.Graph` (``graphs.edge_attribution``, ``graphs.edge_patch``).
    curve
        Its faithfulness curve (``graphs.faithfulness_curve``), drawn beside the graph.
    size
        Edges kept at first (default: the curve's smallest circuit reaching 0.8, else 20).
    """

    _view = traitlets.Unicode("graph").tag(sync=True)
    _prefix = "graph"
    _link_as: ClassVar[dict[str, str]] = {}

    node_kind = view_data(traitlets.List(traitlets.Unicode()))
    """Each node's kind (``embedding``, ``head``, ``head_q`` …, ``mlp``, ``logit``, ``feature``, ``error``)."""
    node_label = view_data(traitlets.List(traitlets.Unicode()))
    """Each node's label (untrusted text, drawn as text)."""
    node_layer = view_data(NDArrayTrait(dtype="int32", dims=("n_nodes",)))
    """int32 ``[n_nodes]``: layer (-1 embeddings, ``n_layers`` logits)."""
    node_pos = view_data(NDArrayTrait(dtype="int32", dims=("n_nodes",)))
    """int32 ``[n_nodes]``: position, -1 when the node is not per position."""
    node_index = view_data(NDArrayTrait(dtype="int32", dims=("n_nodes",)))
    """int32 ``[n_nodes]``: head / feature index, or -1."""
    edge_src = view_data(NDArrayTrait(dtype="int32", dims=("n_edges",)))
    """int32 ``[n_edges]``: each edge's sender, strongest edge first."""
    edge_dst = view_data(NDArrayTrait(dtype="int32", dims=("n_edges",)))
    """int32 ``[n_edges]``: each edge's receiver."""
    edge_weight = view_data(NDArrayTrait(dtype="float32", dims=("n_edges",)))
    """float32 ``[n_edges]``: each edge's weight (``|weight|`` decreasing)."""
    prompt = view_data(traitlets.List(traitlets.Unicode()))
    """The (first) prompt's tokens (untrusted text)."""
    model_n_layers = view_data(traitlets.Int(0))
    """Layers of the model (for linking head selections)."""
    model_n_heads = view_data(traitlets.Int(0))
    """Heads per layer of the model."""
    curve_edges = view_data(traitlets.List(traitlets.Int()))
    """Edges taken (the strongest, before dropping dangling ones) by each circuit of the faithfulness curve."""
    curve_values = view_data(traitlets.List(traitlets.Float()))
    """Faithfulness of each circuit of the curve (1 the model, 0 the empty circuit)."""
    curve_note = view_data(traitlets.Unicode(""))
    """The curve's ablation, CPR and CMD, under it."""
    title = view_data(traitlets.Unicode(""))
    """Title."""
    metric = view_data(traitlets.Unicode(""))
    """The metric's name."""
    caption = view_data(traitlets.Unicode(""))
    """What a weight means (the graph's convention)."""
    negative_note = view_data(traitlets.Unicode(""))
    """What a negative weight means (legend)."""
    positive_note = view_data(traitlets.Unicode(""))
    """What a positive weight means (legend)."""
    model_name = view_data(traitlets.Unicode(""))
    """Name of the model."""

    size = view_setting(SelectionIndex("n_sizes"))
    """Edges kept: the ``size`` strongest, without dangling ones (0 … n_edges)."""
    selected_node = view_setting(SelectionIndex("n_nodes", optional=True))
    """The selected node, or -1."""
    selected_layer = head_selection(SelectionIndex("n_layers"))
    """Layer of the selected head."""
    selected_head = head_selection(SelectionIndex("n_heads", optional=True))
    """The selected head, or -1."""

    n_nodes = Size("n_nodes")
    n_edges = Size("n_edges")

    def __init__(
        self, graph: Graph | None = None, curve: Curve | None = None, *, size: int | None = None, **kwargs: Any
    ) -> None:
        self._graph = graph
        if graph is not None:
            kwargs = {**graph_view_data(graph, curve, size), **kwargs}
        super().__init__(**kwargs)

    @property
    def n_sizes(self) -> int:
        """Sizes the slider can take (0 … n_edges)."""
        return self.n_edges + 1

    @property
    def n_layers(self) -> int:
        """Layers of the model."""
        return int(self.model_n_layers)

    @property
    def n_heads(self) -> int:
        """Heads per layer of the model."""
        return int(self.model_n_heads)

    @property
    def circuit(self) -> Graph:
        """The circuit shown: the graph pruned to ``size`` edges (dangling ones dropped)."""
        if self._graph is None:
            raise AttributeError("circuit: this AttributionGraph was made without a Graph")
        return pruned(self._graph, int(self.size))

    @traitlets.observe("selected_node")
    def _node_selects_head(self, change: dict[str, Any]) -> None:
        # a head or one of its inputs is a head selection: the linked views follow it
        i = int(change["new"])
        if i == NONE or not 0 <= i < len(self.node_kind) or not self.node_kind[i].startswith("head"):
            return
        layer, head = int(self.node_layer[i]), int(self.node_index[i])
        if 0 <= layer < self.n_layers and 0 <= head < self.n_heads:
            with self.hold_trait_notifications():
                self.selected_layer, self.selected_head = layer, head
