"""CompositionVsPatching: per pair of heads, weight-based composition against the path-patching effect.

The weights say which later heads *can* read an earlier head's write (Q-, K- or
V-composition, :class:`~circuitwidgets.CompositionMap`); path patching says
which ones *do*, on given prompts (:func:`circuitwidgets.causal.path_patch` over
every sender). One point per (earlier head, later head) pair: x the composition
score minus the random baseline, y the effect when the earlier head's write
reaches only the later head's q, k or v. Where both agree a pair sits top
right (strong weights and a strong effect); the induction heads of a two-layer
model sit there in the K plot, fed by the previous-token head.

Hover a point for the pair and both numbers; a click selects the pair
(``selected_edge``) and its later head (``selected_layer`` / ``selected_head``,
linked by :func:`circuitwidgets.link` as in the other views). In Python,
:meth:`CompositionVsPatching.pairs` and :meth:`CompositionVsPatching.correlation`
give the numbers the plot draws.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import traitlets
from numpy.typing import ArrayLike, NDArray

from circuitwidgets._checks import check_model
from circuitwidgets.causal.result import Sweep
from circuitwidgets.errors import ArgumentError, ArgumentTypeError, ShapeError
from circuitwidgets.model import CircuitModel
from circuitwidgets.widgets.composition import KINDS, build_composition_map, edge_error
from circuitwidgets.widgets.core.arrays import NDArrayTrait, user_array
from circuitwidgets.widgets.core.base import CircuitWidget
from circuitwidgets.widgets.core.spec import Size, head_selection, trait_error, view_data, view_setting
from circuitwidgets.widgets.core.traits import Choice, Edge, SelectionIndex
from circuitwidgets.widgets.path_composition import check_text, path_patching_scores

__all__ = ["CompositionVsPatching", "Pair"]

#: Fewest pairs a correlation is computed over.
_MIN_PAIRS = 3


class Pair(NamedTuple):
    """One point of the plot: an earlier head, a later head and the two numbers."""

    earlier: tuple[int, int]
    """``(layer, head)`` of the earlier head (the sender)."""
    later: tuple[int, int]
    """``(layer, head)`` of the later head (the receiver)."""
    composition: float
    """Composition score of the kind, minus the random baseline."""
    patching: float
    """Path-patching effect via the kind's input (the sweep's metric)."""

    @property
    def name(self) -> str:
        """``"L0H11 → L1H5"``."""
        return f"L{self.earlier[0]}H{self.earlier[1]} → L{self.later[0]}H{self.later[1]}"


def _stack(name: str, values: ArrayLike) -> NDArray[np.float32]:
    """``values`` as float32 ``[3, L, H, L, H]`` (Q, K, V), or a typed error naming ``name``."""
    arr = user_array(name, values, "float32", "scores [3, n_layers, n_heads, n_layers, n_heads] (Q, K, V)")
    if arr.ndim != 5 or arr.shape[0] != 3 or arr.shape[1:3] != arr.shape[3:5] or 0 in arr.shape:
        raise ShapeError(f"{name}: expected scores [3, n_layers, n_heads, n_layers, n_heads], got {list(arr.shape)}")
    if np.isinf(arr).any():
        raise ArgumentError(f"{name}: expected finite scores (NaN where a pair was not measured), got infinities")
    L = arr.shape[1]
    earlier = np.arange(L)[:, None, None, None] < np.arange(L)[None, None, :, None]
    return np.where(earlier[None], arr, np.nan).astype(np.float32)


class CompositionVsPatching(CircuitWidget):
    """A scatter of composition score (x) against path-patching effect (y), one point per pair of heads.

    Parameters
    ----------
    model
        The model whose weights give the composition scores (omit it to build from
        trait values, or use :meth:`from_scores`).
    *sweeps
        Results of ``causal.path_patch(model, clean, corrupted, metric, sender=None, via=...)``,
        one per ``via`` (q, k, v) measured, of this model.
    n_samples, seed, offset
        The composition baseline's Monte-Carlo size and seed; a rotary model's QK offset
        (:class:`~circuitwidgets.CompositionMap`).
    **kwargs
        Initial traits (``kind``, ``selected_edge``); by default the kind of the first
        sweep (K when measured) and the pair with the largest effect are selected.

    Raises
    ------
    ArgumentError, ArgumentTypeError, ShapeError
        Naming ``sweeps[i]`` when it is not a path-patching sweep over every sender, or
        is of another model or shape than ``model``.
    """

    _view = traitlets.Unicode("compvspatching").tag(sync=True)
    _prefix = "compvspatching"

    model_name = view_data(traitlets.Unicode(""))
    """Name of the model (caption)."""

    composition = view_data(NDArrayTrait(dtype="float32", dims=(3, "n_layers", "n_heads", "n_layers_to", "n_heads_to")))
    """float32 ``[3, L, H, L, H]``: raw Q, K, V composition scores (NaN unless the first head is earlier)."""

    patching = view_data(NDArrayTrait(dtype="float32", dims=(3, "n_layers", "n_heads", "n_layers_to", "n_heads_to")))
    """float32 ``[3, L, H, L, H]``: path-patching effect via q, k, v (NaN for a kind not measured)."""

    baseline_value = view_data(traitlets.Float(0.0))
    """Expected composition score of random matrices (subtracted from x)."""

    metric = view_data(traitlets.Unicode(""))
    """The path-patching metric (the y axis says it)."""

    note = view_data(traitlets.Unicode(""))
    """Plain text under the plot: how the effects were made (metric, corruption, convention)."""

    kind = view_setting(Choice(KINDS, default_value="K"))
    """The kind plotted: ``"Q"``, ``"K"`` or ``"V"`` (composition of that kind against path patching via it)."""

    selected_edge = view_setting(Edge(edge_error))
    """``[]`` or ``[l1, h1, l2, h2]``: the selected pair, from earlier head ``(l1, h1)`` to later head ``(l2, h2)``."""

    selected_layer = head_selection(SelectionIndex("n_layers"))
    """Layer of the selected later head."""

    selected_head = head_selection(SelectionIndex("n_heads"))
    """The selected later head within its layer."""

    n_layers = Size("n_layers")
    n_heads = Size("n_heads")

    def __init__(
        self,
        model: CircuitModel | None = None,
        *sweeps: Sweep,
        n_samples: int = 100,
        seed: int = 0,
        offset: int | None = None,
        **kwargs: Any,
    ) -> None:
        if model is not None:
            model = check_model(model, type(self).__name__)
            if not sweeps:
                raise ArgumentError("sweeps: expected at least one path-patching Sweep after the model, got none")
            weights = build_composition_map(model, n_samples=n_samples, seed=seed, offset=offset)
            path = path_patching_scores(sweeps)
            if path.scores.shape != weights["scores"].shape:
                raise ShapeError(
                    f"sweeps[0]: expected path patching of {model.name!r}'s heads, shape "
                    f"{list(weights['scores'].shape[1:])}, got {list(path.scores.shape[1:])}"
                )
            if path.model and path.model != model.name:
                raise ArgumentError(
                    f"sweeps[0]: expected a sweep of the model {model.name!r}, got one of {path.model!r}"
                )
            kwargs = {
                **_initial(weights["scores"], path.scores, path.vias),
                "composition": weights["scores"],
                "patching": path.scores,
                "baseline_value": weights["baseline_value"],
                "model_name": model.name,
                "metric": path.metric,
                "note": path.note,
                **kwargs,
            }
        elif sweeps:
            raise ArgumentTypeError(f"model: expected a CircuitModel before the sweeps, got {type(model).__name__}")
        super().__init__(**kwargs)

    @classmethod
    def from_scores(
        cls,
        composition: ArrayLike,
        patching: ArrayLike,
        *,
        baseline: float = 0.0,
        metric: str = "",
        note: str = "",
        model_name: str = "",
        **kwargs: Any,
    ) -> CompositionVsPatching:
        """The plot of scores computed anywhere.

        Parameters
        ----------
        composition, patching
            ``[3, n_layers, n_heads, n_layers, n_heads]`` (Q, K, V; earlier head, later head),
            numpy or torch: raw composition scores and the path-patching effect via q, k, v
            (NaN for a kind or pair not measured; entries where the first head is not earlier are ignored).
        baseline
            Subtracted from the composition scores (the random-matrix baseline; 0: raw).
        metric, note, model_name
            The y axis's metric, a note under the plot, the caption.

        Raises
        ------
        ArgumentTypeError, ArgumentError, ShapeError
            Naming the argument, what was expected and what was received.
        """
        comp = _stack("composition", composition)
        path = _stack("patching", patching)
        if comp.shape != path.shape:
            raise ShapeError(f"patching: expected shape {list(comp.shape)} like composition, got {list(path.shape)}")
        if isinstance(baseline, bool) or not isinstance(baseline, (int, float)) or not np.isfinite(baseline):
            raise ArgumentTypeError(f"baseline: expected a finite number, got {baseline!r:.80}")
        text = {name: check_text(name, value) or "" for name, value in (("metric", metric), ("note", note))}
        text["model_name"] = check_text("model_name", model_name) or ""
        vias = tuple(v for k, v in enumerate("qkv") if np.isfinite(path[k]).any())
        state = {**_initial(comp, path, vias or ("k",)), "composition": comp, "patching": path}
        return cls(**{**state, "baseline_value": float(baseline), **text, **kwargs})

    @traitlets.validate("composition", "patching")
    def _validate_stack(self, proposal: traitlets.Bunch) -> NDArray[np.float32]:
        s: NDArray[np.float32] = proposal["value"]
        other = self.patching if proposal["trait"].name == "composition" else self.composition
        if s.shape[1:3] != s.shape[3:5] or (other.size and s.size and other.shape != s.shape):
            expected = f"shape {list(other.shape)} like the other array" if other.size else "shape [3, L, H, L, H]"
            raise trait_error(self, proposal["trait"].name, expected, str(list(s.shape)))
        return s

    def pairs(self, kind: str | None = None) -> list[Pair]:
        """Every pair measured by both, for ``kind`` (default :attr:`kind`), in order of earlier then later head.

        Each is a ``Pair`` (a named tuple): ``earlier`` and ``later`` ``(layer, head)``,
        ``composition`` (the score minus the baseline, x), ``patching`` (the effect, y),
        and ``name`` (``"L0H11 → L1H5"``).
        """
        k = self._kind_index(kind)
        comp = np.asarray(self.composition[k], dtype=np.float64) - self.baseline_value
        path = np.asarray(self.patching[k], dtype=np.float64)
        where = np.argwhere(np.isfinite(comp) & np.isfinite(path))
        return [
            Pair((int(l1), int(h1)), (int(l2), int(h2)), float(comp[l1, h1, l2, h2]), float(path[l1, h1, l2, h2]))
            for l1, h1, l2, h2 in where
        ]

    def correlation(self, kind: str | None = None) -> float:
        """Pearson correlation of composition and path-patching effect over :meth:`pairs` (NaN under 3 pairs or flat)."""
        points = self.pairs(kind)
        if len(points) < _MIN_PAIRS:
            return float("nan")
        x = np.array([p.composition for p in points])
        y = np.array([p.patching for p in points])
        if np.ptp(x) == 0 or np.ptp(y) == 0:
            return float("nan")
        return float(np.corrcoef(x, y)[0, 1])

    def select_pair(self, earlier: tuple[int, int], later: tuple[int, int]) -> None:
        """Select the pair from ``earlier`` to ``later`` (both ``(layer, head)``); the later head becomes ``selected_*``."""
        with self.hold_trait_notifications():
            self.selected_edge = [earlier[0], earlier[1], later[0], later[1]]
            self.selected_layer, self.selected_head = later

    def _kind_index(self, kind: str | None) -> int:
        chosen = self.kind if kind is None else kind
        if chosen not in KINDS:
            raise ArgumentError(f"kind: expected one of {KINDS}, got {chosen!r}")
        return KINDS.index(chosen)


def _initial(comp: NDArray[np.float32], path: NDArray[np.float32], vias: tuple[str, ...]) -> dict[str, Any]:
    """The kind shown first (K when measured) and the pair with the largest effect of it, selected."""
    kind = "K" if "k" in vias else vias[0].upper()
    values = np.where(np.isfinite(comp[KINDS.index(kind)]), path[KINDS.index(kind)], np.nan)
    if not np.isfinite(values).any():
        return {"kind": kind}
    l1, h1, l2, h2 = (int(i) for i in np.unravel_index(int(np.nanargmax(values)), values.shape))
    return {"kind": kind, "selected_edge": [l1, h1, l2, h2], "selected_layer": l2, "selected_head": h2}
