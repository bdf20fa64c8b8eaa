"""Fixtures of the real-browser suite: Debian chromium via Playwright, a Jupyter server, built widgets.

Every test here is marked ``e2e``. Run them alone with ``pytest tests/e2e`` or
leave them out with ``pytest -m "not e2e"``. Screenshots land in
``test-artifacts/screenshots/``; a failing test also saves the page it was
looking at under ``test-artifacts/failures/``.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from contextlib import suppress
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, BrowserContext, Page, sync_playwright

from ._hosts import JupyterServer, jupyter_server
from ._pages import REPO, TIMEOUT_MS, PageLog, watch
from .chromium import CHROMIUM, CHROMIUM_ARGS

FAILURES = REPO / "test-artifacts" / "failures"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.e2e)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    if report.when == "call" and report.failed:
        for name in ("page", "lab", "views", "notebook7", "marimo_page"):
            page = item.funcargs.get(name) if hasattr(item, "funcargs") else None
            page = getattr(page, "page", page)
            if isinstance(page, Page) and not page.is_closed():
                FAILURES.mkdir(parents=True, exist_ok=True)
                with suppress(Exception):  # the page may be gone; the report matters more
                    page.screenshot(path=str(FAILURES / f"{item.name}.png"), full_page=True, timeout=10_000)
    return report


@pytest.fixture(scope="session")
def bundle() -> Path:
    """The built bundle the widgets load, rebuilt first when ``js/src`` is newer (as ``make setup`` does)."""
    from circuitwidgets.widgets.core.base import BUNDLE_PATH

    shutil.rmtree(FAILURES, ignore_errors=True)  # screenshots of the previous run's failures
    src = REPO / "js" / "src"
    # Only in a source checkout whose package is the one under test (not a patched copy).
    if src.is_dir() and REPO in BUNDLE_PATH.parents:
        built_at = BUNDLE_PATH.stat().st_mtime if BUNDLE_PATH.is_file() else 0.0
        if any(p.stat().st_mtime > built_at for p in src.rglob("*.ts")):
            if not (REPO / "js" / "node_modules").is_dir():
                pytest.fail("the bundle is missing or older than js/src: run `make setup`")
            result = subprocess.run(
                ["npm", "--prefix", "js", "run", "build"], cwd=REPO, capture_output=True, text=True, timeout=120
            )
            if result.returncode != 0:
                pytest.fail(f"`npm --prefix js run build` failed:\n{result.stdout[-2000:]}{result.stderr[-2000:]}")
    if not BUNDLE_PATH.is_file():
        pytest.fail(f"{BUNDLE_PATH} is missing: run `npm --prefix js run build` (or `make setup`)")
    return BUNDLE_PATH


@pytest.fixture(scope="session")
def browser(bundle: Path) -> Iterator[Browser]:
    """Headless Debian chromium (never a Playwright download)."""
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing: `apt-get install -y chromium` (`make setup` does it)")
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, timeout=60_000)
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture
def context(browser: Browser) -> Iterator[BrowserContext]:
    context = browser.new_context(viewport={"width": 1280, "height": 900}, device_scale_factor=1, locale="en-US")
    context.set_default_timeout(TIMEOUT_MS)
    try:
        yield context
    finally:
        context.close()


@pytest.fixture
def offline_page(context: BrowserContext) -> tuple[Page, PageLog]:
    """A page where every request that is not ``file:``/``data:``/``blob:`` is aborted and recorded."""
    log = watch(context, offline=True)
    page = context.new_page()
    return page, log


@pytest.fixture
def page(offline_page: tuple[Page, PageLog]) -> Page:
    return offline_page[0]


@pytest.fixture
def page_log(offline_page: tuple[Page, PageLog]) -> PageLog:
    return offline_page[1]


@pytest.fixture(scope="session")
def jupyter(tmp_path_factory: pytest.TempPathFactory, bundle: Path) -> Iterator[JupyterServer]:
    """One Jupyter server (JupyterLab 4 and Notebook 7) for the session, always stopped."""
    root = tmp_path_factory.mktemp("jupyter")
    with jupyter_server(root) as server:
        yield server
    shutil.rmtree(root, ignore_errors=True)


class Built:
    """Widgets built once per session in this process, by view name."""

    def __init__(self) -> None:
        self.cache: dict[str, Any] = {}

    def __call__(self, view: str) -> Any:
        from ._widgets import BUILDERS, widget_exists

        if not widget_exists(view):
            pytest.skip("widget not yet built")
        if view not in self.cache:
            self.cache[view] = BUILDERS[view]()
        return self.cache[view]


@pytest.fixture(scope="session")
def built() -> Built:
    """``built("eigen")``: the widget of a view, built once per session (skips a widget not yet written)."""
    return Built()


@pytest.fixture(scope="session")
def report_12h(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The report of ``attn-only-2l-12h`` as ``circuitwidgets report`` writes it (with its card's training charts),
    written once for every browser test of that page (layout, links, causal views): a page is only read there."""
    import circuitwidgets as cw
    from circuitwidgets.report import write_report

    model = cw.load_pretrained("attn-only-2l-12h")
    path = tmp_path_factory.mktemp("report-12h") / "report.html"
    return write_report(model, path, card=cw.pretrained_card("attn-only-2l-12h"))
