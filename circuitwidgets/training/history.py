"""A model's training history, read from its card: the curves of the induction-head phase change.

``circuitwidgets train`` logs, at every evaluation (see
:mod:`circuitwidgets.training.train`): the held-out loss, the in-context-learning
score of Olsson et al. (2022) (loss on predicted tokens 195–204 of a 256-token
held-out window minus loss on tokens 45–54; it falls below zero as the model
learns to use its context), and per head the previous-token and induction scores
on repeated random tokens, the OV copying score and the baseline-subtracted
K-composition from every earlier head. :class:`TrainingHistory` holds those
scalars as arrays; a card without them, or with malformed ones, gives ``None``
and a reason, never an exception.

The formation step: induction heads form where the best layer-1 induction score
rises fastest. We smooth that score over a twentieth of the evaluations, take the
step of its steepest rise, and the window around it where the rise stays at least
a quarter as steep. Slow gains later in training (a learning-rate anneal raises
every score) do not move the window, as fractions of the final maximum would.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

FloatArray = NDArray[np.float64]


@dataclass(frozen=True)
class TrainingHistory:
    """Scalars logged over training, one row per evaluation."""

    steps: NDArray[np.int64]
    """``[T]`` training step of each evaluation."""
    val_loss: FloatArray
    """``[T]`` held-out loss (nats)."""
    icl_score: FloatArray
    """``[T]`` in-context-learning score (nats; NaN where not logged)."""
    previous_token: FloatArray
    """``[T, n_layers, n_heads]`` previous-token score on repeated random tokens."""
    induction: FloatArray
    """``[T, n_layers, n_heads]`` induction score on repeated random tokens."""
    ov_copying: FloatArray
    """``[T, n_layers, n_heads]`` OV eigenvalue copying score (NaN where not logged)."""
    k_composition: FloatArray
    """``[T, n_layers, n_heads]`` strongest baseline-subtracted K-composition into each head from any
    head of the layer before (NaN in layer 0 and where not logged)."""

    @property
    def n_layers(self) -> int:
        """Layers of the model."""
        return int(self.induction.shape[1])

    @property
    def n_heads(self) -> int:
        """Heads per layer."""
        return int(self.induction.shape[2])

    def best_induction(self) -> FloatArray:
        """``[T]`` the largest induction score of any head after layer 0 at each evaluation."""
        if self.n_layers < 2:
            return np.zeros(len(self.steps))
        return np.asarray(self.induction[:, 1:].reshape(len(self.steps), -1).max(axis=1), dtype=np.float64)

    def formation(self) -> dict[str, int] | None:
        """The phase change: ``{"start", "step", "end"}`` of the best induction score's fastest rise.

        ``step`` is where the smoothed score rises most steeply; ``start`` and
        ``end`` bound the evaluations around it whose rise is at least
        :data:`STEEP_FRACTION` of that steepest rate. ``None`` for a model with
        fewer than two layers or a score that never rises.
        """
        logged = np.isfinite(self.best_induction())  # evaluations of older logs may lack the scores
        best, steps = self.best_induction()[logged], self.steps[logged]
        if self.n_layers < 2 or best.size < 2:
            return None
        rate = np.gradient(_moving_average(best, max(1, best.size // 20)), steps.astype(np.float64))
        peak = int(np.argmax(rate))
        if rate[peak] <= 0.0:
            return None
        steep = rate >= STEEP_FRACTION * rate[peak]
        lo, hi = peak, peak
        while lo > 0 and steep[lo - 1]:
            lo -= 1
        while hi < best.size - 1 and steep[hi + 1]:
            hi += 1
        return {"start": int(steps[lo]), "step": int(steps[peak]), "end": int(steps[hi])}


#: A phase-change window holds the evaluations rising at least this fraction of the steepest rate.
STEEP_FRACTION = 0.25


def _moving_average(values: FloatArray, span: int) -> FloatArray:
    """Centred mean over ``span`` evaluations, the ends padded with the end values (same length)."""
    padded = np.pad(values, (span // 2, span - 1 - span // 2), mode="edge")
    return np.convolve(padded, np.ones(span) / span, mode="valid")


def _array(records: list[dict[str, Any]], key: str, shape: tuple[int, ...]) -> FloatArray:
    """``records[i][key]`` stacked to ``[T, *shape]``; NaN rows where a record lacks the key."""
    out = np.full((len(records), *shape), np.nan)
    for i, record in enumerate(records):
        if key in record:
            value = np.asarray(record[key], dtype=np.float64)
            if value.shape != shape:
                raise ValueError(f"{key} at step {record.get('step')}: expected shape {shape}, got {value.shape}")
            out[i] = value
    return out


def history_from_log(records: object) -> tuple[TrainingHistory | None, str]:
    """``(history, "")`` from a training log (a list of evaluation records), or ``(None, reason)``."""
    if not isinstance(records, list) or not records:
        return None, "the card has no training log"
    if not all(isinstance(r, dict) and "step" in r and "induction" in r for r in records):
        return None, "the training log has no per-head detector scores"
    try:
        shape = np.asarray(records[-1]["induction"], dtype=np.float64).shape
        if len(shape) != 2:
            return None, f"the logged induction scores have shape {shape}, expected [n_layers, n_heads]"
        L, H = shape
        k_raw = (
            _array(records, "k_composition", (max(L - 1, 0), H, H))
            if L > 1
            else np.full((len(records), 0, H, H), np.nan)
        )
        k_best = np.full((len(records), L, H), np.nan)
        with np.errstate(all="ignore"):
            for layer in range(1, L):
                column = k_raw[:, layer - 1]  # [T, earlier, later]
                k_best[:, layer] = np.where(
                    np.isnan(column).all(axis=1), np.nan, np.nanmax(np.nan_to_num(column, nan=-np.inf), axis=1)
                )
        history = TrainingHistory(
            steps=np.asarray([int(r["step"]) for r in records], dtype=np.int64),
            val_loss=np.asarray([float(r.get("val_loss", np.nan)) for r in records]),
            icl_score=np.asarray([float(r.get("icl_score", np.nan)) for r in records]),
            previous_token=_array(records, "previous_token", (L, H)),
            induction=_array(records, "induction", (L, H)),
            ov_copying=_array(records, "ov_copying", (L, H)),
            k_composition=k_best,
        )
    except (TypeError, ValueError, KeyError) as exc:
        return None, f"the training log is malformed ({exc})"
    if np.any(np.diff(history.steps) <= 0):
        return None, "the training log's steps are not increasing"
    return history, ""


def history_from_card(card: object) -> tuple[TrainingHistory | None, str]:
    """The history in a shipped model's card (``card["training"]["log"]``), or ``(None, reason)``."""
    if not isinstance(card, dict):
        return None, "there is no model card"
    training = card.get("training")
    if not isinstance(training, dict):
        return None, "the card has no training record"
    return history_from_log(training.get("log"))
