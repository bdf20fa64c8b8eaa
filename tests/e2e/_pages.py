"""What the browser tests observe on a page: requests, console, dialogs, pixels, view state."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from playwright.sync_api import BrowserContext, ConsoleMessage, Dialog, Error, Locator, Page, Request, Route
from playwright.sync_api import TimeoutError as PlaywrightTimeoutError

from ._widgets import CLICKS, Click

#: URL schemes an offline page may load.
OFFLINE_SCHEMES = ("file", "data", "blob")


#: Marks of our code in an error's text or stack (anywidget loads the bundle from a blob: URL).
OURS = re.compile(r"circuitwidgets|anywidget|cw-|blob:", re.IGNORECASE)

#: Uncaught errors that say nothing about our views. anywidget 0.11 rejects a
#: promise "Failed to initialize model." whenever loading the module and
#: ``initialize`` take more than a fixed 2 s, even when the model then
#: initializes and the view renders (seen with the explorer on 2 loaded
#: cores); the tests still require the view to draw and sync.
BENIGN = re.compile(r"^\[anywidget\] Failed to initialize model\.")

#: Default wait for anything in a page, ms.
TIMEOUT_MS = 30_000

REPO = Path(__file__).resolve().parents[2]
SCREENSHOTS = REPO / "test-artifacts" / "screenshots"


@dataclass
class PageLog:
    """Everything a page did that a test may want to forbid."""

    console_errors: list[str] = field(default_factory=list)
    page_errors: list[str] = field(default_factory=list)
    dialogs: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)
    aborted: list[str] = field(default_factory=list)
    websockets: list[str] = field(default_factory=list)
    benign: list[str] = field(default_factory=list)

    def network(self, allowed_hosts: tuple[str, ...] = ()) -> list[str]:
        """Requests (and websockets) to anything but ``file:``/``data:``/``blob:`` or ``allowed_hosts``."""
        out = []
        for url in [*self.requests, *self.websockets]:
            parts = urlsplit(url)
            if parts.scheme in OFFLINE_SCHEMES:
                continue
            if parts.hostname in allowed_hosts:
                continue
            out.append(url)
        return out

    def ours(self, errors: list[str]) -> list[str]:
        """Of ``errors`` (console or page), those raised by our views: their text or stack names
        circuitwidgets or anywidget, or a ``blob:`` module (how anywidget loads our bundle)."""
        return [e for e in errors if OURS.search(e)]

    def assert_offline_clean(self) -> None:
        """No network attempted, no console error, no uncaught exception, no dialog."""
        problems = {
            "network requests attempted": self.network(),
            "requests aborted": self.aborted,
            "console errors": self.console_errors,
            "uncaught page errors": self.page_errors,
            "dialogs opened": self.dialogs,
        }
        bad = {k: v for k, v in problems.items() if v}
        assert not bad, f"exported page misbehaved: {bad}"


def watch(target: Page | BrowserContext, log: PageLog | None = None, *, offline: bool = False) -> PageLog:
    """Record console errors, page errors, dialogs (dismissed) and requests of ``target``.

    With ``offline``, every request whose scheme is not ``file:``, ``data:`` or
    ``blob:`` is aborted (and recorded in ``aborted``).
    """
    log = PageLog() if log is None else log

    def on_console(msg: ConsoleMessage) -> None:
        if msg.type == "error":
            loc = msg.location or {}
            log.console_errors.append(f"{msg.text} @ {loc.get('url', '')}:{loc.get('lineNumber', '')}")

    def on_page_error(exc: Error) -> None:
        text = f"{exc}\n{exc.stack or ''}"[:3000]
        (log.benign if BENIGN.search(text) else log.page_errors).append(text)

    def on_dialog(dialog: Dialog) -> None:
        if dialog.type == "beforeunload":  # JupyterLab guarding unsaved cells while the test navigates on purpose
            dialog.accept()
            return
        log.dialogs.append(f"{dialog.type}: {dialog.message}")
        dialog.dismiss()

    def on_page(page: Page) -> None:
        page.on("console", on_console)
        page.on("pageerror", on_page_error)
        page.on("dialog", on_dialog)
        page.on("request", lambda req: log.requests.append(req.url))
        page.on("websocket", lambda ws: log.websockets.append(ws.url))

    if isinstance(target, Page):
        on_page(target)
    else:
        target.on("page", on_page)
        for page in target.pages:
            on_page(page)

    if offline:

        def route(route: Route, request: Request) -> None:
            if urlsplit(request.url).scheme in OFFLINE_SCHEMES:
                route.continue_()
            else:
                log.aborted.append(request.url)
                route.abort("internetdisconnected")

        target.route("**/*", route)
    return log


# --- reading views ------------------------------------------------------------

_DESCRIBE_JS = """
(root) => {
  const canvases = [];
  for (const c of root.querySelectorAll("canvas")) {
    const entry = { width: c.width, height: c.height, colours: 0, opaque: 0, hash: 0 };
    if (c.width > 0 && c.height > 0) {
      const ctx = c.getContext("2d");
      if (ctx) {
        const data = ctx.getImageData(0, 0, c.width, c.height).data;
        const seen = new Set();
        let hash = 0;
        for (let i = 0; i < data.length; i += 4) {
          const rgba = ((data[i] << 24) | (data[i + 1] << 16) | (data[i + 2] << 8) | data[i + 3]) >>> 0;
          if (data[i + 3] > 0) entry.opaque++;
          if (seen.size < 256) seen.add(rgba);
          hash = (Math.imul(hash, 31) + rgba) | 0;
        }
        entry.colours = seen.size;
        entry.hash = hash;
      } else {
        entry.colours = -1;  // not a 2d canvas
      }
    }
    canvases.push(entry);
  }
  const shapes = root.querySelectorAll("svg circle, svg rect, svg path, svg line, svg polygon, svg polyline, svg ellipse").length;
  const status = root.querySelector("[data-cw-status]");
  return {
    rows: root.querySelectorAll("[data-cw-row]").length,
    view: root.getAttribute("data-cw-view"),
    canvases,
    svgShapes: shapes,
    status: status ? status.textContent : null,
    text: root.textContent.slice(0, 2000),
    rect: (() => { const r = root.getBoundingClientRect(); return { width: r.width, height: r.height }; })(),
  };
}
"""


def describe(view: Locator) -> dict[str, Any]:
    """Pixels and text of a view: per canvas its distinct colours (up to 256), opaque pixels and a hash."""
    return dict(view.evaluate(_DESCRIBE_JS))


def is_drawn(desc: dict[str, Any]) -> bool:
    """A view is drawn when it has size and a canvas shows two colours or more, its SVG holds shapes, or its table rows."""
    if desc["rect"]["width"] < 10 or desc["rect"]["height"] < 10:
        return False
    canvas_drawn = any(c["colours"] >= 2 and c["opaque"] > 0 for c in desc["canvases"])
    return canvas_drawn or desc["svgShapes"] >= 3 or desc["rows"] >= 1


def assert_drawn(view: Locator) -> dict[str, Any]:
    """Wait (up to the page timeout) for ``view`` to be drawn; return its description."""
    deadline = time.monotonic() + TIMEOUT_MS / 1000
    desc = describe(view)
    while not is_drawn(desc):
        if time.monotonic() > deadline:
            raise AssertionError(f"view {desc['view']!r} is not drawn: {desc}")
        time.sleep(0.2)
        desc = describe(view)
    if desc["canvases"]:
        blank = [c for c in desc["canvases"] if c["width"] and c["colours"] == 1]
        assert not blank, f"view {desc['view']!r} has blank canvases: {blank}"
    return desc


_STYLED_JS = """
(root) => {
  const scope = root.getRootNode();
  const sheets = [...(scope.styleSheets || []), ...(scope.adoptedStyleSheets || [])];
  for (const sheet of sheets) {
    let rules;
    try { rules = sheet.cssRules; } catch { continue; }
    for (const rule of rules) {
      try { if (rule.selectorText && root.matches(rule.selectorText)) return true; } catch { /* selector of another engine */ }
    }
  }
  return false;
}
"""


def is_styled(view: Locator) -> bool:
    """Whether a stylesheet that reaches the view (in its document or shadow root) has a rule for its root."""
    return bool(view.evaluate(_STYLED_JS))


def in_shadow_root(view: Locator) -> bool:
    return bool(view.evaluate("(root) => root.getRootNode() instanceof ShadowRoot"))


def fingerprint(view: Locator) -> tuple[Any, ...]:
    """What a click should change: status text and canvas pixels and selection markers."""
    desc = describe(view)
    marks = view.evaluate(
        '(root) => [...root.querySelectorAll(\'[aria-pressed="true"], .cw-selected, [aria-selected="true"], [data-cw-selected]\')]'
        ".map(e => e.outerHTML.slice(0, 80)).join('|')"
    )
    return (desc["status"], tuple(c["hash"] for c in desc["canvases"]), marks)


def wait_changed(view: Locator, before: tuple[Any, ...], what: str, timeout_s: float = 10.0) -> tuple[Any, ...]:
    """Wait until :func:`fingerprint` differs from ``before``."""
    deadline = time.monotonic() + timeout_s
    now = fingerprint(view)
    while now == before:
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: the view did not change (status {now[0]!r})")
        time.sleep(0.1)
        now = fingerprint(view)
    return now


def wait_status(view: Locator, pattern: str, timeout_s: float = 10.0) -> str:
    """Wait until the view's ``[data-cw-status]`` text matches ``pattern`` (a regex, case-insensitive)."""
    status = view.locator("[data-cw-status]").first
    deadline = time.monotonic() + timeout_s
    while True:
        text = status.text_content() or ""
        if re.search(pattern, text, re.IGNORECASE):
            return text
        if time.monotonic() > deadline:
            raise AssertionError(f"status {text!r} does not match {pattern!r}")
        time.sleep(0.1)


def wait_for(predicate: Callable[[], Any], what: str, timeout_s: float = 10.0, interval_s: float = 0.1) -> Any:
    """Poll ``predicate`` until truthy; fail naming ``what`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:.0f}s waiting for {what}")
        time.sleep(interval_s)


def screenshot(target: Locator | Page, name: str) -> Path:
    """Save a PNG under ``test-artifacts/screenshots/`` (kept for the README)."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    target.screenshot(path=str(path), animations="disabled")
    return path


def wait_view(page: Page, log: PageLog, name: str, nth: int = 0, timeout_s: float = TIMEOUT_MS / 1000) -> Locator:
    """Wait for the ``nth`` ``[data-cw-view=name]``; fail at once when the page throws or logs an error of ours."""
    view = page.locator(f'[data-cw-view="{name}"]').nth(nth)
    return wait_attached(view, name, lambda: log.page_errors + log.ours(log.console_errors), timeout_s, 0.1)


def wait_attached(
    view: Locator, name: str, errors: Callable[[], list[str]], timeout_s: float, interval: float
) -> Locator:
    """Poll until ``view`` is in the page; fail at once with what ``errors()`` reports, or after ``timeout_s``."""

    def shown() -> bool:
        if view.count() > 0:
            return True
        logged = errors()
        if logged:
            raise AssertionError(f"view {name!r} not shown; the page logged: {logged}")
        return False

    wait_for(shown, f"view {name!r} to be shown", timeout_s, interval)
    return view


def open_offline(page: Page, log: PageLog, path: Path, views: list[str]) -> dict[str, Locator]:
    """Open ``path`` from file:// and wait for each of ``views`` to be drawn and styled."""
    page.goto(path.resolve().as_uri())
    found = {}
    for name in views:
        view = wait_view(page, log, name)
        assert_drawn(view)
        assert is_styled(view), f"{name}: no stylesheet rule reaches the view"
        found[name] = view
    return found


def perform(view: Locator, click: Click) -> tuple[dict[str, Any], str]:
    """Click the first uncovered target of ``click`` and wait for the view to change and say so.

    Returns the Python traits the click must have set and the status regex it matched.
    """
    for l, h in click.heads:
        selector, traits, status = click.bind(l, h)
        target = view.locator(selector).first
        try:
            target.click(trial=True, timeout=3_000)  # actionable and not covered by another element
        except PlaywrightTimeoutError:
            continue
        before = fingerprint(view)
        target.click()
        wait_changed(view, before, f"click on {selector}")
        wait_status(view, status)
        return traits, status
    raise AssertionError(f"no target of {click.selector} can be clicked (tried heads {click.heads})")


def click_through(view: Locator, name: str) -> None:
    """Every click of ``_widgets.CLICKS`` changes the view and its status says what is selected."""
    for click in CLICKS[name]:
        perform(view, click)


# --- hostile text ----------------------------------------------------------------

_INJECTION_JS = """
(flag) => ({
  pwned: Boolean(window[flag]),
  scripts: document.querySelectorAll("script").length,
  imgs: document.querySelectorAll("img").length,
  svgOnload: document.querySelectorAll("svg[onload], [onerror], [onload]").length,
  iframes: document.querySelectorAll("iframe").length,
  text: document.body.textContent,
})
"""


def injection_state(page: Page, flag: str) -> dict[str, Any]:
    """Whether a payload ran (``window[flag]``) and how many active elements the page holds."""
    return dict(page.evaluate(_INJECTION_JS, flag))


# --- exported figures ------------------------------------------------------------

#: Words of a view's controls and status that an exported figure must not hold.
CONTROL_WORDS = ("Head:", "Order:", "by size", "selected", "hover", "Hover", "SVG", "PNG")


def assert_figure_has_no_controls(page: Page, view: Locator, title: str) -> None:
    """The view's SVG export holds ``title`` and none of :data:`CONTROL_WORDS`; its PNG export is a PNG."""
    name = view.get_attribute("data-cw-view") or ""
    with page.expect_download() as info:
        view.locator('[data-cw-export="svg"]').click()
    svg = Path(info.value.path()).read_text()
    joined = " ".join(re.findall(r"<text[^>]*>([^<]*)</text>", svg))
    for word in CONTROL_WORDS:
        assert word not in joined, f"{name}: the exported figure holds control text {word!r}"
    assert title in joined, f"{name}: the figure lost its title {title!r}"
    with page.expect_download() as info:
        view.locator('[data-cw-export="png"]').click()
    assert Path(info.value.path()).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", f"{name}: the PNG export is not a PNG"
