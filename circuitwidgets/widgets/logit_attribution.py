"""LogitAttribution: a direct logit attribution as bars that visibly sum to the model's logit.

One line from :func:`circuitwidgets.causal.logit_attribution`:
``cw.LogitAttribution(causal.logit_attribution(model, tokens, answer, by="head"))``.
Each part of the final residual stream is a bar: the embeddings, each layer's
attention (or each head, ``by="head"``) and MLP (or its strongest neurons,
``by="neuron"``, the rest of each layer's neurons as one bar), the biases, the
unembedding's bias. The bars are drawn as a running sum, ending at the total,
which the view sets against the logit the model computed (``extra["logit"]``).
A click on a head's bar selects it (``selected_layer`` / ``selected_head``), so
:func:`circuitwidgets.link` moves an attention view to it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
import traitlets

from circuitwidgets.causal.attribution import logit_attribution
from circuitwidgets.causal.result import Sweep
from circuitwidgets.errors import ArgumentError, ArgumentTypeError, ShapeError
from circuitwidgets.model import CircuitModel
from circuitwidgets.widgets.core.arrays import NDArrayTrait
from circuitwidgets.widgets.core.base import CircuitWidget
from circuitwidgets.widgets.core.spec import NONE, Size, head_selection, view_data, view_setting
from circuitwidgets.widgets.core.traits import Choice, SelectionIndex
from circuitwidgets.widgets.patching_map import check_sweep

__all__ = ["ORDERS", "LogitAttribution", "logit_attribution_data"]

#: Orders of the bars: the model's (embeddings, then layer by layer) or by size.
ORDERS = ("model", "size")

_BY = {("component",): "component", ("layer",): "layer", ("layer", "head"): "head", ("layer", "neuron"): "neuron"}


def _kind(label: str) -> str:
    if label in ("embed", "pos_embed"):
        return "embed"
    if label == "unembed bias":
        return "bias"
    for word in ("attn", "mlp", "per-layer"):
        if word in label:
            return word.replace("per-layer", "other")
    return "other"


def _layer_of(label: str) -> int:
    head = label.split(" ", 1)[0]
    return int(head[1:]) if head[:1] == "L" and head[1:].isdigit() else NONE


def logit_attribution_data(sweep: Sweep, *, prompt: int | None = None, top_neurons: int = 20) -> dict[str, Any]:
    """Trait values of a :class:`LogitAttribution` of ``sweep`` (the strongest head selected when by head).

    Raises
    ------
    ArgumentTypeError, ShapeError, ArgumentError
        Naming ``sweep`` (not a direct logit attribution, or dims it cannot draw),
        ``prompt`` (needed, or out of range, for a result with ``reduce="none"``) or ``top_neurons``.
    """
    sweep = check_sweep(sweep)
    if sweep.technique != "direct logit attribution" or "rest" not in sweep.extra:
        raise ShapeError(
            f"sweep: expected a direct logit attribution (causal.logit_attribution), got {sweep.technique!r}; "
            "draw other sweeps with cw.PatchingMap"
        )
    dims, values = tuple(sweep.dims), np.asarray(sweep.values, dtype=np.float64)
    rest = {k: np.asarray(v, dtype=np.float64) for k, v in sweep.extra["rest"].items()}
    logit = np.asarray(sweep.extra.get("logit", np.nan), dtype=np.float64)
    if dims[:1] == ("batch",):
        n = values.shape[0]
        if isinstance(prompt, bool) or not isinstance(prompt, int) or not 0 <= prompt < n:
            raise ArgumentError(
                f"prompt: expected a prompt index in [0, {n}) for a result by prompt, got {prompt!r:.80}"
            )
        values, dims = values[prompt], dims[1:]
        rest = {k: v[prompt] for k, v in rest.items()}
        logit = logit[prompt]
    elif prompt is not None:
        raise ArgumentError(f"prompt: the result is averaged over prompts (dims {sweep.dims!r}); expected None")
    if dims not in _BY:
        raise ShapeError(
            f"sweep: expected dims ('component',), ('layer',), ('layer', 'head') or ('layer', 'neuron'), got {dims!r}"
        )
    if isinstance(top_neurons, bool) or not isinstance(top_neurons, int) or top_neurons < 1:
        raise ArgumentError(f"top_neurons: expected a positive int, got {top_neurons!r:.80}")
    by = _BY[dims]
    bars: list[tuple[str, float, str, int, int]] = []  # label, value, kind, layer, head
    labels = sweep.labels
    per_layer: dict[int, list[tuple[str, float, str, int, int]]] = {}
    if by == "head":
        for l, h in np.ndindex(*values.shape):
            per_layer.setdefault(l, []).append((f"{labels['layer'][l]}{labels['head'][h]}", values[l, h], "head", l, h))
    elif by == "neuron":
        keep = set(np.argsort(-np.abs(values).ravel(), kind="stable")[:top_neurons].tolist())
        for l in range(values.shape[0]):
            row = per_layer.setdefault(l, [])
            others = 0.0
            for n in range(values.shape[1]):
                if l * values.shape[1] + n in keep:
                    row.append((f"{labels['layer'][l]} {labels['neuron'][n]}", values[l, n], "neuron", l, NONE))
                else:
                    others += values[l, n]
            row.append((f"{labels['layer'][l]} other neurons", others, "other", l, NONE))
    elif by == "layer":
        for l in range(values.shape[0]):
            per_layer.setdefault(l, []).append((labels["layer"][l], values[l], "layer", l, NONE))
    else:
        for i, name in enumerate(labels["component"]):
            layer = _layer_of(name)
            (per_layer.setdefault(layer, []) if layer >= 0 else bars).append(
                (name, values[i], _kind(name), layer, NONE)
            )
    for name, v in rest.items():
        if name != "unembed bias" and _layer_of(name) < 0:
            bars.append((name, float(v), _kind(name), NONE, NONE))
    for layer in sorted(per_layer):
        bars.extend(per_layer[layer])
        bars.extend((n, float(v), _kind(n), layer, NONE) for n, v in rest.items() if _layer_of(n) == layer)
    if "unembed bias" in rest:
        bars.append(("unembed bias", float(rest["unembed bias"]), "bias", NONE, NONE))
    n_layers = len(labels["layer"]) if "layer" in labels else len({b[3] for b in bars if b[3] >= 0})
    state: dict[str, Any] = {
        "values": np.array([b[1] for b in bars], dtype=np.float64),
        "labels": [b[0] for b in bars],
        "kinds": [b[2] for b in bars],
        "bar_layers": [int(b[3]) for b in bars],
        "bar_heads": [int(b[4]) for b in bars],
        "logit": float(logit) if np.isfinite(logit) else None,
        "metric": sweep.metric,
        "by": by,
        "caption": sweep.describe(),
        "model_name": sweep.model,
        "shape": [n_layers, values.shape[1] if by == "head" else 0],
    }
    if by == "head":
        strongest = np.unravel_index(int(np.argmax(np.abs(values))), values.shape)
        state.update(selected_layer=int(strongest[0]), selected_head=int(strongest[1]))
    return state


class LogitAttribution(CircuitWidget):
    """Direct logit attribution as a running sum of bars, ending at the model's logit; click a head's bar to select it.

    Parameters
    ----------
    sweep
        A :func:`circuitwidgets.causal.logit_attribution` result (``by`` any of
        ``"component"``, ``"layer"``, ``"head"``, ``"neuron"``), or a model: then
        ``LogitAttribution(model, tokens, answers=...)`` runs it, as
        ``LogitLens(model, tokens)`` does.
    tokens, answers, by, pos
        With a model: the arguments of :func:`~circuitwidgets.causal.logit_attribution`
        (``by`` defaults to ``"head"`` here).
    prompt
        For a result with ``reduce="none"``: which prompt to draw.
    top_neurons
        ``by="neuron"``: the strongest neurons drawn one by one; the others of
        each layer are one bar, so the sum still equals the logit.
    **kwargs
        Initial traits (``order``, ``selected_layer``, ``selected_head``).
    """

    _view = traitlets.Unicode("logitattribution").tag(sync=True)
    _prefix = "attribution"

    model_name = view_data(traitlets.Unicode(""))
    """Name of the model (caption)."""

    values = view_data(NDArrayTrait(dtype="float64", dims=("n_bars",)))
    """float64 ``[n_bars]``: each part's share of the logit, in the model's order."""

    labels = view_data(traitlets.List(traitlets.Unicode()))
    """Each bar's name (``embed``, ``L0H3``, ``L1 mlp``, ``unembed bias`` …)."""

    kinds = view_data(traitlets.List(traitlets.Unicode()))
    """Each bar's kind: ``embed``, ``attn``, ``head``, ``mlp``, ``neuron``, ``layer``, ``bias``, ``other``."""

    bar_layers = view_data(traitlets.List(traitlets.Int()))
    """Each bar's layer, or -1."""

    bar_heads = view_data(traitlets.List(traitlets.Int()))
    """Each bar's head, or -1 (a click on a head's bar selects it)."""

    logit = view_data(traitlets.Float(None, allow_none=True))
    """The logit (or logit difference) the model computed, before any soft-cap (``extra["logit"]``)."""

    metric = view_data(traitlets.Unicode(""))
    """What is attributed (``logit of the answer``, ``logit difference (answer − wrong)``)."""

    by = view_data(traitlets.Unicode("component"))
    """The split: ``component``, ``layer``, ``head`` or ``neuron``."""

    caption = view_data(traitlets.Unicode(""))
    """How the result was made (:meth:`Sweep.describe`)."""

    shape = view_data(traitlets.List(traitlets.Int(), default_value=[0, 0]))
    """``[n_layers, n_heads]`` of the model where known (0: unknown)."""

    order = view_setting(Choice(ORDERS, default_value="model"))
    """Order of the bars: the model's, or by size."""

    selected_layer = head_selection(SelectionIndex("n_layers", optional=True))
    """Layer of the selected head, or -1."""

    selected_head = head_selection(SelectionIndex("n_heads", optional=True))
    """Selected head, or -1 (only a result by head has heads)."""

    n_bars = Size("n_bars")

    def __init__(
        self,
        sweep: Sweep | CircuitModel | None = None,
        tokens: str | Sequence[int] | torch.Tensor | None = None,
        *,
        answers: object = None,
        by: str = "head",
        pos: int = -1,
        prompt: int | None = None,
        top_neurons: int = 20,
        **kwargs: Any,
    ) -> None:
        if isinstance(sweep, CircuitModel):  # as LogitLens(model, tokens): the widget runs the attribution
            if tokens is None or answers is None:
                raise ArgumentTypeError(
                    f"tokens, answers: expected a text or token ids and the answers with a model, got "
                    f"{type(tokens).__name__} and {type(answers).__name__}"
                )
            sweep = logit_attribution(sweep, tokens, answers, by=by, pos=pos)  # type: ignore[arg-type]
        elif tokens is not None or answers is not None:
            raise ArgumentTypeError(
                f"sweep: expected a CircuitModel when tokens or answers are given, got {type(sweep).__name__}"
            )
        if sweep is not None:
            kwargs = {**logit_attribution_data(sweep, prompt=prompt, top_neurons=top_neurons), **kwargs}
        super().__init__(**kwargs)

    @property
    def n_layers(self) -> int:
        """Layers of the model (0 where unknown)."""
        return int(self.shape[0]) if self.shape else 0

    @property
    def n_heads(self) -> int:
        """Heads per layer for a result by head, else 0."""
        return int(self.shape[1]) if len(self.shape) > 1 else 0

    @property
    def _links_heads(self) -> bool:
        """Only a result by head selects heads."""
        return self.by == "head"

    @property
    def total(self) -> float:
        """The sum of the bars (equal to :attr:`logit` up to rounding)."""
        return float(np.sum(self.values))
