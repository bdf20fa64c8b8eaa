"""``jupyter nbconvert --to circuitwidgets``: notebook HTML whose views stay interactive offline.

nbconvert's own HTML export shows a widget from its saved state (what
``--execute`` and JupyterLab's "save widget state" store) by loading
``@jupyter-widgets/html-manager`` and anywidget from a CDN, so with no network
nothing is drawn. This exporter is nbconvert's HTML exporter with three
changes:

- each output of a circuitwidgets widget is rewritten to our self-contained
  view, built from the widget's *saved* state when there is one (so changes
  made by later cells are kept) and from the output's ``text/html`` fallback
  otherwise; the page carries one copy of the bundle;
- our widgets leave the page's widget state, and when no other widget is left
  the CDN loader is not emitted at all;
- the template's require.js and MathJax scripts are off by default (LaTeX in
  Markdown stays as source); ``--HTMLExporter.mathjax_url=URL`` brings MathJax back.

Registered as the ``circuitwidgets`` exporter (entry point
``nbconvert.exporters``), so it also appears in JupyterLab's
"File > Save and Export Notebook As" menu, as "Circuitwidgets".
"""

from __future__ import annotations

from typing import Any

try:
    from nbconvert.exporters import HTMLExporter
    from nbconvert.preprocessors import Preprocessor
except ModuleNotFoundError as exc:  # nbconvert is an optional extra, so say which one
    raise ModuleNotFoundError(
        f'circuitwidgets.nbexport needs nbconvert ({exc.name} is not installed): pip install "circuitwidgets[export]"',
        name=exc.name,
    ) from exc
from traitlets import default

from circuitwidgets.export import is_saved_circuitwidget, notebook_fragment, saved_state_to_page_state

STATE_MIME = "application/vnd.jupyter.widget-state+json"
VIEW_MIME = "application/vnd.jupyter.widget-view+json"


def _saved_states(nb: Any) -> dict[str, Any]:
    widgets = nb.metadata.get("widgets") or {}
    state = (widgets.get(STATE_MIME) or {}).get("state") or {}
    return state if isinstance(state, dict) else {}


def _widget_outputs(nb: Any) -> list[Any]:
    return [
        output
        for cell in nb.cells
        if cell.get("cell_type") == "code"
        for output in cell.get("outputs", [])
        if isinstance(output.get("data"), dict) and VIEW_MIME in output["data"]
    ]


def _references(value: Any) -> set[str]:
    """Model ids that a saved state refers to (``"IPY_MODEL_<id>"`` strings, e.g. its layout)."""
    if isinstance(value, str):
        return {value[len("IPY_MODEL_") :]} if value.startswith("IPY_MODEL_") else set()
    if isinstance(value, dict):
        return set().union(*(_references(v) for v in value.values()))
    if isinstance(value, list):
        return set().union(*(_references(v) for v in value))
    return set()


def _drop_models(saved: dict[str, Any], ours: set[str]) -> None:
    """Remove our models from ``saved``, then every layout or style model nothing refers to.

    A layout or style is only ever used through its widget; JupyterLab also
    saves those of widgets that are gone, and one stray model would be enough
    to make the page load the CDN widget manager. Other unreferenced models
    (links, for example) are kept: they may act on widgets that remain.
    """
    for model_id in ours:
        del saved[model_id]
    while True:
        used = set().union(*(_references(entry.get("state")) for entry in saved.values()))
        stray = [
            model_id
            for model_id, entry in saved.items()
            if model_id not in used and str(entry.get("model_name", "")).endswith(("LayoutModel", "StyleModel"))
        ]
        if not stray:
            return
        for model_id in stray:
            del saved[model_id]


def make_widgets_offline(nb: Any) -> int:
    """Rewrite ``nb`` in place so that its circuitwidgets outputs need no widget manager; return how many.

    An output of ours is recognised by its saved state (``_anywidget_id`` in
    our package) or, without saved state, by the fallback our widgets attach.
    """
    saved = _saved_states(nb)
    ours = {model_id for model_id, entry in saved.items() if is_saved_circuitwidget(entry)}
    rewritten, bundled = 0, False
    for output in _widget_outputs(nb):
        model_id = output["data"][VIEW_MIME].get("model_id")
        if model_id in ours:
            output["data"]["text/html"] = notebook_fragment(
                saved_state_to_page_state(saved[model_id]), with_bundle=not bundled
            )
            bundled = True
        elif "cw-widget" not in str(output["data"].get("text/html", "")):
            continue
        del output["data"][VIEW_MIME]
        rewritten += 1
    _drop_models(saved, ours)
    if not saved and "widgets" in nb.metadata:
        del nb.metadata["widgets"]
    return rewritten


class OfflineWidgetsPreprocessor(Preprocessor):
    """Runs :func:`make_widgets_offline` after every other preprocessor (so after ``--execute``)."""

    def preprocess(self, nb: Any, resources: Any) -> tuple[Any, Any]:
        make_widgets_offline(nb)
        return nb, resources


class OfflineHTMLExporter(HTMLExporter):
    """nbconvert's HTML exporter with circuitwidgets views that work with no kernel and no network."""

    export_from_notebook = "HTML (circuitwidgets, offline)"

    @default("require_js_url")
    def _no_require_js(self) -> str:
        return ""

    @default("mathjax_url")
    def _no_mathjax(self) -> str:
        return ""

    def _init_preprocessors(self) -> None:
        super()._init_preprocessors()  # type: ignore[no-untyped-call]
        # Registered last so that it sees the state that ExecutePreprocessor stores.
        preprocessor = OfflineWidgetsPreprocessor(parent=self)  # type: ignore[no-untyped-call]
        self.register_preprocessor(preprocessor, enabled=True)  # type: ignore[no-untyped-call]
