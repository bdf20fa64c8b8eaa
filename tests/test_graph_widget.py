"""AttributionGraph: traits from a Graph, the size that prunes, head selections that link, bad input typed."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import traitlets

import circuitwidgets as cw
from circuitwidgets.errors import ArgumentError, ArgumentTypeError
from circuitwidgets.graphs import edge_attribution, faithfulness_curve, prune

sys.path.insert(0, str(Path(__file__).parent))
from conftest import make_random_model
from test_graphs_eap import _pair


@pytest.fixture(scope="module")
def made() -> tuple[object, object, object]:
    model = make_random_model(biases=True)
    clean, corrupted, metric = _pair(model, n=4)
    graph = edge_attribution(model, clean, corrupted, metric)
    curve = faithfulness_curve(model, graph, clean, corrupted, metric, [0.1, 0.5, 1.0])
    return model, graph, curve


def test_traits_carry_the_graph_strongest_first(made: tuple[object, ...]) -> None:
    _, graph, curve = made
    view = cw.AttributionGraph(graph, curve, size=5)
    weights = np.abs(np.asarray(view.edge_weight))
    assert view.n_edges == len(graph.edges) and np.all(np.diff(weights) <= 1e-6)  # type: ignore[attr-defined]
    assert view.node_label == graph.nodes.label and view.n_layers == 2 and view.n_heads == 3  # type: ignore[attr-defined]
    assert view.curve_edges == curve.sizes and view.curve_values == curve.values  # type: ignore[attr-defined]
    assert view.circuit.top(99) == prune(graph, edges=5).top(99)  # type: ignore[arg-type]
    view.size = 0
    assert len(view.circuit.edges) == 0
    with pytest.raises(traitlets.TraitError, match="size"):
        view.size = view.n_edges + 1


def test_selecting_a_head_input_selects_the_head_and_moves_a_linked_view(made: tuple[object, ...]) -> None:
    model, graph, _ = made
    view = cw.AttributionGraph(graph)
    assert view.selected_head >= 0  # starts on the strongest head, so linked views start on it too
    attention = cw.AttentionPatterns(model, _pair(model)[0][0])  # type: ignore[arg-type]
    cw.link(view, attention)
    view.selected_node = graph.node("L1H2.k")  # type: ignore[attr-defined]
    assert (view.selected_layer, view.selected_head) == (1, 2) == (attention.selected_layer, attention.selected_head)
    view.selected_node = graph.node("logits")  # type: ignore[attr-defined]
    assert (attention.selected_layer, attention.selected_head) == (1, 2)  # not a head: no head moves


def test_bad_input_is_typed(made: tuple[object, ...]) -> None:
    _, graph, _ = made
    with pytest.raises(ArgumentTypeError, match="graph"):
        cw.AttributionGraph({"nodes": []})
    with pytest.raises(ArgumentTypeError, match="curve"):
        cw.AttributionGraph(graph, curve=[0.1, 0.2])
    with pytest.raises(ArgumentError, match="size"):
        cw.AttributionGraph(graph, size=10**6)
