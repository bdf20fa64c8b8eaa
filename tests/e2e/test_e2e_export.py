"""Exported pages work offline: opened from file:// with every other request aborted.

For each view, ``save_html`` gives a page that draws, answers clicks, attempts no
request and logs no error; a page with several widgets carries one bundle; and
``jupyter nbconvert --to html --execute`` gives the same from a notebook.
``jupyter nbconvert --to circuitwidgets`` (our exporter) does so from saved
widget state too, keeping what later cells changed.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import nbformat
import pytest
from playwright.sync_api import Page
from playwright.sync_api import TimeoutError as PlaywrightTimeoutError

import circuitwidgets

from ._pages import (
    PageLog,
    assert_drawn,
    click_through,
    fingerprint,
    open_offline,
    perform,
    screenshot,
    wait_changed,
    wait_for,
    wait_status,
)
from ._widgets import CLICKS, VIEWS


@pytest.mark.parametrize("name", list(VIEWS))
def test_save_html_page_draws_and_answers_clicks_offline(
    name: str, built: Any, tmp_path: Path, page: Page, page_log: PageLog
) -> None:
    widget = built(name)
    path = circuitwidgets.save_html(widget, tmp_path / f"{name}.html")

    view = open_offline(page, page_log, path, [name])[name]
    screenshot(view, name)
    click_through(view, name)

    page_log.assert_offline_clean()


def test_one_page_of_several_widgets_holds_one_bundle_and_draws_them_all(
    built: Any, tmp_path: Path, page: Page, page_log: PageLog
) -> None:
    names = ["attention", "eigen"]
    path = circuitwidgets.save_html([built(n) for n in names], tmp_path / "two.html")
    assert path.read_text().count('id="cw-bundle"') == 1

    views = open_offline(page, page_log, path, names)
    click_through(views["attention"], "attention")
    click_through(views["eigen"], "eigen")
    page_log.assert_offline_clean()


def test_explorer_links_its_views_in_an_exported_page(
    built: Any, tmp_path: Path, page: Page, page_log: PageLog
) -> None:
    """Choosing a head in the explorer's scatter moves the other views to it, with no kernel."""
    path = circuitwidgets.save_html(built("explorer"), tmp_path / "explorer.html")
    root = open_offline(page, page_log, path, ["explorer"])["explorer"]
    inner = [
        v
        for v in root.locator("[data-cw-view]").evaluate_all("els => els.map(e => e.dataset.cwView)")
        if v != "explorer"
    ]
    assert {"eigen", "attention"} <= set(inner), inner

    attention = root.locator('[data-cw-view="attention"]').first
    before = fingerprint(attention)
    perform(root, CLICKS["explorer"][0])  # a head in the scatter; the explorer's status names it
    wait_changed(attention, before, "explorer: the attention view follows the head chosen in the scatter")
    page_log.assert_offline_clean()


def click_free_head(scatter: Any, n_layers: int, n_heads: int, taken: set[tuple[int, int]]) -> tuple[int, int]:
    """Click the first head of the scatter not in ``taken`` whose point no other point covers."""
    for l in range(n_layers):
        for h in range(n_heads):
            target = scatter.locator(f'[data-cw-head="{l}.{h}"]').first
            if (l, h) in taken:
                continue
            try:
                target.click(trial=True, timeout=2_000)
            except PlaywrightTimeoutError:
                continue
            target.click()
            return l, h
    raise AssertionError(f"no free head of the scatter can be clicked (taken: {taken})")


def test_report_is_a_linked_page_a_head_chosen_in_the_scatter_moves_the_others(
    tmp_path: Path, page: Page, page_log: PageLog
) -> None:
    """``circuitwidgets report``: click a head in the eigenvalue scatter, and the attention view and the
    skip-trigram table show that head, offline."""
    from circuitwidgets.report import write_report

    model = circuitwidgets.load_pretrained("attn-only-2l")
    path = write_report(model, tmp_path / "report.html")
    views = open_offline(page, page_log, path, ["eigen", "attention", "skiptrigrams"])
    start = {(s["_view"], s["selected_layer"], s["selected_head"]) for s in page_states(page) if "selected_head" in s}
    taken = {(layer, head) for _, layer, head in start}
    before = {name: fingerprint(views[name]) for name in ("attention", "skiptrigrams")}
    layer, head = click_free_head(views["eigen"], model.cfg.n_layers, model.cfg.n_heads, taken)
    wait_status(views["eigen"], rf"L{layer}H{head} selected")
    for name in ("attention", "skiptrigrams"):
        wait_changed(views[name], before[name], f"report: the {name} view follows the head chosen in the scatter")
    wait_status(views["attention"], rf"L{layer}\s*H{head}|layer {layer}\D+head {head}")
    title = views["skiptrigrams"].locator(".cw-title").first
    wait_for(
        lambda: f"L{layer}H{head}" in (title.text_content() or ""), "the skip-trigram table's title names the head"
    )
    # and back: a head chosen in the table's own menu moves the scatter
    other = next((l, h) for l in range(model.cfg.n_layers) for h in range(model.cfg.n_heads) if (l, h) != (layer, head))
    views["skiptrigrams"].locator(".cw-controls select").first.select_option(f"{other[0]}.{other[1]}")
    wait_status(views["eigen"], rf"L{other[0]}H{other[1]} selected")
    page_log.assert_offline_clean()


# --- nbconvert ------------------------------------------------------------------------

NOTEBOOK_CELLS = [
    "import sys; sys.path.insert(0, {here!r})\nfrom _widgets import attention_patterns",
    "attention_patterns()",
    "w = attention_patterns(selected_layer=1, selected_head=3)\nw",
    # A later cell changes a shown widget: the saved state has it, the display-time fallback does not.
    "w.selected_head = 1",
]


def nbconvert(notebook: Path, output: str, *args: str, to: str = "html", timeout_s: int = 300) -> Path:
    """Run ``jupyter nbconvert --to TO ... --output OUTPUT`` and return the file written."""
    cmd = [sys.executable, "-m", "jupyter", "nbconvert", "--to", to, *args, "--output", output, str(notebook)]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, cwd=notebook.parent)
    assert result.returncode == 0, f"{' '.join(cmd)} failed:\n{result.stderr[-4000:]}"
    return notebook.with_name(f"{output}.ipynb" if to == "notebook" else f"{output}.html")


@pytest.fixture(scope="module")
def executed_notebook(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("nbconvert")
    nb = nbformat.v4.new_notebook()
    here = str(Path(__file__).parent)
    nb.cells = [nbformat.v4.new_code_cell(c.format(here=here)) for c in NOTEBOOK_CELLS]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    path = root / "widgets.ipynb"
    nbformat.write(nb, path)
    return path


#: The template's own CDN scripts (require.js, MathJax); not ours, and switched off by the offline command.
TEMPLATE_URLS = re.compile(r"cdnjs\.cloudflare\.com/ajax/libs/(require\.js|mathjax)/|unpkg\.com/@jupyter-widgets/")

#: The command for an offline, interactive page: no widget state (so the
#: ``text/html`` fallback is shown) and no CDN script in the template.
OFFLINE_FLAGS = (
    "--execute",
    "--ExecutePreprocessor.store_widget_state=False",
    "--HTMLExporter.require_js_url=",
    "--HTMLExporter.mathjax_url=",
)


def test_nbconvert_offline_command_gives_an_interactive_page_with_no_request(
    executed_notebook: Path, page: Page, page_log: PageLog
) -> None:
    html = nbconvert(executed_notebook, "offline", *OFFLINE_FLAGS)
    open_offline(page, page_log, html, ["attention"])
    views = page.locator('[data-cw-view="attention"]')
    assert views.count() == 2
    assert_drawn(views.nth(1))
    assert page.locator("#cw-bundle").count() == 1, "the bundle is loaded once per page"
    click_through(views.nth(0), "attention")
    click_through(views.nth(1), "attention")
    page_log.assert_offline_clean()


@pytest.mark.xfail(
    strict=True,
    reason="plain --execute stores the widget state, so nbconvert renders the widget-view output, which needs "
    "@jupyter-widgets/html-manager from unpkg.com: nothing draws offline (use --to circuitwidgets)",
)
def test_nbconvert_default_execute_draws_our_views_and_only_the_template_reaches_for_the_network(
    executed_notebook: Path, page: Page, page_log: PageLog
) -> None:
    """Plain ``--execute``: our views still draw and work; nbconvert's template asks CDNs for require.js and MathJax."""
    html = nbconvert(executed_notebook, "default", "--execute")
    page.goto(html.resolve().as_uri())
    view = page.locator('[data-cw-view="attention"]').first
    view.wait_for(timeout=10_000)
    assert_drawn(view)
    click_through(view, "attention")
    ours = [u for u in page_log.network() if not TEMPLATE_URLS.search(u)]
    assert not ours, f"requests not made by nbconvert's template: {ours}"
    errors = [
        e for e in page_log.console_errors if not TEMPLATE_URLS.search(e) and "ERR_INTERNET_DISCONNECTED" not in e
    ]
    assert not errors and not page_log.page_errors and not page_log.dialogs, (errors, page_log.page_errors)


def page_states(page: Page) -> list[dict[str, Any]]:
    """The widget states a page mounts, in order."""
    return page.evaluate("[...document.querySelectorAll('script.cw-state')].map(s => JSON.parse(s.textContent))")


def assert_our_exporter_page(page: Page, page_log: PageLog, html: Path) -> None:
    """Two attention views, drawn from the saved state (head 1 of layer 1 in the second), one bundle, no request."""
    text = html.read_text(encoding="utf-8")
    assert "widget-state+json" not in text and "unpkg.com" not in text and "require.js" not in text
    open_offline(page, page_log, html, ["attention"])
    views = page.locator('[data-cw-view="attention"]')
    assert views.count() == 2
    assert_drawn(views.nth(1))
    assert [(s["selected_layer"], s["selected_head"]) for s in page_states(page)] == [(0, 0), (1, 1)], (
        "the page must show the state the kernel ended with"
    )
    assert page.locator("#cw-bundle").count() == 1 and text.count('id="cw-bundle"') == 1, (
        "one copy of the bundle per page"
    )
    click_through(views.nth(0), "attention")
    click_through(views.nth(1), "attention")
    page_log.assert_offline_clean()


def test_our_exporter_with_execute_keeps_later_changes_and_needs_no_network(
    executed_notebook: Path, page: Page, page_log: PageLog
) -> None:
    html = nbconvert(executed_notebook, "ours-executed", "--execute", to="circuitwidgets")
    assert_our_exporter_page(page, page_log, html)


def test_our_exporter_on_a_notebook_saved_with_widget_state(
    executed_notebook: Path, page: Page, page_log: PageLog
) -> None:
    saved = nbconvert(executed_notebook, "saved-with-state", "--execute", to="notebook")
    assert "application/vnd.jupyter.widget-state+json" in nbformat.read(saved, as_version=4).metadata.get("widgets", {})
    html = nbconvert(saved, "ours-from-saved", to="circuitwidgets")
    assert_our_exporter_page(page, page_log, html)
