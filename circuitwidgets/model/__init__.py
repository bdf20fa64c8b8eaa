"""The canonical model: configuration, weights, forward pass, and their files.

- :mod:`~circuitwidgets.model.config`: :class:`ModelConfig`, every architectural feature;
- :mod:`~circuitwidgets.model.weights`: the canonical tensors and their validation;
- :mod:`~circuitwidgets.model.core`: :class:`CircuitModel` and its forward pass;
- :mod:`~circuitwidgets.model.forward`, :mod:`~circuitwidgets.model.rotary`: the pieces of that pass;
- :mod:`~circuitwidgets.model.cache`: :class:`ActivationCache`;
- :mod:`~circuitwidgets.model.io`: saving and loading model directories.
"""

from __future__ import annotations

from circuitwidgets.model.cache import ActivationCache
from circuitwidgets.model.config import ACTIVATIONS, NORMALIZATIONS, POSITIONAL_SCHEMES, QK_NORMS, ModelConfig
from circuitwidgets.model.core import CircuitModel
from circuitwidgets.model.run import FORWARD_MEMORY_BUDGET
from circuitwidgets.model.weights import REQUIRED_WEIGHTS, expected_shapes, validate_weights

__all__ = [
    "ACTIVATIONS",
    "FORWARD_MEMORY_BUDGET",
    "NORMALIZATIONS",
    "POSITIONAL_SCHEMES",
    "QK_NORMS",
    "REQUIRED_WEIGHTS",
    "ActivationCache",
    "CircuitModel",
    "ModelConfig",
    "expected_shapes",
    "validate_weights",
]
