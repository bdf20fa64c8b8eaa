"""Every view of the report starts on one head, so the first click that keeps the layer keeps them together."""

from __future__ import annotations

import numpy as np

import circuitwidgets as cw
from circuitwidgets import circuits
from circuitwidgets.report import build_sections


def test_every_view_of_the_report_starts_on_the_strongest_induction_head() -> None:
    model = cw.load_pretrained("attn-only-2l")
    sections = build_sections(model)
    induction = circuits.head_scores(model, kind="induction")
    layer, head = (int(i) for i in np.unravel_index(int(np.argmax(induction)), induction.shape))
    assert layer == 1
    widgets = [s.widget for s in sections if s.widget is not None]
    assert len(widgets) >= 6
    tokens = next(w for w in widgets if isinstance(w, cw.AttentionPatterns)).n_tokens
    for widget in widgets:
        if isinstance(widget, (cw.PatchingMap, cw.LogitLens)) and not widget._links_heads:
            # a map of positions and the lens's rows hold no head: they start on the prompt's last token
            assert widget.selected_pos == tokens - 1, type(widget).__name__
            continue
        assert widget.selected_layer == layer, type(widget).__name__  # term importance: the head's layer
        if widget.has_trait("selected_head"):
            assert widget.selected_head == head, type(widget).__name__
    assert next(w for w in widgets if isinstance(w, cw.AttentionPatterns)).selected_dest == tokens - 1
    composition = next(w for w in widgets if isinstance(w, cw.CompositionMap))
    prev = int(np.argmax(circuits.head_scores(model, kind="previous_token")[0]))
    assert list(composition.selected_edge) == [0, prev, layer, head] and composition.edge_kind == "K"
