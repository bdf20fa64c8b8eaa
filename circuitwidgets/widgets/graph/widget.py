"""AttributionGraph: a :class:`~circuitwidgets.graphs.Graph` drawn as nodes by layer and edges by weight.

One view for both kinds of graph: component graphs from edge attribution
(embeddings, heads with their q/k/v inputs as ports, MLPs, logits, by layer ×
head) and attribution graphs (nodes per position, by layer × position). A
size slider keeps the strongest edges (``size``, a trait a cell can read and
set; ``circuit`` is that pruned graph); beside it, the faithfulness curve
over circuit sizes, with the chosen size marked. A click on a node selects it
(``selected_node``); a head (or one of its inputs) also selects the head
(``selected_layer`` / ``selected_head``), which :func:`circuitwidgets.link`
shares with the attention, composition and patching views.

On attribution graphs (nodes per position) nodes are sized by their influence
on the logits; a node can be pinned into a subgraph (``pinned``) and pinned
nodes grouped into labelled supernodes (``supernodes``); ``subgraph_only``
draws just those, a supernode as one node with its members' edges summed.
:meth:`AttributionGraph.subgraph` returns that subgraph as a
:class:`~circuitwidgets.graphs.Graph`. With ``dashboards`` (a
:class:`~circuitwidgets.FeatureDashboard` per layer) hovering a feature shows
its top contexts. A click on a node selects its token (``selected_dest``,
linked with attention views of the prompt) and, for a feature of the linked
``site``, the feature (``selected_feature``, linked with that site's dashboard).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np
import traitlets

from circuitwidgets.errors import ArgumentError
from circuitwidgets.graphs import Curve, Graph
from circuitwidgets.widgets.core.arrays import NDArrayTrait
from circuitwidgets.widgets.core.base import CircuitWidget
from circuitwidgets.widgets.core.spec import NONE, Size, head_selection, kernel_reply, view_data, view_setting
from circuitwidgets.widgets.core.traits import SelectionIndex
from circuitwidgets.widgets.graph.contexts import by_layer, context_traits, empty_contexts
from circuitwidgets.widgets.graph.data import graph_view_data, pruned
from circuitwidgets.widgets.graph.labels import Clerps, InterventionRequest, Threshold
from circuitwidgets.widgets.graph.pins import NodeRows, Supernodes, pinned_subgraph, pins_of, resolve_nodes
from circuitwidgets.widgets.graph.reading import MAX_CLERP, auto_labels

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
    dashboards
        ``{layer: FeatureDashboard}`` (or a list by layer) of the graph's dictionaries: hovering a
        feature node shows its top ``n_contexts`` contexts from there.
    site_layer
        The layer whose feature selection is linked (``selected_feature`` with that
        layer's dashboard, by :func:`circuitwidgets.link`); default: the last layer with a dashboard.
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
    node_influence = view_data(NDArrayTrait(dtype="float32", dims=("n_nodes",)))
    """float32 ``[n_nodes]``: influence on the logits (attribution graphs; NaN: none), the nodes' size."""
    node_activation = view_data(NDArrayTrait(dtype="float32", dims=("n_nodes",)))
    """float32 ``[n_nodes]``: a feature's activation, a logit's probability (NaN: none)."""
    ctx_vocab = view_data(traitlets.List(traitlets.Unicode()))
    """Token strings of the top contexts (untrusted text); index ``len(ctx_vocab)`` is no token."""
    ctx_tokens = view_data(NDArrayTrait(dims=("n_ctx_nodes", "n_contexts", "width")))
    """uint16/uint32 ``[n_nodes, n_contexts, width]``: each feature node's top contexts (empty without dashboards)."""
    ctx_value = view_data(NDArrayTrait(dtype="float32", dims=("n_ctx_nodes", "n_contexts")))
    """float32: the feature's activation at each context's centre token (NaN: no context)."""
    ctx_centre = view_data(traitlets.Int(0))
    """Index of a context's own token in its window."""
    site = view_data(traitlets.Unicode(""))
    """The dictionary whose feature selection is linked (``L1.tc``), or ``""``."""
    site_layer = view_data(traitlets.Int(-1))
    """Layer of that dictionary's features (-1: none)."""
    n_site_features = view_data(traitlets.Int(0))
    """Features of that dictionary (the bound of ``selected_feature``)."""

    size = view_setting(SelectionIndex("n_sizes"))
    """Edges kept: the ``size`` strongest, without dangling ones (0 … n_edges)."""
    selected_node = view_setting(SelectionIndex("n_nodes", optional=True))
    """The selected node, or -1."""
    selected_layer = head_selection(SelectionIndex("n_layers"))
    """Layer of the selected head."""
    selected_head = head_selection(SelectionIndex("n_heads", optional=True))
    """The selected head, or -1."""
    selected_feature = view_setting(SelectionIndex("n_site_features", optional=True))
    """Feature of ``site`` selected (a click on one of its nodes; linked with its dashboard), or -1."""
    selected_dest = view_setting(SelectionIndex("n_tokens", optional=True))
    """Token position of the selected node (linked with attention views of the prompt), or -1."""
    pinned = view_setting(NodeRows())
    """Node rows pinned into the subgraph (shift-click or the pin button in the view)."""
    supernodes = view_setting(Supernodes())
    """Groups of nodes, ``[{"label": str, "nodes": [row, ...]}]`` (labels are shown as text)."""
    subgraph_only = view_setting(traitlets.Bool(False))
    """Draw only the pinned and grouped nodes (supernodes merged), with every edge between them."""
    node_share = view_data(NDArrayTrait(dtype="float32", dims=("n_nodes",)))
    """float32 ``[n_nodes]``: attribution graphs: each node's cumulative share of influence (0: always kept)."""
    edge_share = view_data(NDArrayTrait(dtype="float32", dims=("n_edges",)))
    """float32 ``[n_edges]``: attribution graphs: each edge's cumulative share of edge influence (edges sent in that
    order, strongest first)."""
    scores_line = view_data(traitlets.Unicode(""))
    """The replacement and completeness scores, as shown on the view."""
    can_intervene = view_data(traitlets.Bool(False))
    """Whether the kernel holds the model and transcoders (interventions run live)."""
    node_threshold = view_setting(Threshold(0.8))
    """Attribution graphs: nodes kept within this cumulative share of influence (circuit-tracer's 0.8)."""
    edge_threshold = view_setting(Threshold(0.98))
    """Attribution graphs: edges kept within this cumulative share of edge influence (circuit-tracer's 0.98)."""
    node_clerp = view_setting(Clerps())
    """A label per node (circuit-tracer's ``clerp``; ``""`` for non-features), editable in the view; text."""
    intervention_request = view_setting(InterventionRequest())
    """View → kernel: ``{"rows": [...], "mode": "zero" | "times2" | "value", "value": float}``."""
    interventions = kernel_reply(traitlets.List(traitlets.Dict()))
    """Kernel → view: results ``{"key", "rows", "mode", "value", "predicted", "measured"}``, the pinned nodes'
    zero and ×2 precomputed (so an exported page shows them)."""

    n_nodes = Size("n_nodes")
    n_edges = Size("n_edges")

    def __init__(
        self,
        graph: Graph | None = None,
        curve: Curve | None = None,
        *,
        size: int | None = None,
        dashboards: object = None,
        n_contexts: int = 3,
        site_layer: int | None = None,
        model: Any = None,
        transcoders: Any = None,
        **kwargs: Any,
    ) -> None:
        self._graph = graph
        both = model is not None and transcoders is not None
        self._model: Any = model if both else None
        self._transcoders: Any = transcoders if both else None
        if graph is not None:
            data = graph_view_data(graph, curve, size)
            boards = by_layer(dashboards, int(data["model_n_layers"]))
            data |= (
                _node_columns(graph)
                | context_traits(graph, boards, n_contexts)
                | _site(boards, site_layer)
                | pins_of(graph)
            )
            data["node_clerp"] = auto_labels(graph, boards, self._model, self._transcoders)
            data["can_intervene"] = self._model is not None and graph.method == "attribution"
            kwargs = {**data, **kwargs}
        elif dashboards is not None:
            raise ArgumentError("dashboards: pass them with the graph they describe")
        else:
            kwargs = {**empty_contexts(), **kwargs}
        super().__init__(**kwargs)

        if self.can_intervene:
            self._precompute_pins()

    @property
    def graph(self) -> Graph:
        """The graph shown, with the labels as edited (``extra["clerps"]``: written to circuit-tracer's JSON as each
        feature's ``clerp``, and by :meth:`~circuitwidgets.graphs.Graph.save`)."""
        if self._graph is None:
            raise AttributeError("graph: this AttributionGraph was made without a Graph")
        out = self._graph.subgraph(np.arange(len(self._graph.nodes)))
        out.extra["clerps"] = {
            self.node_label[i]: text
            for i, text in enumerate(self.node_clerp)
            if i < len(self.node_kind) and self.node_kind[i] == "feature" and text
        }
        return out

    def label(self, node: int | str, text: str) -> None:
        """Set node ``node``'s label (a row or a label such as ``"L1 f123 @5"``) to ``text`` (plain text)."""
        (row,) = resolve_nodes(self.node_label, [node], "node")
        if not isinstance(text, str):
            raise ArgumentError(f"text: expected a str, got {type(text).__name__}")
        clerps = list(self.node_clerp)
        clerps[row] = text[:MAX_CLERP]
        self.node_clerp = clerps

    def intervene(self, nodes: Sequence[int | str], mode: str = "zero", value: float = 0.0) -> dict[str, Any]:
        """Set feature ``nodes`` (rows or labels; together, as a supernode) to zero (``"zero"``), twice their value
        (``"times2"``) or ``value`` (``"value"``): the target's change measured beside the graph's prediction (also
        added to ``interventions``, which the view shows)."""
        from circuitwidgets.widgets.graph.steer import measure

        if self._graph is None or self._model is None:
            raise ArgumentError("model: interventions need AttributionGraph(graph, model=..., transcoders=...)")
        rows = resolve_nodes(self.node_label, list(nodes), "nodes")
        result = measure(self._graph, self._model, self._transcoders, rows, mode, value)
        self.interventions = [r for r in self.interventions if r.get("key") != result["key"]] + [result]
        return result

    def _precompute_pins(self) -> None:
        done = {r.get("key") for r in self.interventions}
        from circuitwidgets.widgets.graph.steer import intervention_key

        for row in self.pinned:
            if self.node_kind[row] != "feature":
                continue
            for mode in ("zero", "times2"):
                if intervention_key([row], mode, 0.0) not in done:
                    self.intervene([row], mode)

    @traitlets.observe("pinned")
    def _pins_precomputed(self, change: dict[str, Any]) -> None:
        if self.can_intervene:
            self._precompute_pins()

    @traitlets.observe("intervention_request")
    def _request(self, change: dict[str, Any]) -> None:
        req = change["new"]
        if not self.can_intervene or not req or not req.get("rows"):
            return
        self.intervene([int(r) for r in req["rows"]], str(req.get("mode", "zero")), float(req.get("value", 0.0)))

    @property
    def n_tokens(self) -> int:
        """Tokens of the prompt (the bound of ``selected_dest``)."""
        return len(self.prompt)

    @property
    def _links_heads(self) -> bool:
        # (an attribution graph has no head node: its empty head selection must not move other views)
        return any(k.startswith("head") for k in self.node_kind)

    @property
    def _links_positions(self) -> bool:
        # (a component graph has no node per position: it moves no other view's token)
        return bool(len(self.node_pos)) and bool(np.any(np.asarray(self.node_pos) >= 0))

    def pin(self, *nodes: int | str) -> None:
        """Pin ``nodes`` (rows or labels such as ``"L1 f123 @5"``) into the subgraph (already pinned ones stay)."""
        rows = resolve_nodes(self.node_label, nodes, "nodes")
        self.pinned = list(self.pinned) + [r for r in dict.fromkeys(rows) if r not in self.pinned]

    def group(self, label: str, nodes: Sequence[int | str]) -> None:
        """Group ``nodes`` (rows or labels; pinned if they were not) into a supernode called ``label``."""
        rows = list(dict.fromkeys(resolve_nodes(self.node_label, nodes, "nodes")))
        if not isinstance(label, str) or not label:
            raise ArgumentError(f"label: expected a non-empty str, got {label!r:.80}")
        with self.hold_trait_notifications():
            self.pin(*rows)
            self.supernodes = [*self.supernodes, {"label": label, "nodes": rows}]

    def subgraph(self) -> Graph:
        """The pinned and grouped nodes with every edge of the graph between them (``extra["pinned"]`` and
        ``extra["supernodes"]`` name them by label, so they survive ``save`` and circuit-tracer's JSON)."""
        if self._graph is None:
            raise AttributeError("subgraph: this AttributionGraph was made without a Graph")
        return pinned_subgraph(self._graph, list(self.pinned), list(self.supernodes))

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
        """The circuit shown: the graph pruned to ``size`` edges (dangling ones dropped); an attribution graph by
        ``node_threshold`` and ``edge_threshold`` of cumulative influence too."""
        if self._graph is None:
            raise AttributeError("circuit: this AttributionGraph was made without a Graph")
        return pruned(self._graph, int(self.size), float(self.node_threshold), float(self.edge_threshold))

    @traitlets.observe("selected_node")
    def _node_selects_token_and_feature(self, change: dict[str, Any]) -> None:
        # the view sets these with the node; a cell setting selected_node gets the same
        i = int(change["new"])
        if not 0 <= i < len(self.node_kind):
            return
        pos = int(self.node_pos[i])
        with self.hold_trait_notifications():
            if 0 <= pos < self.n_tokens:
                self.selected_dest = pos
            in_site = self.node_kind[i] == "feature" and int(self.node_layer[i]) == self.site_layer >= 0
            if in_site and int(self.node_index[i]) < self.n_site_features:
                self.selected_feature = int(self.node_index[i])

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


def _node_columns(graph: Graph) -> dict[str, Any]:
    nodes = graph.nodes
    return {
        "node_influence": nodes.influence.astype(np.float32),
        "node_activation": nodes.activation.astype(np.float32),
    }


def _site(boards: dict[int, Any], site_layer: int | None) -> dict[str, Any]:
    """The linked dictionary: ``site_layer``'s dashboard (default: the last layer with one)."""
    if site_layer is None:
        site_layer = max(boards, default=-1)
    if site_layer == -1 and not boards:
        return {"site": "", "site_layer": -1, "n_site_features": 0}
    if site_layer not in boards:
        raise ArgumentError(f"site_layer: expected a layer with a dashboard ({sorted(boards)}), got {site_layer!r}")
    board = boards[site_layer]
    # (the graph starts on the dashboard's feature, so linking them copies a feature both accept)
    return {
        "site": board.site,
        "site_layer": site_layer,
        "n_site_features": int(board.n_units),
        "selected_feature": int(board.selected_feature),
    }
