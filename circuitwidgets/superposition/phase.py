"""The paper's phase diagram for one extra feature: is it not represented, given a dimension, or in superposition?

Models with ``n`` features in ``m`` dimensions (the paper's smallest case is
``n = 2, m = 1``): features ``0 .. n−2`` have importance 1, the last (the
*extra* feature) has importance ``r`` relative to them, and all share one
feature probability ``1 − S``. Every cell (density × relative importance ×
``tries`` seeds) is one instance of a single :func:`train_toy` run; per cell the
try with the lowest loss on a shared evaluation batch is kept (training from
a poor start can end in a local minimum, as the paper notes). The extra
feature's phase is then read from the trained weights:

- *not represented*: its norm is at most 0.5;
- *superposition*: represented, and the other features put more than 0.5 along it
  (``Σ_{j≠i} (Ŵ_i·W_j)² > 0.5``);
- *dedicated dimension*: represented, with little else along it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from circuitwidgets.errors import ArgumentError
from circuitwidgets.superposition import _args
from circuitwidgets.superposition.measure import REPRESENTED, feature_norms, superposition
from circuitwidgets.superposition.train import train_toy

__all__ = ["CLEAN_STEPS", "CLEAN_TRIES", "PHASES", "PhaseDiagram", "classify_extra", "phase_diagram"]

#: Tries and steps per cell of the view's default diagram (``Superposition()`` without ``phase=``), chosen by
#: measurement on its 6 densities × 6 ratios (1 to 0.01, 0.1 to 10), batch 256: with 2 tries of 2,000 steps
#: three cells differed from what more tries find (r = 1.6 at 1 − S = 0.01 "dedicated" among superposition cells,
#: r = 0.63 at 1 − S = 0.063 "not represented" between superposition cells, r = 0.1 at 1 − S = 0.16 "not
#: represented"); more steps alone (6,000; 12,000 at batch 1,024) changed nothing, 4 tries fixed the first and
#: the last, and 6 tries of 3,000 steps all three, giving the paper's picture: along each row the phase changes
#: once, from dedicated or not represented (dense) to superposition (sparse). It costs 4.8 times the old
#: default (65.7 s against 13.7 s on one thread of a shared 2-core machine at load 14).
CLEAN_TRIES = 6
CLEAN_STEPS = 3_000

#: Phase names, indexed by the codes of :attr:`PhaseDiagram.phase`.
PHASES = ("not represented", "dedicated dimension", "superposition")


@dataclass
class PhaseDiagram:
    """``phase [ratios, densities]`` (codes into ``PHASES``: not represented, dedicated dimension, superposition), the extra feature's ``norm`` and ``superposition``.

    ``densities`` are feature probabilities ``1 − S``; ``ratios`` the extra
    feature's relative importance; ``W [ratios, densities, m, n]`` the kept models.
    """

    densities: np.ndarray
    ratios: np.ndarray
    phase: np.ndarray
    norm: np.ndarray
    superposition: np.ndarray
    W: np.ndarray
    seconds: float

    def phase_at(self, density: float, ratio: float) -> str:
        """The phase of the cell nearest (in log scale) to ``density`` and ``ratio``."""
        row = int(np.argmin(np.abs(np.log(self.ratios) - np.log(ratio))))
        column = int(np.argmin(np.abs(np.log(self.densities) - np.log(density))))
        return PHASES[int(self.phase[row, column])]


def classify_extra(W: np.ndarray, threshold: float = 0.5) -> np.ndarray:
    """Phase code of the last feature of each model in ``W [instances, m, n]`` (see the module's docstring)."""
    norm = feature_norms(W)[:, -1]
    shared = superposition(W)[:, -1]
    return np.where(norm <= REPRESENTED, 0, np.where(shared > threshold, 2, 1))


def phase_diagram(
    densities: object = None,
    ratios: object = None,
    *,
    n: int = 2,
    m: int = 1,
    tries: int = 2,
    steps: int = 3_000,
    batch: int = 256,
    lr: float = 1e-2,
    seed: int = 0,
) -> PhaseDiagram:
    """Train the grid of one-extra-feature models and classify the extra feature in each cell.

    Defaults: 7 densities from 1 to 0.01 and 7 relative importances from 0.1
    to 10 (log-spaced), ``n = 2`` features in ``m = 1`` dimension, 2 tries per
    cell, 3,000 steps of 256 at ``lr = 1e-2`` (a larger rate than the 5→2 models
    use: these models have 3 parameters).
    """
    n, m = _args.shape_of_model(n, m)
    if n < 2:
        raise ArgumentError(f"n: expected at least 2 features (one extra), got {n}")
    density = _grid("densities", densities, np.logspace(0, -2, 7), upper=1.0)
    ratio = _grid("ratios", ratios, np.logspace(-1, 1, 7), upper=None)
    tries = _args.positive_int("tries", tries)
    cells = [(r, d, t) for r in ratio for d in density for t in range(tries)]
    importance = np.ones((len(cells), n))
    importance[:, -1] = [r for r, _, _ in cells]
    result = train_toy(
        n,
        m,
        sparsity=np.array([1.0 - d for _, d, _ in cells]),
        importance=importance,
        steps=steps,
        batch=batch,
        lr=lr,
        seed=seed,
        snapshots=1,
    )
    losses = _evaluation_loss(result.W, result.b, importance, np.array([d for _, d, _ in cells]), seed)
    best = losses.reshape(-1, tries).argmin(axis=1) + np.arange(0, len(cells), tries)
    W = result.W[best]
    shape = (len(ratio), len(density))
    return PhaseDiagram(
        densities=density,
        ratios=ratio,
        phase=classify_extra(W).reshape(shape),
        norm=feature_norms(W)[:, -1].reshape(shape),
        superposition=superposition(W)[:, -1].reshape(shape),
        W=W.reshape(*shape, m, n),
        seconds=result.seconds,
    )


def _grid(name: str, value: object, default: np.ndarray, upper: float | None) -> np.ndarray:
    if value is None:
        return default
    array = np.atleast_1d(np.asarray(value, dtype=np.float64))
    if array.ndim != 1 or array.size == 0 or not np.isfinite(array).all() or (array <= 0).any():
        raise ArgumentError(f"{name}: expected a non-empty list of finite positive numbers, got {value!r}")
    if upper is not None and (array > upper).any():
        raise ArgumentError(f"{name}: expected values in (0, {upper}], got {float(array.max())}")
    return array


def _evaluation_loss(
    W: np.ndarray, b: np.ndarray, importance: np.ndarray, density: np.ndarray, seed: int
) -> np.ndarray:
    """Each model's loss on one shared batch of 8,192 samples per instance (float64)."""
    from circuitwidgets.superposition.model import ToyModel

    model = ToyModel(
        W=torch.as_tensor(W, dtype=torch.float64),
        b=torch.as_tensor(b, dtype=torch.float64),
        importance=torch.as_tensor(importance, dtype=torch.float64),
        feature_probability=torch.as_tensor(density, dtype=torch.float64),
    )
    generator = torch.Generator().manual_seed(seed + 1)
    return model.loss(model.sample(8192, generator)).numpy()
