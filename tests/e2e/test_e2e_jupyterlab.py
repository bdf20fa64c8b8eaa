"""JupyterLab 4, live: each view draws in a notebook, clicks reach the kernel, the kernel moves the view.

One notebook (one kernel) serves the whole module, as a user's session would:
each test types a cell that builds and shows a widget, clicks in its view,
then runs a cell that prints the Python traits.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser

from ._hostile import assert_tokens_are_text
from ._hosts import JupyterServer, NotebookPage
from ._pages import (
    TIMEOUT_MS,
    PageLog,
    assert_drawn,
    fingerprint,
    is_styled,
    perform,
    screenshot,
    wait_changed,
    wait_status,
    watch,
)
from ._widgets import CLICKS, SETS, VIEWS, widget_exists


@pytest.fixture(scope="module")
def lab(jupyter: JupyterServer, browser: Browser) -> Iterator[NotebookPage]:
    context = browser.new_context(viewport={"width": 1400, "height": 1000}, device_scale_factor=1)
    context.set_default_timeout(TIMEOUT_MS)
    try:
        log = watch(context)
        notebook = NotebookPage(context.new_page(), log)
        path = jupyter.write_notebook("lab.ipynb")
        jupyter.start_kernel(path)
        notebook.open(jupyter.lab_url(path))
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


def test_jupyterlab_session_reached_no_host_but_its_server_and_raised_no_error(lab: NotebookPage) -> None:
    """Runs last in this module: over all the views shown, nothing left 127.0.0.1 and no script error surfaced."""
    log: PageLog = lab.log
    assert not log.network(allowed_hosts=("127.0.0.1",)), log.network(allowed_hosts=("127.0.0.1",))
    assert not log.page_errors, log.page_errors
    assert not log.ours(log.console_errors), log.ours(log.console_errors)
    assert not log.dialogs, log.dialogs
