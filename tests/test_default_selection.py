"""The views open on a head worth looking at, never on one picked by noise."""

from __future__ import annotations

import numpy as np

from circuitwidgets import EigenScatter


def _eigs(copying: float, n_layers: int = 1, n_heads: int = 3) -> np.ndarray:
    """Eigenvalues ``[L, H, 2]``: head 0 anti-copying, the last head copying with real part ``copying``."""
    e = np.full((n_layers, n_heads, 2), -1.0 + 0j)
    e[:, -1] = [copying, copying]
    return e


def test_without_an_induction_head_the_scatter_opens_on_the_strongest_copying_head() -> None:
    # a one-layer model: induction scores are noise (~0.01), head 0 has the largest of them
    induction = np.array([[0.013, 0.011, 0.010]], dtype=np.float32)
    w = EigenScatter.from_eigenvalues(_eigs(1.0), _eigs(1.0), detectors={"induction": induction})
    assert (w.selected_layer, w.selected_head) == (0, 2)
    assert w.scores[0, 0, 0, 2] > 0.9


def test_a_real_induction_head_is_the_default_selection() -> None:
    induction = np.zeros((2, 3), dtype=np.float32)
    induction[1, 1] = 0.58
    w = EigenScatter.from_eigenvalues(_eigs(1.0, 2), _eigs(1.0, 2), detectors={"induction": induction})
    assert (w.selected_layer, w.selected_head) == (1, 1)
