"""Jupyter widgets for transformer circuits: one module or folder per view, shared machinery in :mod:`.core`."""

from __future__ import annotations

from circuitwidgets.widgets.attention import AttentionPatterns
from circuitwidgets.widgets.composition import CompositionMap
from circuitwidgets.widgets.composition_vs_patching import CompositionVsPatching
from circuitwidgets.widgets.eigen import EigenScatter
from circuitwidgets.widgets.explorer import CircuitExplorer
from circuitwidgets.widgets.features import FeatureDashboard, PromptFeatures
from circuitwidgets.widgets.graph import AttributionGraph
from circuitwidgets.widgets.grokking import GrokkingScrubber
from circuitwidgets.widgets.head_scores import HeadScores
from circuitwidgets.widgets.history import TrainingHistory
from circuitwidgets.widgets.logit_attribution import LogitAttribution
from circuitwidgets.widgets.logit_lens import LogitLens
from circuitwidgets.widgets.neuron_sparsity import NeuronSparsity
from circuitwidgets.widgets.patching_map import PatchingMap
from circuitwidgets.widgets.skip_trigrams import SkipTrigramTable
from circuitwidgets.widgets.superposition import Superposition
from circuitwidgets.widgets.term_importance import TermImportance

__all__ = [
    "AttentionPatterns",
    "AttributionGraph",
    "CircuitExplorer",
    "CompositionMap",
    "CompositionVsPatching",
    "EigenScatter",
    "FeatureDashboard",
    "GrokkingScrubber",
    "HeadScores",
    "LogitAttribution",
    "LogitLens",
    "NeuronSparsity",
    "PatchingMap",
    "PromptFeatures",
    "SkipTrigramTable",
    "Superposition",
    "TermImportance",
    "TrainingHistory",
]
