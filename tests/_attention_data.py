"""Inputs the attention widget's tests share."""

from __future__ import annotations

import numpy as np

IDS = [1, 7, 3, 9, 4, 1, 7, 3, 9, 4, 1, 7]  # a repeated sequence, period 5


def causal_patterns(n_layers: int, n_heads: int, n: int, seed: int = 0) -> np.ndarray:
    """Random row-normalised causal patterns ``[n_layers, n_heads, n, n]`` (float32)."""
    rng = np.random.default_rng(seed)
    a = rng.random((n_layers, n_heads, n, n)) * np.tril(np.ones((n, n)))
    return (a / a.sum(-1, keepdims=True)).astype(np.float32)
