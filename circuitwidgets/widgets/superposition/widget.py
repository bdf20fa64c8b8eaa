"""``Superposition``: toy models of superposition you can play with (*Toy Models of Superposition*, 2022).

Five panels over one trained toy model ``ReLU(WᵀW x + b)`` and the grid around it:
the features' directions in the hidden space (arrows for ``m = 2``; for ``m > 2``
the first two hidden dimensions, as the view states), ``WᵀW`` beside each
feature's norm coloured by its superposition, feature dimensionality against
``1/(1 − S)`` with the sticky fractions, and the phase diagram of one extra
feature. Sliders choose the feature probability ``1 − S`` and the importance
decay; a scrubber replays training.

In a live kernel a slider retrains that model in the kernel (the latest request
supersedes a running one; closing the widget stops it). The slider grid is
trained up front (one batched run), so in an exported page, with no kernel,
the sliders move over the grid and the scrubber replays any of its models.

Data traits (kernel → view): ``grid_W`` float32 ``[P, D, T, m, n]`` and
``grid_loss [P, D, T]``, ``grid_norms``, ``grid_superposition``,
``grid_dimensionality`` ``[P, D, T, n]``, ``grid_gram [P, D, T, n, n]`` over
``grid_probability [P]`` × ``grid_decay [D]`` and ``snapshot_steps [T]``; the
live model's ``live_*`` in the same layout with ``P = D = 1``; the phase
diagram's ``phase [R, Q]`` (codes: not represented, dedicated dimension,
superposition) over ``phase_densities [Q]`` × ``phase_ratios [R]``.
"""

from __future__ import annotations

import math
import threading
from typing import Any

import numpy as np
import traitlets

from circuitwidgets.errors import ArgumentError
from circuitwidgets.superposition import ToyResult
from circuitwidgets.superposition._args import positive_int
from circuitwidgets.superposition.phase import PhaseDiagram
from circuitwidgets.widgets.core.arrays import NDArrayTrait
from circuitwidgets.widgets.core.base import CircuitWidget
from circuitwidgets.widgets.core.spec import Size, kernel_reply, shown, trait_error, view_data, view_setting
from circuitwidgets.widgets.core.traits import Checked, SelectionIndex
from circuitwidgets.widgets.superposition.data import FIELDS, Recipe, default_phase, grid_data, phase_data, trajectory
from circuitwidgets.widgets.superposition.live import Retrainer

__all__ = ["Superposition"]

_GRID = ("n_probabilities", "n_decays", "n_snapshots")
_LIVE = ("live_probabilities", "live_decays", "n_live_snapshots")
_F = "n_features"


def _array(*dims: str) -> NDArrayTrait:
    return view_data(NDArrayTrait(dtype="float32", dims=dims))


class Fraction(Checked, traitlets.Float):  # type: ignore[type-arg]
    """A finite float in ``(low, high]`` (a slider's value)."""

    def __init__(self, low: float, high: float, default_value: float, **kwargs: Any) -> None:
        super().__init__(default_value=default_value, **kwargs)
        self.low, self.high = low, high

    def check(self, obj: Any, view: Any, value: Any) -> float:
        if isinstance(value, bool) or not (math.isfinite(value) and self.low < value <= self.high):
            raise trait_error(obj, self.name, f"a number in ({self.low}, {self.high}]", shown(value))
        return float(value)


class Superposition(CircuitWidget):
    """Toy models of superposition, trained here and now: geometry, ``WᵀW``, dimensionality, phases (see the module)."""

    _view = traitlets.Unicode("superposition").tag(sync=True)
    _prefix = "superposition"

    grid_probability = view_data(NDArrayTrait(dtype="float32", dims=("n_probabilities",)))
    """float32 ``[P]``: the slider grid's feature probabilities ``1 − S`` (decreasing)."""
    grid_decay = view_data(NDArrayTrait(dtype="float32", dims=("n_decays",)))
    """float32 ``[D]``: the slider grid's importance decays (importance of feature ``i`` is ``decay^i``)."""
    snapshot_steps = view_data(NDArrayTrait(dtype="int32", dims=("n_snapshots",)))
    """int32 ``[T]``: the training step of each snapshot."""
    grid_W = _array(*_GRID, "m", _F)  # noqa: N815 — the paper's W
    """float32 ``[P, D, T, m, n]``: each grid model's weights at each snapshot (column ``i``: feature ``i``)."""
    grid_loss = _array(*_GRID)
    """float32 ``[P, D, T]``: loss on the snapshot step's batch."""
    grid_norms = _array(*_GRID, _F)
    """float32 ``[P, D, T, n]``: ``‖W_i‖``."""
    grid_superposition = _array(*_GRID, _F)
    """float32 ``[P, D, T, n]``: ``Σ_{j≠i} (Ŵ_i·W_j)²``."""
    grid_dimensionality = _array(*_GRID, _F)
    """float32 ``[P, D, T, n]``: feature dimensionality ``D_i``."""
    grid_gram = _array(*_GRID, _F, "n_features_")
    """float32 ``[P, D, T, n, n]``: ``WᵀW``."""
    grid_b = _array(*_GRID, _F)
    """float32 ``[P, D, T, n]``: each grid model's output bias ``b`` at each snapshot."""
    live_W = _array(*_LIVE, "m", _F)  # noqa: N815
    """float32 ``[1, 1, T, m, n]``: the model at the sliders' values (a grid cell, or retrained in the kernel)."""
    live_b = _array(*_LIVE, _F)
    """float32 ``[1, 1, T, n]``: the live model's ``b``."""
    live_loss = _array(*_LIVE)
    """float32 ``[1, 1, T]``: its loss."""
    live_norms = _array(*_LIVE, _F)
    """float32 ``[1, 1, T, n]``: its ``‖W_i‖``."""
    live_superposition = _array(*_LIVE, _F)
    """float32 ``[1, 1, T, n]``: its superposition per feature."""
    live_dimensionality = _array(*_LIVE, _F)
    """float32 ``[1, 1, T, n]``: its feature dimensionality."""
    live_gram = _array(*_LIVE, _F, "n_features_")
    """float32 ``[1, 1, T, n, n]``: its ``WᵀW``."""
    phase_densities = view_data(NDArrayTrait(dtype="float32", dims=("n_phase_densities",)))
    """float32 ``[Q]``: the phase diagram's feature probabilities."""
    phase_ratios = view_data(NDArrayTrait(dtype="float32", dims=("n_phase_ratios",)))
    """float32 ``[R]``: the phase diagram's relative importances of the extra feature."""
    phase = view_data(NDArrayTrait(dtype="int8", dims=("n_phase_ratios", "n_phase_densities")))
    """int8 ``[R, Q]``: 0 not represented, 1 dedicated dimension, 2 superposition."""
    phase_norm = view_data(NDArrayTrait(dtype="float32", dims=("n_phase_ratios", "n_phase_densities")))
    """float32 ``[R, Q]``: the extra feature's norm."""
    recipe = view_data(traitlets.Unicode(""))
    """How the models were trained, in words."""

    feature_probability = view_setting(Fraction(0.0, 1.0, default_value=1.0))
    """The slider: feature probability ``1 − S`` of the model shown (a live kernel retrains at any value)."""
    decay = view_setting(Fraction(0.0, 1.0, default_value=1.0))
    """The slider: importance decay of the model shown."""
    step = view_setting(SelectionIndex("n_snapshots", default_value=0))
    """The scrubber: index of the snapshot shown (the last one is the trained model)."""
    selected_feature = view_setting(SelectionIndex("n_features", optional=True, default_value=-1))
    """The selected feature (−1: none); linked views follow it."""

    live_probability = kernel_reply(traitlets.Float(-1.0))
    """Feature probability the ``live_*`` arrays were trained at (−1: none yet)."""
    live_decay = kernel_reply(traitlets.Float(-1.0))
    """Importance decay the ``live_*`` arrays were trained at."""
    training = kernel_reply(traitlets.Unicode(""))
    """What the kernel is doing: ``""`` (idle), ``"training"``, or why the last retrain failed."""

    n_features = Size("n_features")
    n_snapshots = Size("n_snapshots")

    def __init__(
        self,
        n: int = 5,
        m: int = 2,
        *,
        probabilities: object = None,
        decays: object = (1.0, 0.9, 0.7),
        phase: PhaseDiagram | bool = True,
        steps: int = 2_000,
        lr: float = 5e-3,
        snapshots: int = 30,
        seed: int = 0,
        **kwargs: Any,
    ) -> None:
        """Train the slider grid (``probabilities`` × ``decays``; default 7 probabilities from 1 to 0.01) and,
        unless ``phase=False`` or a :class:`~circuitwidgets.superposition.PhaseDiagram` is given, the phase diagram.
        """
        self._recipe = Recipe(n, m, steps=steps, lr=lr, snapshots=snapshots, seed=seed)
        grid_p = _fractions("probabilities", probabilities, np.logspace(0, -2, 7))
        grid_d = _fractions("decays", decays, None)
        diagram = default_phase() if phase is True else (phase if isinstance(phase, PhaseDiagram) else None)
        data = {**grid_data(self._recipe, grid_p, grid_d), **phase_data(diagram), "recipe": self._recipe.words()}
        start = {"feature_probability": float(grid_p[len(grid_p) // 2]), "decay": float(grid_d[0])}
        count = len(data["snapshot_steps"])
        super().__init__(**{**data, **start, "step": count - 1, **kwargs})
        self._retrainer = Retrainer(self._train_one, self._publish, self._failed)
        self._show(self.feature_probability, self.decay)
        self.observe(self._on_slider, names=["feature_probability", "decay"])

    def _cell(self, probability: float, decay: float) -> tuple[int, int] | None:
        p = np.flatnonzero(np.isclose(self.grid_probability, probability, rtol=1e-5))
        d = np.flatnonzero(np.isclose(self.grid_decay, decay, rtol=1e-5))
        return (int(p[0]), int(d[0])) if p.size and d.size else None

    def _show(self, probability: float, decay: float) -> None:
        """Put a grid cell into ``live_*`` (no training), or ask the retrainer for the model."""
        cell = self._cell(probability, decay)
        if cell is None:
            self.training = "training"
            self._retrainer.request(probability, decay)
            return
        arrays = {f"live_{k}": getattr(self, f"grid_{k}")[cell[0] : cell[0] + 1, cell[1] : cell[1] + 1] for k in FIELDS}
        self._set_live(probability, decay, arrays)

    def _set_live(self, probability: float, decay: float, arrays: dict[str, np.ndarray]) -> None:
        # one message for the arrays and the values they were trained at: the view never sees one without the other
        with self.hold_sync(), self.hold_trait_notifications():
            for key, value in arrays.items():
                self.set_trait(key, value)
            self.live_probability, self.live_decay, self.training = probability, decay, ""

    def _on_slider(self, change: dict[str, Any]) -> None:
        self._show(self.feature_probability, self.decay)

    def _train_one(self, probability: float, decay: float, stop: threading.Event) -> ToyResult:
        return self._recipe.train(np.array([probability]), np.array([decay]), stop=stop, threaded=False)

    def _publish(self, probability: float, decay: float, result: ToyResult) -> None:
        arrays = trajectory(result, (1, 1))
        self._set_live(probability, decay, {f"live_{k}": v for k, v in arrays.items()})

    def _failed(self, why: str) -> None:
        self.training = why

    def retrain(self, feature_probability: float, decay: float, wait: bool = True) -> None:
        """Move the sliders from Python (what the view does) and, with ``wait``, block until the model is shown."""
        self.set_trait("feature_probability", feature_probability)
        self.set_trait("decay", decay)
        if wait:
            self._retrainer.wait()

    @property
    def superseded(self) -> int:
        """How many retrains a later slider move stopped."""
        return self._retrainer.superseded

    def close(self) -> None:
        """Stop any retrain in progress, then close the view."""
        retrainer = getattr(self, "_retrainer", None)
        if retrainer is not None:
            retrainer.close()
        super().close()


def _fractions(name: str, value: object, default: np.ndarray | None) -> np.ndarray:
    if value is None and default is not None:
        return default
    try:
        array = np.atleast_1d(np.asarray(value, dtype=np.float64))
    except (TypeError, ValueError):
        raise ArgumentError(f"{name}: expected a list of numbers in (0, 1], got {value!r:.80}") from None
    if array.ndim != 1 or array.size == 0 or not np.isfinite(array).all() or (array <= 0).any() or (array > 1).any():
        raise ArgumentError(f"{name}: expected a non-empty list of numbers in (0, 1], got {value!r:.80}")
    positive_int(f"len({name})", array.size)
    return array
