"""The superposition view in a real browser: drawn, scrubbed and slid offline in an exported page
(no kernel, no network), and a slider retraining the model in a live JupyterLab kernel.

The widgets are small (3 × 2 grid, 600 steps, 8 snapshots) so the kernel trains them in a few seconds.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Locator, Page

import circuitwidgets
from circuitwidgets.superposition.phase import phase_diagram
from circuitwidgets.widgets import Superposition

from ._hosts import JupyterServer
from ._notebook import NotebookPage
from ._pages import TIMEOUT_MS, PageLog, assert_drawn, open_offline, screenshot, wait_for, wait_status, watch

SMALL = "probabilities=[1.0, 0.1, 0.01], decays=[1.0, 0.9], steps=600, snapshots=8"


def _arrows(view: Locator) -> list[tuple[float, float]]:
    return view.locator(".cw-sp-geometry [data-cw-feature]").evaluate_all(  # type: ignore[no-any-return]
        "els => els.map(e => [Number(e.dataset.cwX), Number(e.dataset.cwY)])"
    )


def _slide(view: Locator, which: str, position: int, event: str) -> None:
    view.locator(f'input[data-cw-slider="{which}"]').evaluate(
        "(input, [v, e]) => { input.value = String(v); input.dispatchEvent(new Event(e, { bubbles: true })); }",
        [position, event],
    )


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    diagram = phase_diagram([1.0, 0.1, 0.01], [0.3, 1.0, 3.0], steps=600)
    widget = Superposition(probabilities=[1.0, 0.1, 0.01], decays=[1.0, 0.9], steps=600, snapshots=8, phase=diagram)
    other = Superposition(probabilities=[0.01], decays=[1.0], steps=100, snapshots=2, phase=False)
    circuitwidgets.link(widget, other)  # by feature index
    path: Path = circuitwidgets.save_html([widget, other], tmp_path_factory.mktemp("sp") / "superposition.html")
    return path


def test_the_exported_view_draws_scrubs_and_slides_over_its_grid_with_no_kernel(
    exported: Path, page: Page, page_log: PageLog
) -> None:
    view = open_offline(page, page_log, exported, ["superposition"])["superposition"]
    linked = page.locator('[data-cw-view="superposition"]').nth(1)
    assert_drawn(linked)
    assert view.locator(".cw-sp-chart").count() == 4  # geometry, WᵀW + norms, dimensionality, phases
    assert len(_arrows(view)) == 5 and view.locator(".cw-norm-bar").count() == 5
    assert view.locator(".cw-sticky").count() == 6 and view.locator(".cw-phase").count() == 9
    screenshot(view, "superposition-offline")
    last = _arrows(view)
    assert view.get_attribute("data-cw-step") == "600"

    _slide(view, "step", 0, "input")  # the scrubber replays training: step 0 is the random start
    wait_for(lambda: view.get_attribute("data-cw-step") == "0", "scrubbed to step 0")
    assert _arrows(view) != last

    _slide(view, "probability", 1000, "change")  # the sparsest grid value: a pentagon-like spread
    wait_status(view, r"1 − S = 0\.0100.*exported page: the precomputed model nearest the sliders")
    assert view.get_attribute("data-cw-source") == "grid"
    _slide(view, "step", 7, "input")
    wait_for(lambda: view.get_attribute("data-cw-step") == "600", "scrubbed to the end")
    assert view.locator(".cw-sp-geometry [data-cw-feature]").count() == 5
    screenshot(view, "superposition-offline-sparse")

    view.locator('.cw-sp-gram [data-cw-feature="2"] .cw-norm-bar').click()
    wait_status(view, r"feature 2: ‖W‖")
    wait_status(linked, r"feature 2: ‖W‖")  # the linked view follows the feature, with no kernel
    page_log.assert_offline_clean()  # no request left the page


def _gram_ticks(view: Locator) -> list[str]:
    return view.locator(".cw-gram-bar .cw-colourbar-tick").all_text_contents()


def test_colour_bars_stay_fixed_across_the_scrubber_and_labels_never_overlap(
    tmp_path: Path, page: Page, page_log: PageLog
) -> None:
    # 20 features in 5 dimensions (a projection: the labels crowd), sparse, 4 snapshots
    widget = Superposition(20, 5, probabilities=[0.01], decays=[1.0], steps=300, snapshots=4, phase=False)
    path = circuitwidgets.save_html([widget], tmp_path / "sp20.html")
    for width in (1400, 1000):
        page.set_viewport_size({"width": width, "height": 1000})
        view = open_offline(page, page_log, path, ["superposition"])["superposition"]
        assert view.locator(".cw-gram-bar").count() == 1 and view.locator(".cw-superposition-bar").count() == 1
        assert view.locator(".cw-arrow-legend").count() == 1
        last = _gram_ticks(view)
        assert len(last) >= 2
        for step in (0, 1, 2):
            _slide(view, "step", step, "input")
            wait_for(
                lambda s=step, v=view: v.get_attribute("data-cw-step") == str(widget.snapshot_steps[s]), "scrubbed"
            )
            assert _gram_ticks(view) == last  # (the scale spans the whole run)
            dead = int((widget.grid_norms[0, 0, step] <= 0.5).sum())  # features not represented at this snapshot
            assert view.locator(".cw-sp-gram .cw-norm-bar.cw-dead").count() == dead
        boxes = view.locator(".cw-feature-label").evaluate_all(
            "ts => ts.map(t => { const r = t.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; })"
        )
        clashes = [
            (a, b)
            for i, a in enumerate(boxes)
            for b in boxes[i + 1 :]
            if a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]
        ]
        assert boxes and not clashes, clashes
        screenshot(view, f"superposition-20-in-5-{width}")
    page_log.assert_offline_clean()


BUILD = f"""\
import circuitwidgets as cw
from IPython.display import display
w = cw.Superposition({SMALL}, phase=False)
display(w)"""


@pytest.fixture(scope="module")
def live(jupyter: JupyterServer, browser: Browser) -> Iterator[tuple[NotebookPage, Locator]]:
    context = browser.new_context(viewport={"width": 1400, "height": 1000}, device_scale_factor=1)
    context.set_default_timeout(TIMEOUT_MS)
    try:
        lab = NotebookPage(context.new_page(), watch(context))
        lab.open(jupyter, jupyter.write_notebook("superposition.ipynb"))
        index = lab.cells.count() - 1
        lab.run(BUILD, timeout_s=180)
        view = lab.cells.nth(index).locator('.jp-OutputArea-output [data-cw-view="superposition"]')
        view.wait_for(timeout=60_000)
        assert_drawn(view)
        yield lab, view
    finally:
        context.close()


def test_a_slider_retrains_the_model_in_the_kernel_and_the_view_redraws_it(live: tuple[NotebookPage, Locator]) -> None:
    lab, view = live
    before = _arrows(view)
    started = time.monotonic()
    _slide(view, "probability", 750, "change")  # 1 − S = 0.0316: not on the grid, so the kernel trains it
    wait_for(lambda: view.get_attribute("data-cw-live-probability") == "0.0316", "the retrained model arrived", 120)
    seconds = time.monotonic() - started
    assert view.get_attribute("data-cw-source") == "live"
    assert _arrows(view) != before
    wait_status(view, r"1 − S = 0\.0316, decay 1\.00, step 600")
    assert lab.value("[w.live_probability, w.training, int(w.live_W.shape[2])]") == [0.0316, "", 8]
    screenshot(view, "superposition-live")
    print(f"slider → retrained → redrawn in {seconds:.2f} s (600-step model)")


#: ``model shown: 1 − S = 0.158, decay 1.00, step 600: 3 of 5 features represented, loss 1.23e-02``
SHOWN = re.compile(
    r"model shown: 1 − S = ([\d.]+), decay ([\d.]+), step (\d+): (\d+) of \d+ features represented, loss ([\d.]+e[+-]?\d+)"
)


def test_a_live_retrain_never_shows_the_new_sparsity_with_the_old_models_statistics(
    live: tuple[NotebookPage, Locator],
) -> None:
    """Every text the status line takes during a retrain is recorded in the page (a MutationObserver, so no
    intermediate frame is missed between polls); each model named must always come with the same statistics, and
    the retrained one with the statistics the kernel's model has once it arrived."""
    lab, view = live
    view.locator("[data-cw-status]").first.evaluate(
        """status => {
            window.__cwStatuses = [status.textContent];
            new MutationObserver(() => window.__cwStatuses.push(status.textContent))
                .observe(status, { childList: true, characterData: true, subtree: true });
        }"""
    )
    _slide(view, "probability", 400, "change")  # 1 − S = 0.158: off the grid, so the kernel retrains
    wait_for(lambda: view.get_attribute("data-cw-live-probability") == "0.158", "the retrained model arrived", 120)
    final = wait_status(view, r"1 − S = 0\.158\d*, decay 1\.00, step 600: ")
    texts: list[str] = view.locator("[data-cw-status]").first.evaluate("() => window.__cwStatuses")
    seen: dict[tuple[str, str, str], set[tuple[str, str]]] = {}
    for text in texts:
        shown = SHOWN.search(text)
        assert shown, text
        seen.setdefault(shown.group(1, 2, 3), set()).add(shown.group(4, 5))
    mixed = {model: stats for model, stats in seen.items() if len(stats) > 1}
    assert not mixed, f"one model named with two sets of statistics: {mixed}"
    retrained = SHOWN.search(final)
    assert retrained and seen[retrained.group(1, 2, 3)] == {retrained.group(4, 5)}
    assert len(texts) >= 2, texts  # (the retrain was watched: the status changed)
    # ... and those statistics are the kernel's retrained model's at its last snapshot
    loss, kept = lab.value("[float(w.live_loss[0, 0, -1]), int((w.live_norms[0, 0, -1] > 0.5).sum())]")
    assert int(retrained.group(4)) == kept and float(retrained.group(5)) == pytest.approx(loss, rel=0.01)
