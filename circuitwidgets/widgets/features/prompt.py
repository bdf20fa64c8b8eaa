"""PromptFeatures: a prompt's tokens and, per token, the units (features, neurons) active there, strongest first.

Each token of the prompt is a column holding its ``k`` strongest active units
as chips (the unit's name and activation); a click on a chip selects that unit
(``selected_feature``, linked to a :class:`FeatureDashboard` of the same site
by :func:`circuitwidgets.link`), a click on a token selects its position
(``selected_dest``, linked to an attention view's). Long prompts draw only the
columns in view (virtualised like the attention view's token strip).

Built with ``head_query=`` (a position), it also follows heads: a head chosen in a
linked view moves it, and the views linked to its position, to the token that
head attends to most from ``head_query`` (``head_positions``; BOS left out, where
heads with nothing to read park).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
import traitlets

from circuitwidgets._checks import check_int
from circuitwidgets.errors import ArgumentError, ArgumentTypeError
from circuitwidgets.features.dictionary import Dictionary
from circuitwidgets.features.examples import unit_activations
from circuitwidgets.features.units import Units, dictionary_features
from circuitwidgets.model import CircuitModel
from circuitwidgets.widgets.core.arrays import NDArrayTrait
from circuitwidgets.widgets.core.base import CircuitWidget
from circuitwidgets.widgets.core.spec import Size, view_data, view_setting
from circuitwidgets.widgets.core.traits import SelectionIndex
from circuitwidgets.widgets.features.data import DENSE_SHARE, dense_units, prompt_data

__all__ = ["PromptFeatures", "strongest_sources"]


class PromptFeatures(CircuitWidget):
    """The active units at each token of one prompt.

    Parameters
    ----------
    model
        The model to run.
    units
        A ``circuitwidgets.features.Dictionary`` (its features) or
        ``circuitwidgets.features.Units`` (``features.neurons(model, 1)``).
    prompt
        A text or token ids (one prompt).
    k
        Units kept per token (the strongest active ones).
    density
        Optional share of a corpus's tokens where each unit is positive (``FeatureDashboard.density``,
        ``Examples.density``): units above ``dense_share`` are marked dense on their chips.
    dense_share
        The share above which a unit is dense (``DENSE_SHARE``, 10 %, by default).
    head_query
        Optional query position (negative counts from the end: ``-1`` is the last token): a head chosen in a
        linked view then selects the token that head attends to most from there (:func:`strongest_sources`).
    **kwargs
        Initial traits (``selected_feature``, ``selected_dest``).
    """

    _view = traitlets.Unicode("promptfeatures").tag(sync=True)
    _prefix = "promptfeatures"
    _links_heads = False

    model_name = view_data(traitlets.Unicode(""))
    """Name of the model (caption)."""
    site = view_data(traitlets.Unicode(""))
    """What the units are (``L1.tc``, ``L1 neurons``): views of the same site link their ``selected_feature``."""
    unit_prefix = view_data(traitlets.Unicode(""))
    """Unit ``i`` is called ``unit_prefix + str(i)``."""
    n_units_total = view_data(traitlets.Int(0))
    """How many units the layer has (the bound of ``selected_feature``)."""
    tokens = view_data(traitlets.List(traitlets.Unicode()))
    """The prompt's tokens (untrusted text, shown as text)."""
    active = view_data(NDArrayTrait(dtype="int32", dims=("n_tokens", "k")))
    """int32 ``[n_tokens, k]``: each token's strongest active units, strongest first (-1 where fewer are active)."""
    active_value = view_data(NDArrayTrait(dtype="float32", dims=("n_tokens", "k")))
    """float32: their activations."""
    dense = view_data(NDArrayTrait(dtype="int32", dims=("n_dense",)))
    """int32: the units called dense (active on more than ``dense_share`` of a corpus), marked on their chips."""
    dense_share = view_data(traitlets.Float(0.0))
    """The share of tokens above which a unit is dense (0 when no density was given)."""
    head_positions = view_data(traitlets.List(traitlets.List(traitlets.Int())))
    """``[n_layers][n_heads]``: the token a head chosen in a linked view moves the position to (-1: none); empty
    when the view follows no head (built without ``head_query``)."""

    selected_feature = view_setting(SelectionIndex("n_units_total", optional=True))
    """The unit selected (-1 for none); linked with a dashboard of the same site."""
    selected_dest = view_setting(SelectionIndex("n_tokens", optional=True))
    """The token position selected (-1 for none); linked with an attention view's destination."""

    n_tokens = Size("n_tokens")
    k = Size("k")
    n_dense = Size("n_dense")

    def __init__(
        self,
        model: CircuitModel | None = None,
        units: Units | Dictionary | None = None,
        prompt: str | Sequence[int] | torch.Tensor | None = None,
        *,
        k: int = 8,
        density: np.ndarray | torch.Tensor | None = None,
        dense_share: float = DENSE_SHARE,
        head_query: int | None = None,
        **kwargs: Any,
    ) -> None:
        if model is not None:
            kwargs = {**prompt_traits(model, units, prompt, k), **kwargs}
            if head_query is not None and prompt is not None:  # (no prompt: prompt_traits refused it above)
                n_tokens = len(kwargs["tokens"])
                query = check_int("head_query", head_query, -n_tokens, n_tokens)
                kwargs["head_positions"] = strongest_sources(model, prompt, query)
        elif head_query is not None:
            raise ArgumentError("head_query: expected a model to read the heads' attention from, got model=None")
        if density is not None:
            n = kwargs.get("n_units_total")
            share = _check_share(dense_share)
            if not isinstance(density, np.ndarray | torch.Tensor) or density.ndim != 1:
                raise ArgumentTypeError(
                    f"density: expected a 1-d array of per-unit shares, got {type(density).__name__}"
                )
            if n is not None and density.shape[0] != n:
                raise ArgumentError(f"density: expected {n} values (one per unit), got {density.shape[0]}")
            kwargs = {**kwargs, "dense": dense_units(density, share), "dense_share": share}
        super().__init__(**kwargs)

    def features_at(self, pos: int) -> list[tuple[str, float]]:
        """``(unit name, activation)`` of the active units at token ``pos``, strongest first."""
        pos = check_int("pos", pos, 0, self.n_tokens)
        return [
            (f"{self.unit_prefix}{int(i)}", float(v))
            for i, v in zip(self.active[pos], self.active_value[pos], strict=True)
            if int(i) >= 0
        ]


def _check_share(value: object) -> float:
    """``dense_share`` as a float in [0, 1)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= float(value) < 1:
        raise ArgumentError(f"dense_share: expected a share of tokens in [0, 1), got {value!r}")
    return float(value)


def prompt_traits(
    model: CircuitModel, units: Units | Dictionary | None, prompt: str | Sequence[int] | torch.Tensor | None, k: int
) -> dict[str, Any]:
    """Trait values of a :class:`PromptFeatures` (runs the model once, to the site the units read)."""
    if not isinstance(model, CircuitModel):
        raise ArgumentTypeError(f"model: expected a CircuitModel, got {type(model).__name__}")
    read = dictionary_features(model, units) if isinstance(units, Dictionary) else units
    if not isinstance(read, Units):
        raise ArgumentTypeError(f"units: expected a features.Dictionary or features.Units, got {type(units).__name__}")
    if prompt is None:
        raise ArgumentTypeError("prompt: expected a text or token ids, got None")
    tokens = model._check_tokens(prompt)
    if tokens.shape[0] != 1:
        raise ArgumentTypeError(f"prompt: expected one prompt, got {tokens.shape[0]}")
    k = check_int("k", k, 1)
    with torch.no_grad():
        acts = unit_activations(model, read, tokens)
    site = read.prefix.rstrip("/") if read.kind == "feature" else f"L{read.layer} {read.kind}s"
    return {
        **prompt_data(model, tokens, acts, k),
        "site": site,
        "unit_prefix": read.prefix,
        "n_units_total": read.n_units,
    }


def strongest_sources(model: CircuitModel, prompt: str | Sequence[int] | torch.Tensor, query: int) -> list[list[int]]:
    """``[n_layers][n_heads]``: the position each head attends to most from ``query`` on ``prompt``.

    BOS (position 0) is left out when the query has any other token to read: heads with nothing to read park
    their attention there, and a move to BOS would show nothing. A query at position 0 reads only itself.

    Parameters
    ----------
    model
        The model to run (once, keeping only the attention patterns).
    prompt
        A text or token ids (one prompt).
    query
        The query position; negative counts from the end (``-1``: the last token).

    Returns
    -------
    list[list[int]]
        Position per ``[layer][head]``.
    """
    if not isinstance(model, CircuitModel):
        raise ArgumentTypeError(f"model: expected a CircuitModel, got {type(model).__name__}")
    tokens = model._check_tokens(prompt)
    if tokens.shape[0] != 1:
        raise ArgumentTypeError(f"prompt: expected one prompt, got {tokens.shape[0]}")
    n = int(tokens.shape[1])
    query = check_int("query", query, -n, n)
    query %= n
    _, cache = model.run_with_cache(tokens, names=["pattern"])
    out = []
    for layer in range(model.cfg.n_layers):
        row = cache["pattern", layer][0, :, query, : query + 1].double().clone()  # [head, src]
        if query > 0:
            row[:, 0] = -1.0  # (BOS: where heads with nothing to read park)
        out.append([int(i) for i in row.argmax(-1)])
    return out
