"""The shipped attention-only models, read from the installed package (no network)."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import torch

from circuitwidgets.errors import ArgumentError, NetworkRefusedError
from circuitwidgets.model import CircuitModel

DEFAULT_MODEL = "attn-only-2l"


def _pretrained_root() -> Path:
    return Path(str(resources.files("circuitwidgets") / "pretrained"))


def list_pretrained() -> list[str]:
    """Names of the shipped models, e.g. ``["attn-only-0l", "attn-only-1l", "attn-only-2l"]``."""
    root = _pretrained_root()
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if (p / "model.safetensors").is_file())


def pretrained_card(name: str) -> dict[str, object]:
    """The model card of a shipped model (corpus, hyperparameters, measured findings)."""
    path = _model_dir(name) / "card.json"
    return dict(json.loads(path.read_text())) if path.is_file() else {}


def _model_dir(name: str) -> Path:
    if not isinstance(name, str):
        raise ArgumentError(f"name: expected a shipped model name (str), got {type(name).__name__}")
    available = list_pretrained()
    if name not in available:
        if "/" in name:
            raise NetworkRefusedError(
                f"name: {name!r} looks like a model-hub name; circuitwidgets never downloads. "
                "Load the model yourself (from a local path) and pass it to "
                "circuitwidgets.from_hf(model) or circuitwidgets.from_transformer_lens(model)."
            )
        raise ArgumentError(f"name: expected one of the shipped models {available}, got {name!r}")
    return _pretrained_root() / name


def load_pretrained(
    name: str = DEFAULT_MODEL,
    dtype: torch.dtype = torch.float32,
    device: str | torch.device = "cpu",
    center: bool = False,
) -> CircuitModel:
    """Load a shipped model (weights are stored in float16, computed in ``dtype``).

    Parameters
    ----------
    name
        One of :func:`list_pretrained`; default ``"attn-only-2l"``.
    dtype, device
        Where and how to hold the weights (analyses run on CPU by default).
    center
        Centre the weights as TransformerLens does by default (``gelu-2l``: writing
        weights and unembedding; attention-only models: the unembedding);
        see :meth:`CircuitModel.centered`.
    """
    model = CircuitModel.load(_model_dir(name), dtype=dtype, device=device, center=center)
    model.name = name
    return model
