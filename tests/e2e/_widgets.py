"""Widgets the browser tests display, built the same way in pytest and in a kernel.

This file is also copied next to the notebooks and marimo apps the tests
create, so a kernel builds exactly what the exported-page tests build:
``from _widgets import attention_patterns``.

Only the standard library, numpy and circuitwidgets are imported here.
"""

from __future__ import annotations

import functools
import importlib.util
from dataclasses import dataclass
from typing import Any

import numpy as np

#: Views the suite knows, by ``_view`` name → widget class name in ``circuitwidgets.widgets``.
VIEWS = {
    "attention": "AttentionPatterns",
    "eigen": "EigenScatter",
    "skiptrigrams": "SkipTrigramTable",
    "composition": "CompositionMap",
    "termimportance": "TermImportance",
    "explorer": "CircuitExplorer",
}

#: Text the model-based widgets are shown on (Python source, like the shipped models' corpus).
TEXT = "def add(a, b):\n    return a + b\n\nx = add(1, 2)\ny = add(x, x)\n"

#: Tokens of the raw-array attention widget.
TOKENS = ["<bos>", "The", " cat", " sat", " on", " the", " mat", "."]

#: A page-wide flag that an executed payload would set.
PWNED_FLAG = "__cw_pwned"


def widget_module(view: str) -> str:
    """Module of ``circuitwidgets.widgets`` expected to define ``view``'s widget."""
    return {
        "attention": "attention",
        "eigen": "eigen",
        "skiptrigrams": "skip_trigrams",
        "composition": "composition",
        "termimportance": "term_importance",
        "explorer": "explorer",
    }[view]


def widget_exists(view: str) -> bool:
    """Whether the widget of ``view`` has been written (its module exists and imports its class)."""
    if importlib.util.find_spec(f"circuitwidgets.widgets.{widget_module(view)}") is None:
        return False
    import circuitwidgets.widgets as widgets

    return hasattr(widgets, VIEWS[view])


def causal_patterns(n_layers: int, n_heads: int, n: int, seed: int = 0) -> np.ndarray:
    """Random causal attention ``[n_layers, n_heads, n, n]`` with two recognisable heads.

    Head (0, 1) attends to the previous token, head (1, 2) to the first token;
    the rest are random softmax-like rows.
    """
    rng = np.random.default_rng(seed)
    logits = rng.normal(0.0, 1.5, (n_layers, n_heads, n, n))
    mask = np.tril(np.ones((n, n), dtype=bool))
    a = np.where(mask, np.exp(logits), 0.0)
    a /= a.sum(-1, keepdims=True)
    prev = np.eye(n, k=-1)
    prev[0, 0] = 1.0
    if n_heads > 1:
        a[0, 1] = prev
    if n_layers > 1 and n_heads > 2:
        a[1, 2] = 0.0
        a[1, 2, :, 0] = 1.0
    return a.astype(np.float32)


def attention_patterns(**kwargs: Any) -> Any:
    """AttentionPatterns on :data:`TOKENS`, 2 layers × 4 heads."""
    from circuitwidgets import AttentionPatterns

    return AttentionPatterns.from_arrays(TOKENS, causal_patterns(2, 4, len(TOKENS)), **kwargs)


def hostile_tokens() -> list[str]:
    """Token strings that would run code, inject elements or garble the page if treated as HTML."""
    return [
        "<bos>",
        "<script>alert(1)</script>",
        f'<img src=x onerror="window.{PWNED_FLAG}=1;alert(1)">',
        "</script>",
        f"</script><script>window.{PWNED_FLAG}=1</script>",
        "&nbsp;",
        "&lt;b&gt;",
        "javascript:alert(1)",
        "\"double\" 'single'",
        "`${1+1}`",
        "\u202eevil\u202c",
        "nul\x00bell\x07esc\x1b",
        "tab\tnewline\ncr\r",
        "🦀 e\u0301 👩‍🔬",
        f'"><svg onload="window.{PWNED_FLAG}=1">',
        "\u2028\u2029",
        "x" * 10_000,
    ]


def hostile_attention() -> Any:
    """AttentionPatterns whose tokens are :func:`hostile_tokens`."""
    from circuitwidgets import AttentionPatterns

    tokens = hostile_tokens()
    return AttentionPatterns.from_arrays(tokens, causal_patterns(1, 2, len(tokens), seed=1))


@functools.lru_cache(maxsize=1)
def model() -> Any:
    """The shipped two-layer attention-only model (the first weight-space widget loads it)."""
    import circuitwidgets

    return circuitwidgets.load_pretrained("attn-only-2l")


def eigen_scatter() -> Any:
    from circuitwidgets import EigenScatter

    return EigenScatter(model(), max_tokens=256, selected_layer=0, selected_head=0)


def skip_trigram_table() -> Any:
    from circuitwidgets import SkipTrigramTable

    return SkipTrigramTable(model(), selected_layer=0, selected_head=0, k=10, profile_k=4, progress_bar=False)


def composition_map() -> Any:
    from circuitwidgets import CompositionMap

    return CompositionMap(model(), n_samples=20, selected_layer=0, selected_head=0)


def term_importance() -> Any:
    from circuitwidgets import TermImportance

    return TermImportance(model(), TEXT)


def circuit_explorer() -> Any:
    from circuitwidgets import CircuitExplorer

    return CircuitExplorer(
        model(), TEXT, k=10, profile_k=4, max_tokens=256, progress_bar=False, selected_layer=1, selected_head=0
    )


#: ``_view`` name → builder. Each starts from a stated selection that the clicks below change.
BUILDERS = {
    "attention": attention_patterns,
    "eigen": eigen_scatter,
    "skiptrigrams": skip_trigram_table,
    "composition": composition_map,
    "termimportance": term_importance,
    "explorer": circuit_explorer,
}


# --- what a user does to each view ------------------------------------------------


@dataclass(frozen=True)
class Click:
    """A click in a view, what Python must then hold, and what the view's status must say.

    ``selector``, the values of ``traits`` and ``status`` may hold ``{l}`` and
    ``{h}``: they are filled with the first head of ``heads`` whose element
    is not covered by another (points of a scatter can overlap).
    """

    selector: str
    traits: dict[str, Any]
    status: str
    heads: tuple[tuple[int, int], ...] = ((0, 0),)

    def bind(self, l: int, h: int) -> tuple[str, dict[str, Any], str]:
        def fill(v: Any) -> Any:
            return int(v.format(l=l, h=h)) if isinstance(v, str) else v

        return (
            self.selector.format(l=l, h=h),
            {k: fill(v) for k, v in self.traits.items()},
            self.status.format(l=l, h=h),
        )


_HEAD_TRAITS = {"selected_layer": "{l}", "selected_head": "{h}"}

#: Clicks per view, each changing the selection the builders above start from.
CLICKS: dict[str, list[Click]] = {
    "attention": [
        Click('[data-cw-head="{l}.{h}"]', _HEAD_TRAITS, r"L{l}\s*H{h}|layer {l}\D+head {h}", ((1, 2),)),
        Click('[data-cw-token="3"]', {"selected_dest": 3}, r"sat"),
    ],
    "eigen": [
        Click(
            '[data-cw-head="{l}.{h}"]',
            _HEAD_TRAITS,
            r"L{l}H{h} selected",
            ((1, 1), (1, 0), (1, 2), (1, 3), (0, 1), (0, 2)),
        )
    ],
    "composition": [Click('[data-cw-head="{l}.{h}"]', _HEAD_TRAITS, r"L{l}H{h} selected", ((0, 2), (0, 1), (1, 1)))],
    "skiptrigrams": [Click('tr[data-cw-row="2"]', {"selected_row": 2}, r"row 3")],
    "termimportance": [Click('[data-cw-order="1"]', {"selected_order": 1}, r"selected")],
    "explorer": [
        Click(
            '[data-cw-view="eigen"] [data-cw-head="{l}.{h}"]',
            _HEAD_TRAITS,
            r"L{l}H{h} selected",
            ((0, 1), (0, 2), (0, 3), (1, 1), (1, 2), (1, 3)),
        )
    ],
}

#: Python statements that change the selection, and the status they must produce in the view
#: (never a head the clicks above may select, so the view must change).
SETS: dict[str, tuple[str, str]] = {
    "attention": ("w.selected_layer, w.selected_head = 0, 3", r"L0\s*H3|layer 0\D+head 3"),
    "eigen": ("w.selected_layer, w.selected_head = 0, 3", r"L0H3 selected"),
    "composition": ("w.selected_layer, w.selected_head = 1, 3", r"L1H3 selected"),
    "skiptrigrams": ("w.selected_layer, w.selected_head = 1, 2", r"L1H2 selected"),
    "termimportance": ("w.selected_order = 2", r"selected"),
    "explorer": ("w.selected_layer, w.selected_head = 1, 0", r"L1H0 selected"),
}
