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
    grid_pass,
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
        acts, logits = grid_pass(w)  # one pass over the p² pairs serves every measure
        norms.append(fourier_norms(w).numpy())
        restricted.append(restricted_loss(w, keys, train_idx, logits))
        excluded.append(excluded_loss(w, keys, train_idx, logits))
        squares.append(sum_squared_weights(w))
        neurons.append(neuron_frequency_map(w, acts).float().numpy())
    return ProgressMeasures(
        np.asarray(steps, dtype=np.int64),
        list(keys),
        np.stack(norms),
        np.asarray(restricted),
        np.asarray(excluded),
        np.asarray(squares),
        np.stack(neurons),
    )


@dataclass(frozen=True)
class Phases:
    """Where the measurements put the three phases (steps; each ``None`` when the run never got there).

    - ``memorised``: the first measured step with train accuracy 100 % (memorisation ends, circuit formation starts);
    - ``cleanup``: the first checkpoint after it at which the restricted loss is below the excluded loss: the key
      frequencies alone fit the training pairs better than everything else without them (cleanup starts);
    - ``grokked``: the first measured step after it with test accuracy >= 99 % (cleanup has removed the memorised
      noise; the test loss has fallen).
    """

    memorised: int | None
    cleanup: int | None
    grokked: int | None


def find_phases(history: GrokHistory, measures: ProgressMeasures) -> Phases:
    """The phase boundaries of ``history`` from its curves and its progress measures (see :class:`Phases`)."""
    full = np.nonzero(history.train_accuracy >= 1.0)[0]
    if not full.size:
        return Phases(None, None, None)
    memorised = int(history.steps[full[0]])
    crossed = np.nonzero((measures.steps > memorised) & (measures.restricted_loss < measures.excluded_loss))[0]
    if not crossed.size:
        return Phases(memorised, None, None)
    cleanup = int(measures.steps[crossed[0]])
    done = np.nonzero((history.steps > cleanup) & (history.test_accuracy >= 0.99))[0]
    return Phases(memorised, cleanup, int(history.steps[done[0]]) if done.size else None)
