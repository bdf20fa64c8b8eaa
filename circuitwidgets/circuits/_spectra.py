"""Summaries of eigenvalue spectra shared by the copying and same-matching analyses."""

from __future__ import annotations

import numpy as np


def sorted_by_magnitude(eigs: np.ndarray) -> np.ndarray:
    """Eigenvalues along the last axis sorted by decreasing magnitude (stable for ties)."""
    order = np.argsort(-np.abs(eigs), axis=-1, kind="stable")
    return np.take_along_axis(eigs, order, axis=-1)


def eigen_score(eigs: np.ndarray) -> np.ndarray:
    """``Σλ / Σ|λ|`` over the last axis of complex eigenvalues (NaN where all are zero)."""
    total = eigs.sum(axis=-1).real
    magnitude = np.abs(eigs).sum(axis=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(magnitude > 0, total / np.where(magnitude > 0, magnitude, 1.0), np.nan)
