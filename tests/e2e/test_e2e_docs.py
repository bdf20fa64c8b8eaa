"""The documentation site works offline: every page opened from ``file://`` with the network cut.

The site is built once per session (``sphinx-build``, the first step of
``make docs``; notebook executions are cached in ``docs/_build/.executed/``, so
a rebuild with unchanged sources takes seconds). ``make docs`` runs this file
after building, with ``CW_DOCS_BUILT=1``, to reuse that build.

For every built page: every circuitwidgets view on it draws, no request
other than ``file:``/``data:``/``blob:`` is attempted, and nothing is logged as
an error. And every public name of ``circuitwidgets``, ``circuitwidgets.circuits``
and ``circuitwidgets.widgets`` (and every public member of each widget class)
has an entry in the API reference.
"""

from __future__ import annotations

import importlib
import inspect
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from playwright.sync_api import Browser

from ._pages import REPO, assert_drawn, perform, watch
from ._widgets import Click

DOCS = REPO / "docs"
HTML = DOCS / "_build" / "html"
BUILD_TIMEOUT_S = 900

#: The public modules whose ``__all__`` must each have an API entry.
PUBLIC_MODULES = ("circuitwidgets", "circuitwidgets.circuits", "circuitwidgets.widgets")


def sphinx_build(out: Path) -> subprocess.CompletedProcess[str]:
    """The build ``make docs`` runs (warnings are errors; nitpicky cross-references)."""
    argv = [sys.executable, "-m", "sphinx", "-b", "html", "-n", "-W", "--keep-going", "-q", str(DOCS), str(out)]
    return subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S, check=False)


@pytest.fixture(scope="session")
def site() -> Path:
    """The built site: built here, or by ``make docs`` just before (``CW_DOCS_BUILT=1``)."""
    if os.environ.get("CW_DOCS_BUILT") != "1":
        pytest.importorskip("sphinx", reason="the docs extra is not installed: pip install -e '.[docs]'")
        pytest.importorskip("myst_nb", reason="the docs extra is not installed: pip install -e '.[docs]'")
        started = time.monotonic()
        result = sphinx_build(HTML)
        sys.stderr.write(f"\ndocs built in {time.monotonic() - started:.0f}s\n")
        assert result.returncode == 0, f"sphinx-build failed:\n{result.stdout[-4000:]}\n{result.stderr[-6000:]}"
    assert (HTML / "index.html").is_file(), f"{HTML} holds no built site: run `make docs`"
    return HTML


def pages(site: Path) -> list[Path]:
    return sorted(p for p in site.rglob("*.html") if "_static" not in p.parts and "_sources" not in p.parts)


def test_site_has_the_pages_the_issue_asks_for(site: Path) -> None:
    names = {p.relative_to(site).as_posix() for p in pages(site)}
    expected = {
        "index.html",
        "export.html",
        "hosts.html",
        "coming-from-circuitsvis.html",
        "coming-from-transformerlens.html",
        *(f"notebooks/{nb.stem}.html" for nb in (REPO / "notebooks").glob("*.ipynb")),
        *(f"api/generated/{m}.html" for m in PUBLIC_MODULES),
    }
    assert expected <= names, f"missing pages: {sorted(expected - names)}"


def test_every_page_draws_its_widgets_offline_with_no_request_and_no_error(site: Path, browser: Browser) -> None:
    """Each page from file://, every non-file request aborted: views draw, nothing asked, nothing logged.

    One tab visits every page in turn (a context and a tab per page cost more than the pages did: this test took
    76 s that way and 38 s this way, 51 pages at load 7-11), its record cleared before each page; nothing of ours keeps state between pages
    (no storage, no cookie: every page's state is inline), and anything a page logs while the next one loads is
    counted against the next one; each page still gets its pause for late errors before the tab leaves it."""
    problems: dict[str, list[str]] = {}
    views_seen: dict[str, int] = {}
    context = browser.new_context(viewport={"width": 1280, "height": 900}, locale="en-US")
    context.set_default_timeout(30_000)
    try:
        log = watch(context, offline=True)
        page = context.new_page()
        for path in pages(site):
            name = path.relative_to(site).as_posix()
            for entries in vars(log).values():
                entries.clear()  # (this page's record only)
            page.goto(path.as_uri(), wait_until="load")
            mounts = page.locator(".cw-widget")
            found: list[str] = []
            for i in range(mounts.count()):
                mount = mounts.nth(i)
                root = mount.locator("[data-cw-view]").first
                try:
                    root.wait_for(state="attached", timeout=30_000)
                    root.scroll_into_view_if_needed()
                    desc = assert_drawn(root)
                    found.append(desc["view"])
                    # An explorer's children draw too (all its views are laid out at once).
                    inner = root.locator("[data-cw-view]")
                    for j in range(inner.count()):
                        child = inner.nth(j)
                        if child.is_visible():
                            found.append(assert_drawn(child)["view"])
                except Exception as exc:  # one message per page, all pages checked
                    problems.setdefault(name, []).append(f"widget {i} not drawn: {exc}"[:600])
            for view in found:
                views_seen[view] = views_seen.get(view, 0) + 1
            if name.startswith(("views/", "notebooks/")) and name not in ("views/index.html",) and not found:
                problems.setdefault(name, []).append("a view or notebook page shows no widget")
            page.wait_for_timeout(300)  # late errors (the views' first frames, any page's timers) before leaving
            for kind, entries in (
                ("network requests attempted", log.network()),
                ("requests aborted", log.aborted),
                ("console errors", log.console_errors),
                ("uncaught page errors", log.page_errors),
                ("dialogs", log.dialogs),
            ):
                if entries:
                    problems.setdefault(name, []).append(f"{kind}: {entries[:5]}")
    finally:
        context.close()
    assert not problems, "documentation pages misbehaved offline:\n" + "\n".join(
        f"- {page}: {'; '.join(msgs)}" for page, msgs in problems.items()
    )
    widgets = importlib.import_module("circuitwidgets.widgets")
    wanted = {getattr(widgets, n)._view.default_value for n in widgets.__all__}
    missing = sorted(wanted - set(views_seen))
    assert not missing, (
        f"views never drawn anywhere on the site: {missing}; give each a page, docs/views/NAME.md with a "
        "```{circuitwidget} block (see docs/views/eigen.md), listed in docs/views/index.md"
    )


def _ids(site: Path) -> set[str]:
    import re

    ids: set[str] = set()
    for path in (site / "api").rglob("*.html"):
        ids.update(re.findall(r'\bid="([^"]+)"', path.read_text(encoding="utf-8")))
    return ids


def _public_members(cls: type) -> list[str]:
    """A widget's own public API: its traits and methods (not those every ipywidget has)."""
    import ipywidgets

    inherited = set(dir(ipywidgets.DOMWidget))
    return [n for n in vars(cls) if not n.startswith("_") and n not in inherited]


def test_every_public_name_has_an_api_entry(site: Path) -> None:
    ids = _ids(site)
    missing = []
    for module_name in PUBLIC_MODULES:
        module = importlib.import_module(module_name)
        for name in module.__all__:
            if f"{module_name}.{name}" not in ids:
                missing.append(f"{module_name}.{name}")
            obj = getattr(module, name)
            if module_name == "circuitwidgets" and inspect.isclass(obj) and getattr(obj, "_view", None) is not None:
                missing += [
                    f"circuitwidgets.{name}.{member}"
                    for member in _public_members(obj)
                    if f"circuitwidgets.{name}.{member}" not in ids
                ]
    assert not missing, f"public names with no entry in the API reference: {missing}"


def test_api_entries_carry_the_docstrings(site: Path) -> None:
    """The reference is generated from the docstrings, not just the names."""
    text = (site / "api" / "generated" / "circuitwidgets.circuits.html").read_text(encoding="utf-8")
    import circuitwidgets.circuits as circuits

    first_line = inspect.getdoc(circuits.composition_scores).splitlines()[0]
    words = [w for w in first_line.split() if w.isalpha()][:4]
    assert all(w in text for w in words), f"the docstring of composition_scores is not on its page: {first_line!r}"


def test_a_view_on_a_docs_page_answers_a_click_offline(site: Path, browser: Browser) -> None:
    """Live, not a picture: a click on the eigenvalue scatter changes the view, with no kernel."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    try:
        log = watch(context, offline=True)
        page = context.new_page()
        page.goto((site / "views" / "eigen.html").as_uri())
        view = page.locator('[data-cw-view="eigen"]').first
        assert_drawn(view)
        # The page's scatter opens on the strongest induction head (L1H1): click another one.
        click = Click('[data-cw-head="{l}.{h}"]', {}, r"L{l}H{h} selected", ((0, 2), (0, 1), (1, 2), (1, 3)))
        perform(view, click)
        assert not log.network() and not log.page_errors and not log.console_errors
    finally:
        context.close()


def python_snippets() -> list[tuple[str, str]]:
    """Every ```python block of the docs' Markdown pages (the ``circuitwidget`` blocks run in the build)."""
    import re

    found = []
    for path in sorted(DOCS.rglob("*.md")):
        if "_build" in path.parts or path.name == "README.md":
            continue
        text = path.read_text(encoding="utf-8")
        for i, match in enumerate(re.finditer(r"(<!-- docs: not run -->\s*)?```python\n(.*?)```", text, re.DOTALL)):
            if not match.group(1):
                found.append((f"{path.relative_to(DOCS).as_posix()}#{i}", match.group(2)))
    return found


@pytest.mark.parametrize(("where", "code"), python_snippets(), ids=[w for w, _ in python_snippets()])
def test_docs_python_snippets_run(where: str, code: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The guides' code runs as written (``display`` is the notebook's; here it only collects)."""
    if "transformer_lens" in code:
        pytest.importorskip("transformer_lens")
    if "panel" in code:
        pytest.importorskip("panel")
    monkeypatch.chdir(tmp_path)
    shown: list[object] = []
    exec(compile(code, where, "exec"), {"__name__": "__docs__", "display": lambda *objs: shown.extend(objs)})
