"""Panel: what a served Panel app shows of our widgets with no network, as the docs (hosts page) say.

Panel shows an anywidget through its ``IPyWidget`` pane (``pn.panel(widget)``),
rendered by ``ipywidgets_bokeh``, whose widget manager fetches every
third-party widget module, anywidget's front end included, from a CDN
(``IPyWidget.cdn``, unpkg by default; bokeh/ipywidgets_bokeh#110 asks for
anywidget support). With the network cut, nothing of ours draws there. What
does work offline in a Panel app is our exported page (``html_page``) in an
``<iframe srcdoc>``: the view draws and answers clicks in the page, with no
kernel. The test checks both, so the hosts page is corrected the day
ipywidgets_bokeh stops reaching for a CDN.

The server listens on 127.0.0.1 on a free port, runs from a temporary
directory in its own process group, and is always stopped.
"""

from __future__ import annotations

import re
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from playwright.sync_api import BrowserContext, Request, Route

from ._hosts import HERE, START_TIMEOUT_S, Server, _isolated_env, free_port
from ._pages import PageLog, assert_drawn, perform, watch
from ._widgets import Click

pytest.importorskip("panel", reason="the hosts extra is not installed: pip install -e '.[hosts]'")
pytest.importorskip("ipywidgets_bokeh", reason="the hosts extra is not installed: pip install -e '.[hosts]'")

APP = """
import html
import panel as pn
from _widgets import BUILDERS
from circuitwidgets.export import html_page

pn.extension("ipywidgets")
scatter = BUILDERS["eigen"]()
label = pn.pane.Str("no click yet")

def show(change):
    label.object = f"kernel saw L{scatter.selected_layer}H{scatter.selected_head}"

scatter.observe(show, names=["selected_layer", "selected_head"])
page = html.escape(html_page(scatter), quote=True)
exported = pn.pane.HTML(f'<iframe id="cw-export" srcdoc="{page}" style="width:1000px;height:700px;border:0"></iframe>')
pn.Column(pn.panel(scatter), label, exported).servable()
"""

#: Where ipywidgets_bokeh looks for anywidget's front end (the request that fails offline).
ANYWIDGET_FROM_CDN = re.compile(r"^https://(unpkg\.com|cdn\.jsdelivr\.net/npm)/anywidget@")


def local_only(context: BrowserContext) -> PageLog:
    """Record the page's errors; abort (and record) every request that is not to 127.0.0.1."""
    log = watch(context)

    def route(route: Route, request: Request) -> None:
        parts = urlsplit(request.url)
        if parts.scheme in ("data", "blob", "about") or parts.hostname == "127.0.0.1":
            route.continue_()
        else:
            log.aborted.append(request.url)
            route.abort("internetdisconnected")

    context.route("**/*", route)
    return log


@pytest.fixture(scope="module")
def panel_app(tmp_path_factory: pytest.TempPathFactory, bundle: Path) -> Iterator[str]:
    root = tmp_path_factory.mktemp("panel")
    shutil.copy(HERE / "_widgets.py", root / "_widgets.py")
    (root / "app.py").write_text(APP, encoding="utf-8")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    argv = [
        sys.executable,
        "-m",
        "panel",
        "serve",
        "app.py",
        "--address=127.0.0.1",
        f"--port={port}",
        f"--allow-websocket-origin=127.0.0.1:{port}",
        "--num-procs=1",
    ]
    server = Server("panel", argv, root, _isolated_env(root), f"{url}/app")
    try:
        server.start(timeout_s=START_TIMEOUT_S)
        yield f"{url}/app"
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)


def test_panel_app_offline_ipywidget_pane_needs_a_cdn_and_the_exported_page_works(
    panel_app: str, context: BrowserContext
) -> None:
    log = local_only(context)
    page = context.new_page()
    page.goto(panel_app, timeout=START_TIMEOUT_S * 1000)

    # The offline export in an iframe: our view draws and answers a click, no kernel, no network.
    frame = page.frame_locator("#cw-export")
    view = frame.locator('[data-cw-view="eigen"]').first
    view.wait_for(timeout=60_000)
    assert_drawn(view)
    perform(view, Click('[data-cw-head="{l}.{h}"]', {}, r"L{l}H{h} selected", ((0, 2), (0, 1), (1, 2), (1, 3))))

    # pn.panel(widget): ipywidgets_bokeh asks a CDN for anywidget, so with no network no view of ours
    # is drawn outside the iframe (the documented limitation).
    deadline_ms = 60_000
    waited = 0
    while not any(ANYWIDGET_FROM_CDN.match(u) for u in log.aborted) and waited < deadline_ms:
        page.wait_for_timeout(500)
        waited += 500
    asked = [u for u in log.aborted if ANYWIDGET_FROM_CDN.match(u)]
    assert asked, (
        "ipywidgets_bokeh no longer fetches anywidget from a CDN: pn.panel(widget) may now work offline; "
        f"update docs/hosts.md and test a click reaching the kernel (outside requests: {log.aborted})"
    )
    drawn_outside = page.evaluate(
        """() => {
          const found = [];
          const walk = (root) => {
            for (const e of root.querySelectorAll('[data-cw-view]')) found.push(e);
            for (const e of root.querySelectorAll('*')) if (e.shadowRoot) walk(e.shadowRoot);
          };
          walk(document);
          return found.length;
        }"""
    )
    assert drawn_outside == 0, "a view of ours drew through ipywidgets_bokeh offline: update docs/hosts.md"
