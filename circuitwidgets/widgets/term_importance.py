"""Marginal loss reduction of the path terms by order, and of each layer's order-1 terms.

The paper's term-importance algorithm (:func:`circuitwidgets.circuits.term_importance`):
attention patterns frozen, head outputs first replaced by zeros (order 0: the
direct path only), then by the outputs of the previous run (orders ≤ 1, ≤ 2,
…). The view draws the loss reduction each order adds, and, for order 1, each
layer's share, with the numbers.

Data traits (kernel → view): ``marginal`` float64 ``[max_order + 1]``,
``losses`` float64 ``[max_order + 1]``, ``layer_order1`` float64 ``[n_layers]``,
``loss_no_terms``, ``full_loss`` (nats).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
import traitlets
from numpy.typing import NDArray

from circuitwidgets.circuits import term_importance
from circuitwidgets.errors import ArgumentError, ArgumentTypeError
from circuitwidgets.model import CircuitModel
from circuitwidgets.widgets._arrays import NDArrayTrait
from circuitwidgets.widgets._base import CircuitWidget, SelectionIndex, check_selection

__all__ = ["TermImportance", "term_importance_data"]

TokensOrText = str | Sequence[int] | torch.Tensor


def term_importance_data(
    model: CircuitModel, tokens_or_text: TokensOrText, *, max_order: int | None = None
) -> dict[str, Any]:
    """Trait values of a :class:`TermImportance` for ``model`` on a text or ``[batch, pos]`` token ids.

    Cost ``max_order + n_layers + 2`` forward passes.
    """
    if not isinstance(model, CircuitModel):
        raise ArgumentTypeError(f"model: expected a circuitwidgets.CircuitModel, got {type(model).__name__}")
    result = term_importance(model, tokens_or_text, max_order=max_order, progress_bar=False)
    if isinstance(tokens_or_text, str):
        shape = tuple(model.to_tokens(tokens_or_text).shape)
    else:
        t = torch.as_tensor(tokens_or_text)
        shape = tuple(t.shape) if t.ndim == 2 else (1, int(t.shape[0]))
    return {
        "losses": np.asarray(result.losses, dtype=np.float64),
        "marginal": np.asarray(result.marginal, dtype=np.float64),
        "layer_order1": np.asarray(result.layer_order1, dtype=np.float64),
        "loss_no_terms": float(result.loss_no_terms),
        "full_loss": float(result.full_loss),
        "n_sequences": int(shape[0]),
        "n_positions": int(shape[1]),
        "model_name": model.name,
    }


class TermImportance(CircuitWidget):
    """Loss reduction of the order-0, 1, 2, … path terms, and of each layer's order-1 terms.

    Parameters
    ----------
    model
        The model (omit it to build from trait values, e.g. :func:`term_importance_data`).
    tokens_or_text
        A text, or token ids ``[pos]`` or ``[batch, pos]``, on which the losses are measured.
    max_order
        Highest order (default ``n_layers``, where the loss equals the model's).
    **kwargs
        Initial traits.
    """

    _view = traitlets.Unicode("termimportance").tag(sync=True)
    _from_view = frozenset({"selected_order", "selected_layer"})

    model_name = traitlets.Unicode("").tag(sync=True)
    """Name of the model (caption)."""

    losses = NDArrayTrait(dtype="float64", ndim=1).tag(sync=True)
    """float64 ``[max_order + 1]``: mean loss (nats) keeping path terms of order ≤ n."""

    marginal = NDArrayTrait(dtype="float64", ndim=1).tag(sync=True)
    """float64 ``[max_order + 1]``: loss reduction from adding the order-n terms."""

    layer_order1 = NDArrayTrait(dtype="float64", ndim=1).tag(sync=True)
    """float64 ``[n_layers]``: loss reduction from adding only layer l's order-1 terms to the direct path."""

    loss_no_terms = traitlets.Float(0.0).tag(sync=True)
    """Loss with no path terms at all (nats)."""

    full_loss = traitlets.Float(0.0).tag(sync=True)
    """Loss of the ordinary forward pass (nats)."""

    n_sequences = traitlets.Int(0).tag(sync=True)
    """Sequences the losses are averaged over."""

    n_positions = traitlets.Int(0).tag(sync=True)
    """Tokens per sequence."""

    selected_order = SelectionIndex("n_orders", optional=True).tag(sync=True)
    """Highlighted order, or -1."""

    selected_layer = SelectionIndex("n_layers", optional=True).tag(sync=True)
    """Highlighted layer of the order-1 bars, or -1."""

    def __init__(
        self,
        model: CircuitModel | None = None,
        tokens_or_text: TokensOrText | None = None,
        *,
        max_order: int | None = None,
        **kwargs: Any,
    ) -> None:
        if model is not None:
            if tokens_or_text is None:
                raise ArgumentError("tokens_or_text: expected a text or token ids to measure the loss on, got None")
            kwargs = {**term_importance_data(model, tokens_or_text, max_order=max_order), **kwargs}
        super().__init__(**kwargs)

    @traitlets.default("losses")
    def _default_losses(self) -> NDArray[np.float64]:
        return np.zeros(0)

    @traitlets.default("marginal")
    def _default_marginal(self) -> NDArray[np.float64]:
        return np.zeros(0)

    @traitlets.default("layer_order1")
    def _default_layer_order1(self) -> NDArray[np.float64]:
        return np.zeros(0)

    @traitlets.validate("selected_order", "selected_layer")
    def _validate_selection(self, proposal: traitlets.Bunch) -> int:
        return check_selection(self, proposal)

    @property
    def n_orders(self) -> int:
        """Orders measured (``max_order + 1``)."""
        return int(self.marginal.shape[0])

    @property
    def n_layers(self) -> int:
        """Number of layers."""
        return int(self.layer_order1.shape[0])
