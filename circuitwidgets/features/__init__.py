"""Sparse dictionaries (SAEs, transcoders, skip-transcoders): features, not just neurons (DESIGN.md §3d).

- :class:`Dictionary`: ``encode``, ``decode``, ``inputs(model, tokens)``, ``features(model, tokens)``;
- :func:`train_dictionary`: train one on activations streamed from a model run over the corpus;
- :func:`evaluate`: SAELens's evaluation numbers (L0, explained variance, CE loss recovered, ...);
- :func:`load_pretrained`: the shipped dictionaries of a shipped model, by name (``"L0.tc"``, ...);
- :func:`save_saelens` / :func:`load_saelens`, :func:`save_circuit_tracer` / :func:`load_circuit_tracer`: files.

Heavy modules load on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "Dictionary": "circuitwidgets.features.dictionary",
    "KINDS": "circuitwidgets.features.dictionary",
    "ACTIVATIONS": "circuitwidgets.features.activation",
    "train_dictionary": "circuitwidgets.features.train",
    "DictionaryTrainConfig": "circuitwidgets.features.train",
    "evaluate": "circuitwidgets.features.evaluate",
    "load_pretrained": "circuitwidgets.features.pretrained",
    "save": "circuitwidgets.features.files",
    "load": "circuitwidgets.features.files",
    "save_saelens": "circuitwidgets.features.saelens_format",
    "load_saelens": "circuitwidgets.features.saelens_format",
    "save_circuit_tracer": "circuitwidgets.features.circuit_tracer_format",
    "load_circuit_tracer": "circuitwidgets.features.circuit_tracer_format",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'circuitwidgets.features' has no attribute {name!r}")


def __dir__() -> list[str]:
    return __all__
