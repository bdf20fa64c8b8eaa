"""Sparse dictionaries (SAEs, transcoders, skip-transcoders): features, not just neurons (DESIGN.md §3d).

- :class:`Dictionary`: ``encode``, ``decode``, ``inputs(model, tokens)``, ``features(model, tokens)``;
- :func:`train_dictionary` / :func:`train_dictionaries`: train on activations streamed from runs of a
  model over the corpus (several dictionaries from one pass);
- :func:`evaluate`: SAELens's evaluation numbers (L0, explained variance, CE loss recovered, ...);
- :func:`load_pretrained`: the shipped dictionaries of a shipped model, by name (``"L0.tc"``, ...);
- :func:`max_activating` over :func:`neurons`, :func:`head_outputs` or :func:`dictionary_features`:
  top contexts, a random sample and a histogram for every unit of a layer, in one streaming pass;
- :func:`logit_effects`, :func:`direct_logit_effects` (a unit's write through the final norm and ``W_U``),
  :func:`feature_to_feature`, :func:`head_to_feature` (virtual weights with features as endpoints);
- :func:`save_saelens` / :func:`load_saelens`, :func:`save_circuit_tracer` / :func:`load_circuit_tracer`: files;
- :func:`intervene` (``times``, ``group``) and :func:`generate`: set transcoder features to values in the real
  model and read the logits, or steer a continuation (circuit-tracer's ``feature_intervention``).

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
    "train_dictionaries": "circuitwidgets.features.train",
    "DictionarySpec": "circuitwidgets.features.train",
    "DictionaryTrainConfig": "circuitwidgets.features.train",
    "evaluate": "circuitwidgets.features.evaluation",
    "load_pretrained": "circuitwidgets.features.pretrained",
    "list_pretrained_dictionaries": "circuitwidgets.features.pretrained",
    "dictionary_card": "circuitwidgets.features.pretrained",
    "save": "circuitwidgets.features.files",
    "load": "circuitwidgets.features.files",
    "save_saelens": "circuitwidgets.features.saelens_format",
    "load_saelens": "circuitwidgets.features.saelens_format",
    "save_circuit_tracer": "circuitwidgets.features.circuit_tracer_format",
    "load_circuit_tracer": "circuitwidgets.features.circuit_tracer_format",
    # reading units (neurons, heads, features) over a corpus: max-activating examples, logit effects, virtual weights
    "Units": "circuitwidgets.features.units",
    "neurons": "circuitwidgets.features.units",
    "head_outputs": "circuitwidgets.features.units",
    "dictionary_features": "circuitwidgets.features.units",
    "Examples": "circuitwidgets.features.examples",
    "max_activating": "circuitwidgets.features.examples",
    "output_directions": "circuitwidgets.features.effects",
    "logit_effects": "circuitwidgets.features.effects",
    "direct_logit_effects": "circuitwidgets.features.effects",
    "top_tokens": "circuitwidgets.features.effects",
    "feature_to_feature": "circuitwidgets.features.virtual_weights",
    "head_to_feature": "circuitwidgets.features.virtual_weights",
    # interventions on transcoder features in the real model (circuit-tracer's feature_intervention), steering
    "intervene": "circuitwidgets.features.intervention",
    "Intervened": "circuitwidgets.features.intervention",
    "times": "circuitwidgets.features.intervention",
    "group": "circuitwidgets.features.intervention",
    "generate": "circuitwidgets.features.steering",
    "Generated": "circuitwidgets.features.steering",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        # Bound here once loaded, so later reads never reach this hook. No public name is also a submodule's
        # name: importing that submodule would bind the module over the name (test_lazy_exports holds this).
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'circuitwidgets.features' has no attribute {name!r}")


def __dir__() -> list[str]:
    return __all__
