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
``title`` and ``note``: a caption replacing the composition wording, and a
note under the view (plain text), for maps of other pair scores: a
path-patching map (:meth:`CompositionMap.from_path_patching`) draws in the
same slots the effect of each earlier head's write via a later head's q, k or v.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import traitlets
from numpy.typing import ArrayLike, NDArray

from circuitwidgets._checks import check_model
from circuitwidgets.causal.result import Sweep
from circuitwidgets.circuits import composition_baseline
from circuitwidgets.circuits.composition import COMPOSITION_MEMORY_BUDGET, _raw_composition_scores
from circuitwidgets.errors import ArgumentError, ArgumentTypeError, NonFiniteError, ShapeError
from circuitwidgets.model import CircuitModel
from circuitwidgets.widgets.core.arrays import NDArrayTrait, user_array
from circuitwidgets.widgets.core.base import CircuitWidget
from circuitwidgets.widgets.core.offset import ReadsQKAtOffset, engine_offset, offset_setting, resolve_offset
from circuitwidgets.widgets.core.spec import Size, head_selection, trait_error, view_data, view_setting
from circuitwidgets.widgets.core.traits import Choice, Count, Edge, SelectionIndex
from circuitwidgets.widgets.path_composition import check_text, path_patching_scores

__all__ = ["KINDS", "CompositionMap", "composition_map_data", "edge_error"]

#: Composition kinds, in the order of ``scores``' first axis.
KINDS = ("Q", "K", "V")


def composition_map_data(
    model: CircuitModel, *, n_samples: int = 100, seed: int = 0, offset: int | None = None
) -> dict[str, Any]:
    """Trait values of a :class:`CompositionMap`: raw scores of every kind and the baseline.

    ``offset``: rotary models read Q and K composition through the QK circuit at
    this offset (default 0, shown in the view; :mod:`circuitwidgets.widgets.core.offset`).
    Cost: the three kinds of :func:`~circuitwidgets.circuits.composition_scores`
    in one pass (``O(L H d_model² d_head + P d_model²)`` for ``P`` pairs) and one
    Monte-Carlo baseline.
    """
    return build_composition_map(
        check_model(model, "composition_map_data"), n_samples=n_samples, seed=seed, offset=offset
    )


def build_composition_map(
    model: CircuitModel, *, n_samples: int = 100, seed: int = 0, offset: int | None = None
) -> dict[str, Any]:
    """:func:`composition_map_data` of a model already checked (the widget's builder: no warning, no re-check).

    The three kinds in one pass over the Gram-matrix tiles (the earlier heads'
    tiles shared, :func:`~circuitwidgets.circuits.all_composition_scores`).
    """
    qk_offset = resolve_offset(model, offset)
    at = engine_offset(qk_offset)
    scores = _raw_composition_scores(model, KINDS, COMPOSITION_MEMORY_BUDGET, at)
    return {
        "scores": scores.astype(np.float32),
        "baseline_value": float(composition_baseline(model.cfg.d_model, model.cfg.d_head, n_samples, seed)),
        "model_name": model.name,
        "qk_offset": qk_offset,
    }


def _pair_scores(name: str, values: ArrayLike) -> NDArray[np.float64]:
    """``values`` as float ``[L, H, L, H]`` (NaN allowed only where ignored), or a typed error naming ``name``."""
    arr = user_array(name, values, "float64", "scores [n_layers, n_heads, n_layers, n_heads]")
    if arr.ndim != 4 or arr.shape[:2] != arr.shape[2:] or 0 in arr.shape:
        raise ShapeError(
            f"{name}: expected scores [n_layers, n_heads, n_layers, n_heads], got shape {tuple(arr.shape)}"
        )
    L = arr.shape[0]
    earlier = np.arange(L)[:, None, None, None] < np.arange(L)[None, None, :, None]
    bad = earlier & ~np.isfinite(np.broadcast_to(arr, arr.shape))
    if bad.any():
        raise NonFiniteError(
            f"{name}: expected finite scores where the first head is earlier, got {int(bad.sum())} NaN or infinite"
        )
    return arr


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


class CompositionMap(ReadsQKAtOffset, CircuitWidget):
    """Q/K/V composition scores between all pairs of heads, as heatmaps and as a layered graph.

    Parameters
    ----------
    model
        The model (omit it to build from trait values, or use :meth:`from_scores`).
    n_samples, seed
        Monte-Carlo size and seed of the baseline.
    **kwargs
        Initial traits, for example ``subtract_baseline=False`` or ``kind="K"``.
    """

    _view = traitlets.Unicode("composition").tag(sync=True)
    _prefix = "composition"

    model_name = view_data(traitlets.Unicode(""))
    """Name of the model (caption)."""

    scores = view_data(NDArrayTrait(dtype="float32", dims=(3, "n_layers", "n_heads", "n_layers_to", "n_heads_to")))
    """float32 ``[3, L, H, L, H]``: raw Q, K, V composition scores (NaN unless the first head is earlier)."""

    baseline_value = view_data(traitlets.Float(0.0))
    """Expected score of random matrices with a head's shapes (subtracted when ``subtract_baseline``)."""

    edge_threshold = view_data(traitlets.Float(0.0, min=0.0, max=1.0))
    """Raw score an edge must reach to be drawn in the graph (0: none; the graph's legend says which);
    ``threshold_against_rotations()`` sets it from the model's own heads."""

    threshold_label = view_data(traitlets.Unicode(""))
    """What ``edge_threshold`` is, in words, for the graph's legend (plain text)."""

    title = view_data(traitlets.Unicode(""))
    """Caption of scores that are not composition scores (a path-patching map); ``""``: "Composition between heads".
    Given, the maps are titled "via q/k/v" and no caption, colour bar or tooltip says "composition"."""

    note = view_data(traitlets.Unicode(""))
    """Plain text under the view (how the scores were made: metric, corruption, convention), exported with it."""

    subtract_baseline = view_setting(traitlets.Bool(True))
    """Show scores minus ``baseline_value`` (the paper's diagrams do)."""

    kind = view_setting(Choice((*KINDS, "all"), default_value="all"))
    """Edges drawn in the graph: ``"Q"``, ``"K"``, ``"V"`` or ``"all"``."""

    n_edges = view_setting(Count(1, 200, default_value=12))
    """Strongest edges drawn in the graph (1..200)."""

    selected_edge = view_setting(Edge(edge_error))
    """``[]`` or ``[l1, h1, l2, h2]``: the selected edge from earlier head ``(l1, h1)`` to later head ``(l2, h2)``."""

    edge_kind = view_setting(Choice((*KINDS, ""), default_value=""))
    """Kind of the selected edge (``"Q"``, ``"K"``, ``"V"``), or ``""``."""

    qk_offset = offset_setting()
    """Rotary models: the offset ``Δ = i − j`` of the QK circuits in Q and K composition (0 unless given;
    a live kernel recomputes when the view's control changes it); -1 for models without rotary layers."""

    selected_layer = head_selection(SelectionIndex("n_layers"))
    """Layer of the selected head (its edges are highlighted)."""

    selected_head = head_selection(SelectionIndex("n_heads"))
    """Selected head within its layer."""

    n_layers = Size("n_layers")
    n_heads = Size("n_heads")

    def __init__(
        self,
        model: CircuitModel | None = None,
        *,
        n_samples: int = 100,
        seed: int = 0,
        offset: int | None = None,
        **kwargs: Any,
    ) -> None:
        self._model: CircuitModel | None = None
        self._options = (n_samples, seed)
        if model is not None:
            # (checked here, one frame below the caller, so a model with MLPs warns in this widget's name)
            model = check_model(model, type(self).__name__)
            kwargs = {**build_composition_map(model, n_samples=n_samples, seed=seed, offset=offset), **kwargs}
        super().__init__(**kwargs)
        self._model = model  # (after the initial traits: setting qk_offset there must not recompute)

    @classmethod
    def initial(
        cls, model: CircuitModel, *, n_samples: int = 100, seed: int = 0, offset: int | None = None
    ) -> dict[str, Any]:
        """Initial traits for ``model`` (:func:`composition_map_data`)."""
        return build_composition_map(check_model(model), n_samples=n_samples, seed=seed, offset=offset)

    @classmethod
    def from_model(
        cls, model: CircuitModel, *, n_samples: int = 100, seed: int = 0, offset: int | None = None, **kwargs: Any
    ) -> CompositionMap:
        """Same as ``CompositionMap(model, ...)``: scores computed from the model's weights."""
        check_model(model, cls.__name__)
        return cls(model, n_samples=n_samples, seed=seed, offset=offset, **kwargs)

    def _recompute_at_offset(self, model: CircuitModel, offset: int | None) -> None:
        n_samples, seed = self._options
        self.scores = build_composition_map(model, n_samples=n_samples, seed=seed, offset=offset)["scores"]

    @classmethod
    def from_scores(
        cls,
        q: ArrayLike,
        k: ArrayLike,
        v: ArrayLike,
        *,
        baseline: float = 0.0,
        model_name: str = "",
        title: str | None = None,
        note: str | None = None,
        **kwargs: Any,
    ) -> CompositionMap:
        """A map of composition scores, or of any other score per pair of heads, computed anywhere.

        Parameters
        ----------
        q, k, v
            Scores ``[n_layers, n_heads, n_layers, n_heads]`` from earlier head ``(l1, h1)``
            to later head ``(l2, h2)``, numpy or torch; entries where ``l1 >= l2`` are ignored (NaN).
        baseline
            Score of random matrices (subtracted when ``subtract_baseline``; 0 shows raw scores).
        model_name
            Caption.
        title
            Caption of scores that are not composition scores (a causal map); the maps are then
            titled "via q", "via k", "via v" and nothing says "composition score".
        note
            Plain text shown under the view: how the scores were made (metric, corruption, convention).
        **kwargs
            Initial traits.

        Raises
        ------
        ArgumentTypeError, ShapeError, NonFiniteError
            Naming the argument, what was expected and what was received.
        """
        arrays = [_pair_scores(name, value) for name, value in (("q", q), ("k", k), ("v", v))]
        for name, arr in zip("kv", arrays[1:], strict=True):
            if arr.shape != arrays[0].shape:
                raise ShapeError(f"{name}: expected shape {list(arrays[0].shape)} like q, got {list(arr.shape)}")
        if isinstance(baseline, bool) or not isinstance(baseline, (int, float)) or not np.isfinite(baseline):
            raise ArgumentTypeError(f"baseline: expected a finite number, got {baseline!r:.80}")
        L = arrays[0].shape[0]
        earlier = np.arange(L)[:, None, None, None] < np.arange(L)[None, None, :, None]
        scores = np.stack([np.where(earlier, a, np.nan) for a in arrays]).astype(np.float32)
        return cls._of_scores(scores, float(baseline), model_name, title, note, kwargs)

    @classmethod
    def from_path_patching(cls, *sweeps: Sweep, **kwargs: Any) -> CompositionMap:
        """A map of path-patching effects in the composition slots: via q in Q, via k in K, via v in V.

        The title names the metric; the note says, from the sweeps' own records,
        the metric's clean and corrupted values, where the prompts differ, and the
        convention. Scores are drawn as they are (no baseline).

        Parameters
        ----------
        *sweeps
            One to three results of ``causal.path_patch(model, clean, corrupted, metric,
            sender=None, via=...)`` (dims ``sender_layer, sender_head, layer, head``), of
            different ``via``, one model and one metric; the kinds not given are empty (NaN).
        **kwargs
            Initial traits (``title`` or ``note`` replace the ones made from the sweeps).

        Raises
        ------
        ArgumentError, ArgumentTypeError, ShapeError
            Naming ``sweeps[i]``: not a Sweep, not path patching over every sender, a
            second sweep of the same ``via``, or another model, metric or shape than ``sweeps[0]``.
        """
        path = path_patching_scores(sweeps)
        settings = {"kind": path.vias[0].upper()} if len(path.vias) == 1 else {}
        return cls._of_scores(path.scores, 0.0, path.model, path.title, path.note, {**settings, **kwargs})

    @classmethod
    def _of_scores(
        cls,
        scores: NDArray[np.float32],
        baseline: float,
        model_name: object,
        title: object,
        note: object,
        kwargs: dict[str, Any],
    ) -> CompositionMap:
        """The widget of checked ``[3, L, H, L, H]`` scores, its text arguments checked by name."""
        text = {"model_name": check_text("model_name", model_name) or ""}
        for name, value in (("title", title), ("note", note)):
            checked = check_text(name, value)
            if checked is not None:
                text[name] = checked
        return cls(**{"scores": scores, "baseline_value": baseline, **text, **kwargs})

    @traitlets.validate("scores")
    def _validate_scores(self, proposal: traitlets.Bunch) -> NDArray[np.float32]:
        s: NDArray[np.float32] = proposal["value"]
        if s.shape[1:3] != s.shape[3:5]:
            raise trait_error(self, "scores", "shape [3, L, H, L, H]", str(list(s.shape)))
        return s

    def score(self, kind: str, baseline: bool | None = None) -> NDArray[np.float32]:
        """Scores ``[L, H, L, H]`` of ``kind``, minus the baseline when ``baseline`` (default ``subtract_baseline``)."""
        if kind not in KINDS:
            raise ArgumentError(f"kind: expected one of {KINDS}, got {kind!r}")
        raw: NDArray[np.float32] = self.scores[KINDS.index(kind)]
        subtract = self.subtract_baseline if baseline is None else baseline
        return (raw - np.float32(self.baseline_value)) if subtract else raw

    def threshold_against_rotations(self, quantile: float = 0.99, n_samples: int = 2000, seed: int = 0) -> float:
        """Draw only edges above what this model's own heads reach by chance, and say so in the legend.

        Sets ``edge_threshold`` to ``circuitwidgets.circuits.composition_null.composition_threshold`` (the ``quantile`` of
        scores of random head pairs with the residual stream between them rotated at random) and returns it.
        Needs the model the widget was built from.
        """
        from circuitwidgets.circuits.composition_null import composition_threshold

        if self._model is None:
            raise ArgumentError("model: this CompositionMap was not built from a model, so it has no heads to rotate")
        offset = self.qk_offset if self.qk_offset >= 0 else None
        threshold = composition_threshold(self._model, quantile, n_samples, seed, offset=offset)
        cfg = self._model.cfg
        pairs = 3 * cfg.n_heads**2 * cfg.n_layers * (cfg.n_layers - 1) // 2
        chance = (1 - quantile) * pairs
        self.threshold_label = (
            f"the score {quantile:.0%} of this model's head pairs stay under when the residual stream between "
            f"the two heads is rotated at random ({n_samples:,} draws); by chance about {chance:.0f} of its "
            f"{pairs:,} pairs would pass"
        )
        self.edge_threshold = threshold
        return threshold

    def select_edge(self, earlier: tuple[int, int], later: tuple[int, int], kind: str = "") -> None:
        """Select the edge from ``earlier`` to ``later`` (both ``(layer, head)``); the later head becomes ``selected_*``."""
        with self.hold_trait_notifications():
            self.selected_edge = [earlier[0], earlier[1], later[0], later[1]]
            self.edge_kind = kind
            self.selected_layer, self.selected_head = later
