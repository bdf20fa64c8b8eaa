"""HeadScores: any per-head quantity ``[n_layers, n_heads]`` as a heatmap, linked by head selection.

Detector scores, the loss change of ablating each head, direct logit
attribution: many of the figures researchers draw are one number per head. The
view draws each as a grid of layers × heads with a colour bar (sequential for
non-negative scores, diverging around zero for signed ones), the value of each
cell on hover, and the selected head outlined; clicking a cell sets
``selected_layer`` / ``selected_head``, which in :class:`~circuitwidgets.CircuitExplorer`
(and with :func:`circuitwidgets.link`) moves every other view. Several named
maps can share one widget; a switch above the grid chooses among them.

Data traits (kernel → view): ``scores`` float64 ``[n_maps, n_layers, n_heads]``,
``names`` and ``notes`` (one per map), optional ``layer_labels`` / ``head_labels``,
``scale``. View → kernel: ``selected_map``, ``selected_layer``, ``selected_head``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, cast

import numpy as np
import torch
import traitlets
from numpy.typing import ArrayLike, NDArray

from circuitwidgets._checks import check_model
from circuitwidgets.activations.detectors import KINDS, head_scores
from circuitwidgets.errors import ArgumentError, ArgumentTypeError, NonFiniteError, ShapeError
from circuitwidgets.model import ActivationCache, CircuitModel
from circuitwidgets.widgets.core.arrays import NDArrayTrait, user_array
from circuitwidgets.widgets.core.base import CircuitWidget
from circuitwidgets.widgets.core.context import build_progress, check_context
from circuitwidgets.widgets.core.spec import Size, head_selection, trait_error, view_data, view_setting
from circuitwidgets.widgets.core.traits import SelectionIndex

__all__ = ["KIND_NOTES", "SCALES", "HeadScores", "head_scores_data"]

#: Colour scales: ``"auto"`` is diverging when a map has a negative value, else sequential.
SCALES = ("auto", "sequential", "diverging")

#: What each detector kind measures (shown under the grid).
KIND_NOTES = {
    "previous_token": "mean attention from each token to the one before it (i → i−1)",
    "duplicate_token": "mean attention to earlier copies of the same token",
    "induction": "mean attention to the token after an earlier copy of the current token",
    "current_token": "mean attention of each token to itself (i → i)",
    "first_token": "mean attention to the first position (BOS)",
}

Kinds = str | Sequence[str]


def _kinds(kind: object) -> list[str]:
    """``kind`` as a non-empty list of detector kinds, checked before any work."""
    if isinstance(kind, str):
        kinds = list(KINDS) if kind == "all" else [kind]
    elif isinstance(kind, (list, tuple)) and kind and all(isinstance(k, str) for k in kind):
        kinds = list(dict.fromkeys(kind))
    else:
        raise ArgumentTypeError(f"kind: expected a detector kind, a list of them or 'all', got {kind!r:.80}")
    unknown = [k for k in kinds if k not in KINDS]
    if unknown:
        raise ArgumentError(f"kind: expected one of {KINDS} (or 'all'), got {unknown[0]!r}")
    return kinds


def _tokens_for_context(model: CircuitModel, tokens: object) -> Any:
    """``tokens`` with texts tokenised, after refusing more positions than the model's context."""
    if isinstance(tokens, str) or (
        isinstance(tokens, (list, tuple)) and tokens and all(isinstance(t, str) for t in tokens)
    ):
        tokens = model.to_tokens(cast(Any, tokens))
    shape = getattr(tokens, "shape", None)
    if shape is None and isinstance(tokens, (list, tuple)) and tokens:
        first = tokens[0]
        shape = (len(tokens), len(first)) if isinstance(first, (list, tuple)) else (len(tokens),)
    if shape is not None and len(shape) >= 1:
        check_context(
            model,
            int(shape[-1]),
            "tokens",
            "head scores average over positions, so several shorter texts of equal length (a list) give the same measure",
        )
    return tokens


def head_scores_data(
    model: CircuitModel,
    kind: Kinds = "induction",
    *,
    tokens: Any = None,
    cache: ActivationCache | None = None,
    progress_bar: bool | None = None,
    **options: Any,
) -> dict[str, Any]:
    """Trait values of a :class:`HeadScores` of the detector ``kind`` (or kinds) of ``model``.

    Each map is exactly :func:`circuitwidgets.circuits.head_scores` ``(model, kind,
    tokens, cache, **options)``. Given ``tokens`` and no ``cache``, the model
    runs once and every kind reads that run's patterns. Kinds, the context
    length of ``tokens`` and the model are checked before any forward pass.
    """
    model = check_model(model)  # a forward-pass analysis: nothing of the MLPs is excluded, so no warning
    kinds = _kinds(kind)
    if tokens is not None:
        tokens = _tokens_for_context(model, tokens)
        if cache is None and len(kinds) > 1 and not options:
            ids = torch.as_tensor(tokens, device=model.device)
            tokens = ids[None] if ids.ndim == 1 else ids
            _, cache = model.run_with_cache(tokens, names=["pattern"])
    maps = []
    with build_progress(len(kinds), "head scores", progress_bar, delay=1.0) as step:
        for k in kinds:
            step(k)
            maps.append(head_scores(model, cast(Any, k), tokens=tokens, cache=cache, **options))
    on = (
        "the given cache"
        if cache is not None and tokens is None
        else "the given tokens"
        if tokens is not None
        else "repeated random tokens"
    )
    return {
        "scores": np.stack(maps).astype(np.float64),
        "names": [k.replace("_", "-") + " score" for k in kinds],
        "notes": [f"{KIND_NOTES[k]}, on {on}" for k in kinds],
        "model_name": model.name,
    }


def _check_map(name: str, values: Any, shape: tuple[int, int] | None) -> NDArray[np.float64]:
    """One ``[n_layers, n_heads]`` map: numbers, the right shape, finite; else a typed error naming ``name``."""
    arr = user_array(name, values, "float64", "an array [n_layers, n_heads] of numbers")
    if arr.ndim != 2 or arr.shape[0] == 0 or arr.shape[1] == 0:
        raise ShapeError(
            f"{name}: expected an array [n_layers, n_heads] with at least one head, got shape {list(arr.shape)}"
        )
    if shape is not None and arr.shape != shape:
        raise ShapeError(f"{name}: expected shape {list(shape)} like the first map, got {list(arr.shape)}")
    bad = ~np.isfinite(arr)
    if bad.any():
        layer, head = (int(i) for i in np.argwhere(bad)[0])
        raise NonFiniteError(
            f"{name}: expected finite values, got {int(bad.sum())} NaN or infinite (the first at layer {layer}, head {head})"
        )
    return arr


def _labels(name: str, labels: Sequence[str] | None, n: int, what: str) -> list[str]:
    if labels is None:
        return []
    if isinstance(labels, str) or not all(isinstance(s, str) for s in labels):
        raise ArgumentTypeError(f"{name}: expected a list of {n} strings (one per {what}), got {labels!r:.80}")
    if len(labels) != n:
        raise ShapeError(f"{name}: expected {n} labels (one per {what}), got {len(labels)}")
    return list(labels)


class HeadScores(CircuitWidget):
    """A per-head heatmap ``[n_layers, n_heads]``: choose a head by clicking it.

    Build it with :meth:`from_scores` (any numbers per head) or
    :meth:`from_model` (the engine's head detectors); ``HeadScores(model,
    kind=...)`` is the same as the latter.

    Parameters
    ----------
    model
        The model (omit it to build from traits or use :meth:`from_scores`).
    kind
        Detector kind, a list of kinds or ``"all"`` (:data:`circuitwidgets.activations.detectors.KINDS`).
    tokens, cache
        Score on the user's tokens or activation cache instead of repeated
        random tokens (:func:`circuitwidgets.circuits.head_scores`).
    **kwargs
        Initial traits (``selected_layer=1, selected_head=2``; by default the
        head with the largest score, or the largest magnitude on a diverging scale).
    """

    _view = traitlets.Unicode("headscores").tag(sync=True)
    _prefix = "heads"

    model_name = view_data(traitlets.Unicode(""))
    """Name of the model (caption)."""

    scores = view_data(NDArrayTrait(dtype="float64", dims=("n_maps", "n_layers", "n_heads")))
    """float64 ``[n_maps, n_layers, n_heads]``: one number per head and map, all finite."""

    names = view_data(traitlets.List(traitlets.Unicode()))
    """Name of each map (its title and the label of its switch), shown as text."""

    notes = view_data(traitlets.List(traitlets.Unicode()))
    """What each map measures (a sentence under the grid; may be empty)."""

    layer_labels = view_data(traitlets.List(traitlets.Unicode()))
    """Row labels, one per layer (empty: ``L0``, ``L1``, …)."""

    head_labels = view_data(traitlets.List(traitlets.Unicode()))
    """Column labels, one per head (empty: ``H0``, ``H1``, …)."""

    scale = view_data(traitlets.Enum(SCALES, default_value="auto"))
    """Colour scale: ``"sequential"`` (0 to the largest value), ``"diverging"`` (symmetric about 0),
    or ``"auto"`` (diverging when the map has a negative value)."""

    selected_map = view_setting(SelectionIndex("n_maps"))
    """Map shown, ``0..n_maps-1``."""

    selected_layer = head_selection(SelectionIndex("n_layers"))
    """Layer of the selected head."""

    selected_head = head_selection(SelectionIndex("n_heads"))
    """Selected head within its layer."""

    n_maps = Size("n_maps")
    n_layers = Size("n_layers")
    n_heads = Size("n_heads")

    def __init__(
        self,
        model: CircuitModel | None = None,
        kind: Kinds | None = None,
        *,
        tokens: Any = None,
        cache: ActivationCache | None = None,
        progress_bar: bool | None = None,
        **kwargs: Any,
    ) -> None:
        if model is not None:
            data = self.initial(
                model, "induction" if kind is None else kind, tokens=tokens, cache=cache, progress_bar=progress_bar
            )
            kwargs = {**data, **kwargs}
        elif kind is not None or tokens is not None or cache is not None:
            raise ArgumentTypeError("model: expected a CircuitModel when kind, tokens or cache is given, got None")
        super().__init__(**kwargs)

    @traitlets.validate("scores")
    def _finite_scores(self, proposal: traitlets.Bunch) -> NDArray[np.float64]:
        value: NDArray[np.float64] = proposal["value"]
        if not np.isfinite(value).all():
            raise trait_error(self, "scores", "finite values", f"{int((~np.isfinite(value)).sum())} NaN or infinite")
        return value

    @classmethod
    def initial(
        cls,
        model: CircuitModel,
        kind: Kinds = "all",
        *,
        tokens: Any = None,
        cache: ActivationCache | None = None,
        progress_bar: bool | None = None,
        **options: Any,
    ) -> dict[str, Any]:
        """Initial traits for ``model``'s detector ``kind`` (:func:`head_scores_data`), the strongest head selected."""
        data = head_scores_data(model, kind, tokens=tokens, cache=cache, progress_bar=progress_bar, **options)
        return {**data, **_strongest(data["scores"][0], "auto")}

    @classmethod
    def from_model(
        cls,
        model: CircuitModel,
        kind: Kinds = "induction",
        *,
        tokens: Any = None,
        cache: ActivationCache | None = None,
        progress_bar: bool | None = None,
        seq_len: int | None = None,
        n_seqs: int | None = None,
        seed: int | None = None,
        **kwargs: Any,
    ) -> HeadScores:
        """Head detector scores of ``model``: each map is :func:`circuitwidgets.circuits.head_scores`.

        Parameters
        ----------
        kind
            ``"previous_token"``, ``"duplicate_token"``, ``"induction"``,
            ``"current_token"``, ``"first_token"``, a list of them, or ``"all"``.
        tokens, cache
            The user's tokens (a text, equal-length texts, ids ``[pos]`` / ``[batch, pos]``)
            or activation cache; neither: repeated random tokens.
        progress_bar
            A bar over the kinds (``None``: tqdm decides; shown after a second).
        seq_len, n_seqs, seed
            Repeated random tokens only (see :func:`~circuitwidgets.circuits.head_scores`).
        **kwargs
            Initial traits.

        Raises
        ------
        ArgumentError, ArgumentTypeError
            An unknown kind (naming ``kind``), a text longer than the model's
            context (naming ``tokens``), a cache of another model (naming ``cache``),
            before any forward pass.
        """
        options = {k: v for k, v in (("seq_len", seq_len), ("n_seqs", n_seqs), ("seed", seed)) if v is not None}
        data = head_scores_data(model, kind, tokens=tokens, cache=cache, progress_bar=progress_bar, **options)
        return cls(**{**data, **_strongest(data["scores"][0], str(kwargs.get("scale", "auto"))), **kwargs})

    @classmethod
    def from_scores(
        cls,
        scores: ArrayLike | Mapping[str, ArrayLike],
        *,
        name: str = "score",
        note: str = "",
        layer_labels: Sequence[str] | None = None,
        head_labels: Sequence[str] | None = None,
        scale: str = "auto",
        model_name: str = "",
        **kwargs: Any,
    ) -> HeadScores:
        """Any per-head numbers: ``scores [n_layers, n_heads]`` (numpy, torch, nested lists).

        Parameters
        ----------
        scores
            One map ``[n_layers, n_heads]``, or several as ``{name: map}`` (same shape),
            each shown by a switch.
        name, note
            Title of a single map and a sentence on what it measures.
        layer_labels, head_labels
            Row labels (``n_layers``) and column labels (``n_heads``); default ``L0``…, ``H0``….
        scale
            ``"auto"`` (diverging when a value is negative), ``"sequential"`` or ``"diverging"``.
        model_name
            Caption.
        **kwargs
            Initial traits (``selected_layer``, ``selected_head``, ``selected_map``).

        Raises
        ------
        ShapeError, NonFiniteError, ArgumentTypeError, ArgumentError
            Naming the argument: ``scores`` of another rank or empty, NaN or
            infinite values, maps of unequal shapes, labels of the wrong count,
            an unknown ``scale``.
        """
        if isinstance(scores, Mapping):
            if not scores:
                raise ShapeError("scores: expected at least one map, got an empty mapping")
            if not all(isinstance(k, str) for k in scores):
                raise ArgumentTypeError(f"scores: expected map names as str keys, got {list(scores)!r:.80}")
            names = list(scores)
            maps: list[NDArray[np.float64]] = []
            for key in names:
                maps.append(_check_map(f"scores[{key!r}]", scores[key], maps[0].shape if maps else None))
            notes = [""] * len(names)
        else:
            if not isinstance(name, str):
                raise ArgumentTypeError(f"name: expected a str, got {type(name).__name__}")
            maps = [_check_map("scores", scores, None)]
            names, notes = [name], [note if isinstance(note, str) else str(note)]
        if scale not in SCALES:
            raise ArgumentError(f"scale: expected one of {SCALES}, got {scale!r:.80}")
        stacked = np.stack(maps)
        state = {
            "scores": stacked,
            "names": names,
            "notes": notes,
            "layer_labels": _labels("layer_labels", layer_labels, stacked.shape[1], "layer"),
            "head_labels": _labels("head_labels", head_labels, stacked.shape[2], "head"),
            "scale": scale,
            "model_name": str(model_name),
            **_strongest(stacked[0], scale),
        }
        return cls(**{**state, **kwargs})

    # ---------------------------------------------------------------- reading
    @property
    def values(self) -> NDArray[np.float64]:
        """The map shown, float64 ``[n_layers, n_heads]``."""
        return cast(NDArray[np.float64], self.scores[int(self.selected_map)])

    @property
    def selected_score(self) -> float:
        """Score of the selected head on the map shown."""
        return float(self.values[int(self.selected_layer), int(self.selected_head)])


def _strongest(values: NDArray[np.float64], scale: str) -> dict[str, int]:
    """The head with the largest score (largest magnitude on a diverging scale)."""
    diverging = scale == "diverging" or (scale == "auto" and bool((values < 0).any()))
    layer, head = np.unravel_index(int(np.argmax(np.abs(values) if diverging else values)), values.shape)
    return {"selected_layer": int(layer), "selected_head": int(head)}
