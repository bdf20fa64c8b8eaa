"""Checkpoints whose stored tensors are not the ones their config declares are refused, typed, before allocating.

Every checkpoint is a tiny model built offline from a config and written with
``save_pretrained``; then a tensor is dropped, or ``config.json`` is made to
declare more or fewer layers than are stored, or a far larger model.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from families import CASES_BY_ID
from safetensors.torch import load_file, save_file
from test_sources_hf import gpt2

from circuitwidgets.errors import IncompleteCheckpointError, ShapeError
from circuitwidgets.sources.huggingface import from_hf
from circuitwidgets.sources.safetensors_file import load_safetensors

ROOT = Path(__file__).resolve().parent.parent

LOADERS: dict[str, Callable[[Path], Any]] = {
    "from_hf": from_hf,
    "from_hf-mlp-false": lambda root: from_hf(root, mlp=False),
    "load_safetensors": load_safetensors,
}


def _llama(root: Path) -> Path:
    CASES_BY_ID["llama-mha-tied"].build().save_pretrained(root)
    return root


def _gpt2(root: Path) -> Path:
    gpt2().save_pretrained(root)
    return root


def _drop(root: Path, name: str) -> None:
    state = load_file(str(root / "model.safetensors"))
    del state[name]
    save_file(state, str(root / "model.safetensors"), metadata={"format": "pt"})


def _declare(root: Path, **fields: int) -> None:
    config = json.loads((root / "config.json").read_text())
    (root / "config.json").write_text(json.dumps(config | fields))


@pytest.mark.parametrize("loader", list(LOADERS))
@pytest.mark.parametrize(
    ("name", "match"),
    [
        ("model.layers.1.self_attn.q_proj.weight", r"missing 1 \(model\.layers\.1\.self_attn\.q_proj\.weight\)"),
        ("model.layers.1.mlp.up_proj.weight", r"missing 1 \(model\.layers\.1\.mlp\.up_proj\.weight\)"),
    ],
    ids=["attention", "mlp"],
)
def test_a_missing_tensor_is_named(loader: str, name: str, match: str, tmp_path: Path) -> None:
    root = _llama(tmp_path / "ckpt")
    _drop(root, name)
    with pytest.raises(IncompleteCheckpointError, match=match):
        LOADERS[loader](root)


@pytest.mark.parametrize("loader", list(LOADERS))
def test_a_config_declaring_more_layers_than_stored_is_refused(loader: str, tmp_path: Path) -> None:
    root = _llama(tmp_path / "ckpt")
    _declare(root, num_hidden_layers=3)
    with pytest.raises(IncompleteCheckpointError, match=r"missing 9 \(model\.layers\.2\."):
        LOADERS[loader](root)


@pytest.mark.parametrize("loader", list(LOADERS))
def test_a_config_declaring_fewer_layers_than_stored_is_refused(loader: str, tmp_path: Path) -> None:
    root = _llama(tmp_path / "ckpt")
    _declare(root, num_hidden_layers=1)
    with pytest.raises(IncompleteCheckpointError, match=r"unexpected 9 \(model\.layers\.1\."):
        LOADERS[loader](root)


@pytest.mark.parametrize("loader", ["from_hf", "load_safetensors"])
@pytest.mark.parametrize(
    ("change", "match"),
    [
        ("drop", r"missing 1 \(transformer\.h\.1\.attn\.c_attn\.weight\)"),
        ("more", r"missing 12 \(transformer\.h\.2\."),
        ("fewer", r"unexpected \d+ \(transformer\.h\.1\."),
    ],
)
def test_gpt2_checkpoints_are_checked_too(loader: str, change: str, match: str, tmp_path: Path) -> None:
    root = _gpt2(tmp_path / "ckpt")
    if change == "drop":
        _drop(root, "transformer.h.1.attn.c_attn.weight")
    else:
        _declare(root, n_layer=3 if change == "more" else 1)
    with pytest.raises(IncompleteCheckpointError, match=match):
        LOADERS[loader](root)


@pytest.mark.parametrize("loader", list(LOADERS))
def test_complete_checkpoints_still_load(loader: str, tmp_path: Path) -> None:
    assert LOADERS[loader](_llama(tmp_path / "ckpt")).cfg.n_layers == 2


_BOMB = """
import resource, sys
limit = 1536 * 2**20  # old code allocated the declared 7.5 GB model: fail fast, never eat the machine
resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))
from circuitwidgets.sources.huggingface import from_hf
from circuitwidgets.sources.safetensors_file import load_safetensors
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
try:
    (load_safetensors if sys.argv[2] == "load_safetensors" else from_hf)(sys.argv[1])
except Exception as exc:
    print("raised", type(exc).__name__, str(exc)[:300])
print("peak_kib", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before)
"""


@pytest.mark.parametrize("loader", ["load_safetensors", "from_hf"])
def test_a_config_declaring_a_huge_model_over_tiny_weights_allocates_nothing(loader: str, tmp_path: Path) -> None:
    root = _gpt2(tmp_path / "ckpt")
    _declare(root, n_layer=48, n_embd=4096, n_head=32)  # 48 layers x 4,096: a 7.5 GB float32 model
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", _BOMB, str(root), loader], capture_output=True, text=True, env=env, timeout=300
    )
    out = done.stdout
    assert done.returncode == 0, done.stderr[-2000:]
    assert "raised IncompleteCheckpointError" in out or "raised ShapeError" in out, out
    peak = int(out.rsplit("peak_kib", 1)[1])
    assert peak * 1024 < 1.5e9 / 4, f"the refusal grew the peak by {peak / 2**20:.2f} GiB"


def test_shape_errors_are_typed(tmp_path: Path) -> None:
    root = _gpt2(tmp_path / "ckpt")
    _declare(root, n_embd=32)
    with pytest.raises(ShapeError, match=r"expected shape .* \(from config\.json\)"):
        load_safetensors(root)
