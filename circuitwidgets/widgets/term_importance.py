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
from numpy.typing import ArrayLike, NDArray

from circuitwidgets.circuits import term_importance
from circuitwidgets.errors import ArgumentError, ArgumentTypeError, NonFiniteError, ShapeError
from circuitwidgets.model import CircuitModel
from circuitwidgets.widgets.core.arrays import NDArrayTrait, user_array
from circuitwidgets.widgets.core.base import CircuitWidget
from circuitwidgets.widgets.core.context import check_context
from circuitwidgets.widgets.core.spec import Size, head_selection, view_data, view_setting
from circuitwidgets.widgets.core.traits import Integer, SelectionIndex

__all__ = ["TermImportance", "term_importance_data"]

TokensOrText = str | Sequence[int] | torch.Tensor


def term_importance_data(
    model: CircuitModel, text_or_tokens: TokensOrText, *, max_order: int | None = None
) -> dict[str, Any]:
    """Trait values of a :class:`TermImportance` for ``model`` on a text or ``[batch, pos]`` token ids.

    Cost ``max_order + n_layers + 2`` forward passes.
    """
    if not isinstance(model, CircuitModel):
        raise ArgumentTypeError(f"model: expected a circuitwidgets.CircuitModel, got {type(model).__name__}")
    shape = _shape(model, text_or_tokens)
    if shape is not None:  # (else the engine says what is wrong with the input)
        check_context(
            model,
            shape[1],
            "text_or_tokens",
            "the loss of a long document is the mean over windows: pass them as a batch [batch, pos]",
        )
    result = term_importance(model, text_or_tokens, max_order=max_order, progress_bar=False)
    shape = shape or _shape(model, text_or_tokens)
    assert shape is not None  # (the engine accepted it)
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


def _shape(model: CircuitModel, text_or_tokens: Any) -> tuple[int, int] | None:
    """``(batch, pos)`` of a text or token ids, or ``None`` when they are not readable as such."""
    try:
        if isinstance(text_or_tokens, str):
            rows, cols = model.to_tokens(text_or_tokens).shape
            return int(rows), int(cols)
        t = torch.as_tensor(text_or_tokens)
    except Exception:  # (reported by the engine, with its wording)
        return None
    if t.ndim == 2:
        return int(t.shape[0]), int(t.shape[1])
    return (1, int(t.shape[0])) if t.ndim == 1 else None


class TermImportance(CircuitWidget):
    """Loss reduction of the order-0, 1, 2, … path terms, and of each layer's order-1 terms.

    Parameters
    ----------
    model
        The model (omit it to build from trait values, or use :meth:`from_losses`).
    text_or_tokens
        A text, or token ids ``[pos]`` or ``[batch, pos]``, on which the losses are measured.
        (``tokens_or_text=`` is its former name, still accepted.)
    max_order
        Highest order (default ``n_layers``, where the loss equals the model's).
    **kwargs
        Initial traits.
    """

    _view = traitlets.Unicode("termimportance").tag(sync=True)
    _prefix = "terms"

    model_name = view_data(traitlets.Unicode(""))
    """Name of the model (caption)."""

    losses = view_data(NDArrayTrait(dtype="float64", dims=("n_orders",)))
    """float64 ``[max_order + 1]``: mean loss (nats) keeping path terms of order ≤ n."""

    marginal = view_data(NDArrayTrait(dtype="float64", dims=("n_orders",)))
    """float64 ``[max_order + 1]``: loss reduction from adding the order-n terms."""

    layer_order1 = view_data(NDArrayTrait(dtype="float64", dims=("n_layers",)))
    """float64 ``[n_layers]``: loss reduction from adding only layer l's order-1 terms to the direct path."""

    loss_no_terms = view_data(traitlets.Float(0.0))
    """Loss with no path terms at all (nats)."""

    full_loss = view_data(traitlets.Float(0.0))
    """Loss of the ordinary forward pass (nats)."""

    n_sequences = view_data(Integer(0))
    """Sequences the losses are averaged over."""

    n_positions = view_data(Integer(0))
    """Tokens per sequence."""

    selected_order = view_setting(SelectionIndex("n_orders", optional=True))
    """Highlighted order, or -1."""

    selected_layer = head_selection(SelectionIndex("n_layers", optional=True))
    """Highlighted layer of the order-1 bars, or -1 (in the explorer: the selected head's layer)."""

    n_layers = Size("n_layers")
    n_orders = Size("n_orders")

    def __init__(
        self,
        model: CircuitModel | None = None,
        text_or_tokens: TokensOrText | None = None,
        *,
        max_order: int | None = None,
        tokens_or_text: TokensOrText | None = None,
        **kwargs: Any,
    ) -> None:
        if text_or_tokens is None:
            text_or_tokens = tokens_or_text
        if model is not None:
            kwargs = {**self.initial(model, text_or_tokens, max_order=max_order), **kwargs}
        super().__init__(**kwargs)

    @classmethod
    def initial(
        cls, model: CircuitModel, text_or_tokens: TokensOrText | None, *, max_order: int | None = None
    ) -> dict[str, Any]:
        """Initial traits for ``model`` on a text or token ids (:func:`term_importance_data`)."""
        if text_or_tokens is None:
            raise ArgumentError(
                "text_or_tokens: expected a text or token ids to measure the loss on "
                "(the argument once named tokens_or_text), got None"
            )
        return term_importance_data(model, text_or_tokens, max_order=max_order)

    @classmethod
    def from_model(
        cls, model: CircuitModel, text_or_tokens: TokensOrText, *, max_order: int | None = None, **kwargs: Any
    ) -> TermImportance:
        """Same as ``TermImportance(model, text_or_tokens, ...)``: losses measured by the paper's algorithm."""
        return cls(model, text_or_tokens, max_order=max_order, **kwargs)

    @classmethod
    def from_losses(
        cls,
        losses: ArrayLike,
        *,
        loss_no_terms: float,
        full_loss: float | None = None,
        layer_order1: ArrayLike | None = None,
        model_name: str = "",
        **kwargs: Any,
    ) -> TermImportance:
        """Term importance measured anywhere: the loss keeping path terms of order ≤ n, for n = 0, 1, ….

        Parameters
        ----------
        losses
            ``[max_order + 1]`` mean losses (nats), order 0 first.
        loss_no_terms
            Loss with no path terms at all (the reference of order 0's reduction).
        full_loss
            Loss of the ordinary forward pass (default ``losses[-1]``).
        layer_order1
            Optional ``[n_layers]`` loss reduction of each layer's order-1 terms alone.
        model_name
            Caption.

        Raises
        ------
        ArgumentTypeError, ShapeError, NonFiniteError
            Naming the argument, what was expected and what was received.
        """
        loss = _finite_vector("losses", losses)
        if loss.size == 0:
            raise ShapeError("losses: expected at least the order-0 loss, got an empty array")
        no_terms = _finite_number("loss_no_terms", loss_no_terms)
        full = float(loss[-1]) if full_loss is None else _finite_number("full_loss", full_loss)
        per_layer = np.zeros(0) if layer_order1 is None else _finite_vector("layer_order1", layer_order1)
        marginal = np.concatenate([[no_terms - loss[0]], loss[:-1] - loss[1:]])
        state = {
            "losses": loss,
            "marginal": marginal,
            "layer_order1": per_layer,
            "loss_no_terms": no_terms,
            "full_loss": full,
            "model_name": model_name,
        }
        return cls(**{**state, **kwargs})


def _finite_vector(name: str, values: ArrayLike) -> NDArray[np.float64]:
    """``values`` as a finite float64 vector, or a typed error naming ``name``."""
    arr = user_array(name, values, "float64", "a vector of losses")
    if arr.ndim != 1:
        raise ShapeError(f"{name}: expected a vector [n], got shape {tuple(arr.shape)}")
    if not np.isfinite(arr).all():
        raise NonFiniteError(f"{name}: expected finite values, got {int((~np.isfinite(arr)).sum())} NaN or infinite")
    return arr


def _finite_number(name: str, value: Any) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float, np.floating, np.integer))
        or not np.isfinite(value)
    ):
        raise ArgumentTypeError(f"{name}: expected a finite number, got {value!r:.80}")
    return float(value)
