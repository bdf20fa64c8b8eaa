"""The shared ``Graph`` result: top(k), subgraph, pruning, and safetensors save/load (atomic, hostile files refused)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from circuitwidgets.errors import ArgumentError, ArgumentTypeError, ShapeError
from circuitwidgets.graphs import EdgeTable, Graph, NodeTable, prune


def _graph() -> Graph:
    # embed -> L0H0.{q,k,v}, embed -> MLP0 ... a tiny component graph of a 1-layer, 1-head model with an MLP
    kind = ["embedding", "head", "head_q", "head_k", "head_v", "mlp", "logit"]
    label = ["embed", "L0H0", "L0H0.q", "L0H0.k", "L0H0.v", "MLP0", "logits"]
    layer = [-1, 0, 0, 0, 0, 0, 1]
    index = [-1, 0, 0, 0, 0, -1, -1]
    nodes = NodeTable(kind, np.array(layer), np.full(7, -1), np.array(index), label)
    #          embed->q  embed->k embed->v embed->MLP head->MLP embed->logits head->logits MLP->logits
    src = np.array([0, 0, 0, 0, 1, 0, 1, 5])
    dst = np.array([2, 3, 4, 5, 5, 6, 6, 6])
    weight = np.array([0.1, -3.0, 0.5, 0.2, -0.05, 2.0, 1.0, -0.4])
    return Graph(nodes, EdgeTable(src, dst, weight), {"faithfulness": 0.5}, ["a", "b"], [3, 4], "c", "eap", "m")


def test_top_lists_strongest_first_with_labels() -> None:
    g = _graph()
    assert g.top(3) == [("embed", "L0H0.k", -3.0), ("embed", "logits", 2.0), ("L0H0", "logits", 1.0)]
    assert g.edge_index("L0H0", "MLP0") == 4
    with pytest.raises(ArgumentError, match=re.escape("no edge 'MLP0' → 'L0H0.q'")):
        g.edge_index("MLP0", "L0H0.q")
    with pytest.raises(ArgumentTypeError, match="k:"):
        g.top(-1)


def test_subgraph_reindexes_nodes_and_keeps_inner_edges() -> None:
    sub = _graph().subgraph([6, 0, 1])
    assert sub.nodes.label == ["embed", "L0H0", "logits"]
    assert sub.top(5) == [("embed", "logits", 2.0), ("L0H0", "logits", 1.0)]


def test_prune_by_edges_drops_dangling_edges() -> None:
    g = _graph()
    # the 2 strongest: embed->L0H0.k and embed->logits; L0H0 writes nowhere kept, so its key input is dangling
    assert prune(g, edges=2).top(9) == [("embed", "logits", 2.0)]
    assert prune(g, edges=2, connected=False).top(9) == [("embed", "L0H0.k", -3.0), ("embed", "logits", 2.0)]
    # with head->logits kept, the key input reaches the logits through its head
    assert len(prune(g, edges=3).edges) == 3
    # |w| >= 0.3: -3, 2, 1, 0.5, -0.4; MLP0 -> logits is dangling (no kept edge into MLP0)
    assert len(g.prune(threshold=0.3).edges) == 4


def test_prune_by_nodes_counts_a_head_with_its_inputs_once() -> None:
    kept = prune(_graph(), nodes=3)  # loads: head group 4.55, embed 5.8, logits 3.4, MLP 0.65
    assert {(s, r) for s, r, _ in kept.top(9)} == {
        ("embed", "L0H0.q"),
        ("embed", "L0H0.k"),
        ("embed", "L0H0.v"),
        ("embed", "logits"),
        ("L0H0", "logits"),
    }
    with pytest.raises(ArgumentError, match="exactly one of"):
        prune(_graph(), edges=1, nodes=2)


def test_save_load_round_trip(tmp_path: Path) -> None:
    g = _graph()
    g.extra["curve"] = {"sizes": [0, 1], "faithfulness": [0.0, 1.0]}
    path = g.save(tmp_path / "g.safetensors")
    back = Graph.load(path)
    assert back.nodes.label == g.nodes.label and back.nodes.kind == g.nodes.kind
    np.testing.assert_array_equal(back.edges.weight, g.edges.weight)
    np.testing.assert_array_equal(back.nodes.layer, g.nodes.layer)
    assert back.scores == g.scores and back.prompt == g.prompt and back.tokens == g.tokens
    assert back.extra == g.extra and back.method == "eap"
    assert [p.name for p in tmp_path.iterdir()] == ["g.safetensors"]  # no temporary file left


def test_load_refuses_truncated_and_foreign_files(tmp_path: Path) -> None:
    path = _graph().save(tmp_path / "g.safetensors")
    raw = path.read_bytes()
    (tmp_path / "cut.safetensors").write_bytes(raw[: len(raw) // 2])
    with pytest.raises(ArgumentError, match=re.escape("cut.safetensors")):
        Graph.load(tmp_path / "cut.safetensors")
    from safetensors.numpy import save_file

    save_file({"x": np.zeros(2)}, str(tmp_path / "other.safetensors"))
    with pytest.raises(ArgumentError, match=re.escape("other.safetensors")):
        Graph.load(tmp_path / "other.safetensors")


def test_save_failure_leaves_the_old_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _graph().save(tmp_path / "g.safetensors")
    before = path.read_bytes()

    def boom(*_: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr("os.replace", boom)
    with pytest.raises(KeyboardInterrupt):
        _graph().prune(edges=1).save(path)
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["g.safetensors"]


def test_bad_tables_are_typed() -> None:
    with pytest.raises(ShapeError, match=re.escape("nodes.layer")):
        NodeTable(["head"], np.array([0, 1]), np.array([0]), np.array([0]), ["x"])
    with pytest.raises(ArgumentError, match=re.escape("nodes.kind")):
        NodeTable(["neuron"], np.array([0]), np.array([0]), np.array([0]), ["x"])
    nodes = NodeTable(["head"], np.array([0]), np.array([0]), np.array([0]), ["x"])
    with pytest.raises(ArgumentError, match=re.escape("edges.dst")):
        Graph(nodes, EdgeTable(np.array([0]), np.array([3]), np.array([1.0])))
