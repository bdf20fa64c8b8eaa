"""The classic interface, Notebook 7 (``/tree``, ``/notebooks/...``): one widget, both directions."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser

from ._hosts import JupyterServer
from ._notebook import NotebookPage
from ._pages import (
    TIMEOUT_MS,
    assert_drawn,
    fingerprint,
    is_styled,
    perform,
    screenshot,
    wait_changed,
    wait_status,
    watch,
)
from ._widgets import CLICKS, SETS, widget_exists


@pytest.fixture
def notebook7(browser: Browser) -> Iterator[NotebookPage]:
    context = browser.new_context(viewport={"width": 1300, "height": 1000}, device_scale_factor=1)
    context.set_default_timeout(TIMEOUT_MS)
    try:
        yield NotebookPage(context.new_page(), watch(context))
    finally:
        context.close()


def test_attention_in_notebook7_draws_and_syncs_both_ways(jupyter: JupyterServer, notebook7: NotebookPage) -> None:
    if not widget_exists("attention"):
        pytest.skip("widget not yet built")
    notebook, log = notebook7, notebook7.log
    path = jupyter.write_notebook("classic.ipynb")

    # the file browser of the classic interface lists it
    notebook.page.goto(f"{jupyter.url}/tree?token={jupyter.token}")
    notebook.page.get_by_text("classic.ipynb").first.wait_for()
    notebook.open(jupyter, path, front="notebook7")
    notebook.run("from _widgets import attention_patterns")
    view = notebook.display("w = attention_patterns()\nw", "attention")
    assert_drawn(view)
    assert is_styled(view)
    view.scroll_into_view_if_needed()
    screenshot(notebook.page, "notebook7-attention")

    for click in CLICKS["attention"]:
        traits, _status = perform(view, click)
        notebook.wait_value("{" + ", ".join(f"{n!r}: w.{n}" for n in traits) + "}", traits)

    code, status = SETS["attention"]
    before = fingerprint(view)
    notebook.run(code)
    wait_changed(view, before, code)
    wait_status(view, status)

    assert not log.network(allowed_hosts=("127.0.0.1",))
    # Notebook 7's own settings code throws on load ("reading 'schema'"); only errors of our views count.
    assert not log.ours(log.page_errors), "\n".join(log.ours(log.page_errors))
    assert not log.ours(log.console_errors), log.ours(log.console_errors)
