"""The report's page: its introduction, the sections in order, linked, written as one offline HTML file.

:func:`write_report` is what ``circuitwidgets report`` runs: the sections come from
:func:`circuitwidgets.report.paper.build_sections`, the views are linked by head, position and feature
(:func:`circuitwidgets.link`), and :func:`circuitwidgets.export.html_page` writes them with the bundle inlined.
"""

from __future__ import annotations

import html
import time
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from circuitwidgets._text import visible_label
from circuitwidgets.export import html_page
from circuitwidgets.features.dictionary import Dictionary
from circuitwidgets.model import CircuitModel
from circuitwidgets.report.paper import DEFAULT_TEXT, build_sections

__all__ = ["write_report"]


def _intro(model: CircuitModel, card: dict[str, Any]) -> str:
    cfg = model.cfg
    lines = [
        f"<h1>{html.escape(visible_label(model.name))}: a walk through <em>A Mathematical Framework for Transformer Circuits</em></h1>",
        f"<p>{cfg.n_layers} {'layer' if cfg.n_layers == 1 else 'layers'}, {cfg.n_heads} heads × {cfg.d_head} dimensions, d_model {cfg.d_model}, "
        f"{cfg.d_vocab} tokens, context {cfg.n_ctx}; positions: {html.escape(visible_label(cfg.positional_embedding_type))}; "
        f"{'with MLPs (MLP paths are outside the weight-space analyses)' if cfg.has_mlp else 'attention only'}.</p>",
    ]
    training = card.get("training") if isinstance(card, dict) else None
    if isinstance(training, dict):
        lines.append(
            f"<p>Trained by circuitwidgets on {html.escape(visible_label(str(training.get('corpus', {}).get('corpus', 'its corpus'))))}: "
            f"{training.get('steps')} steps, {training.get('tokens', 0):,} tokens, validation loss {training.get('val_loss')} nats.</p>"
        )
    lines.append(
        "<p>Every view below is interactive, offline: hover, click heads and tokens, switch layers. "
        "The views are linked: choosing a head in one moves the others to it.</p>"
    )
    return "\n".join(lines)


def _text_page(title: str, body: str) -> str:
    """A self-contained page of text and tables only (no widget, so no script)."""
    return (
        '<!doctype html>\n<html><head><meta charset="utf-8"><title>'
        + html.escape(visible_label(title))
        + "</title><style>body{font-family:system-ui,sans-serif;max-width:1200px;margin:2em auto;padding:0 1em}"
        "</style></head><body>" + body + "</body></html>\n"
    )


def write_report(
    model: CircuitModel,
    path: str | Path,
    text: str = DEFAULT_TEXT,
    card: dict[str, Any] | None = None,
    log: Callable[[str], None] = lambda s: None,
    dictionaries: Mapping[str, Dictionary] | None = None,
) -> Path:
    """Build the report for ``model`` and write it to ``path`` (a self-contained HTML file).

    ``dictionaries`` (``{name: Dictionary}``, e.g. ``features.load_pretrained("gelu-2l")``) adds the features
    part: the features the induction answer reads and its attribution graph."""
    t0 = time.perf_counter()
    sections = build_sections(model, text, log=log, card=card, dictionaries=dictionaries)
    blocks = [f"<section><h2>{html.escape(visible_label(s.title))}</h2>{s.explanation}</section>" for s in sections]
    widgets = [s.widget for s in sections if s.widget is not None]
    texts: list[str] = []
    pending = _intro(model, card or {})
    for section, block in zip(sections, blocks, strict=True):
        pending += block
        if section.widget is not None:
            texts.append(pending)
            pending = ""
    title = f"circuitwidgets report: {model.name}"
    if widgets:
        from circuitwidgets.widgets.core.link import link

        with warnings.catch_warnings():  # positions link only where the token counts agree; the others say so
            warnings.simplefilter("ignore", category=UserWarning)
            link(*widgets)
        page = html_page(widgets, title=title, sections=texts)
        if pending:
            page = page.replace("</body>", pending + "</body>", 1)
    else:  # a zero-layer model: its direct path is a table, and the page needs no view
        page = _text_page(title, pending)
    page = page.replace(
        "</style>",
        ".cw-table{border-collapse:collapse;font-size:13px}.cw-table td,.cw-table th{border:1px solid #ddd;padding:2px 6px;text-align:left}</style>",
        1,
    )
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(page, encoding="utf-8")
    log(f"wrote {target} ({target.stat().st_size / 1e6:.2f} MB) in {time.perf_counter() - t0:.1f} s")
    return target
