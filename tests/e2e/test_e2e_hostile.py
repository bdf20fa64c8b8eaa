"""Hostile vocabularies in an exported page (issue 11): tokens are shown as text, never run.

The JupyterLab half of this check is ``test_e2e_jupyterlab.py::test_hostile_tokens_stay_text_in_jupyterlab``.
"""

from __future__ import annotations

import re
from pathlib import Path

from playwright.sync_api import Page

import circuitwidgets

from ._hostile import assert_tokens_are_text
from ._pages import PageLog, assert_drawn, screenshot, wait_view
from ._widgets import PWNED_FLAG, hostile_attention, hostile_tokens


def test_hostile_tokens_stay_text_in_an_exported_page(tmp_path: Path, page: Page, page_log: PageLog) -> None:
    path = circuitwidgets.save_html(hostile_attention(), tmp_path / "hostile.html")
    source = path.read_text(encoding="utf-8")
    # No token reaches the HTML parser raw: the state is JSON with "<" escaped.
    assert "<script>alert(1)" not in source and "</script><script>window" not in source
    scripts_in_file = len(re.findall(r"<script\b", source))

    page.goto(path.resolve().as_uri())
    view = wait_view(page, page_log, "attention")
    assert_drawn(view)
    assert_tokens_are_text(page, view)
    screenshot(view, "attention-hostile")

    assert page.locator("script").count() == scripts_in_file, "a script element was added to the page"
    assert page.locator("img").count() == 0
    assert not page.evaluate(f"Boolean(window.{PWNED_FLAG})")
    assert "<script>alert(1)</script>" in (view.text_content() or "")
    page_log.assert_offline_clean()


def test_selection_status_shows_a_hostile_token_as_text(tmp_path: Path, page: Page, page_log: PageLog) -> None:
    """The status line names the selected token; with markup in the token it still reads as text."""
    tokens = hostile_tokens()
    path = circuitwidgets.save_html(hostile_attention(), tmp_path / "hostile.html")
    page.goto(path.resolve().as_uri())
    view = wait_view(page, page_log, "attention")
    view.locator('[data-cw-token="1"]').click()
    status = view.locator("[data-cw-status]").first
    status.wait_for()
    assert status.evaluate("e => e.querySelectorAll('img, script, iframe, [onerror], [onload]').length") == 0
    assert tokens[1][:15] in (status.text_content() or "")
    assert not page.evaluate(f"Boolean(window.{PWNED_FLAG})")
    page_log.assert_offline_clean()
