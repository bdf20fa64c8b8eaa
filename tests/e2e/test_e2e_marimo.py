"""marimo: ``mo.ui.anywidget(widget)`` in an app served by ``marimo run`` on 127.0.0.1.

The view draws, and a click in it reaches Python: a dependent cell re-runs and
prints the widget's value and its traits.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page

from ._hosts import MarimoServer, marimo_server
from ._pages import (
    TIMEOUT_MS,
    PageLog,
    assert_drawn,
    in_shadow_root,
    is_styled,
    perform,
    screenshot,
    wait_view,
    watch,
)
from ._widgets import CLICKS, widget_exists

pytest.importorskip("marimo", reason="marimo is an optional extra (pip install circuitwidgets[marimo])")

APP = """
import marimo

app = marimo.App()


@app.cell
def _():
    import json

    import marimo as mo

    from _widgets import attention_patterns

    w = mo.ui.anywidget(attention_patterns())
    return json, mo, w


@app.cell
def _(w):
    w
    return


@app.cell
def _(json, mo, w):
    traits = {k: getattr(w.widget, k) for k in ("selected_layer", "selected_head", "selected_dest")}
    value = {k: w.value.get(k) for k in traits}
    mo.plain_text("CW-PY " + json.dumps(traits) + "\\nCW-VALUE " + json.dumps(value))
    return
"""


@pytest.fixture(scope="module")
def marimo_app(tmp_path_factory: pytest.TempPathFactory, bundle: Path) -> Iterator[MarimoServer]:
    if not widget_exists("attention"):
        pytest.skip("widget not yet built")
    with marimo_server(tmp_path_factory.mktemp("marimo"), APP) as server:
        yield server


@pytest.fixture
def marimo_page(marimo_app: MarimoServer, browser: Browser) -> Iterator[tuple[Page, PageLog]]:
    context = browser.new_context(viewport={"width": 1300, "height": 1000}, device_scale_factor=1)
    context.set_default_timeout(TIMEOUT_MS)
    try:
        log = watch(context)
        yield context.new_page(), log
    finally:
        context.close()


def python_side(page: Page, timeout_s: float = 60.0) -> tuple[dict[str, int], dict[str, int]]:
    """The traits and ``value`` printed by the app's last cell."""
    deadline = time.monotonic() + timeout_s
    while True:
        text = page.locator("body").inner_text()
        py = [line for line in text.splitlines() if line.startswith("CW-PY ")]
        value = [line for line in text.splitlines() if line.startswith("CW-VALUE ")]
        if py and value:
            return json.loads(py[-1][6:]), json.loads(value[-1][9:])
        if time.monotonic() > deadline:
            raise AssertionError(f"the app's output cell never showed the traits: {text[-1000:]!r}")
        time.sleep(0.3)


def test_marimo_view_draws_and_a_click_updates_python(
    marimo_app: MarimoServer, marimo_page: tuple[Page, PageLog]
) -> None:
    page, log = marimo_page
    page.goto(marimo_app.url, timeout=120_000)
    view = wait_view(page, log, "attention", timeout_s=120)
    assert_drawn(view)
    screenshot(view, "marimo-attention")

    py, value = python_side(page)
    assert py == {"selected_layer": 0, "selected_head": 0, "selected_dest": -1}, py

    # Only the head thumbnails: a hovered token reflows the token strip and may not
    # hold still long enough to click on a loaded machine.
    for click in CLICKS["attention"][:1]:
        traits, _status = perform(view, click)
        deadline = time.monotonic() + 60
        while True:
            py, value = python_side(page)
            if all(py[k] == v and value[k] == v for k, v in traits.items()):
                break
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"after clicking {click.selector}: Python sees {py}, value {value}; expected {traits}"
                )
            time.sleep(0.3)

    assert not log.network(allowed_hosts=("127.0.0.1",)), log.network(allowed_hosts=("127.0.0.1",))
    assert not log.ours(log.page_errors), log.ours(log.page_errors)
    assert not log.ours(log.console_errors), log.ours(log.console_errors)


def test_marimo_view_is_styled(marimo_app: MarimoServer, marimo_page: tuple[Page, PageLog]) -> None:
    page, log = marimo_page
    page.goto(marimo_app.url, timeout=120_000)
    view = wait_view(page, log, "attention", timeout_s=120)
    assert in_shadow_root(view)
    assert is_styled(view), "no stylesheet in the view's shadow root has a rule for it"
