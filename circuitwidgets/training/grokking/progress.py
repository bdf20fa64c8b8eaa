"""The progress measures over a run, at every checkpoint, and the three phases they mark.

:func:`progress_measures` computes, at each checkpoint of a
:class:`~circuitwidgets.training.grokking.train.GrokHistory`, the embedding's
Fourier norms, the restricted and excluded losses (with the key frequencies of
the last checkpoint, as the paper does), the sum of squared weights and the
neuron × frequency map: what a scrubber replays.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from circuitwidgets.errors import ArgumentError
from circuitwidgets.training.grokking.measures import (
    excluded_loss,
    fourier_norms,
    key_frequencies,
    neuron_frequency_map,
    restricted_loss,
    sum_squared_weights,
)
from circuitwidgets.training.grokking.model import split
from circuitwidgets.training.grokking.train import GrokHistory


@dataclass
class ProgressMeasures:
    """The measures at each checkpoint step.

    Attributes
    ----------
    steps : numpy.ndarray
        Checkpoint steps, ascending.
    key_frequencies : list[int]
        The key frequencies of the last checkpoint (used for every step's restricted and excluded loss).
    fourier_norms : numpy.ndarray
        ``[step, p // 2 + 1]``: the embedding's norm per frequency.
    restricted_loss, excluded_loss, sum_squared_weights : numpy.ndarray
        ``[step]``.
    neuron_frequency : numpy.ndarray
        ``[step, d_mlp, p // 2 + 1]`` float32: each neuron's variance fraction per frequency.
    """

    steps: np.ndarray
    key_frequencies: list[int]
    fourier_norms: np.ndarray
    restricted_loss: np.ndarray
    excluded_loss: np.ndarray
    sum_squared_weights: np.ndarray
    neuron_frequency: np.ndarray


def progress_measures(history: GrokHistory, keys: list[int] | None = None) -> ProgressMeasures:
    """Every measure at every checkpoint of ``history`` (``keys``: default, the last checkpoint's key frequencies)."""
    if not history.checkpoints:
        raise ArgumentError("history: expected a history with checkpoints, got one with none")
    steps = sorted(history.checkpoints)
    train_idx, _ = split(history.config)
    if keys is None:
        keys = key_frequencies(fourier_norms(history.checkpoints[steps[-1]]))
    norms, restricted, excluded, squares, neurons = [], [], [], [], []
    for step in steps:
        w = history.checkpoints[step]
        norms.append(fourier_norms(w).numpy())
        restricted.append(restricted_loss(w, keys, train_idx))
        excluded.append(excluded_loss(w, keys, train_idx))
        squares.append(sum_squared_weights(w))
        neurons.append(neuron_frequency_map(w).float().numpy())
    return ProgressMeasures(
        np.asarray(steps, dtype=np.int64),
        list(keys),
        np.stack(norms),
        np.asarray(restricted),
        np.asarray(excluded),
        np.asarray(squares),
        np.stack(neurons),
    )
