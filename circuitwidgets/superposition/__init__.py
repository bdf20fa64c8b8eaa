"""Toy models of superposition (*Toy Models of Superposition*, Elhage et al., 2022): train, measure, map phases.

- :mod:`.model`: :class:`ToyModel` ``ReLU(WᵀW x + b)`` and the training step's gradient;
- :mod:`.train`: :func:`train_toy`, many instances in one batched loop, with snapshots to replay;
- :mod:`.measure`: the paper's measurements (norms, superposition, dimensionality, angles);
- :mod:`.phase`: the phase diagram of one extra feature.

An engine package: it imports :mod:`circuitwidgets.errors` only, never the
transformer engine nor the widgets.
"""

from __future__ import annotations

from circuitwidgets.superposition._args import MoreDimensionsThanFeaturesWarning
from circuitwidgets.superposition.model import ToyModel
from circuitwidgets.superposition.train import ToyResult, importance_decay, snapshot_steps, train_toy

__all__ = [
    "MoreDimensionsThanFeaturesWarning",
    "ToyModel",
    "ToyResult",
    "importance_decay",
    "snapshot_steps",
    "train_toy",
]
