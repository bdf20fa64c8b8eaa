"""Self-contained, offline HTML for one widget or many.

A page holds one base64 copy of our bundled ES module, each widget's state
(binary buffers base64-encoded, gzip-compressed when that helps), and a small
model shim that implements what a view's ``render`` uses (``get``, ``set``,
``on``, ``off``, ``save_changes``, ``send``): ``js/src/shim/``, built to
``static/shim.js`` and inlined here. Front-end interaction and linking
therefore work with no kernel; widgets of one page can be linked
(``html_page(..., link=["selected_layer", "selected_head"])``: a head chosen in
one view moves the others). A Content-Security-Policy forbids every network
request, so an exported page cannot reach the network even by accident.

The blocks a page is made of (bundle, shim, one widget's state) come from
:mod:`circuitwidgets.widgets.core.page`, which also gives each widget's mime
bundle its ``text/html`` fallback (what ``jupyter nbconvert --to html`` shows
when the notebook holds no widget state); :mod:`circuitwidgets.nbexport`
(``jupyter nbconvert --to circuitwidgets``) builds it from the saved state
otherwise. This module imports the widgets' machinery, never the reverse.
"""

from __future__ import annotations

import html
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from circuitwidgets._text import visible_label
from circuitwidgets.errors import ArgumentError, ArgumentTypeError
from circuitwidgets.widgets.core.link import link_of
from circuitwidgets.widgets.core.page import (
    FALLBACK_STATE_LIMIT,
    _bundle_block,
    _widget_block,
    bundle_source,
    html_fallback,
    is_saved_circuitwidget,
    notebook_fragment,
    saved_state_to_page_state,
    shim_source,
    styles_source,
    widget_state,
)

__all__ = [
    "FALLBACK_STATE_LIMIT",
    "bundle_source",
    "html_fallback",
    "html_page",
    "is_saved_circuitwidget",
    "notebook_fragment",
    "save_html",
    "saved_state_to_page_state",
    "shim_source",
    "styles_source",
    "widget_state",
]

_CSP = (
    "default-src 'none'; script-src 'unsafe-inline' blob:; style-src 'unsafe-inline'; "
    "img-src data: blob:; font-src data:; connect-src data: blob:"
)


def _linked_groups(items: Sequence[Any]) -> list[tuple[tuple[str, ...], str, dict[str, str]]]:
    """Per widget of a page, the traits it shares with others of the page through :func:`circuitwidgets.link`,
    its group, and the names it links under another trait (a patching map's ``selected_pos`` as ``selected_dest``)."""
    groups = [link_of(w) for w in items]
    out: list[tuple[tuple[str, ...], str, dict[str, str]]] = []
    for widget, group in zip(items, groups, strict=True):
        on_page = sum(1 for g in groups if g is not None and g is group)
        if group is None or on_page < 2:
            out.append(((), "", {}))
            continue
        out.append((group.names_of(widget), f"g{groups.index(group)}", group.aliases_of(widget)))
    return out


def _as_widget_list(widgets: Any) -> list[Any]:
    items = list(widgets) if isinstance(widgets, (list, tuple)) else [widgets]
    if not items:
        raise ArgumentError("widgets: expected at least one widget, got an empty list")
    return items


def html_page(
    widgets: Any, title: str = "circuitwidgets", sections: Sequence[str] | None = None, link: Sequence[str] = ()
) -> str:
    """A complete offline page with ``widgets`` (one or a list), each optionally preceded by a section of HTML.

    ``link`` names traits kept equal across the page's widgets that hold them
    (for example ``["selected_layer", "selected_head"]``: choosing a head in
    one view moves the others). Without it, widgets linked by
    :func:`circuitwidgets.link` stay linked on the page, group by group.
    """
    items = _as_widget_list(widgets)
    if isinstance(link, str) or not all(isinstance(n, str) and n.isidentifier() for n in link):
        raise ArgumentTypeError(f"link: expected a list of trait names, got {link!r:.80}")
    if not isinstance(title, str):
        raise ArgumentTypeError(f"title: expected a str, got {type(title).__name__}")
    if sections is not None and (
        isinstance(sections, str) or not isinstance(sections, Sequence) or not all(isinstance(x, str) for x in sections)
    ):
        raise ArgumentTypeError(f"sections: expected a list of HTML strings, got {type(sections).__name__}")
    if sections is not None and len(sections) != len(items):
        raise ArgumentError(f"sections: expected one per widget ({len(items)}), got {len(sections)}")
    linked = [(tuple(link), "", {})] * len(items) if link else _linked_groups(items)
    body = "\n".join(
        (sections[i] if sections is not None else "") + _widget_block(w, *linked[i]) for i, w in enumerate(items)
    )
    return (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{_CSP}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{html.escape(visible_label(title))}</title>"
        "<style>body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;max-width:1200px;margin:2em auto;padding:0 1em;color:#222}"
        ".cw-widget{margin:1.5em 0}</style></head><body>\n"
        f"{body}\n{_bundle_block()}\n<script>{shim_source()}</script>\n"
        "<script>window.__circuitwidgetsMount();</script>\n</body></html>\n"
    )


def save_html(widgets: Any, path: str | Path, title: str = "circuitwidgets") -> Path:
    """Write one widget (or a list of them, or an explorer) to a self-contained HTML file.

    The page needs no kernel and makes no network request: the bundle and
    state are inline, and interaction (hover, head switching, linked views)
    runs in the browser; widgets linked with :func:`circuitwidgets.link` stay
    linked on the page. Computations that need the kernel (for example
    skip-trigrams of a token that was not precomputed) say so in the view.

    Returns the path written.
    """
    if not isinstance(path, (str, os.PathLike)) or "\x00" in str(path):
        raise ArgumentTypeError(f"path: expected a file path (str or Path), got {path!r:.80}")
    target = Path(path)
    if target.suffix.lower() not in (".html", ".htm"):
        raise ArgumentError(f"path: expected a file name ending in .html, got {str(target)!r}")
    page = html_page(widgets, title=title)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(page, encoding="utf-8")
    except OSError as exc:
        raise ArgumentError(f"path: cannot write {str(target)!r} ({exc.strerror or exc})") from None
    return target
