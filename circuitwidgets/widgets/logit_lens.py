"""LogitLens: what the residual stream predicts at every layer, as a grid of layers × positions.

One line from a result, ``cw.LogitLens(causal.logit_lens(model, tokens))``, or
from a model and tokens, ``cw.LogitLens(model, tokens)``. Each cell (the stream
before a layer, or after the last, at one position) shows its top token as text,
shaded by that token's probability; hovering gives the top-k with their
probabilities; a click selects the row (``selected_layer``: row ``l < n_layers``
is the stream before layer ``l``, row ``n_layers`` the final stream) and the
position (``selected_pos``, linked as an attention view's ``selected_dest`` by
:func:`circuitwidgets.link`). Long prompts scroll sideways.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np
import torch
import traitlets

from circuitwidgets.causal.lens import LogitLens as LensResult
from circuitwidgets.causal.lens import logit_lens
from circuitwidgets.errors import ArgumentError, ArgumentTypeError
from circuitwidgets.model import CircuitModel
from circuitwidgets.widgets.core.arrays import NDArrayTrait
from circuitwidgets.widgets.core.base import CircuitWidget
from circuitwidgets.widgets.core.spec import Size, view_data, view_setting
from circuitwidgets.widgets.core.traits import SelectionIndex

__all__ = ["LogitLens", "logit_lens_data"]


def _strings(lens: LensResult, ids: list[int]) -> list[str]:
    """Display strings of token ``ids`` through the lens's model (``#id`` where it has no tokenizer)."""
    model = getattr(lens, "_model", None)
    to_str = getattr(model, "to_str_tokens", None)
    if to_str is None or not ids:
        return [f"#{i}" for i in ids]
    out = to_str(torch.tensor(ids, dtype=torch.long))
    return [str(s) for s in out]


def logit_lens_data(lens: LensResult, *, prompt: int = 0) -> dict[str, Any]:
    """Trait values of a :class:`LogitLens` of prompt ``prompt`` of ``lens`` (the final row selected).

    Raises
    ------
    ArgumentTypeError, ArgumentError
        Naming ``lens`` (not a logit-lens result) or ``prompt`` (out of range).
    """
    if not isinstance(lens, LensResult):
        raise ArgumentTypeError(
            f"lens: expected a circuitwidgets.causal.LogitLens result (causal.logit_lens(model, tokens)) "
            f"or a CircuitModel and tokens, got {type(lens).__name__}"
        )
    ids = np.asarray(lens.top_ids)
    if ids.ndim != 4:
        raise ArgumentError(f"lens: expected top_ids [rows, batch, pos, k], got shape {list(ids.shape)}")
    batch = ids.shape[1]
    if isinstance(prompt, bool) or not isinstance(prompt, int) or not 0 <= prompt < batch:
        raise ArgumentError(f"prompt: expected a prompt index in [0, {batch}), got {prompt!r:.80}")
    mine = ids[:, prompt]  # [rows, pos, k]
    vocab_ids, index = np.unique(mine, return_inverse=True)
    probs = np.exp(np.asarray(lens.top_log_probs[:, prompt], dtype=np.float64)).astype(np.float32)
    return {
        "tokens": [str(t) for t in lens.tokens[prompt]],
        "layer_labels": list(lens.layer_labels),
        "vocab": _strings(lens, [int(i) for i in vocab_ids]),
        "top_ids": index.reshape(mine.shape).astype(np.int32),
        "top_probs": probs,
        "model_name": lens.model,
        "selected_layer": ids.shape[0] - 1,
    }


class LogitLens(CircuitWidget):
    """The logit lens as a grid: each layer's (row's) top prediction at each position.

    Parameters
    ----------
    lens
        A :func:`circuitwidgets.causal.logit_lens` result, or a
        :class:`~circuitwidgets.CircuitModel` (then ``tokens`` is required).
    tokens
        A text or token ids, with a model.
    k
        Predictions kept per cell (with a model; a result keeps its own).
    prompt
        Which prompt of a batch to show.
    **kwargs
        Initial traits (``selected_layer``, ``selected_pos``).

    Raises
    ------
    ArgumentTypeError, ArgumentError
        Naming ``lens``, ``tokens`` or ``prompt``.
    """

    _view = traitlets.Unicode("logitlens").tag(sync=True)
    _prefix = "lens"
    _link_as: ClassVar[dict[str, str]] = {"selected_dest": "selected_pos"}
    _links_heads = False  # (its rows are the stream before each layer and after the last, not heads' layers)

    model_name = view_data(traitlets.Unicode(""))
    """Name of the model (caption)."""

    tokens = view_data(traitlets.List(traitlets.Unicode()))
    """The prompt's tokens along the position axis (untrusted text, shown as text)."""

    layer_labels = view_data(traitlets.List(traitlets.Unicode()))
    """Row labels: ``before L0`` … ``final``."""

    vocab = view_data(traitlets.List(traitlets.Unicode()))
    """Display strings of the predicted tokens (``top_ids`` index them)."""

    top_ids = view_data(NDArrayTrait(dtype="int32", dims=("n_rows", "n_tokens", "k")))
    """int32 ``[n_rows, n_tokens, k]``: each cell's top-k predictions, best first, as indices into ``vocab``."""

    top_probs = view_data(NDArrayTrait(dtype="float32", dims=("n_rows", "n_tokens", "k")))
    """float32 ``[n_rows, n_tokens, k]``: their probabilities."""

    selected_layer = view_setting(SelectionIndex("n_rows"))
    """Row selected: the stream before layer ``l``, or ``n_layers`` for the final stream."""

    selected_pos = view_setting(SelectionIndex("n_tokens", optional=True))
    """Position selected, or -1 (linked as an attention view's ``selected_dest``)."""

    n_rows = Size("n_rows")
    n_tokens = Size("n_tokens")
    k = Size("k")

    def __init__(
        self,
        lens: LensResult | CircuitModel | None = None,
        tokens: str | Sequence[int] | torch.Tensor | None = None,
        *,
        k: int = 5,
        prompt: int = 0,
        **kwargs: Any,
    ) -> None:
        if isinstance(lens, CircuitModel):
            if tokens is None:
                raise ArgumentTypeError("tokens: expected a text or token ids with a model, got None")
            lens = logit_lens(lens, tokens, k=k)
        elif tokens is not None:
            raise ArgumentTypeError(f"lens: expected a CircuitModel when tokens is given, got {type(lens).__name__}")
        if lens is not None:
            kwargs = {**logit_lens_data(lens, prompt=prompt), **kwargs}
        super().__init__(**kwargs)

    @classmethod
    def from_model(
        cls, model: CircuitModel, tokens: str | Sequence[int] | torch.Tensor, *, k: int = 5, **kwargs: Any
    ) -> LogitLens:
        """Same as ``LogitLens(model, tokens, k=k)``: runs :func:`circuitwidgets.causal.logit_lens`."""
        return cls(model, tokens, k=k, **kwargs)

    @property
    def n_layers(self) -> int:
        """Layers of the model (one row fewer than the grid: the last row is the final stream)."""
        return max(0, self.n_rows - 1)

    @property
    def selected_prediction(self) -> list[tuple[str, float]]:
        """The selected cell's top-k as ``(token, probability)`` (empty with no position selected)."""
        if self.selected_pos < 0:
            return []
        ids = self.top_ids[self.selected_layer, self.selected_pos]
        probs = self.top_probs[self.selected_layer, self.selected_pos]
        return [(self.vocab[int(i)], float(p)) for i, p in zip(ids, probs, strict=True)]
