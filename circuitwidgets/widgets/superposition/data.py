"""Trait payloads of the superposition view, computed by the engine (:mod:`circuitwidgets.superposition`).

Every model the view can show is a *trajectory*: its weights at the training
snapshots and the paper's measurements of each snapshot, as float32 arrays
whose leading axes index the model. The slider grid holds ``[P, D, T, …]``
(feature probability × importance decay × snapshot); a live retrain holds
``[1, 1, T, …]``, the same layout, so the view reads both one way.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from circuitwidgets.superposition import ToyResult, importance_decay, train_toy
from circuitwidgets.superposition.measure import feature_dimensionality, feature_norms, superposition
from circuitwidgets.superposition.phase import CLEAN_STEPS, CLEAN_TRIES, PhaseDiagram, phase_diagram

__all__ = ["FIELDS", "Recipe", "grid_data", "phase_data", "trajectory"]

#: The per-model arrays (suffixes of the ``grid_*`` and ``live_*`` traits).
FIELDS = ("W", "b", "loss", "norms", "superposition", "dimensionality", "gram")


class Recipe:
    """How the view's models are trained: ``n`` features in ``m`` dimensions, ``steps`` of ``batch`` at ``lr``.

    The interactive default (2,000 steps at lr 5e-3) reaches the geometry the
    paper's recipe (10,000 steps at 1e-3) does on the 5 → 2 models (the
    benchmark and the notebook check it) in a fifth of the steps.
    """

    def __init__(
        self,
        n: int,
        m: int,
        steps: int = 2_000,
        batch: int = 1024,
        lr: float = 5e-3,
        snapshots: int = 30,
        seed: int = 0,
    ) -> None:
        self.n, self.m, self.steps, self.batch, self.lr, self.snapshots, self.seed = (
            n,
            m,
            steps,
            batch,
            lr,
            snapshots,
            seed,
        )

    def train(self, probability: np.ndarray, decay: np.ndarray, **kwargs: Any) -> ToyResult:
        """One batched run: instance ``k`` has feature probability ``probability[k]`` and importance ``decay[k]^i``."""
        importance = np.stack([importance_decay(self.n, float(d)) for d in decay])
        return train_toy(
            self.n,
            self.m,
            sparsity=1.0 - np.asarray(probability, dtype=np.float64),
            importance=importance,
            steps=self.steps,
            batch=self.batch,
            lr=self.lr,
            snapshots=self.snapshots,
            seed=self.seed,
            **kwargs,
        )

    def words(self) -> str:
        """The recipe as the view states it."""
        return (
            f"{self.n} features in {self.m} dimensions; Adam lr {self.lr:g}, {self.steps:,} steps of {self.batch:,}, "
            f"seed {self.seed}; importance decay^i"
        )


def trajectory(result: ToyResult, shape: tuple[int, ...]) -> dict[str, np.ndarray]:
    """The :data:`FIELDS` of every instance of ``result`` over its snapshots, instances reshaped to ``shape``."""
    snaps = result.snapshot_W.transpose(1, 0, 2, 3)  # [instances, T, m, n]
    _, count, m, n = snaps.shape
    flat = snaps.reshape(-1, m, n)
    bias = result.snapshot_b.transpose(1, 0, 2).reshape(-1, n)  # [instances × T, n]
    gram = np.einsum("kmi,kmj->kij", flat.astype(np.float64), flat.astype(np.float64))
    arrays = {
        "W": flat,
        "b": bias,
        "loss": result.snapshot_loss.T.reshape(-1),
        "norms": feature_norms(flat),
        "superposition": superposition(flat),
        "dimensionality": feature_dimensionality(flat),
        "gram": gram,
    }
    return {
        k: np.ascontiguousarray(v.reshape(*shape, count, *v.shape[1:]), dtype=np.float32) for k, v in arrays.items()
    }


def grid_data(recipe: Recipe, probabilities: np.ndarray, decays: np.ndarray) -> dict[str, Any]:
    """Train the slider grid (one batched run) and return its ``grid_*`` traits."""
    p, d = np.meshgrid(probabilities, decays, indexing="ij")
    result = recipe.train(p.reshape(-1), d.reshape(-1))
    arrays = trajectory(result, (len(probabilities), len(decays)))
    return {
        "grid_probability": np.asarray(probabilities, dtype=np.float32),
        "grid_decay": np.asarray(decays, dtype=np.float32),
        "snapshot_steps": result.snapshot_steps.astype(np.int32),
        **{f"grid_{k}": v for k, v in arrays.items()},
    }


def phase_data(diagram: PhaseDiagram | None) -> dict[str, Any]:
    """The ``phase_*`` traits of a phase diagram (empty arrays for none)."""
    if diagram is None:
        return {
            "phase_densities": np.zeros(0, dtype=np.float32),
            "phase_ratios": np.zeros(0, dtype=np.float32),
            "phase": np.zeros((0, 0), dtype=np.int8),
            "phase_norm": np.zeros((0, 0), dtype=np.float32),
        }
    return {
        "phase_densities": diagram.densities.astype(np.float32),
        "phase_ratios": diagram.ratios.astype(np.float32),
        "phase": diagram.phase.astype(np.int8),
        "phase_norm": diagram.norm.astype(np.float32),
    }


def default_phase() -> PhaseDiagram:
    """The view's phase diagram: 6 densities × 6 relative importances of ``n = 2, m = 1``, the best of
    :data:`~circuitwidgets.superposition.phase.CLEAN_TRIES` tries of ``CLEAN_STEPS`` steps per cell (chosen by
    measurement: see there)."""
    return phase_diagram(np.logspace(0, -2, 6), np.logspace(-1, 1, 6), tries=CLEAN_TRIES, steps=CLEAN_STEPS)
