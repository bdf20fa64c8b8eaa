"""Toy models of superposition (*Toy Models of Superposition*, Elhage et al., 2022): train, measure, map phases.

- :class:`ToyModel`, ``ReLU(WᵀW x + b)``, and :func:`train_toy`, many instances in
  one batched loop (a hand-written gradient and Adam; seeded), with weight
  snapshots to replay (:class:`ToyResult`);
- the paper's measurements: :func:`feature_norms`, :func:`superposition`,
  :func:`dimensions_per_feature`, :func:`feature_dimensionality`, :func:`represented`,
  :func:`angles` and :func:`angle_gaps` (for ``m = 2``);
- :func:`phase_diagram` (:class:`PhaseDiagram`): is one extra feature not represented,
  given a dedicated dimension, or put in superposition, across sparsity × relative importance.

An engine package: it imports ``circuitwidgets.errors`` only, never the
transformer engine nor the widgets.
"""

from __future__ import annotations

from circuitwidgets.superposition._args import MoreDimensionsThanFeaturesWarning
from circuitwidgets.superposition.measure import (
    angle_gaps,
    angles,
    dimensions_per_feature,
    feature_dimensionality,
    feature_norms,
    interference,
    represented,
    superposition,
)
from circuitwidgets.superposition.model import ToyModel
from circuitwidgets.superposition.phase import PhaseDiagram, classify_extra, phase_diagram
from circuitwidgets.superposition.train import ToyResult, importance_decay, snapshot_steps, train_toy

__all__ = [
    "MoreDimensionsThanFeaturesWarning",
    "PhaseDiagram",
    "ToyModel",
    "ToyResult",
    "angle_gaps",
    "angles",
    "classify_extra",
    "dimensions_per_feature",
    "feature_dimensionality",
    "feature_norms",
    "importance_decay",
    "interference",
    "phase_diagram",
    "represented",
    "snapshot_steps",
    "superposition",
    "train_toy",
]
