"""Reading an attribution graph in its view: pruning by cumulative influence (never empty, logits always reached),
labels (automatic, edited, saved as circuit-tracer's clerp), the scores, and interventions from the view (the
graph's prediction beside the measured change; pinned nodes precomputed)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import traitlets
from _graphs import mlp_model, random_transcoders

import circuitwidgets as cw
from circuitwidgets.graphs import Graph, from_circuit_tracer_json, to_circuit_tracer_json
from circuitwidgets.graphs.attribution import attribution_graph
from circuitwidgets.graphs.graph import SINK_KINDS

TOKENS = [0, 5, 7, 9, 5, 7, 3, 11, 4, 9, 12, 5]


@pytest.fixture(scope="module")
def built() -> tuple[cw.CircuitModel, list, Graph]:
    model = mlp_model()
    tcs = random_transcoders(model)
    return model, tcs, attribution_graph(model, tcs, torch.tensor(TOKENS))


def _reaches_every_logit(g: Graph) -> bool:
    logits = {i for i, k in enumerate(g.nodes.kind) if k in SINK_KINDS}
    return logits <= set(g.edges.dst.tolist())


def test_defaults_show_the_graph_as_built_and_thresholds_prune(built: tuple) -> None:
    _, _, g = built
    w = cw.AttributionGraph(g)
    assert (w.node_threshold, w.edge_threshold) == (0.8, 0.98)  # circuit-tracer's defaults
    assert len(w.circuit.edges) == len(g.edges)  # the built graph, whole, at its own thresholds
    sizes = []
    for t in (0.9, 0.5, 0.2, 0.05, 0.001):
        w.node_threshold = min(t, 0.8)
        w.edge_threshold = t
        c = w.circuit
        assert len(c.edges) > 0 and _reaches_every_logit(c)  # never empty, never without the logits
        sizes.append(len(c.edges))
    assert sizes == sorted(sizes, reverse=True) and sizes[-1] < len(g.edges) / 3
    with pytest.raises(traitlets.TraitError, match="node_threshold"):
        w.node_threshold = 0.0


def test_scores_and_labels(built: tuple, tmp_path: Path) -> None:
    model, tcs, g = built
    w = cw.AttributionGraph(g, model=model, transcoders=tcs)
    assert w.scores_line.startswith("Replacement 0.") and "Completeness 0." in w.scores_line
    features = [i for i, k in enumerate(w.node_kind) if k == "feature"]
    assert all(w.node_clerp[i].startswith("→ ") for i in features)  # top output tokens
    assert all(w.node_clerp[i] == "" for i, k in enumerate(w.node_kind) if k != "feature")
    plain = cw.AttributionGraph(g)
    assert plain.node_clerp[features[0]] == g.nodes.label[features[0]].split(" @")[0]  # no model: "L0 f4"
    w.label(features[0], "<img src=x onerror=alert(1)> quote feature")
    labelled = w.graph
    assert labelled.extra["clerps"][g.nodes.label[features[0]]] == "<img src=x onerror=alert(1)> quote feature"
    path = to_circuit_tracer_json(labelled, tmp_path / "g.json")
    back = from_circuit_tracer_json(path)
    assert back.extra["clerps"][back.nodes.label[features[0]]] == "<img src=x onerror=alert(1)> quote feature"
    again = cw.AttributionGraph(back)
    assert again.node_clerp[features[0]] == "<img src=x onerror=alert(1)> quote feature"
    labelled.save(tmp_path / "g.safetensors")
    assert Graph.load(tmp_path / "g.safetensors").extra["clerps"] == labelled.extra["clerps"]
    with pytest.raises(traitlets.TraitError, match="node_clerp"):
        w.node_clerp = ["x"]


def test_interventions_from_the_view(built: tuple) -> None:
    model, tcs, g = built
    w = cw.AttributionGraph(g, model=model, transcoders=tcs)
    assert w.can_intervene and w.interventions == []
    logit = next(i for i, k in enumerate(g.nodes.kind) if k == "logit")
    # a feature with a direct edge into the top logit: zeroing it, the graph predicts minus that edge
    edge = next(e for e in range(len(g.edges)) if g.edges.dst[e] == logit and g.nodes.kind[g.edges.src[e]] == "feature")
    row = int(g.edges.src[edge])
    w.pin(row)
    keys = {r["key"] for r in w.interventions}
    assert keys == {f"{row}|zero|", f"{row}|times2|"}  # precomputed for the pinned node
    zero = next(r for r in w.interventions if r["mode"] == "zero")
    assert zero["predicted"] == pytest.approx(-float(g.edges.weight[edge]), rel=1e-9)
    assert np.isfinite(zero["measured"]) and zero["measured"] != zero["predicted"]
    features = [i for i, k in enumerate(w.node_kind) if k == "feature"][:3]
    w.intervention_request = {"rows": features, "mode": "value", "value": 1.5, "id": 1}
    assert w.interventions[-1]["rows"] == sorted(features) and w.interventions[-1]["mode"] == "value"
    with pytest.raises(traitlets.TraitError, match="intervention_request"):
        w.intervention_request = {"rows": features, "mode": "value", "value": float("nan")}
    with pytest.raises(cw.errors.ArgumentError, match="model"):
        cw.AttributionGraph(g).intervene([row])
