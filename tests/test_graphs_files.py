"""Attribution graphs as the shared Graph result: pruning into it, its safetensors file, circuit-tracer's JSON
(read, written, hostile or truncated files refused by name, no half-written file after an interrupt)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch
from _graphs import mlp_model, random_transcoders

from circuitwidgets.errors import ArgumentError
from circuitwidgets.graphs import Graph
from circuitwidgets.graphs.attribution import attribution_graph, attribution_matrix
from circuitwidgets.graphs.ct_json import from_circuit_tracer_json, to_circuit_tracer_json
from circuitwidgets.graphs.influence import graph_scores, prune_by_influence

TOKENS = torch.tensor([[0, 5, 7, 9, 5, 7, 3, 11]])


@pytest.fixture(scope="module")
def graph() -> Graph:
    model = mlp_model(seed=5)
    return attribution_graph(model, random_transcoders(model, seed=6), TOKENS, max_feature_nodes=None)


@pytest.fixture(scope="module")
def unambiguous(graph: Graph) -> Graph:
    """Without layer 0's features 0 and 1, whose circuit-tracer ids are those of the errors of layers 0 and 1."""
    n = graph.nodes
    keep = [i for i in range(len(n)) if not (n.kind[i] == "feature" and n.layer[i] == 0 and n.index[i] < 2)]
    sub = graph.subgraph(keep)
    sub.extra["cumulative_influence"] = [graph.extra["cumulative_influence"][i] for i in keep]
    return sub


def test_graph_is_the_pruned_dense_matrix_with_its_scores(graph: Graph) -> None:
    model = mlp_model(seed=5)
    dense = attribution_matrix(model, random_transcoders(model, seed=6), TOKENS, max_feature_nodes=None)
    assert graph.scores == pytest.approx(graph_scores(dense))
    kept = prune_by_influence(dense)
    assert len(graph.nodes) == int(kept.nodes.sum()) < dense.adjacency.shape[0]
    assert len(graph.edges) == int((kept.edges & (dense.adjacency != 0)).sum())
    rows = {}
    for i, (kind, layer, pos, index) in enumerate(
        zip(graph.nodes.kind, graph.nodes.layer, graph.nodes.pos, graph.nodes.index, strict=True)
    ):
        rows[i] = (kind, int(layer), int(pos), int(index))
    full = {}
    for j, (layer, pos, f) in enumerate(dense.features.tolist()):
        full[("feature", layer, pos, f)] = j
    for layer in range(2):
        for pos in range(dense.n_pos):
            full[("error", layer, pos, -1)] = dense.error_start + layer * dense.n_pos + pos
    for pos, tok in enumerate(dense.tokens):
        full[("embedding", -1, pos, tok)] = dense.token_start + pos
    for k, tok in enumerate(dense.logit_tokens.tolist()):
        full[("logit", 2, dense.n_pos - 1, tok)] = dense.logit_start + k
    for s, d, w in zip(graph.edges.src, graph.edges.dst, graph.edges.weight, strict=True):
        assert w == dense.adjacency[full[rows[int(d)]], full[rows[int(s)]]].item()
    assert set(graph.nodes.kind) == {"feature", "error", "embedding", "logit"}
    assert graph.method == "attribution" and "frozen" in graph.convention


def test_safetensors_round_trip(graph: Graph, tmp_path: Path) -> None:
    back = Graph.load(graph.save(tmp_path / "g.safetensors"))
    assert back.nodes.label == graph.nodes.label and back.scores == graph.scores
    np.testing.assert_array_equal(back.edges.weight, graph.edges.weight)


def test_circuit_tracer_json_round_trip(unambiguous: Graph, tmp_path: Path) -> None:
    graph = unambiguous
    path = to_circuit_tracer_json(graph, tmp_path / "g.json", slug="test")
    data = json.loads(path.read_text())
    assert set(data) == {"metadata", "qParams", "nodes", "links"} and data["metadata"]["slug"] == "test"
    ids = {n["node_id"] for n in data["nodes"]}
    assert all(link["source"] in ids and link["target"] in ids for link in data["links"])
    back = from_circuit_tracer_json(path)
    assert back.nodes.kind == graph.nodes.kind
    for column in ("layer", "pos", "index"):
        np.testing.assert_array_equal(getattr(back.nodes, column), getattr(graph.nodes, column))
    np.testing.assert_array_equal(back.edges.src, graph.edges.src)
    np.testing.assert_array_equal(back.edges.weight, graph.edges.weight)
    features = np.array([k == "feature" for k in graph.nodes.kind])
    np.testing.assert_array_equal(back.nodes.activation[features], graph.nodes.activation[features])
    assert back.extra["cumulative_influence"][:3] == graph.extra["cumulative_influence"][:3]
    assert back.prompt == graph.prompt


@pytest.mark.parametrize(
    ("edit", "match"),
    [
        (lambda d: d["nodes"][0].update(feature_type="<script>"), "feature_type"),
        (lambda d: d["nodes"][0].update(node_id="1_x_3"), "node_id"),
        (lambda d: d["nodes"][0].update(ctx_idx="3"), "ctx_idx"),
        (lambda d: d["links"][0].update(target="9_9_9"), r"links\[0\]"),
        (lambda d: d["links"][0].update(weight=None), "weight"),
        (lambda d: d.update(nodes={"a": 1}), "'nodes'"),
        (lambda d: d["nodes"].append(d["nodes"][0]), "share the node_id"),
        (lambda d: d["metadata"].update(prompt_tokens=[1, 2]), "prompt_tokens"),
    ],
)
def test_hostile_json_is_refused_by_name(unambiguous: Graph, tmp_path: Path, edit: object, match: str) -> None:
    path = to_circuit_tracer_json(unambiguous, tmp_path / "g.json")
    data = json.loads(path.read_text())
    edit(data)  # type: ignore[operator]
    path.write_text(json.dumps(data))
    with pytest.raises(ArgumentError, match=match) as info:
        from_circuit_tracer_json(path)
    assert "g.json" in str(info.value)


def test_truncated_or_garbage_files_name_the_file(graph: Graph, tmp_path: Path) -> None:
    path = to_circuit_tracer_json(graph, tmp_path / "g.json")
    text = path.read_text()
    for body in (text[: len(text) // 2], "[" * 100_000, "\xff\xfe", "[]"):
        path.write_text(body, encoding="latin-1")
        with pytest.raises(ArgumentError, match=r"g\.json"):
            from_circuit_tracer_json(path)
    with pytest.raises(ArgumentError, match=r"missing\.json"):
        from_circuit_tracer_json(tmp_path / "missing.json")


def test_token_strings_stay_text(unambiguous: Graph, tmp_path: Path) -> None:
    path = to_circuit_tracer_json(unambiguous, tmp_path / "g.json")
    data = json.loads(path.read_text())
    data["metadata"]["prompt_tokens"][1] = "a\u202eexe.txt<img src=x>"
    path.write_text(json.dumps(data))
    back = from_circuit_tracer_json(path)
    label = next(
        lbl
        for lbl, p, k in zip(back.nodes.label, back.nodes.pos, back.nodes.kind, strict=True)
        if k == "embedding" and p == 1
    )
    assert "\u202e" not in label and "\\u202e" in label
    assert back.prompt[1] == "a\u202eexe.txt<img src=x>"  # kept as data; views render it as text


def test_interrupted_write_leaves_the_old_file(graph: Graph, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "g.json"
    path.write_text("old")

    def interrupted(fd: int) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "fsync", interrupted)
    with pytest.raises(KeyboardInterrupt):
        to_circuit_tracer_json(graph, path)
    assert path.read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["g.json"]


def test_ambiguous_ids_are_refused_on_reading(tmp_path: Path) -> None:
    node = {"ctx_idx": 3, "influence": 0.5}
    data = {
        "metadata": {"prompt_tokens": ["a", "b", "c", "d"]},
        "nodes": [
            node | {"node_id": "0_1_3", "feature_type": "cross layer transcoder", "activation": 1.0},
            node | {"node_id": "0_1_3", "feature_type": "mlp reconstruction error"},
        ],
        "links": [],
    }
    path = tmp_path / "ambiguous.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ArgumentError, match=r"ambiguous\.json.*'0_1_3'.*cannot tell them apart"):
        from_circuit_tracer_json(path)
