"""Dictionary files: ours, SAELens's folder and circuit-tracer's layer files round-trip; bad files are typed errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from _features import random_dictionary
from safetensors.torch import save_file

from circuitwidgets.errors import ArgumentError, NonFiniteError
from circuitwidgets.features.circuit_tracer_format import load_circuit_tracer, save_circuit_tracer
from circuitwidgets.features.dictionary import Dictionary
from circuitwidgets.features.files import load, save
from circuitwidgets.features.saelens_format import load_saelens, save_saelens

X = torch.randn(4, 12, generator=torch.Generator().manual_seed(5), dtype=torch.float64)


def _same(a: Dictionary, b: Dictionary) -> None:
    assert a.config() == b.config()
    torch.testing.assert_close(a.encode(X), b.encode(X))
    torch.testing.assert_close(a(X), b(X))


@pytest.mark.parametrize(
    ("kind", "activation"),
    [("sae", "topk"), ("sae", "jumprelu"), ("sae", "relu"), ("transcoder", "relu"), ("skip-transcoder", "jumprelu")],
)
def test_round_trips(tmp_path: Path, kind: str, activation: str) -> None:
    d = random_dictionary(kind, activation, k=5, layer=1)
    d.model_name = "m"
    _same(d, load(save(d, tmp_path / "d.safetensors"), dtype=torch.float64))
    _same(d, load_saelens(save_saelens(d, tmp_path / "sl", dtype=torch.float64), dtype=torch.float64))
    if kind != "sae":
        layer0 = random_dictionary(kind, activation, k=5, layer=0, seed=1)
        save_circuit_tracer([layer0, d], tmp_path / "ct", dtype=torch.float64)
        both = load_circuit_tracer(tmp_path / "ct", dtype=torch.float64)
        assert isinstance(both, dict)
        for original, read in ((layer0, both[0]), (d, both[1])):
            torch.testing.assert_close(original(X), read(X))
        assert "feature_input_hook: ln2.hook_normalized" in (tmp_path / "ct" / "config.yaml").read_text()


def test_saelens_b_dec_applied_to_input_is_folded(tmp_path: Path) -> None:
    d = random_dictionary("sae", "relu")
    folder = save_saelens(d, tmp_path / "sl", dtype=torch.float64)
    cfg = json.loads((folder / "cfg.json").read_text())
    cfg["apply_b_dec_to_input"] = True
    (folder / "cfg.json").write_text(json.dumps(cfg))
    read = load_saelens(folder, dtype=torch.float64)
    torch.testing.assert_close(read.encode(X), d.encode(X - d.b_dec))


def test_topk_transcoder_is_refused_by_saelens_format(tmp_path: Path) -> None:
    with pytest.raises(
        ArgumentError, match=r"TopK transcoder needs a TopK transcoder class in SAELens.*JumpReLUTranscoder"
    ):
        save_saelens(random_dictionary("transcoder", "topk"), tmp_path / "x")


def test_bad_files_are_typed_and_named(tmp_path: Path) -> None:
    d = random_dictionary("sae", "relu")
    path = save(d, tmp_path / "d.safetensors")
    truncated = tmp_path / "t.safetensors"
    truncated.write_bytes(path.read_bytes()[:-100])
    with pytest.raises(ArgumentError, match=r"t\.safetensors.*header 'b_enc': expected 240 bytes"):
        load(truncated)
    folder = save_saelens(d, tmp_path / "sl")
    cfg = json.loads((folder / "cfg.json").read_text())
    (folder / "cfg.json").write_text(json.dumps({**cfg, "architecture": "gelu_sae"}))
    with pytest.raises(ArgumentError, match=r"cfg\.json'?: architecture: expected one of .*got 'gelu_sae'"):
        load_saelens(folder)
    nan = {k: v.clone() for k, v in d.tensors().items()}
    nan["b_enc"][0] = float("nan")
    nan["W_enc"] = nan["W_enc"].t()  # circuit-tracer keeps the encoder as rows
    save_file({k: v.float().contiguous() for k, v in nan.items()}, str(tmp_path / "layer_0.safetensors"))
    with pytest.raises(NonFiniteError, match=r"layer_0\.safetensors'?: b_enc: expected finite"):
        load_circuit_tracer(tmp_path / "layer_0.safetensors")
    with pytest.raises(ArgumentError, match="does not exist"):
        load(tmp_path / "missing.safetensors")
