"""Voilà: a notebook served as a dashboard shows our views, and a click reaches a kernel observer.

Voilà runs the notebook in a kernel and serves its outputs; it loads the
anywidget front end from the installed JupyterLab extension (nothing from a
CDN). The server listens on 127.0.0.1 on a free port, runs from a temporary
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
from ._pages import PageLog, assert_drawn, perform, wait_for, wait_view, watch
from ._widgets import CLICKS

pytest.importorskip("voila", reason="the hosts extra is not installed: pip install -e '.[hosts]'")

#: The dashboard: a scatter, and a label that only a kernel observer of the scatter's selection writes.
DASHBOARD = [
    "import ipywidgets\nfrom _widgets import BUILDERS\nscatter = BUILDERS['eigen']()\nlabel = ipywidgets.Label('no click yet')",
    "def show(change):\n"
    "    label.value = f'kernel saw L{scatter.selected_layer}H{scatter.selected_head}'\n"
    "scatter.observe(show, names=['selected_layer', 'selected_head'])",
    "display(scatter, label)",
]


#: What Voila's lab template (``voila/templates/lab/index.html.j2``) itself loads from a CDN.
VOILA_TEMPLATE_CDN = re.compile(
    r"^https://cdn\.jsdelivr\.net/npm/@fortawesome/fontawesome-free@[^/]+/css/[\w.-]+\.css$"
)


@pytest.fixture(scope="module")
def voila(tmp_path_factory: pytest.TempPathFactory, bundle: Path) -> Iterator[str]:
    """A Voilà server for one notebook; yields the dashboard's URL."""
    import nbformat

    root = tmp_path_factory.mktemp("voila")
    shutil.copy(HERE / "_widgets.py", root / "_widgets.py")
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(src) for src in DASHBOARD]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}
    nbformat.write(nb, root / "dashboard.ipynb")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    argv = [
        sys.executable,
        "-m",
        "voila",
        "dashboard.ipynb",
        "--no-browser",
        f"--port={port}",
        "--Voila.ip=127.0.0.1",
        "--VoilaConfiguration.show_tracebacks=True",
        "--MappingKernelManager.cull_idle_timeout=600",
    ]
    server = Server("voila", argv, root, _isolated_env(root), f"{url}/voila/static/")
    try:
        server.start(timeout_s=START_TIMEOUT_S)
        yield url
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)


def local_only(context: BrowserContext) -> PageLog:
    """Record the page's errors; abort (and record) every request that is not to 127.0.0.1."""
    log = watch(context)

    def route(route: Route, request: Request) -> None:
        parts = urlsplit(request.url)
        if parts.scheme in ("data", "blob") or parts.hostname == "127.0.0.1":
            route.continue_()
        else:
            log.aborted.append(request.url)
            route.abort("internetdisconnected")

    context.route("**/*", route)
    return log


def test_voila_dashboard_draws_our_view_and_a_click_reaches_the_kernel(voila: str, context: BrowserContext) -> None:
    log = local_only(context)
    page = context.new_page()
    page.goto(voila, timeout=START_TIMEOUT_S * 1000)
    view = wait_view(page, log, "eigen", timeout_s=START_TIMEOUT_S)
    assert_drawn(view)
    label = page.locator(".widget-label", has_text=re.compile("no click yet|kernel saw")).first
    label.wait_for(timeout=30_000)
    assert (label.text_content() or "").strip() == "no click yet"

    traits, _ = perform(view, CLICKS["eigen"][0])  # a head that is not selected yet
    layer, head = traits["selected_layer"], traits["selected_head"]
    wait_for(
        lambda: (label.text_content() or "").strip() == f"kernel saw L{layer}H{head}",
        f"the kernel observer to write L{layer}H{head} (label says {label.text_content()!r})",
        timeout_s=30,
    )
    # Voila's own lab template links Font Awesome from a CDN (icons of its UI); nothing else may leave.
    outside = [url for url in log.network(allowed_hosts=("127.0.0.1",)) if not VOILA_TEMPLATE_CDN.match(url)]
    assert not outside, f"the dashboard asked for the network: {outside}"
    assert not log.page_errors, log.page_errors
    assert not log.ours(log.console_errors), log.ours(log.console_errors)
