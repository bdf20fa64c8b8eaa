"""Checks that hostile token strings stayed text (issue 11), shared by the exported-page and JupyterLab tests."""

from __future__ import annotations

import unicodedata

from playwright.sync_api import Locator, Page

from circuitwidgets._text import is_invisible_format

from ._pages import wait_for
from ._widgets import PWNED_FLAG, hostile_tokens


def printable_core(token: str, limit: int = 30) -> str:
    """The longest run of printable, non-space characters of ``token`` (at most ``limit``).

    Views show whitespace and control characters in their own visible way
    (``·``, ``⏎``, ``\\x00``) and truncate long tokens, but a run of ordinary
    characters must appear as it is.
    """
    best, run = "", ""
    for ch in token:
        if ch.isspace() or unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp"):
            best, run = max(best, run, key=len), ""
        else:
            run += ch
    return max(best, run, key=len)[:limit]


_TOKEN_JS = """
(el) => ({
  text: el.textContent,
  title: el.getAttribute("title") || "",
  children: el.children.length,
  width: el.getBoundingClientRect().width,
  bidi: getComputedStyle(el).unicodeBidi,
})
"""

_ACTIVE_JS = """
(root) => ({
  scripts: root.querySelectorAll("script").length,
  imgs: root.querySelectorAll("img").length,
  iframes: root.querySelectorAll("iframe, object, embed").length,
  handlers: [...root.querySelectorAll("*")].filter(e => [...e.attributes].some(a => a.name.startsWith("on"))).length,
  links: [...root.querySelectorAll("a[href], [src]")].filter(e => /javascript:/i.test(e.getAttribute("href") || e.getAttribute("src") || "")).length,
})
"""


def assert_tokens_are_text(page: Page, view: Locator) -> None:
    """Click every token; then no payload ran, nothing was injected, and every token reads as text."""
    tokens = hostile_tokens()
    spans = view.locator("[data-cw-token]")
    wait_for(lambda: spans.count() >= len(tokens), f"{len(tokens)} token elements")
    for i in range(len(tokens)):
        span = view.locator(f'[data-cw-token="{i}"]').first
        span.scroll_into_view_if_needed()
        span.hover()
        span.click()
    page.wait_for_timeout(300)

    assert not page.evaluate(f"Boolean(window.{PWNED_FLAG})"), "a token's payload ran"
    active = view.evaluate(_ACTIVE_JS)
    assert active == {"scripts": 0, "imgs": 0, "iframes": 0, "handlers": 0, "links": 0}, (
        f"elements injected into the view: {active}"
    )

    for i, token in enumerate(tokens):
        got = view.locator(f'[data-cw-token="{i}"]').first.evaluate(_TOKEN_JS)
        assert got["children"] == 0, f"token {i} ({token[:40]!r}) became markup"
        shown = got["text"] + got["title"]
        core = printable_core(token)
        assert core in shown, f"token {i}: {core!r} not shown as text in {shown[:200]!r}"
        raw_format = [hex(ord(ch)) for ch in shown if is_invisible_format(ord(ch))]
        assert not raw_format, f"token {i}: invisible format characters {raw_format} reached the page unescaped"
        for ch in token:
            if is_invisible_format(ord(ch)) and len(token) < 100:
                assert f"\\u{ord(ch):04x}" in shown, (
                    f"token {i}: U+{ord(ch):04X} is not shown as an escape in {shown!r}"
                )
        if len(token) > 1000:
            assert got["width"] < 1200, f"token {i} ({len(token)} chars) is not truncated for display: {got['width']}px"
            assert len(got["title"]) >= len(token) or token in got["title"], (
                "the full text of a long token is not available on hover"
            )
