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
rises fastest. We report the evaluation at which it first reaches half of its
largest value over training (the midpoint of the rise), and the window from 10 %
to 90 % of that value.
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
        """Steps where the best induction score first reaches 10 %, 50 % and 90 % of its maximum.

        ``None`` for a model with fewer than two layers or no rise at all.
        """
        best = self.best_induction()
        top = float(best.max()) if best.size else 0.0
        if self.n_layers < 2 or top <= 0.0:
            return None
        marks = {}
        for name, fraction in (("start", 0.1), ("step", 0.5), ("end", 0.9)):
            index = int(np.argmax(best >= fraction * top))
            marks[name] = int(self.steps[index])
        return marks


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
        k_raw = _array(records, "k_composition", (max(L - 1, 0), H, H)) if L > 1 else np.full((len(records), 0, H, H), np.nan)
        k_best = np.full((len(records), L, H), np.nan)
        with np.errstate(all="ignore"):
            for layer in range(1, L):
                column = k_raw[:, layer - 1]  # [T, earlier, later]
                k_best[:, layer] = np.where(np.isnan(column).all(axis=1), np.nan, np.nanmax(np.nan_to_num(column, nan=-np.inf), axis=1))
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
