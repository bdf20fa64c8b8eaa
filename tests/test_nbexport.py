"""``jupyter nbconvert --to circuitwidgets``: our outputs are rewritten to offline views, other widgets are kept.

The browser checks of the pages it writes are in ``tests/e2e/test_e2e_export.py``;
these check the notebook rewriting itself on a notebook executed by nbclient,
which stores widget state the way ``--execute`` does.
"""

from __future__ import annotations

import base64
import json
import re
import zlib
from typing import Any

import nbformat
import numpy as np
import pytest
from nbclient import NotebookClient

from circuitwidgets.export import is_saved_circuitwidget, saved_state_to_page_state
from circuitwidgets.nbexport import STATE_MIME, VIEW_MIME, OfflineHTMLExporter, make_widgets_offline

CELLS = [
    "import numpy as np\nimport ipywidgets\nimport circuitwidgets as cw\n"
    "p = np.tril(np.ones((1, 2, 4, 4)))\np = p / p.sum(-1, keepdims=True)\n"
    "w = cw.AttentionPatterns.from_arrays(['a', 'b', '<script>', 'd'], p)\nw",
    "slider = ipywidgets.IntSlider(3)\nslider",
    "w.selected_head = 1",
]


def _executed(store_widget_state: bool = True) -> Any:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(c) for c in CELLS]
    NotebookClient(nb, timeout=120, kernel_name="python3", store_widget_state=store_widget_state).execute()
    return nb


@pytest.fixture(scope="module")
def executed() -> Any:
    return _executed()


def _states(nb: Any) -> dict[str, Any]:
    return dict(nb.metadata.get("widgets", {}).get(STATE_MIME, {}).get("state", {}))


def _page_states(html: str) -> list[dict[str, Any]]:
    found = re.findall(r'<script[^>]*class="cw-state"[^>]*>(.*?)</script>', html, flags=re.S)
    return [json.loads(s) for s in found]


def test_our_output_becomes_an_offline_view_with_the_state_the_kernel_ended_with(executed: Any) -> None:
    nb = nbformat.from_dict(json.loads(json.dumps(executed)))
    assert make_widgets_offline(nb) == 1
    ours = nb.cells[0].outputs[0].data
    assert VIEW_MIME not in ours, "the widget-view entry would make nbconvert reach for the CDN"
    (state,) = _page_states(ours["text/html"])
    assert state["selected_head"] == 1, "a later cell's change must be kept"
    assert state["tokens"][2] == "<script>"
    assert ours["text/html"].count('id="cw-bundle"') == 1
    assert "<script>" not in ours["text/html"].split('class="cw-state">')[1].split("</script>")[0]


def test_other_widgets_and_their_state_are_kept(executed: Any) -> None:
    nb = nbformat.from_dict(json.loads(json.dumps(executed)))
    before = _states(nb)
    make_widgets_offline(nb)
    after = _states(nb)
    assert VIEW_MIME in nb.cells[1].outputs[0].data, "the slider still needs the widget manager"
    slider_id = nb.cells[1].outputs[0].data[VIEW_MIME]["model_id"]
    assert slider_id in after and all(not is_saved_circuitwidget(e) for e in after.values())
    # the slider's layout and style stay; our widget's layout goes with it
    for ref in ("layout", "style"):
        assert after[slider_id]["state"][ref].removeprefix("IPY_MODEL_") in after
    assert len(after) == len(before) - 2


def test_with_only_our_widgets_the_page_needs_no_widget_manager() -> None:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(c) for c in (CELLS[0], CELLS[2])]
    NotebookClient(nb, timeout=120, kernel_name="python3").execute()
    assert _states(nb), "nbclient stored the widget state"
    make_widgets_offline(nb)
    assert "widgets" not in nb.metadata
    html, _ = OfflineHTMLExporter().from_notebook_node(nb)
    assert "html-manager" not in html and "require.js" not in html and STATE_MIME not in html
    assert len(_page_states(html)) == 1


def test_without_saved_state_the_fallback_is_used_and_the_manager_is_not_loaded() -> None:
    nb = _executed(store_widget_state=False)
    assert "widgets" not in nb.metadata
    assert make_widgets_offline(nb) == 1
    html, _ = OfflineHTMLExporter().from_notebook_node(nb)
    assert len(_page_states(html)) == 1 and "html-manager" not in html


def test_saved_buffers_are_put_back_where_they_belong_in_either_encoding() -> None:
    raw = np.arange(6, dtype=np.float32).tobytes()
    entry = {
        "model_name": "AnyModel",
        "state": {
            "_anywidget_id": "circuitwidgets.widgets.attention.widget.AttentionPatterns",
            "_esm": "x" * 100,
            "patterns": {"shape": [6]},
        },
        "buffers": [{"path": ["patterns", "view"], "encoding": "hex", "data": raw.hex()}],
    }
    assert is_saved_circuitwidget(entry)
    state = saved_state_to_page_state(entry)
    assert "_esm" not in state
    ((encoding, data),) = state["patterns"]["view"].items()
    decoded = base64.b64decode(data)
    assert (zlib.decompress(decoded) if encoding == "__b64z__" else decoded) == raw
    entry["buffers"][0] = {"path": ["patterns", "view"], "encoding": "base64", "data": base64.b64encode(raw).decode()}
    assert saved_state_to_page_state(entry)["patterns"]["view"] == state["patterns"]["view"]


def test_the_exporter_is_registered_with_nbconvert() -> None:
    from nbconvert.exporters import get_exporter

    assert get_exporter("circuitwidgets") is OfflineHTMLExporter
    assert OfflineHTMLExporter().mathjax_url == "" and OfflineHTMLExporter().require_js_url == ""


def test_stray_layouts_go_but_links_between_other_widgets_stay(executed: Any) -> None:
    """JupyterLab saves the layouts of widgets that are gone; one would be enough to load the CDN manager."""
    nb = nbformat.from_dict(json.loads(json.dumps(executed)))
    saved = nb.metadata["widgets"][STATE_MIME]["state"]
    slider_id = nb.cells[1].outputs[0].data[VIEW_MIME]["model_id"]
    saved["stray-layout"] = {"model_name": "LayoutModel", "state": {"_model_name": "LayoutModel"}}
    saved["a-link"] = {"model_name": "LinkModel", "state": {"source": [f"IPY_MODEL_{slider_id}", "value"]}}
    make_widgets_offline(nb)
    after = _states(nb)
    assert "stray-layout" not in after and "a-link" in after and slider_id in after


def test_without_nbconvert_the_import_names_the_extra_to_install() -> None:
    """A user without the ``export`` extra learns what to install, not just a bare module name."""
    import subprocess
    import sys

    code = (
        "import sys; sys.modules['nbconvert'] = None\n"
        "try:\n    import circuitwidgets.nbexport\nexcept ModuleNotFoundError as e:\n    print(e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120).stdout
    assert "circuitwidgets[export]" in out and "nbconvert" in out, out
