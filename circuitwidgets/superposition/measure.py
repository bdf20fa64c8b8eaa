"""The paper's measurements of trained toy models, on ``W [instances, m, n]`` (numpy or torch, any float dtype).

Definitions (*Toy Models of Superposition*): feature ``i``'s direction is column
``W_i``; ``Ŵ_i = W_i / ‖W_i‖``.

- norm ``‖W_i‖`` (a feature is *represented* when it is near 1; the paper draws the line at 0.5);
- superposition ``Σ_{j≠i} (Ŵ_i · W_j)²``: how much of the other features lies along feature ``i``;
- dimensions per feature ``m / ‖W‖_F²``;
- feature dimensionality ``D_i = ‖W_i‖² / Σ_j (Ŵ_i · W_j)²`` (1: a dimension of its own; 1/2: an
  antipodal pair; 2/5: a pentagon; 0 for a feature that is not represented).
"""

from __future__ import annotations

import numpy as np

from circuitwidgets.errors import ArgumentTypeError, NonFiniteError, ShapeError
from circuitwidgets.superposition._args import _as_float_array

__all__ = [
    "REPRESENTED",
    "STICKY_FRACTIONS",
    "angle_gaps",
    "angles",
    "dimensions_per_feature",
    "feature_dimensionality",
    "feature_norms",
    "interference",
    "represented",
    "superposition",
]

#: Norm above which a feature counts as represented (the paper's threshold).
REPRESENTED = 0.5

#: Feature dimensionalities the paper found features sticking to (1, 3/4, 2/3, 1/2, 2/5, 1/3), with their geometry.
STICKY_FRACTIONS: tuple[tuple[float, str], ...] = (
    (1.0, "dedicated dimension"),
    (3 / 4, "tetrahedron"),
    (2 / 3, "triangle"),
    (1 / 2, "antipodal pair"),
    (2 / 5, "pentagon"),
    (1 / 3, "triangle pair"),
)


def _weights(W: object) -> np.ndarray:
    """``W`` as float64 ``[instances, m, n]``: a real floating array or tensor, finite, with no empty axis."""
    raw = W.detach().cpu() if hasattr(W, "detach") else W
    kind = getattr(getattr(raw, "dtype", None), "kind", None) or str(getattr(raw, "dtype", ""))
    if isinstance(raw, (str, bytes, bool)) or kind in ("b", "O", "U", "S", "c") or "bool" in kind or "complex" in kind:
        raise ArgumentTypeError(f"W: expected real floating weights [instances, m, n], got {type(W).__name__} {kind}")
    array = _as_float_array("W", raw, "weights [instances, m, n] or [m, n]")
    if array.ndim == 2:
        array = array[None]
    if array.ndim != 3 or 0 in array.shape:
        raise ShapeError(f"W: expected [instances, m, n] or [m, n] with no empty axis, got shape {array.shape}")
    return array


def _threshold(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)):
        raise ArgumentTypeError(f"threshold: expected a number, got {type(value).__name__}")
    if not np.isfinite(value):
        raise NonFiniteError(f"threshold: expected a finite number, got {value}")
    return float(value)


def feature_norms(W: object) -> np.ndarray:
    """``‖W_i‖`` per instance and feature: ``[instances, n]``."""
    norms: np.ndarray = np.linalg.norm(_weights(W), axis=1)
    return norms


def represented(W: object, threshold: float = REPRESENTED) -> np.ndarray:
    """Whether each feature's norm exceeds ``threshold``: ``[instances, n]`` bool."""
    above: np.ndarray = feature_norms(W) > _threshold(threshold)
    return above


def interference(W: object) -> np.ndarray:
    """``(Ŵ_i · W_j)²`` for every pair: ``[instances, n, n]`` (row ``i``; zero rows for zero features)."""
    weights = _weights(W)
    norms = np.linalg.norm(weights, axis=1)
    unit = np.divide(weights, norms[:, None, :], out=np.zeros_like(weights), where=norms[:, None, :] > 0)
    pairs: np.ndarray = np.einsum("kmi,kmj->kij", unit, weights) ** 2
    return pairs


def superposition(W: object) -> np.ndarray:
    """``Σ_{j≠i} (Ŵ_i · W_j)²`` per instance and feature: ``[instances, n]``."""
    pairs = interference(W)
    others: np.ndarray = pairs.sum(axis=2) - np.einsum("kii->ki", pairs)
    return others


def dimensions_per_feature(W: object) -> np.ndarray:
    """``m / ‖W‖_F²`` per instance: ``[instances]`` (inf for an all-zero ``W``)."""
    weights = _weights(W)
    frobenius = (weights**2).sum(axis=(1, 2))
    with np.errstate(divide="ignore"):
        ratio: np.ndarray = weights.shape[1] / frobenius
    return ratio


def feature_dimensionality(W: object) -> np.ndarray:
    """``D_i = ‖W_i‖² / Σ_j (Ŵ_i · W_j)²`` per instance and feature: ``[instances, n]`` (0 where ``W_i = 0``)."""
    total = interference(W).sum(axis=2)
    squared = feature_norms(W) ** 2
    dimensionality: np.ndarray = np.divide(squared, total, out=np.zeros_like(total), where=total > 0)
    return dimensionality


def angles(W: object, threshold: float = REPRESENTED) -> list[np.ndarray]:
    """For ``m = 2``: per instance, the sorted angles (degrees in [0, 360)) of the represented features."""
    weights = _weights(W)
    if weights.shape[1] != 2:
        raise ShapeError(f"W: angles in the plane need m = 2 hidden dimensions, got m = {weights.shape[1]}")
    keep = represented(weights, _threshold(threshold))
    degrees = np.degrees(np.arctan2(weights[:, 1], weights[:, 0])) % 360.0
    return [np.sort(degrees[k][keep[k]]) for k in range(weights.shape[0])]


def angle_gaps(degrees: object) -> np.ndarray:
    """Gaps between consecutive sorted angles around the circle (they sum to 360)."""
    degrees = _as_float_array("degrees", degrees, "angles in degrees")
    if degrees.ndim != 1:
        raise ShapeError(f"degrees: expected a 1-D array of angles, got shape {degrees.shape}")
    if degrees.size == 0:
        return degrees
    ordered = np.sort(degrees)
    return np.diff(np.append(ordered, ordered[0] + 360.0))
