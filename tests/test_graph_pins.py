"""AttributionGraph on an attribution graph: pins and supernodes as checked traits, the subgraph they make (saved and
in circuit-tracer's JSON with its pins), hover contexts from the dashboards, and a node click selecting its token and
the linked dashboard's feature."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import traitlets

import circuitwidgets as cw
from circuitwidgets.errors import ArgumentError, ArgumentTypeError
from circuitwidgets.features.dictionary import Dictionary
from circuitwidgets.graphs import Graph, attribution_graph, from_circuit_tracer_json, to_circuit_tracer_json

PROMPT = "The cat sat. The cat"


@pytest.fixture(scope="module")
def made() -> dict[str, Any]:
    model = cw.load_pretrained("gelu-2l")
    tcs = [Dictionary.random("transcoder", "topk", 256, 256, layer=i, k=8, seed=i) for i in range(2)]
    tokens = model.to_tokens(PROMPT)
    graph = attribution_graph(model, tcs, tokens, batch=64, node_threshold=1.0, edge_threshold=1.0)
    rows = torch.randint(1, 2048, (4, 16), generator=torch.Generator().manual_seed(0))
    boards = [
        cw.FeatureDashboard.from_model(model, tc, rows, k=3, samples=2, batch_size=4, progress=False) for tc in tcs
    ]
    return {"model": model, "graph": graph, "boards": boards, "tokens": tokens}


def _features(view: Any, layer: int) -> list[int]:
    return [i for i, k in enumerate(view.node_kind) if k == "feature" and view.node_layer[i] == layer]


def test_pins_and_supernodes_make_the_subgraph(made: dict[str, Any], tmp_path: Path) -> None:
    graph: Graph = made["graph"]
    view = cw.AttributionGraph(graph)
    a, b = _features(view, 0)[:2]
    logit = view.node_kind.index("logit")
    view.pin(logit, graph.nodes.label[a])
    view.group("\u202eevil <b>label</b>", [a, b])
    assert view.pinned == [logit, a, b]
    assert view.supernodes == [{"label": "\u202eevil <b>label</b>", "nodes": [a, b]}]
    sub = view.subgraph()
    expected = graph.subgraph([logit, a, b])
    assert sub.nodes.label == expected.nodes.label
    assert sub.top(99) == expected.top(99)
    # every edge of the graph between the three, whatever the slider keeps
    inside = [(s, d) for s, d in zip(graph.edges.src, graph.edges.dst, strict=True) if {s, d} <= {logit, a, b}]
    assert len(sub.edges) == len(inside)
    assert sub.extra["pinned"] == [graph.nodes.label[r] for r in (logit, a, b)]
    assert sub.extra["supernodes"] == [
        {"label": "\u202eevil <b>label</b>", "nodes": [graph.nodes.label[r] for r in (a, b)]}
    ]
    # saved and loaded back, the view of the subgraph starts with the same pins and group
    loaded = Graph.load(sub.save(tmp_path / "sub.safetensors"))
    again = cw.AttributionGraph(loaded)
    assert [again.node_label[r] for r in again.pinned] == sub.extra["pinned"]
    assert [[again.node_label[r] for r in g["nodes"]] for g in again.supernodes] == [
        sub.extra["supernodes"][0]["nodes"]
    ]


def test_pins_travel_in_circuit_tracer_json(made: dict[str, Any], tmp_path: Path) -> None:
    view = cw.AttributionGraph(made["graph"])
    a, b = _features(view, 1)[:2]
    view.group("induction", [a, b])
    path = to_circuit_tracer_json(view.subgraph(), tmp_path / "sub.json")
    q = json.loads(path.read_text())["qParams"]
    ids = {n["node_id"] for n in json.loads(path.read_text())["nodes"]}
    assert len(q["pinnedIds"]) == 2 and set(q["pinnedIds"]) <= ids
    assert q["supernodes"][0][0] == "induction" and set(q["supernodes"][0][1:]) == set(q["pinnedIds"])
    back = cw.AttributionGraph(from_circuit_tracer_json(path))
    assert len(back.pinned) == 2 and back.supernodes[0]["label"] == "induction"
    # ids a file names that are not its nodes are left out, not trusted
    data = json.loads(path.read_text())
    data["qParams"] = {"pinnedIds": ["nope", 5], "supernodes": [["x", "nope"], "bad", [1, 2]]}
    path.write_text(json.dumps(data))
    assert cw.AttributionGraph(from_circuit_tracer_json(path)).pinned == []


@pytest.mark.parametrize(
    ("name", "value", "match"),
    [
        ("pinned", [0, 0], "distinct"),
        ("pinned", [10**6], "node rows"),
        ("supernodes", [{"label": "", "nodes": [0]}], "label of 1..120"),
        ("supernodes", [{"label": "x" * 121, "nodes": [0]}], "label of 1..120"),
        ("supernodes", [{"label": "x", "nodes": []}], "non-empty"),
        ("supernodes", [{"label": "x", "nodes": [0]}, {"label": "y", "nodes": [0]}], "at most one"),
        ("supernodes", [{"label": "x", "nodes": [0], "extra": 1}], "keys"),
        ("supernodes", [{"label": "x", "nodes": [True]}], "node rows"),
    ],
)
def test_bad_pins_are_refused_naming_the_trait(made: dict[str, Any], name: str, value: object, match: str) -> None:
    view = cw.AttributionGraph(made["graph"])
    with pytest.raises(traitlets.TraitError, match=rf"'{name}(\[\d\])?' trait of AttributionGraph expected .*{match}"):
        setattr(view, name, value)
    with pytest.raises(ArgumentError, match=r"nodes\[0\]: no node called"):
        view.pin("no such node")
    with pytest.raises(ArgumentError, match="label: expected a non-empty str"):
        view.group("", [0])


def test_hover_contexts_are_the_dashboards_top_contexts(made: dict[str, Any]) -> None:
    boards = made["boards"]
    view = cw.AttributionGraph(made["graph"], dashboards=boards, n_contexts=2)
    assert view.ctx_tokens.shape[:2] == (view.n_nodes, 2) and view.ctx_centre == boards[0].centre
    checked = 0
    for i, kind in enumerate(view.node_kind):
        values = view.ctx_value[i]
        if kind != "feature":
            assert np.isnan(values).all()
            continue
        top = boards[int(view.node_layer[i])].top_contexts(int(view.node_index[i]))[:2]
        assert [float(v) for v in values if not np.isnan(v)] == pytest.approx([v for v, _ in top])
        for slot, (_, words) in enumerate(top):
            ids = view.ctx_tokens[i, slot]
            assert [view.ctx_vocab[int(t)] for t in ids if int(t) < len(view.ctx_vocab)] == words
            checked += 1
    assert checked > 0
    with pytest.raises(ArgumentTypeError, match="dashboards"):
        cw.AttributionGraph(made["graph"], dashboards="L1.tc")
    with pytest.raises(ArgumentError, match="site_layer"):
        cw.AttributionGraph(made["graph"], dashboards={0: boards[0]}, site_layer=1)


def test_a_node_click_selects_its_token_and_the_linked_feature(made: dict[str, Any]) -> None:
    model, boards = made["model"], made["boards"]
    view = cw.AttributionGraph(made["graph"], dashboards=boards)
    attention = cw.AttentionPatterns(model, made["tokens"][0])
    head = (attention.selected_layer, attention.selected_head)
    group = cw.link(view, boards[1], attention)
    assert {"selected_feature", "selected_dest"} <= set(group.names)
    assert (attention.selected_layer, attention.selected_head) == head  # (a graph with no head moves no head)
    node = _features(view, 1)[-1]
    view.selected_node = node
    assert boards[1].selected_feature == view.node_index[node] == view.selected_feature
    assert attention.selected_dest == view.node_pos[node] == view.selected_dest
    # a layer-0 feature is not the linked site's: the dashboard stays
    before = boards[1].selected_feature
    view.selected_node = _features(view, 0)[0]
    assert boards[1].selected_feature == before
    boards[1].selected_feature = 7
    assert view.selected_feature == 7
    group.unlink()


def test_an_attribution_graph_shows_every_edge_at_first(made: dict[str, Any]) -> None:
    # (already pruned by influence; its strongest edges by |weight| alone need not reach a logit)
    graph: Graph = made["graph"]
    assert cw.AttributionGraph(graph).size == len(graph.edges)
    assert cw.AttributionGraph(graph, size=3).size == 3
