"""A widget's state as offline HTML: the blocks every page and notebook output is made of.

A page holds one base64 copy of our bundled ES module, each widget's state
(binary buffers base64-encoded, deflated when that helps), and a small model
shim that implements what a view's ``render`` uses (``get``, ``set``, ``on``,
``off``, ``save_changes``, ``send``): ``js/src/shim/``, built to
``static/shim.js`` and inlined here.

This module is the floor the widgets stand on for their ``text/html``
fallback (:func:`html_fallback`, what ``jupyter nbconvert --to html`` shows
when the notebook holds no widget state); it knows no widget class. The page
exporters above the widgets, :mod:`circuitwidgets.export` (``save_html``) and
:mod:`circuitwidgets.nbexport` (``jupyter nbconvert --to circuitwidgets``),
assemble their pages from the same blocks.
"""

from __future__ import annotations

import base64
import html
import json
import zlib
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from circuitwidgets.errors import ArgumentTypeError

__all__ = [
    "FALLBACK_STATE_LIMIT",
    "bundle_source",
    "html_fallback",
    "is_saved_circuitwidget",
    "notebook_fragment",
    "saved_state_to_page_state",
    "shim_source",
    "styles_source",
    "widget_state",
]

#: Widget state larger than this (bytes, before base64) is not duplicated into
#: the ``text/html`` fallback of a notebook output; save_html has no limit.
FALLBACK_STATE_LIMIT = 16 * 2**20

_SKIPPED_TRAITS = {
    "_esm",
    "_css",
    "_anywidget_id",
    "comm",
    "keys",
    "log",
    "layout",
    "tabbable",
    "tooltip",
    "_dom_classes",
}


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


#: Buffers of at least this many bytes are deflated at :data:`LARGE_BUFFER_LEVEL`, smaller ones at level 6.
LARGE_BUFFER_BYTES = 2**20
#: zlib level of large buffers. On 12 heads' quantised attention (``AttentionPatterns.from_arrays``) level 6 was
#: 9/10 of ``save_html``'s time: at 512 tokens (1.5 MB) 0.30 s, level 4 0.076 s for 6.5 % more bytes; at 2,048
#: (25 MB) 2.17 s, level 4 0.45 s for 14.5 % more (medians of 5, load 8). The page inflates either the same way.
LARGE_BUFFER_LEVEL = 4


def _encode_buffer(data: bytes) -> dict[str, str]:
    packed = zlib.compress(data, LARGE_BUFFER_LEVEL if len(data) >= LARGE_BUFFER_BYTES else 6)
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
    return (
        text.replace("<", "\\u003c")
        .replace(">", "\\u003e")
        .replace("&", "\\u0026")
        .replace("\u2028", "\\u2028")
        .replace("\u2029", "\\u2029")
    )


def _state_block(
    state: dict[str, Any], link: Sequence[str] = (), group: str = "", alias: dict[str, str] | None = None
) -> str:
    linked = f' data-cw-link="{html.escape(" ".join(link))}"' if link else ""
    if link and group:
        linked += f' data-cw-link-group="{html.escape(group)}"'
    if link and alias:
        pairs = " ".join(f"{name}={own}" for name, own in alias.items())
        linked += f' data-cw-link-as="{html.escape(pairs)}"'
    return (
        f'<div class="cw-widget"{linked}>'
        f'<script type="application/json" class="cw-state">{_json_for_script(state)}</script>'
        '<div class="cw-view"></div></div>'
    )


def _widget_block(widget: Any, link: Sequence[str] = (), group: str = "", alias: dict[str, str] | None = None) -> str:
    return _state_block(widget_state(widget), link, group, alias)


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
    return (
        f'<style class="cw-styles">{styles_source()}</style><script type="text/plain" id="cw-bundle">{encoded}</script>'
    )


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
