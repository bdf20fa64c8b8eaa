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

The same fragment is offered as the ``text/html`` fallback of each widget's
mime bundle, which is what ``jupyter nbconvert --to html`` shows when the
notebook holds no widget state; :mod:`circuitwidgets.nbexport` (``jupyter
nbconvert --to circuitwidgets``) builds it from the saved state otherwise.
"""

from __future__ import annotations

import base64
import html
import json
import os
import zlib
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from circuitwidgets.errors import ArgumentError, ArgumentTypeError

#: Widget state larger than this (bytes, before base64) is not duplicated into
#: the ``text/html`` fallback of a notebook output; save_html has no limit.
FALLBACK_STATE_LIMIT = 16 * 2**20

_SKIPPED_TRAITS = {"_esm", "_css", "_anywidget_id", "comm", "keys", "log", "layout", "tabbable", "tooltip", "_dom_classes"}

_CSP = (
    "default-src 'none'; script-src 'unsafe-inline' blob:; style-src 'unsafe-inline'; "
    "img-src data: blob:; font-src data:; connect-src data: blob:"
)



def _static(name: str) -> Path:
    return Path(str(resources.files("circuitwidgets") / "static" / name))


def _built(name: str) -> str:
    """Text of a built file in ``static/`` (error with the fix when it was never built)."""
    path = _static(name)
    if not path.is_file():
        raise FileNotFoundError(
            f"{path} is missing: the JavaScript bundle was not built. Run `npm --prefix js ci && npm --prefix js run build` "
            "or reinstall circuitwidgets with `pip install .`"
        )
    return path.read_text(encoding="utf-8")


def bundle_source() -> str:
    """Text of the built ES module of the views."""
    return _built("index.js")


def styles_source() -> str:
    """Text of the built stylesheet of the views (``js/src/styles/``)."""
    # (inlined in a <style> element: "</style" inside it would end the element early; the build has none)
    return _built("index.css").replace("</style", "<\\/style")


def shim_source() -> str:
    """Text of the built offline model that mounts a page's widgets (``js/src/shim/``)."""
    # (a "</script" inside it would end the inline script early; the build has none)
    return _built("shim.js").replace("</script", "<\\/script")


def _encode_buffer(data: bytes) -> dict[str, str]:
    packed = zlib.compress(data, 6)
    if len(packed) < 0.9 * len(data):
        return {"__b64z__": base64.b64encode(packed).decode("ascii")}
    return {"__b64__": base64.b64encode(data).decode("ascii")}


def _encode_value(value: Any) -> Any:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return _encode_buffer(bytes(value))
    if isinstance(value, dict):
        return {str(k): _encode_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_encode_value(v) for v in value]
    return value


def _buffer_bytes(value: Any) -> int:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return memoryview(value).nbytes
    if isinstance(value, dict):
        return sum(_buffer_bytes(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return sum(_buffer_bytes(v) for v in value)
    return 0


def widget_state(widget: Any) -> dict[str, Any]:
    """The synced state of an anywidget, JSON-ready (buffers encoded), without the bundle."""
    if not hasattr(widget, "get_state") or not hasattr(widget, "_esm"):
        raise ArgumentTypeError(f"widgets: expected a circuitwidgets widget, got {type(widget).__name__}")
    state = {k: v for k, v in widget.get_state().items() if k not in _SKIPPED_TRAITS}
    return dict(_encode_value(state))


def _json_for_script(data: Any) -> str:
    # Token strings are untrusted: "<" must never reach the HTML parser, so
    # "</script>" inside a token cannot close the element.
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026").replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")


def _state_block(state: dict[str, Any], link: Sequence[str] = (), group: str = "") -> str:
    linked = f' data-cw-link="{html.escape(" ".join(link))}"' if link else ""
    if link and group:
        linked += f' data-cw-link-group="{html.escape(group)}"'
    return (
        f'<div class="cw-widget"{linked}>'
        f'<script type="application/json" class="cw-state">{_json_for_script(state)}</script>'
        '<div class="cw-view"></div></div>'
    )


def _widget_block(widget: Any, link: Sequence[str] = (), group: str = "") -> str:
    return _state_block(widget_state(widget), link, group)


def _linked_groups(items: Sequence[Any]) -> list[tuple[tuple[str, ...], str]]:
    """Per widget of a page, the traits it shares with others of the page through :func:`circuitwidgets.link`, and its group."""
    from circuitwidgets.widgets._link import link_of

    groups = [link_of(w) for w in items]
    out: list[tuple[tuple[str, ...], str]] = []
    for group in groups:
        on_page = sum(1 for g in groups if g is not None and g is group)
        if group is None or on_page < 2:
            out.append(((), ""))
            continue
        out.append((tuple(group.names), f"g{groups.index(group)}"))  # (each view links the names it has)
    return out


def is_saved_circuitwidget(entry: Any) -> bool:
    """Whether a notebook's saved widget-state entry is one of our widgets.

    ``entry`` is one value of ``metadata.widgets["application/vnd.jupyter.widget-state+json"]["state"]``
    as written by nbclient (``--execute``) or JupyterLab ("save widget state").
    """
    if not isinstance(entry, dict) or not isinstance(entry.get("state"), dict):
        return False
    widget_id = entry["state"].get("_anywidget_id")
    return isinstance(widget_id, str) and widget_id.startswith("circuitwidgets.")


def _put(state: dict[str, Any], path: Sequence[Any], value: Any) -> None:
    node: Any = state
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value


def saved_state_to_page_state(entry: dict[str, Any]) -> dict[str, Any]:
    """The page state of one saved widget (see :func:`is_saved_circuitwidget`), JSON-ready.

    Saved states keep binary buffers apart, base64-encoded with the path where
    each belongs; they are put back in place (deflated when that helps), and
    the traits a page does not need (the bundle, layout) are dropped.
    """
    state = json.loads(json.dumps(entry["state"]))
    for buffer in entry.get("buffers", []):
        # The widget-state schema allows base64 and hex encodings.
        raw = bytes.fromhex(buffer["data"]) if buffer.get("encoding") == "hex" else base64.b64decode(buffer["data"])
        _put(state, buffer["path"], _encode_buffer(raw))
    return {k: v for k, v in state.items() if k not in _SKIPPED_TRAITS}


def notebook_fragment(state: dict[str, Any], with_bundle: bool) -> str:
    """One output's HTML for a page state; the page's first one carries the bundle and the model shim (``with_bundle``)."""
    return (
        _state_block(state)
        + (f"{_bundle_block()}<script>{shim_source()}</script>" if with_bundle else "")
        + "<script>window.__circuitwidgetsMount();</script>"
    )


def _bundle_block() -> str:
    encoded = base64.b64encode(bundle_source().encode("utf-8")).decode("ascii")
    return f'<style class="cw-styles">{styles_source()}</style><script type="text/plain" id="cw-bundle">{encoded}</script>'


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
    linked = [(tuple(link), "")] * len(items) if link else _linked_groups(items)
    body = "\n".join(
        (sections[i] if sections is not None else "") + _widget_block(w, *linked[i]) for i, w in enumerate(items)
    )
    return (
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f'<meta http-equiv="Content-Security-Policy" content="{_CSP}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{html.escape(title)}</title>"
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


def html_fallback(widget: Any) -> str | None:
    """The ``text/html`` fallback for a notebook output, or ``None`` when the state is too large to duplicate."""
    if _buffer_bytes(widget.get_state()) > FALLBACK_STATE_LIMIT:
        return None
    # Each fallback carries the bundle because any output may be the first one
    # a page renders; the mount function loads it once per page.
    return (
        _widget_block(widget)
        + _bundle_block().replace('id="cw-bundle"', 'class="cw-bundle-copy"')
        + "<script>if(!document.getElementById('cw-bundle')){const b=document.querySelector('.cw-bundle-copy');b.id='cw-bundle';}</script>"
        + f"<script>{shim_source()}</script><script>window.__circuitwidgetsMount();</script>"
    )


