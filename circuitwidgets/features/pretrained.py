"""The shipped dictionaries of the shipped models: ``circuitwidgets/pretrained/<model>/dictionaries/``.

Each ``<name>.safetensors`` is a dictionary in circuitwidgets's file format (float16 on disk);
``card.json`` holds, per dictionary, the command that reproduces it, its training tokens, time,
hardware and the metrics measured on held-out code (see :mod:`circuitwidgets.features.publish`).
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Any

import torch

from circuitwidgets.errors import ArgumentError
from circuitwidgets.features.dictionary import Dictionary
from circuitwidgets.features.files import load


def dictionaries_dir(model: str) -> Path:
    """Folder of ``model``'s shipped dictionaries (it may not exist)."""
    if not isinstance(model, str) or "/" in model or model.startswith("."):
        raise ArgumentError(f"model: expected a shipped model name, got {model!r}")
    return Path(str(resources.files("circuitwidgets") / "pretrained")) / model / "dictionaries"


def list_pretrained_dictionaries(model: str = "gelu-2l") -> list[str]:
    """Names of ``model``'s shipped dictionaries, e.g. ``["L0.resid_post", "L0.tc", "L1.tc"]``."""
    folder = dictionaries_dir(model)
    return sorted(p.name.removesuffix(".safetensors") for p in folder.glob("*.safetensors")) if folder.is_dir() else []


def dictionary_card(model: str = "gelu-2l") -> dict[str, Any]:
    """The card of ``model``'s shipped dictionaries (``{"dictionaries": {name: {...}}, ...}``)."""
    path = dictionaries_dir(model) / "card.json"
    return dict(json.loads(path.read_text())) if path.is_file() else {}


def load_pretrained(
    model: str = "gelu-2l", dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu"
) -> dict[str, Dictionary]:
    """``{name: Dictionary}`` of ``model``'s shipped dictionaries (e.g. ``"L0.tc"``, ``"L1.tc"``, ``"L0.resid_post"``)."""
    names = list_pretrained_dictionaries(model)
    if not names:
        raise ArgumentError(f"model: {model!r} ships no dictionaries (looked in {dictionaries_dir(model)})")
    return {name: load(dictionaries_dir(model) / f"{name}.safetensors", dtype=dtype, device=device) for name in names}
