"""Scrub through a grokking run: the loss curves with the three phases marked, and at the scrubbed checkpoint the
embedding's Fourier norms per frequency and the neuron × frequency map (Nanda et al.'s progress measures).

Data traits (kernel → view): ``steps`` int32 ``[T]``, ``train_loss``, ``test_loss`` float32 ``[T]`` (the curves);
``checkpoint_steps`` int32 ``[C]``; ``restricted_loss``, ``excluded_loss`` float32 ``[C]``; ``fourier_norms``
float32 ``[C, F]`` (frequency 0 .. p // 2); ``neuron_frequency`` float16 ``[C, M, F]`` (neurons sorted by their
strongest frequency at the last checkpoint); ``key_frequencies``; ``phases`` ``[memorised, cleanup, grokked]``
(steps, -1 where not reached). Selection (view ↔ kernel): ``selected_checkpoint``, an index into ``checkpoint_steps``.
Everything the view draws is in these traits, so scrubbing works in an exported page with no kernel.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import traitlets

from circuitwidgets.errors import ArgumentTypeError
from circuitwidgets.training.grokking import GrokHistory, ProgressMeasures, find_phases, progress_measures
from circuitwidgets.widgets.core.arrays import NDArrayTrait
from circuitwidgets.widgets.core.base import CircuitWidget
from circuitwidgets.widgets.core.spec import Size, view_data, view_setting
from circuitwidgets.widgets.core.traits import Integer, SelectionIndex

__all__ = ["GrokkingScrubber"]


class GrokkingScrubber(CircuitWidget):
    """A training scrubber for a grokking run (:mod:`circuitwidgets.training.grokking`).

    Build it with :meth:`from_history` (a live run or :func:`~circuitwidgets.training.grokking.load_pretrained`).
    """

    _view = traitlets.Unicode("grokking").tag(sync=True)
    _prefix = "grokking"

    title = view_data(traitlets.Unicode(""))
    """Caption (the task)."""

    steps = view_data(NDArrayTrait(dtype="int32", dims=("n_evals",)))
    """int32 ``[T]``: steps at which the curves were measured."""

    train_loss = view_data(NDArrayTrait(dtype="float32", dims=("n_evals",)))
    """float32 ``[T]``: loss on the training pairs (nats)."""

    test_loss = view_data(NDArrayTrait(dtype="float32", dims=("n_evals",)))
    """float32 ``[T]``: loss on the test pairs (nats)."""

    checkpoint_steps = view_data(NDArrayTrait(dtype="int32", dims=("n_checkpoints",)))
    """int32 ``[C]``: the checkpoints' steps."""

    restricted_loss = view_data(NDArrayTrait(dtype="float32", dims=("n_checkpoints",)))
    """float32 ``[C]``: loss of the logits restricted to the key frequencies (training pairs)."""

    excluded_loss = view_data(NDArrayTrait(dtype="float32", dims=("n_checkpoints",)))
    """float32 ``[C]``: loss of the logits with the key frequencies removed (training pairs)."""

    fourier_norms = view_data(NDArrayTrait(dtype="float32", dims=("n_checkpoints", "n_frequencies")))
    """float32 ``[C, F]``: the embedding's norm along each frequency."""

    neuron_frequency = view_data(NDArrayTrait(dtype="float16", dims=("n_checkpoints", "n_neurons", "n_frequencies")))
    """float16 ``[C, M, F]``: each neuron's share of variance per frequency (neurons in display order)."""

    key_frequencies = view_data(traitlets.List(Integer()))
    """The key frequencies (of the last checkpoint)."""

    phases = view_data(traitlets.List(Integer()))
    """``[memorised, cleanup, grokked]`` steps (-1: not reached)."""

    selected_checkpoint = view_setting(SelectionIndex("n_checkpoints"))
    """Index of the scrubbed checkpoint."""

    n_checkpoints = Size("n_checkpoints")

    @classmethod
    def from_history(
        cls, history: GrokHistory, measures: ProgressMeasures | None = None, **kwargs: Any
    ) -> GrokkingScrubber:
        """The scrubber of ``history`` (``measures``: computed with :func:`progress_measures` when not given)."""
        if not isinstance(history, GrokHistory):
            raise ArgumentTypeError(f"history: expected a grokking GrokHistory, got {type(history).__name__}")
        m = progress_measures(history) if measures is None else measures
        phases = find_phases(history, m)
        order = np.lexsort((-m.neuron_frequency[-1].max(axis=1), m.neuron_frequency[-1].argmax(axis=1)))
        cfg = history.config
        data: dict[str, Any] = {
            "title": f"(a + b) mod {cfg.p}, {cfg.fraction:.0%} of pairs for training",
            "steps": history.steps.astype(np.int32),
            "train_loss": history.train_loss.astype(np.float32),
            "test_loss": history.test_loss.astype(np.float32),
            "checkpoint_steps": m.steps.astype(np.int32),
            "restricted_loss": m.restricted_loss.astype(np.float32),
            "excluded_loss": m.excluded_loss.astype(np.float32),
            "fourier_norms": m.fourier_norms.astype(np.float32),
            "neuron_frequency": m.neuron_frequency[:, order].astype(np.float16),
            "key_frequencies": list(m.key_frequencies),
            "phases": [-1 if s is None else s for s in (phases.memorised, phases.cleanup, phases.grokked)],
            "selected_checkpoint": len(m.steps) - 1,
        }
        return cls(**{**data, **kwargs})
