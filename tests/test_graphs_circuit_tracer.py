"""Attribution graphs against circuit-tracer 0.5 itself, on the same tiny random model and transcoders.

circuit-tracer 0.5 pins TransformerLens 3 and transformers 4, which our environment excludes, so it runs in
its own environment (``make .venv-peers/ctracer/.installed``, which ``make test`` builds; override the
interpreter with ``CW_CTRACER_PYTHON``) through ``scripts/ctracer_reference.py``: a 2-layer LayerNorm GELU
model built by TransformerLens from a config with random weights, random ReLU transcoders reading
``ln2.hook_normalized`` (our ``mlp_in``) and writing ``hook_mlp_out``. We load the same weights (folding the
norms, as every loader here does) and the same transcoders, build our graph in float64 and compare: the
adjacency (theirs is float32), the features chosen, the pruned nodes and edges, the two scores, and that
circuit-tracer's own JSON model accepts our graph file.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from _ctracer import NEEDS_CTRACER, assert_same_graph, run_reference
from safetensors.torch import load_file

from circuitwidgets.features.dictionary import Dictionary
from circuitwidgets.graphs.attribution import attribution_graph, attribution_matrix
from circuitwidgets.graphs.ct_json import to_circuit_tracer_json
from circuitwidgets.graphs.dense import DenseAttribution
from circuitwidgets.model import CircuitModel, ModelConfig
from circuitwidgets.sources._convert import RawModel, fold_layer_norms

pytestmark = [pytest.mark.slow, NEEDS_CTRACER]


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("ctracer")
    run_reference("build", str(out))
    return out


def _model(out: Path) -> CircuitModel:
    spec = json.loads((out / "config.json").read_text())["model"]
    s = {k: v.double() for k, v in load_file(str(out / "model.safetensors")).items()}
    L = spec["n_layers"]

    def stack(name: str) -> torch.Tensor:
        return torch.stack([s[f"blocks.{layer}.{name}"] for layer in range(L)])

    weights = {"W_E": s["embed.W_E"], "W_pos": s["pos_embed.W_pos"], "W_U": s["unembed.old_unembed.W_U"],
               "b_U": s["unembed.old_unembed.b_U"]}  # fmt: skip
    for letter in "QKVO":
        weights[f"W_{letter}"] = stack(f"attn.W_{letter}")
        weights[f"b_{letter}"] = stack(f"attn.b_{letter}")
    for name in ("W_in", "b_in", "W_out", "b_out"):
        weights[name] = stack(f"mlp.old_mlp.{name}")
    norms = [[(s[f"blocks.{layer}.{n}.w"], s[f"blocks.{layer}.{n}.b"]) for layer in range(L)] for n in ("ln1", "ln2")]
    raw = RawModel(weights, norms[0], norms[1], (s["ln_final.w"], s["ln_final.b"]))
    cfg = ModelConfig(
        L, spec["n_heads"], spec["d_model"], spec["d_head"], spec["d_vocab"], spec["n_ctx"],
        positional_embedding_type="standard", normalization="ln_pre", has_mlp=True, d_mlp=spec["d_mlp"],
        act_fn="gelu", bos_token_id=0,
    )  # fmt: skip
    return CircuitModel(cfg, fold_layer_norms(raw), name="ctracer-tiny")


def _transcoders(out: Path) -> list[Dictionary]:
    t = {k: v.double() for k, v in load_file(str(out / "transcoders.safetensors")).items()}
    n = len({k.split(".")[0] for k in t})
    return [
        Dictionary(
            "transcoder",
            "relu",
            W_enc=t[f"L{i}.W_enc"].T.contiguous(),
            b_enc=t[f"L{i}.b_enc"],
            W_dec=t[f"L{i}.W_dec"],
            b_dec=t[f"L{i}.b_dec"],
            layer=i,
        )
        for i in range(n)
    ]


def _ours(out: Path, name: str) -> tuple[DenseAttribution, dict[str, Any]]:
    spec = json.loads((out / "config.json").read_text())
    max_nodes, batch = spec["runs"][name]
    dense = attribution_matrix(
        _model(out), _transcoders(out), torch.tensor(spec["tokens"]), max_feature_nodes=max_nodes, batch=batch
    )
    return dense, spec


def test_same_model(reference: Path) -> None:
    spec = json.loads((reference / "config.json").read_text())
    theirs = load_file(str(reference / "logits.safetensors"))["logits"].double()
    ours = _model(reference)(torch.tensor([spec["tokens"]]))[0]
    torch.testing.assert_close(ours, theirs, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name", ["all", "top40"])
def test_same_graph_pruning_and_scores(reference: Path, name: str) -> None:
    dense, spec = _ours(reference, name)
    assert_same_graph(dense, reference, name, spec)
    assert float(dense.adjacency.abs().max()) > 0.1  # (a graph of near-zero edges would agree trivially)


def test_circuit_tracer_reads_our_json(reference: Path, tmp_path: Path) -> None:
    spec = json.loads((reference / "config.json").read_text())
    graph = attribution_graph(_model(reference), _transcoders(reference), torch.tensor(spec["tokens"]))
    path = to_circuit_tracer_json(graph, tmp_path / "ours.json")
    assert run_reference("validate", str(path)).startswith(f"valid: {len(graph.nodes)} nodes, {len(graph.edges)} links")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))
