"""The attention widget's trait checks (its validators), for one text or a batch of prompts.

The data traits must agree with the tokens: ``patterns`` laid out for the
widget's tokens (``[n_layers, n_heads, ...]``), or, for a batch, for its longest
prompt with the prompts first (``[n_prompts, n_layers, n_heads, ...]``; see
:mod:`~circuitwidgets.widgets.attention.batch`). Errors are worded by
:func:`~circuitwidgets.widgets.core.spec.trait_error`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

from circuitwidgets.widgets.attention.codec import head_size
from circuitwidgets.widgets.core.spec import trait_error

__all__ = ["check_diagonals", "check_patterns_trait", "check_per_position_trait", "kind_problem", "wire_layout"]

_MAX_LABEL = 40
_MAX_OFFSET = 2**20


def wire_layout(widget: Any) -> tuple[tuple[int, ...], int]:
    """The leading sizes the data arrays have before ``[n_layers, n_heads]`` (``(n_prompts,)`` for a batch, else
    ``()``), and the tokens each array is laid out for (the longest prompt's)."""
    prompts = getattr(widget, "prompts", None) or []
    if prompts:
        return (len(prompts),), max(len(t) for t in prompts)
    return (), len(widget.tokens)


def _dims(lead: tuple[int, ...]) -> str:
    return f"n_prompts={lead[0]}, n_layers, n_heads" if lead else "n_layers, n_heads"


def check_patterns_trait(
    widget: Any, name: str, p: NDArray[np.uint8] | None, *, waiting: bool
) -> NDArray[np.uint8] | None:
    """``patterns`` / ``value_patterns`` laid out for the widget's tokens (``[L, H, 0]`` allowed while ``waiting``)."""
    if p is None:
        return None
    lead, n = wire_layout(widget)
    k = len(lead) + 2
    expected = head_size(n, widget.causal)
    pending = waiting and not lead and p.ndim == 3 and p.shape[2] == 0
    if not pending and (p.ndim != k + len(expected) or p.shape[k:] != expected or p.shape[: len(lead)] != lead):
        tokens = f"prompts of up to {n} tokens" if lead else f"{n} tokens"
        raise trait_error(
            widget,
            name,
            f"shape [{_dims(lead)}, {', '.join(map(str, expected))}] for {tokens} "
            f"({'causal' if widget.causal else 'full'})",
            str(list(p.shape)),
        )
    if name == "value_patterns" and p.shape[:k] != widget.patterns.shape[:k]:
        raise trait_error(
            widget, name, f"{list(widget.patterns.shape[:k])} heads like 'patterns'", str(list(p.shape[:k]))
        )
    return p


def check_per_position_trait(widget: Any, name: str, v: NDArray[np.float32] | None) -> NDArray[np.float32] | None:
    """``value_norms`` / ``logit_effect``: ``[n_layers, n_heads, n_tokens]`` like the patterns (a batch: prompts first), or ``None``."""
    if v is None:
        return None
    lead, n = wire_layout(widget)
    expected = (*widget.patterns.shape[: len(lead) + 2], n)
    if v.shape != expected:
        raise trait_error(widget, name, f"shape {list(expected)} [{_dims(lead)}, n_tokens]", str(list(v.shape)))
    return v


def check_diagonals(widget: Any, value: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``diagonals``: entries ``{"offset": int, "label": str}``, offsets within ±2^20, labels cut to 40 characters."""
    out = []
    for i, d in enumerate(value):
        offset, label = d.get("offset"), d.get("label", "")
        if (
            set(d) - {"offset", "label"}
            or isinstance(offset, bool)
            or not isinstance(offset, int)
            or not isinstance(label, str)
        ):
            raise trait_error(widget, "diagonals", "entries {'offset': int, 'label': str}", f"{d!r:.80} at {i}")
        if abs(offset) > _MAX_OFFSET:
            raise trait_error(widget, "diagonals", f"offsets in [-{_MAX_OFFSET}, {_MAX_OFFSET}]", f"{offset} at {i}")
        out.append({"offset": int(offset), "label": label[:_MAX_LABEL]})
    return out


def kind_problem(view: Any, kind: str) -> str | None:
    """Why ``pattern_kind`` cannot be ``kind`` (value-weighted patterns need their data or, long, value norms), or ``None``."""
    long = getattr(view, "_tiles", None)
    if long is not None and kind in long.kinds:
        return None
    if kind == "value" and view.value_patterns is None:
        return "'raw': value-weighted patterns need a model (or value_norms)"
    return None
