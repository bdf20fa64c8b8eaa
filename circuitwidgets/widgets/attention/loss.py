"""The attention view's per-token loss: the model's loss predicting the next token at each position.

``per_token_loss`` is per position, not per head: ``−log p(t_{i+1} | t_{≤i})`` in nats,
float32 ``[n]`` with NaN at the last position (no next token); for a batch
``[n_prompts, n]`` padded on the right with NaN
(:mod:`~circuitwidgets.widgets.attention.batch`). From a model it comes from the
logits of the forward pass that records the patterns
(:func:`~circuitwidgets.activations.loss.next_token_loss`); from arrays the user
brings it (:func:`check_loss`). The view's ``strip`` setting chooses whether the
strip beside the pattern (and the tokens, when they show the strip) shows the
selected head's logit effect or this loss.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from circuitwidgets.errors import ArgumentError, NonFiniteError, ShapeError
from circuitwidgets.widgets.attention.codec import float32_array
from circuitwidgets.widgets.core.spec import trait_error

__all__ = ["STRIPS", "check_loss", "check_loss_trait", "stack_losses", "strip_problem"]

#: What the strip beside the pattern can show: the selected head's logit effect, or the per-token loss.
STRIPS = ("logit_effect", "loss")


def check_loss(values: Any, name: str, n: int) -> NDArray[np.float32] | None:
    """A user's per-token loss as float32 ``[n]`` (``[1, n]`` accepted), finite and ≥ 0 or NaN; ``None`` passes.

    Raises :class:`ArgumentTypeError`, :class:`ShapeError`, :class:`NonFiniteError` or
    :class:`ArgumentError` naming ``name``, what was expected and what was received.
    """
    if values is None:
        return None
    v = float32_array(values, name)
    if v.ndim == 2 and v.shape[0] == 1:
        v = v[0]
    if v.shape != (n,):
        raise ShapeError(
            f"{name}: expected shape ({n},) [n_tokens], one loss per position (not per head), "
            f"got {tuple(np.shape(values))}"
        )
    bad = np.isinf(v)
    if bad.any():
        raise NonFiniteError(f"{name}: expected finite values (or NaN), got {int(bad.sum())} infinite entries")
    if (v < 0).any():
        raise ArgumentError(
            f"{name}: expected losses ≥ 0 (−log p of the next token, in nats), got minimum {float(np.nanmin(v)):.4g}"
        )
    return np.ascontiguousarray(v)


def stack_losses(parts: Sequence[NDArray[np.float32] | None], width: int) -> NDArray[np.float32] | None:
    """Each prompt's ``[n_p]`` losses padded with NaN into ``[n_prompts, width]``; ``None`` unless every prompt has them."""
    if not parts or any(p is None for p in parts):
        return None
    out = np.full((len(parts), width), np.nan, dtype=np.float32)
    for i, part in enumerate(parts):
        assert part is not None
        out[i, : part.shape[0]] = part
    return out


def check_loss_trait(widget: Any, v: NDArray[np.float32] | None) -> NDArray[np.float32] | None:
    """``per_token_loss`` laid out for the widget's tokens: ``[n]``, or ``[n_prompts, n]`` for a batch (longest prompt)."""
    if v is None:
        return None
    prompts = getattr(widget, "prompts", None) or []
    expected = (len(prompts), max(len(t) for t in prompts)) if prompts else (len(widget.tokens),)
    if v.shape != expected:
        layout = "[n_prompts, n_tokens]" if prompts else "[n_tokens]"
        raise trait_error(widget, "per_token_loss", f"shape {list(expected)} {layout}", str(list(v.shape)))
    return v


def strip_problem(view: Any, kind: str) -> str | None:
    """Why ``strip`` cannot be ``kind`` (the loss needs ``per_token_loss``), or ``None``."""
    if kind == "loss" and getattr(view, "per_token_loss", None) is None:
        return "'logit_effect': the loss strip needs per_token_loss (a model, or per_token_loss= from arrays)"
    return None
