"""JupyterLab 4, live: each view draws in a notebook, clicks reach the kernel, the kernel moves the view.

One notebook (one kernel) serves the view tests, as a user's session would:
each test types a cell that builds and shows a widget, clicks in its view,
then runs a cell that prints the Python traits; none relies on a widget another
test showed. The export tests build a notebook of their own (own kernel, own
page), so they pass alone (``-k export_menu``) and in any order, and never
reload the shared page. Every wait is on a state (a cell's prompt, a view drawn,
a file saved, a request made) with a bounded timeout, never on a fixed time.
"""

from __future__ import annotations

import json
import re
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page

from ._hostile import assert_tokens_are_text
from ._hosts import JupyterServer
from ._notebook import NotebookPage
from ._pages import (
    TIMEOUT_MS,
    PageLog,
    assert_drawn,
    fingerprint,
    is_styled,
    perform,
    screenshot,
    wait_changed,
    wait_for,
    wait_status,
    watch,
)
from ._widgets import CLICKS, SETS, VIEWS, widget_exists

#: Scripts that nbconvert's stock template asks CDNs for (not ours).
TEMPLATE_CDN = re.compile(r"cdnjs\.cloudflare\.com/ajax/libs/(require\.js|mathjax)/")


@pytest.fixture(scope="module")
def lab(jupyter: JupyterServer, browser: Browser) -> Iterator[NotebookPage]:
    context = browser.new_context(viewport={"width": 1400, "height": 1000}, device_scale_factor=1)
    context.set_default_timeout(TIMEOUT_MS)
    try:
        log = watch(context)
        notebook = NotebookPage(context.new_page(), log)
        path = jupyter.write_notebook("lab.ipynb")
        notebook.open(jupyter, path)
        notebook.run("from _widgets import BUILDERS, hostile_attention")
        yield notebook
    finally:
        context.close()


@pytest.fixture(autouse=True)
def no_new_page_error(lab: NotebookPage) -> Iterator[None]:
    """Each test answers for the uncaught errors raised while it ran."""
    seen = len(lab.log.page_errors)
    yield
    new = lab.log.page_errors[seen:]
    assert not new, "uncaught errors in the page:\n" + "\n".join(new)


def kernel_traits(names: list[str], var: str) -> str:
    return "{" + ", ".join(f"{n!r}: {var}.{n}" for n in names) + "}"


@pytest.mark.parametrize("name", list(VIEWS))
def test_view_draws_and_clicks_reach_the_kernel_and_back(name: str, lab: NotebookPage) -> None:
    if not widget_exists(name):
        pytest.skip("widget not yet built")
    var = f"w_{name}"
    view = lab.display(f"{var} = BUILDERS[{name!r}]()\n{var}", name)
    assert_drawn(view)
    assert is_styled(view)
    view.scroll_into_view_if_needed()
    screenshot(lab.page, f"jupyterlab-{name}")  # the window: an element shot of a tall output garbles in Lab

    # view → kernel
    for click in CLICKS[name]:
        traits, _status = perform(view, click)
        lab.wait_value(kernel_traits(list(traits), var), traits)

    # kernel → view
    code, status = SETS[name]
    before = fingerprint(view)
    lab.run(re.sub(r"\bw\.", f"{var}.", code))
    wait_changed(view, before, f"{name}: {code} from a cell")
    wait_status(view, status)


def test_a_skip_trigram_head_chosen_in_the_view_is_computed_by_the_kernel_and_shown(lab: NotebookPage) -> None:
    """A head that was not precomputed: the kernel computes it and sends it alone; the view lists it."""
    if not widget_exists("skiptrigrams"):
        pytest.skip("widget not yet built")
    view = lab.display(
        "from _widgets import model\nfrom circuitwidgets import SkipTrigramTable\n"
        "w_lazy = SkipTrigramTable(model(), heads=[(0, 0)], k=5, profile_k=3)\nw_lazy",
        "skiptrigrams",
    )
    assert lab.value("int(w_lazy.ready[1, 1])") == 0
    view.locator(".cw-controls select").first.select_option("1.1")
    lab.wait_value("[w_lazy.selected_layer, w_lazy.selected_head, int(w_lazy.ready[1, 1])]", [1, 1, 1])
    title = view.locator(".cw-title").first
    deadline = time.monotonic() + 20
    while not ("L1H1" in (title.text_content() or "") and view.locator('tr[data-cw-row="0"]').count()):
        assert time.monotonic() < deadline, f"the computed head was not shown (title {title.text_content()!r})"
        time.sleep(0.1)
    expected = lab.value("len(w_lazy.trigrams)")
    assert expected > 0 and "Computing" not in (view.text_content() or "")


def test_an_invalid_value_from_a_cell_is_refused_and_the_view_keeps_the_last_valid_one(lab: NotebookPage) -> None:
    if not widget_exists("attention"):
        pytest.skip("widget not yet built")
    view = lab.display("w_bad = BUILDERS['attention'](selected_layer=1, selected_head=1)\nw_bad", "attention")
    wait_status(view, r"layer 1\D+head 1|L1\s*H1")
    out = lab.run("try:\n    w_bad.selected_head = 99\nexcept Exception as e:\n    print('refused', type(e).__name__)")
    assert "refused TraitError" in out
    assert lab.value("w_bad.selected_head") == 1
    wait_status(view, r"layer 1\D+head 1|L1\s*H1")


def test_hostile_tokens_stay_text_in_jupyterlab(lab: NotebookPage) -> None:
    if not widget_exists("attention"):
        pytest.skip("widget not yet built")
    view = lab.display("w_hostile = hostile_attention()\nw_hostile", "attention")
    assert_drawn(view)
    assert_tokens_are_text(lab.page, view)
    assert not lab.log.dialogs, lab.log.dialogs
    # the last click selected the last token; the kernel saw it
    assert lab.value("w_hostile.selected_dest") in (-1, 16)


def _get(jupyter: JupyterServer, path: str) -> bytes:
    request = urllib.request.Request(f"{jupyter.url}{path}", headers={"Authorization": f"token {jupyter.token}"})
    with urllib.request.urlopen(request, timeout=120) as response:
        return bytes(response.read())


def _send(jupyter: JupyterServer, method: str, path: str, body: dict[str, object] | None = None) -> None:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        f"{jupyter.url}{path}",
        data=data,
        method=method,
        headers={"Authorization": f"token {jupyter.token}", "Content-Type": "application/json"},
    )
    urllib.request.urlopen(request, timeout=60).close()


def _save_widget_state(jupyter: JupyterServer, on: bool) -> None:
    """The widget manager's "save widget state" setting (read when a page loads, so set before opening one)."""
    _send(
        jupyter,
        "PUT",
        "/lab/api/settings/@jupyter-widgets/jupyterlab-manager:plugin",
        {"raw": json.dumps({"saveState": on})},
    )


def _save_and_wait(lab: NotebookPage, jupyter: JupyterServer, name: str, with_state: bool) -> None:
    """Save as a user would (Ctrl+S) and wait for the file to hold our outputs (and the widget state).

    On a loaded machine a key press can land before the notebook has focus: the save is asked again every
    10 s until the file changes, for at most 120 s.
    """
    import nbformat

    path = jupyter.notebooks / name
    before = path.stat().st_mtime_ns
    deadline = time.monotonic() + 120
    asked = 0.0
    while True:
        if path.stat().st_mtime_ns != before:
            nb = nbformat.read(path, as_version=4)
            outputs = [o for c in nb.cells for o in c.get("outputs", []) if "text/html" in o.get("data", {})]
            has_state = "application/vnd.jupyter.widget-state+json" in nb.metadata.get("widgets", {})
            if outputs and has_state == with_state:
                return
        if time.monotonic() - asked > 10:
            lab.cells.last.click()
            lab.page.keyboard.press("Escape")
            lab.page.keyboard.press("Control+s")
            asked = time.monotonic()
        assert time.monotonic() < deadline, "the notebook was not saved with the expected content"
        time.sleep(0.5)


@contextmanager
def _notebook_of_two_views(jupyter: JupyterServer, browser: Browser, name: str) -> Iterator[NotebookPage]:
    """A notebook of its own (its own kernel and page) that shows an attention view and an eigenvalue view, both
    drawn: the export tests need no earlier test to have filled a notebook, and never reload a shared page."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000}, device_scale_factor=1)
    context.set_default_timeout(TIMEOUT_MS)
    jupyter.write_notebook(name)
    notebook = NotebookPage(context.new_page(), watch(context))
    try:
        notebook.open(jupyter, name)
        notebook.run("from _widgets import BUILDERS")
        for view in ("attention", "eigen"):
            assert_drawn(notebook.display(f"w_{view} = BUILDERS[{view!r}]()\nw_{view}", view))
        yield notebook
    finally:
        context.close()
        if notebook.kernel_id:  # (set as soon as the session is made)
            with suppress(OSError):  # (the server may already be gone; its kernels go with it)
                _send(jupyter, "DELETE", f"/api/kernels/{notebook.kernel_id}")


def _open_export(browser: Browser, html: Path) -> tuple[Page, PageLog]:
    context = browser.new_context(viewport={"width": 1280, "height": 900}, device_scale_factor=1)
    context.set_default_timeout(TIMEOUT_MS)
    log = watch(context, offline=True)
    page = context.new_page()
    page.goto(html.resolve().as_uri())
    return page, log


def _assert_views_work(page: Page, log: PageLog) -> None:
    """Every view of ours on the page is drawn, and a click changes the attention view."""
    widgets = page.locator(".cw-widget")
    assert widgets.count() >= 2
    for i in range(widgets.count()):
        view = widgets.nth(i).locator("[data-cw-view]").first
        view.wait_for(timeout=TIMEOUT_MS)
        assert_drawn(view)
    attention = page.locator('[data-cw-view="attention"]').first
    attention.locator('[data-cw-head="0.1"]').first.click()
    before = fingerprint(attention)
    attention.locator('[data-cw-head="0.2"]').first.click()
    wait_changed(attention, before, "click on head 0.2 in an exported page")


@pytest.mark.parametrize("with_state", [False, True], ids=["plain-save", "widget-state-saved"])
def test_jupyterlab_export_menu_gives_an_offline_page_with_our_exporter(
    with_state: bool, jupyter: JupyterServer, browser: Browser, tmp_path: Path
) -> None:
    """File > Save and Export Notebook As: the "Circuitwidgets" entry (our exporter) draws every view with no network.

    Also records what the stock "HTML" entry gives: without saved widget state
    our views draw from their fallback (only the template's CDN scripts are
    attempted); with saved state nbconvert shows the widget manager's
    placeholder, which needs a CDN, so nothing of ours is drawn offline.
    Each case builds the notebook it exports, with the setting made before its page opens.
    """
    if not widget_exists("attention"):
        pytest.skip("widget not yet built")
    formats = json.loads(_get(jupyter, "/api/nbconvert"))
    assert formats["circuitwidgets"]["output_mimetype"] == "text/html", formats.get("circuitwidgets")
    name = f"export-{'state' if with_state else 'plain'}.ipynb"
    _save_widget_state(jupyter, with_state)
    try:
        with _notebook_of_two_views(jupyter, browser, name) as notebook:
            _save_and_wait(notebook, jupyter, name, with_state)
    finally:
        _save_widget_state(jupyter, False)  # (the server's default, for whatever runs next)

    ours = tmp_path / "ours.html"
    ours.write_bytes(_get(jupyter, f"/nbconvert/circuitwidgets/{name}?download=true"))
    page, log = _open_export(browser, ours)
    try:
        _assert_views_work(page, log)
        log.assert_offline_clean()
    finally:
        page.context.close()

    stock = tmp_path / "stock.html"
    stock.write_bytes(_get(jupyter, f"/nbconvert/html/{name}?download=true"))
    page, log = _open_export(browser, stock)
    try:
        if with_state:
            # the widget manager's placeholder asks a CDN for its script: wait for that request, not for a time
            wait_for(lambda: any("unpkg.com" in u for u in log.network()), "the stock page's CDN request", 60)
            page.wait_for_load_state("load")
            assert page.locator("[data-cw-view]").count() == 0, "stock export with saved state now draws offline"
        else:
            _assert_views_work(page, log)
            assert all(TEMPLATE_CDN.search(u) for u in log.network()), log.network()
    finally:
        page.context.close()


def test_jupyterlab_session_reached_no_host_but_its_server_and_raised_no_error(lab: NotebookPage) -> None:
    """Runs last in this module: over all the views shown, nothing left 127.0.0.1 and no script error surfaced."""
    log: PageLog = lab.log
    assert not log.network(allowed_hosts=("127.0.0.1",)), log.network(allowed_hosts=("127.0.0.1",))
    assert not log.page_errors, log.page_errors
    assert not log.ours(log.console_errors), log.ours(log.console_errors)
    assert not log.dialogs, log.dialogs
