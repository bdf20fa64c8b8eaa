"""PatchingMap: any causal :class:`~circuitwidgets.causal.Sweep` as a heatmap of layers × positions, heads or neurons.

One line from a result: ``cw.PatchingMap(causal.patch(...))``. Rows are layers;
columns are the sweep's positions (the clean prompt's tokens along the axis, the
positions where the corrupted prompt differs marked), heads or neurons (the
strongest ``top_neurons`` on request). A sweep over layers, positions *and*
heads is drawn one head at a time (a head picker; the head is the selection), a
path-patching sweep over every sender one sender at a time. NaN cells (a receiver
that cannot read its sender) are drawn as "n/a". The colour scale is diverging
around 0, or, for a normalised metric, 0 (corrupted) to 1 (clean behaviour
restored), said under the map; the caption is the sweep's own description
(:meth:`~circuitwidgets.causal.Sweep.describe`).

A click selects the cell's layer and its head (``selected_layer`` /
``selected_head``, as in the other views) and position (``selected_pos``). With
:func:`circuitwidgets.link` the position is linked as an attention view's
``selected_dest``: a click on a (layer, position) cell selects that token there.
"""

from __future__ import annotations

from typing import Any, ClassVar, cast

import numpy as np
import traitlets
from numpy.typing import NDArray

from circuitwidgets.causal.result import Sweep
from circuitwidgets.errors import ArgumentError, ArgumentTypeError, ShapeError
from circuitwidgets.widgets.core.arrays import NDArrayTrait
from circuitwidgets.widgets.core.base import CircuitWidget
from circuitwidgets.widgets.core.spec import NONE, Size, head_selection, view_data, view_setting
from circuitwidgets.widgets.core.traits import SelectionIndex

__all__ = ["NORMALISED_NOTE", "PatchingMap", "check_sweep", "patching_map_data"]

#: What the normalised scale means (written under the map).
NORMALISED_NOTE = "0 = corrupted behaviour, 1 = clean behaviour restored"

#: Dims a map draws as columns, in order of preference, and as panels (one shown at a time).
_COLUMNS = ("pos", "head", "neuron")


def check_sweep(sweep: object, name: str = "sweep") -> Sweep:
    """``sweep`` as a :class:`Sweep` whose values, dims and labels agree, else a typed error naming ``name``."""
    if not isinstance(sweep, Sweep):
        raise ArgumentTypeError(f"{name}: expected a circuitwidgets.causal.Sweep, got {type(sweep).__name__}")
    raw = np.asarray(sweep.values)
    if raw.dtype.kind not in "fiu":  # object, string, bool or complex values are not a sweep's numbers
        raise ArgumentTypeError(f"{name}.values: expected an array of real numbers, got dtype {raw.dtype}")
    for field in ("metric", "technique"):
        if not isinstance(getattr(sweep, field), str):
            raise ArgumentTypeError(f"{name}.{field}: expected a str, got {type(getattr(sweep, field)).__name__}")
    values = raw.astype(np.float64)
    if values.ndim != len(sweep.dims):
        raise ShapeError(f"{name}: values have {values.ndim} axes but dims {sweep.dims!r} name {len(sweep.dims)}")
    for axis, dim in enumerate(sweep.dims):
        labels = sweep.labels.get(dim)
        if labels is None or len(labels) != values.shape[axis]:
            raise ShapeError(f"{name}: dim {dim!r} has {values.shape[axis]} entries but labels {labels!r:.60}")
    if np.isinf(values).any():
        raise ArgumentError(f"{name}: expected finite values (NaN for cells that do not exist), got infinities")
    return sweep


def _tokens(sweep: Sweep, n_pos: int) -> tuple[list[str], list[str], list[int]]:
    """The clean (or only) prompt's tokens, the corrupted prompt's, and the positions where any prompt pair differs."""
    prompts = sweep.prompts
    clean = prompts.get("clean") or prompts.get("tokens") or []
    corrupted = prompts.get("corrupted") or []
    shown = [str(t) for t in clean[0]] if clean and len(clean[0]) == n_pos else []
    if not shown:  # (labels are "3 ' the'": the index, then the token's repr)
        shown = [label.split(" ", 1)[-1] for label in sweep.labels["pos"]]
    other = [str(t) for t in corrupted[0]] if corrupted and len(corrupted[0]) == n_pos else []
    differ = sorted(
        {
            i
            for a, b in zip(clean, corrupted, strict=False)
            for i, (x, y) in enumerate(zip(a, b, strict=False))
            if x != y
        }
    )
    return shown, other, differ


def patching_map_data(sweep: Sweep, *, top_neurons: int | None = None) -> dict[str, Any]:
    """Trait values of a :class:`PatchingMap` of ``sweep`` (checked; the strongest cell selected).

    Raises
    ------
    ArgumentTypeError, ShapeError, ArgumentError
        Naming ``sweep`` (not a Sweep, or dims a map cannot draw: no ``layer``, a
        ``component`` or ``batch`` dim) or ``top_neurons``.
    """
    sweep = check_sweep(sweep)
    if top_neurons is not None and (
        isinstance(top_neurons, bool) or not isinstance(top_neurons, int) or top_neurons < 1
    ):
        raise ArgumentError(f"top_neurons: expected a positive int or None, got {top_neurons!r:.80}")
    dims = tuple(sweep.dims)
    values = np.asarray(sweep.values, dtype=np.float64)
    panel_dim = ""
    if dims[:2] == ("sender_layer", "sender_head") and dims[2:] == ("layer", "head"):
        L, H = values.shape[:2]
        stacked = values.reshape(L * H, *values.shape[2:])
        keep = [i for i in range(L * H) if np.isfinite(stacked[i]).any()]
        panel_labels = [f"{sweep.labels['sender_layer'][i // H]}{sweep.labels['sender_head'][i % H]} →" for i in keep]
        cube, col_dim, panel_dim = stacked[keep], "head", "sender"
    else:
        unknown = [d for d in dims if d not in ("layer", *_COLUMNS)]
        if "layer" not in dims or unknown or len(dims) > 3:
            raise ShapeError(
                f"sweep: a PatchingMap draws dims 'layer' with up to two of {_COLUMNS} (or a path-patching sweep "
                f"over every sender), got dims {dims!r}"
                + ("; draw a logit attribution with cw.LogitAttribution" if "component" in dims else "")
                + ("; pick one prompt (reduce='mean')" if "batch" in dims else "")
            )
        rest = [d for d in _COLUMNS if d in dims]
        col_dim = rest[0] if rest else ""
        panel_dim = rest[1] if len(rest) > 1 else ""
        order = [dims.index(d) for d in ("layer", col_dim, panel_dim) if d]
        cube = np.transpose(values, order)
        if not col_dim:
            cube = cube[:, None]
        cube = np.moveaxis(cube, 2, 0) if panel_dim else cube[None]
        panel_labels = list(sweep.labels[panel_dim]) if panel_dim else []
    # cube: [n_panels, n_layers, n_cols]
    col_labels = list(sweep.labels[col_dim]) if col_dim else ["all"]
    col_index = list(range(len(col_labels)))
    if top_neurons is not None and "neuron" in (col_dim, panel_dim):
        strength = np.nan_to_num(np.abs(cube), nan=0.0)
        axis_keep = (0, 1) if col_dim == "neuron" else (1, 2)
        per = strength.max(axis=axis_keep)
        chosen = sorted(int(i) for i in np.argsort(-per, kind="stable")[:top_neurons])
        if col_dim == "neuron":
            cube, col_labels, col_index = cube[:, :, chosen], [col_labels[i] for i in chosen], chosen
        else:
            cube, panel_labels = cube[chosen], [panel_labels[i] for i in chosen]
    elif top_neurons is not None:
        raise ArgumentError(f"top_neurons: the sweep has no neuron dim (dims {dims!r})")
    n_pos = len(sweep.labels["pos"]) if "pos" in dims else 0
    clean, corrupted, differ = _tokens(sweep, n_pos) if n_pos else ([], [], [])
    normalised = sweep.metric.startswith("normalised")
    state: dict[str, Any] = {
        "values": np.ascontiguousarray(cube, dtype=np.float64),
        "col_dim": col_dim,
        "panel_dim": panel_dim,
        "layer_labels": list(sweep.labels["layer"]),
        "col_labels": col_labels,
        "col_index": col_index,
        "panel_labels": panel_labels,
        "clean_tokens": clean,
        "corrupted_tokens": corrupted,
        "differ": differ,
        "normalised": normalised,
        "title": sweep.technique + (f" of {sweep.site}" if sweep.site else ""),
        "metric": sweep.metric,
        "caption": sweep.describe(),
        "scale_note": NORMALISED_NOTE if normalised else "",
        "model_name": sweep.model,
    }
    return {**state, **_strongest(state)}


def _strongest(state: dict[str, Any]) -> dict[str, int]:
    """The selection of the strongest cell (largest |value|)."""
    cube: NDArray[np.float64] = state["values"]
    flat = np.nan_to_num(np.abs(cube), nan=-1.0)
    panel, layer, col = (int(i) for i in np.unravel_index(int(np.argmax(flat)), cube.shape))
    out = {"selected_layer": layer, "selected_panel": panel, "selected_head": NONE, "selected_pos": NONE}
    for dim, index in ((state["col_dim"], col), (state["panel_dim"], panel)):
        if dim == "head":
            out["selected_head"] = index
        elif dim == "pos":
            out["selected_pos"] = index
    return out


class PatchingMap(CircuitWidget):
    """A causal sweep as a heatmap; click a cell to select its layer, head and position.

    Parameters
    ----------
    sweep
        Any :class:`~circuitwidgets.causal.Sweep` over ``layer`` and up to two of
        ``pos``, ``head``, ``neuron`` (activation and path patching, ablation,
        attribution patching, logit attribution by head or neuron), or a
        path-patching sweep over every sender.
    top_neurons
        Keep the ``top_neurons`` neurons with the largest effect (for a sweep over neurons).
    **kwargs
        Initial traits (``selected_layer``, ``selected_head``, ``selected_pos``);
        by default the strongest cell is selected.

    Raises
    ------
    ArgumentTypeError, ShapeError, ArgumentError
        Naming ``sweep`` when it is not a Sweep or its dims cannot be drawn as a
        map (a ``component`` or ``batch`` dim), or ``top_neurons``.
    """

    _view = traitlets.Unicode("patchingmap").tag(sync=True)
    _prefix = "patching"
    _link_as: ClassVar[dict[str, str]] = {"selected_dest": "selected_pos"}

    model_name = view_data(traitlets.Unicode(""))
    """Name of the model (caption)."""

    values = view_data(NDArrayTrait(dtype="float64", dims=("n_panels", "n_layers", "n_cols")))
    """float64 ``[n_panels, n_layers, n_cols]``: the sweep's values, NaN where a cell does not exist."""

    col_dim = view_data(traitlets.Unicode(""))
    """What the columns are: ``"pos"``, ``"head"``, ``"neuron"``, or ``""`` (one value per layer)."""

    panel_dim = view_data(traitlets.Unicode(""))
    """What is shown one at a time: ``"head"``, ``"neuron"``, ``"sender"`` (path patching from every sender) or ``""``."""

    layer_labels = view_data(traitlets.List(traitlets.Unicode()))
    """Row labels (``L0``, …)."""

    col_labels = view_data(traitlets.List(traitlets.Unicode()))
    """Column labels (positions ``"3 ' the'"``, ``H0``…, ``N12``…)."""

    col_index = view_data(traitlets.List(traitlets.Int()))
    """Index in the sweep of each column (the kept neurons with ``top_neurons``)."""

    panel_labels = view_data(traitlets.List(traitlets.Unicode()))
    """Labels of the panels (heads, senders ``L0H11 →``, neurons)."""

    clean_tokens = view_data(traitlets.List(traitlets.Unicode()))
    """The clean (or ablated) prompt's tokens along the position axis (untrusted text)."""

    corrupted_tokens = view_data(traitlets.List(traitlets.Unicode()))
    """The corrupted prompt's tokens (empty for an ablation)."""

    differ = view_data(traitlets.List(traitlets.Int()))
    """Positions where a clean and a corrupted prompt differ (marked on the axis)."""

    normalised = view_data(traitlets.Bool(False))
    """Whether the metric is normalised (0 corrupted, 1 clean restored)."""

    title = view_data(traitlets.Unicode(""))
    """Title: the technique and site."""

    metric = view_data(traitlets.Unicode(""))
    """The metric's name."""

    caption = view_data(traitlets.Unicode(""))
    """How the sweep was made (:meth:`Sweep.describe`), under the map."""

    scale_note = view_data(traitlets.Unicode(""))
    """What the colour scale means (the normalised scale's meaning), under the colour bar."""

    selected_layer = head_selection(SelectionIndex("n_layers"))
    """Layer of the selected cell."""

    selected_head = head_selection(SelectionIndex("n_heads", optional=True))
    """Head of the selected cell, or -1 for a map with no head axis."""

    selected_pos = view_setting(SelectionIndex("n_tokens", optional=True))
    """Position of the selected cell, or -1 (linked as an attention view's ``selected_dest``)."""

    selected_panel = view_setting(SelectionIndex("n_panels"))
    """Panel shown (a sender, or a neuron); for head panels the shown panel is ``selected_head``."""

    n_panels = Size("n_panels")
    n_layers = Size("n_layers")
    n_cols = Size("n_cols")

    def __init__(self, sweep: Sweep | None = None, *, top_neurons: int | None = None, **kwargs: Any) -> None:
        if sweep is not None:
            kwargs = {**patching_map_data(sweep, top_neurons=top_neurons), **kwargs}
        elif top_neurons is not None:
            raise ArgumentTypeError("sweep: expected a Sweep when top_neurons is given, got None")
        super().__init__(**kwargs)

    @classmethod
    def from_sweep(cls, sweep: Sweep, *, top_neurons: int | None = None, **kwargs: Any) -> PatchingMap:
        """Same as ``PatchingMap(sweep, ...)``."""
        return cls(sweep, top_neurons=top_neurons, **kwargs)

    @property
    def n_heads(self) -> int:
        """Heads of the model when the map has a head axis (columns or panels), else 0."""
        if self.col_dim == "head":
            return self.n_cols
        return self.n_panels if self.panel_dim == "head" else 0

    @property
    def n_tokens(self) -> int:
        """Positions when the map has a position axis, else 0."""
        if self.col_dim == "pos":
            return self.n_cols
        return 0

    @property
    def _links_heads(self) -> bool:
        """Whether its layer is a head's (a map with no head axis moves no other view's head)."""
        return "head" in (self.col_dim, self.panel_dim)

    @property
    def _links_positions(self) -> bool:
        """Whether it has a position axis to link (as an attention view's ``selected_dest``)."""
        return self.n_tokens > 0

    @property
    def selected_value(self) -> float:
        """The value of the selected cell (NaN where it does not exist)."""
        panel = max(0, self.selected_head) if self.panel_dim == "head" else self.selected_panel
        col = {"head": self.selected_head, "pos": self.selected_pos}.get(self.col_dim, 0)
        return float(cast(NDArray[np.float64], self.values)[panel, self.selected_layer, max(0, col)])
