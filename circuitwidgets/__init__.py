"""circuitwidgets: Jupyter widgets for *A Mathematical Framework for Transformer Circuits*.

The public surface is small: a canonical model (:class:`CircuitModel`) and its
loaders, the engine in :mod:`circuitwidgets.circuits` (weights) and :mod:`circuitwidgets.causal`
(interventions on a run), sparse dictionaries in ``circuitwidgets.features``, the widgets, and
:func:`save_html`. Heavy modules load on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_LAZY = {
    "CircuitModel": "circuitwidgets.model",
    "ModelConfig": "circuitwidgets.model",
    "load_pretrained": "circuitwidgets.sources.pretrained",
    "list_pretrained": "circuitwidgets.sources.pretrained",
    "pretrained_card": "circuitwidgets.sources.pretrained",
    "from_transformer_lens": "circuitwidgets.sources.transformer_lens",
    "from_hf": "circuitwidgets.sources.huggingface",
    "from_nnsight": "circuitwidgets.sources.nnsight_handle",
    "AttentionPatterns": "circuitwidgets.widgets",
    "EigenScatter": "circuitwidgets.widgets",
    "SkipTrigramTable": "circuitwidgets.widgets",
    "CompositionMap": "circuitwidgets.widgets",
    "CompositionVsPatching": "circuitwidgets.widgets",
    "TermImportance": "circuitwidgets.widgets",
    "TrainingHistory": "circuitwidgets.widgets",
    "GrokkingScrubber": "circuitwidgets.widgets",
    "NeuronSparsity": "circuitwidgets.widgets",
    "CircuitExplorer": "circuitwidgets.widgets",
    "HeadScores": "circuitwidgets.widgets",
    "PatchingMap": "circuitwidgets.widgets",
    "LogitLens": "circuitwidgets.widgets",
    "LogitAttribution": "circuitwidgets.widgets",
    "Superposition": "circuitwidgets.widgets",
    "FeatureDashboard": "circuitwidgets.widgets",
    "PromptFeatures": "circuitwidgets.widgets",
    "link": "circuitwidgets.widgets.core.link",
    "Graph": "circuitwidgets.graphs",
    "edge_attribution": "circuitwidgets.graphs",
    "edge_patch": "circuitwidgets.graphs",
    "faithfulness": "circuitwidgets.graphs",
    "faithfulness_curve": "circuitwidgets.graphs",
    "AttributionGraph": "circuitwidgets.widgets",
    "save_html": "circuitwidgets.export",
    "train_toy": "circuitwidgets.superposition",
    "causal_trace": "circuitwidgets.hypotheses",
    "Hypothesis": "circuitwidgets.hypotheses",
    "scrub": "circuitwidgets.hypotheses",
    "probe": "circuitwidgets.hypotheses",
    "control_task": "circuitwidgets.hypotheses",
}

__all__ = sorted([*_LAZY, "__version__"])


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    if name in ("circuits", "causal", "features", "graphs", "widgets", "errors", "export", "superposition"):
        return importlib.import_module(f"circuitwidgets.{name}")
    if name == "hypotheses":
        return importlib.import_module("circuitwidgets.hypotheses")
    raise AttributeError(f"module 'circuitwidgets' has no attribute {name!r}")


def __dir__() -> list[str]:
    return __all__
