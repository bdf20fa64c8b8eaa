"""Q-, K- and V-composition between every earlier and every later head: heatmaps and a layered graph.

Scores are the paper's ``‖W_A W_B‖_F / (‖W_A‖_F ‖W_B‖_F)``
(:func:`circuitwidgets.circuits.composition_scores`), sent raw with the
expected score of random matrices of the same shapes
(:func:`circuitwidgets.circuits.composition_baseline`, one number for all three
kinds); the view shows them raw or minus that baseline, as three heatmaps
(earlier heads × later heads) and as a graph of the strongest edges. Clicking
an edge selects both heads.

Data traits (kernel → view)
---------------------------
``scores`` float32 ``[3, L, H, L, H]``: kind (Q, K, V), earlier layer, earlier
head, later layer, later head; NaN where the earlier layer is not earlier.
``baseline_value``: the random-matrix baseline.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import traitlets
from numpy.typing import NDArray

from circuitwidgets.circuits import composition_baseline, composition_scores
from circuitwidgets.circuits._checks import check_model
from circuitwidgets.errors import ArgumentError
from circuitwidgets.model import CircuitModel
from circuitwidgets.widgets._arrays import NDArrayTrait
from circuitwidgets.widgets._base import CircuitWidget, SelectionIndex, check_selection

__all__ = ["KINDS", "CompositionMap", "composition_map_data", "edge_error"]

#: Composition kinds, in the order of ``scores``' first axis.
KINDS = ("Q", "K", "V")


def composition_map_data(model: CircuitModel, *, n_samples: int = 100, seed: int = 0) -> dict[str, Any]:
    """Trait values of a :class:`CompositionMap`: raw scores of every kind and the baseline.

    Cost: three :func:`~circuitwidgets.circuits.composition_scores` calls
    (``O(L H d_model² d_head)`` each) and one Monte-Carlo baseline.
    """
    model = check_model(model, "composition_map_data")
    scores = np.stack([composition_scores(model, kind) for kind in KINDS])  # type: ignore[arg-type]
    return {
        "scores": scores.astype(np.float32),
        "baseline_value": float(composition_baseline(model.cfg.d_model, model.cfg.d_head, n_samples, seed)),
        "model_name": model.name,
    }


def edge_error(edge: Any, n_layers: int, n_heads: int) -> str | None:
    """Why ``edge`` is not ``[]`` or ``[l1, h1, l2, h2]`` with ``l1 < l2`` in range (``None`` when it is)."""
    if not isinstance(edge, (list, tuple)):
        return f"expected [] or [l1, h1, l2, h2], got {type(edge).__name__}"
    if len(edge) == 0:
        return None
    if len(edge) != 4 or any(isinstance(v, bool) or not isinstance(v, int) for v in edge):
        return f"expected [] or four ints [l1, h1, l2, h2], got {list(edge)!r:.80}"
    l1, h1, l2, h2 = edge
    if not (0 <= l1 < l2 < n_layers and 0 <= h1 < n_heads and 0 <= h2 < n_heads):
        return (
            f"expected an earlier head (l1, h1) and a later head (l2, h2) with 0 <= l1 < l2 < {n_layers} "
            f"and heads in 0..{n_heads - 1}, got {list(edge)}"
        )
    return None


class CompositionMap(CircuitWidget):
    """Q/K/V composition scores between all pairs of heads, as heatmaps and as a layered graph.

    Parameters
    ----------
    model
        The model (omit it to build from trait values, e.g. :func:`composition_map_data`).
    n_samples, seed
        Monte-Carlo size and seed of the baseline.
    **kwargs
        Initial traits, for example ``subtract_baseline=False`` or ``kind="K"``.
    """

    _view = traitlets.Unicode("composition").tag(sync=True)
    _from_view = frozenset(
        {"kind", "n_edges", "subtract_baseline", "selected_layer", "selected_head", "selected_edge", "edge_kind"}
    )

    model_name = traitlets.Unicode("").tag(sync=True)
    """Name of the model (caption)."""

    scores = NDArrayTrait(dtype="float32", ndim=5).tag(sync=True)
    """float32 ``[3, L, H, L, H]``: raw Q, K, V composition scores (NaN unless the first head is earlier)."""

    baseline_value = traitlets.Float(0.0).tag(sync=True)
    """Expected score of random matrices with a head's shapes (subtracted when ``subtract_baseline``)."""

    subtract_baseline = traitlets.Bool(True).tag(sync=True)
    """Show scores minus ``baseline_value`` (the paper's diagrams do)."""

    kind = traitlets.Unicode("all").tag(sync=True)
    """Edges drawn in the graph: ``"Q"``, ``"K"``, ``"V"`` or ``"all"``."""

    n_edges = traitlets.Int(12).tag(sync=True)
    """Strongest edges drawn in the graph (1..200)."""

    selected_layer = SelectionIndex("n_layers").tag(sync=True)
    """Layer of the selected head (its edges are highlighted)."""

    selected_head = SelectionIndex("n_heads").tag(sync=True)
    """Selected head within its layer."""

    selected_edge = traitlets.List(traitlets.Int(), default_value=[]).tag(sync=True)
    """``[]`` or ``[l1, h1, l2, h2]``: the selected edge from earlier head ``(l1, h1)`` to later head ``(l2, h2)``."""

    edge_kind = traitlets.Unicode("").tag(sync=True)
    """Kind of the selected edge (``"Q"``, ``"K"``, ``"V"``), or ``""``."""

    def __init__(
        self, model: CircuitModel | None = None, *, n_samples: int = 100, seed: int = 0, **kwargs: Any
    ) -> None:
        if model is not None:
            model = check_model(model, "CompositionMap")
            kwargs = {**composition_map_data(model, n_samples=n_samples, seed=seed), **kwargs}
        super().__init__(**kwargs)

    @traitlets.default("scores")
    def _default_scores(self) -> NDArray[np.float32]:
        return np.zeros((3, 0, 0, 0, 0), dtype=np.float32)

    @traitlets.validate("selected_layer", "selected_head")
    def _validate_selection(self, proposal: traitlets.Bunch) -> int:
        return check_selection(self, proposal)

    @traitlets.validate("selected_edge")
    def _validate_edge(self, proposal: traitlets.Bunch) -> list[int]:
        edge = proposal["value"]
        reason = edge_error(edge, self.n_layers, self.n_heads)
        if reason is not None:
            raise traitlets.TraitError(f"The 'selected_edge' trait of CompositionMap {reason}")
        return [int(v) for v in edge]

    @traitlets.validate("kind")
    def _validate_kind(self, proposal: traitlets.Bunch) -> str:
        value = proposal["value"]
        if value not in (*KINDS, "all"):
            raise traitlets.TraitError(
                f"The 'kind' trait of CompositionMap expected one of {(*KINDS, 'all')}, got {value!r}"
            )
        return str(value)

    @traitlets.validate("edge_kind")
    def _validate_edge_kind(self, proposal: traitlets.Bunch) -> str:
        value = proposal["value"]
        if value not in (*KINDS, ""):
            raise traitlets.TraitError(
                f"The 'edge_kind' trait of CompositionMap expected one of {(*KINDS, '')}, got {value!r}"
            )
        return str(value)

    @traitlets.validate("n_edges")
    def _validate_n_edges(self, proposal: traitlets.Bunch) -> int:
        value = proposal["value"]
        if isinstance(value, bool) or not 1 <= value <= 200:
            raise traitlets.TraitError(f"The 'n_edges' trait of CompositionMap expected 1..200, got {value}")
        return int(value)

    @traitlets.validate("scores")
    def _validate_scores(self, proposal: traitlets.Bunch) -> NDArray[np.float32]:
        s: NDArray[np.float32] = proposal["value"]
        if s.shape[0] != len(KINDS) or s.shape[1:3] != s.shape[3:5]:
            raise traitlets.TraitError(
                f"The 'scores' trait of CompositionMap expected shape [3, L, H, L, H], got {list(s.shape)}"
            )
        return s

    @property
    def n_layers(self) -> int:
        """Number of layers."""
        return int(self.scores.shape[1])

    @property
    def n_heads(self) -> int:
        """Heads per layer."""
        return int(self.scores.shape[2])

    def score(self, kind: str, baseline: bool | None = None) -> NDArray[np.float32]:
        """Scores ``[L, H, L, H]`` of ``kind``, minus the baseline when ``baseline`` (default ``subtract_baseline``)."""
        if kind not in KINDS:
            raise ArgumentError(f"kind: expected one of {KINDS}, got {kind!r}")
        raw: NDArray[np.float32] = self.scores[KINDS.index(kind)]
        subtract = self.subtract_baseline if baseline is None else baseline
        return (raw - np.float32(self.baseline_value)) if subtract else raw

    def select_edge(self, earlier: tuple[int, int], later: tuple[int, int], kind: str = "") -> None:
        """Select the edge from ``earlier`` to ``later`` (both ``(layer, head)``); the later head becomes ``selected_*``."""
        with self.hold_trait_notifications():
            self.selected_edge = [earlier[0], earlier[1], later[0], later[1]]
            self.edge_kind = kind
            self.selected_layer, self.selected_head = later
