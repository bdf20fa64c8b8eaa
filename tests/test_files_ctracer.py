"""Against circuit-tracer 0.5 itself (its environment, as the graph cross-checks): every transcoder kind we write
loads with its own ``load_transcoder_set`` and computes what ours does; a graph written by its own front-end models
reads here with every label; ours validates against its ``Model`` with token strings in the logit clerps."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import torch
from _ctracer import NEEDS_CTRACER, PYTHON
from _features import random_dictionary
from safetensors.torch import load_file, save_file

from circuitwidgets.features import save_circuit_tracer
from circuitwidgets.graphs import from_circuit_tracer_json, to_circuit_tracer_json

SCRIPT = Path(__file__).resolve().parent / "ctracer_files.py"
KINDS = {"relu": ("transcoder", "relu"), "jumprelu": ("transcoder", "jumprelu"),
         "skip-relu": ("skip-transcoder", "relu"), "skip-jumprelu": ("skip-transcoder", "jumprelu"),
         "batchtopk": ("transcoder", "batchtopk")}  # fmt: skip


def _run(*args: str) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    done = subprocess.run([str(PYTHON), str(SCRIPT), *args], capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


@NEEDS_CTRACER
def test_circuit_tracer_loads_every_kind_we_write(tmp_path: Path) -> None:
    x = torch.randn(6, 12, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    sets = {}
    for name, (kind, activation) in KINDS.items():
        layers = [random_dictionary(kind, activation, k=4, layer=i, seed=i) for i in range(2)]
        if activation == "batchtopk":
            for d in layers:
                d.register_buffer("threshold", torch.rand(d.d_sae, dtype=torch.float64) * 0.5)
        folder = save_circuit_tracer(layers, tmp_path / "sets" / name, dtype=torch.float64)
        save_file({"x": x}, str(folder / "x.safetensors"))
        sets[name] = layers
    (tmp_path / "out").mkdir()
    _run("read", str(tmp_path / "sets"), str(tmp_path / "out"))
    for name, layers in sets.items():
        theirs = load_file(str(tmp_path / "out" / f"{name}.safetensors"))
        for i, d in enumerate(layers):
            ours = (
                d.encode(x) if d.activation != "batchtopk" else (lambda p: p * (p > d.threshold))(d.pre_activations(x))
            )
            torch.testing.assert_close(theirs[f"encode.{i}"], ours, rtol=1e-12, atol=1e-12, msg=f"{name} encode")
            torch.testing.assert_close(theirs[f"forward.{i}"], d.decode(ours, x), rtol=1e-12, atol=1e-12)


@NEEDS_CTRACER
def test_a_graph_circuit_tracer_writes_keeps_every_label_here_and_back(tmp_path: Path) -> None:
    _run("write", str(tmp_path))
    graph = from_circuit_tracer_json(tmp_path / "theirs.json")
    logits = [label for label, kind in zip(graph.nodes.label, graph.nodes.kind, strict=True) if kind == "logit"]
    assert logits == ["logit '·\"' (11)", "logit '_' (12)"]  # the token strings, not ids (a space shown as ·)
    assert list(graph.extra["clerps"].values()) == ["closing quote <b>"]
    assert graph.extra["transcoder_list"] == ["L0.tc", "L1.tc"]
    ours = to_circuit_tracer_json(graph, tmp_path / "ours.json")
    report = json.loads(_run("validate", str(ours)).strip().splitlines()[-1])
    assert report["logit_clerps"] == ['Output " "" (p=0.600)', 'Output "_" (p=0.200)']
    assert report["feature_clerps"] == ["closing quote <b>"] and report["transcoder_list"] == ["L0.tc", "L1.tc"]
    assert from_circuit_tracer_json(ours).nodes.label == graph.nodes.label
