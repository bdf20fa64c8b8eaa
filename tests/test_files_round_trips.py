"""Files read and written with the other tools' own classes in mind (issue 55's file items, issue 58's checks).

- the shipped dictionaries: the SAE exports to SAELens; a TopK transcoder is refused naming the SAELens class it
  would need and what to do; circuit-tracer's format refuses TopK (its loader reads ReLU and JumpReLU only) the
  same way, and ``load_circuit_tracer(..., k=)`` reads a circuit-tracer TopK transcoder (saved without ``k``);
- an attribution graph written to circuit-tracer's JSON names its logit tokens (``Output " t7"``, not the id),
  ``transcoder_list`` names the dictionaries, and reading it back keeps every node label and the clerps.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from _features import random_dictionary
from _graphs import mlp_model

from circuitwidgets.errors import ArgumentError, FileFormatError
from circuitwidgets.features import Dictionary, load_circuit_tracer, load_pretrained, save_circuit_tracer, save_saelens
from circuitwidgets.graphs import attribution_graph, from_circuit_tracer_json, to_circuit_tracer_json


def test_the_shipped_dictionaries_export_what_saelens_can_represent(tmp_path: Path) -> None:
    shipped = load_pretrained("gelu-2l")
    assert (save_saelens(shipped["L0.resid_post"], tmp_path / "sae") / "cfg.json").is_file()
    for name in ("L0.tc", "L1.tc"):
        with pytest.raises(ArgumentError, match=rf"{name}: a TopK transcoder needs .*sae_lens.JumpReLUTranscoder"):
            save_saelens(shipped[name], tmp_path / name)
    with pytest.raises(ArgumentError, match=r"L0\.stc: a TopK skip-transcoder .*JumpReLUSkipTranscoder"):
        save_saelens(shipped["L0.stc"], tmp_path / "stc")
    with pytest.raises(ArgumentError, match=r"activation 'topk': circuit-tracer 0\.5's load_transcoder_set reads"):
        save_circuit_tracer([shipped["L0.tc"], shipped["L1.tc"]], tmp_path / "ct")


def test_a_circuit_tracer_topk_transcoder_is_read_with_k(tmp_path: Path) -> None:
    relu = random_dictionary("transcoder", "relu", layer=0, dtype=torch.float32)
    save_circuit_tracer([relu], tmp_path)  # what circuit-tracer's to_safetensors writes for its TopK: no k
    read = load_circuit_tracer(tmp_path / "layer_0.safetensors", k=4)
    assert isinstance(read, Dictionary) and read.activation == "topk" and read.k == 4
    x = torch.randn(5, 12)
    pre = x @ relu.W_enc + relu.b_enc
    top = pre.topk(4, dim=-1)
    expected = torch.zeros_like(pre).scatter(-1, top.indices, top.values.relu())
    torch.testing.assert_close(read.encode(x), expected)
    with pytest.raises(ArgumentError, match=r"k: expected an int in \[1, 30\]"):
        load_circuit_tracer(tmp_path / "layer_0.safetensors", k=31)
    plain = load_circuit_tracer(tmp_path)
    assert isinstance(plain, dict) and plain[0].activation == "relu"


def test_graph_json_names_logit_tokens_and_round_trips_every_label(tmp_path: Path) -> None:
    model = mlp_model()
    tcs = {
        layer: random_dictionary("transcoder", "relu", d_in=16, d_sae=24, k=None, layer=layer, seed=layer)
        for layer in range(2)
    }
    with torch.no_grad():  # layer 0's features 0 and 1 never fire: their ids would be layers 0 and 1's error nodes'
        tcs[0].b_enc[:2] = -1e3
    graph = attribution_graph(model, tcs, torch.tensor([0, 5, 9, 3, 7, 2]), node_threshold=1.0, edge_threshold=1.0)
    graph.extra["clerps"] = {graph.nodes.label[0]: "a <b>label</b> a user typed"}
    path = to_circuit_tracer_json(graph, tmp_path / "g.json", transcoders=tcs)
    data = json.loads(path.read_text())
    assert data["metadata"]["transcoder_list"] == ["L0.tc", "L1.tc"]
    logits = [n for n in data["nodes"] if n["feature_type"] == "logit"]
    assert logits and all(n["clerp"].startswith('Output "t') for n in logits), [n["clerp"] for n in logits]
    back = from_circuit_tracer_json(path)
    assert back.nodes.label == graph.nodes.label  # logit labels included: 'logit 't7' (7)', not 'logit (7)'
    assert back.extra["clerps"] == graph.extra["clerps"]
    assert back.extra["transcoder_list"] == ["L0.tc", "L1.tc"]
    assert back.extra["logit_strings"] == graph.extra["logit_strings"]


def test_a_logit_token_of_underscores_and_quotes_is_kept(tmp_path: Path) -> None:
    node = {"node_id": "3_7_1", "feature": 7, "layer": "3", "ctx_idx": 1, "feature_type": "logit",
            "jsNodeId": "L_7-1", "token_prob": 0.25, "clerp": 'Output "_" (p=0.250)'}  # fmt: skip
    quoted = dict(node, node_id="3_8_1", clerp='Output ""a" (p=0)" (p=0.250)')
    data = {"metadata": {"prompt_tokens": ["a", "b"]}, "nodes": [node, quoted], "links": []}
    (tmp_path / "g.json").write_text(json.dumps(data))
    graph = from_circuit_tracer_json(tmp_path / "g.json")
    assert graph.nodes.label == ["logit '_' (7)", "logit '\"a\"·(p=0)' (8)"]  # (a space shown as ·)
    assert graph.extra["logit_strings"] == {"7": "_", "8": '"a" (p=0)'}


def test_graph_json_refuses_a_position_past_the_prompt(tmp_path: Path) -> None:
    node = {"node_id": "0_1_5", "feature": 1, "layer": "0", "ctx_idx": 5, "feature_type": "cross layer transcoder",
            "jsNodeId": "x"}  # fmt: skip
    (tmp_path / "g.json").write_text(json.dumps({"metadata": {"prompt_tokens": ["a"]}, "nodes": [node], "links": []}))
    with pytest.raises(ArgumentError, match=r"nodes\[0\]\.ctx_idx: expected a position in \[0, 1\)"):
        from_circuit_tracer_json(tmp_path / "g.json")
    with pytest.raises(FileFormatError, match=r"expected a regular file.*character device"):
        from_circuit_tracer_json("/dev/null")
