"""The report is one selection, offline: a position clicked in the (layer, position) map or the logit lens moves the
attention view and the other, the lens scrolls it into view; a head clicked in one view moves every head view, and
the composition map's outlined edge follows the head (cleared when it no longer ends there)."""

from __future__ import annotations

from pathlib import Path

import pytest
from playwright.sync_api import Locator, Page

from ._pages import PageLog, open_offline, wait_for, wait_status, wait_view

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def report(report_12h: Path) -> Path:
    return report_12h


def _lens_column_visible(lens: Locator, pos: int) -> bool:
    """Whether the lens's column ``pos`` lies within its scrolled viewport."""
    return bool(
        lens.evaluate(
            """(view, pos) => {
                const plot = view.querySelector('.cw-scroll');
                const cell = view.querySelector(`[data-cw-pos="${pos}"] rect`);
                if (!plot || !cell) return false;
                const a = plot.getBoundingClientRect(), b = cell.getBoundingClientRect();
                return b.left >= a.left - 1 && b.right <= a.right + 1;
            }""",
            pos,
        )
    )


def test_a_position_click_moves_the_attention_view_and_the_lens_which_scrolls_to_it(
    report: Path, page: Page, page_log: PageLog
) -> None:
    views = open_offline(page, page_log, report, ["attention", "logitlens"])
    attention, lens = views["attention"], views["logitlens"]
    positions = wait_view(page, page_log, "patchingmap", nth=1)
    # every view of the page's prompt starts on its last token
    wait_status(attention, r"destination 39 ")
    wait_status(lens, r"pos 39 .*\(selected\)")
    wait_status(positions, r"pos 39 ")
    assert _lens_column_visible(lens, 39)
    # a click on (L1, position 20) of the map: the attention view's destination and the lens's column follow
    positions.locator('[data-cw-layer="1"][data-cw-col="20"] rect').first.click()
    wait_status(positions, r"^L1 · pos 20 ")
    wait_status(attention, r"destination 20 ")
    wait_status(lens, r"pos 20 .*\(selected\)")
    wait_for(lambda: _lens_column_visible(lens, 20), "the lens scrolls position 20 into view")
    # a click in the lens moves the other two
    lens.locator('[data-cw-row="2"][data-cw-pos="3"] rect').first.click()
    wait_status(attention, r"destination 3 ")
    wait_status(positions, r"pos 3 ")
    wait_for(lambda: _lens_column_visible(lens, 3), "the lens keeps its clicked column in view")
    page_log.assert_offline_clean()


def test_a_head_click_moves_every_head_view_and_the_composition_edge_follows(
    report: Path, page: Page, page_log: PageLog
) -> None:
    names = ["eigen", "composition", "attention", "headscores", "patchingmap", "logitattribution"]
    views = open_offline(page, page_log, report, names)
    composition = views["composition"]
    wait_status(composition, r"^Edge L0H11 → L1H5 .*selected; L1H5 selected")
    views["patchingmap"].locator('[data-cw-layer="1"][data-cw-col="7"] rect').first.click()
    wait_status(composition, r"^L1H7 selected$")  # the edge into L1H5 is no longer outlined
    wait_status(views["eigen"], r"^L1H7 selected")
    wait_status(views["attention"], r"^Layer 1, head 7 ")
    wait_status(views["headscores"], r"^L1H7: ")
    wait_status(views["logitattribution"], r"^L1H7: ")
    wait_status(wait_view(page, page_log, "patchingmap", nth=2), r"^L1H7: ")  # the path-patching map
    # a head chosen in the detector heatmaps moves the others too, the head-patching map included
    views["headscores"].locator('[data-cw-layer="1"][data-cw-head="9"]').first.click()
    wait_status(views["patchingmap"], r"^L1H9: ")
    wait_status(composition, r"^L1H9 selected$")
    page_log.assert_offline_clean()


def test_the_attention_thumbnails_are_painted_without_scrolling_in_a_full_page_capture(
    report: Path, page: Page, page_log: PageLog
) -> None:
    import io

    from PIL import Image

    page.set_viewport_size({"width": 1000, "height": 700})
    attention = open_offline(page, page_log, report, ["attention"])["attention"]
    thumbs = attention.locator(".cw-thumb")
    n = thumbs.count()
    assert n == 24  # 2 layers × 12 heads, most of them below the fold of a 700 px window
    wait_for(
        lambda: attention.evaluate("v => [...v.querySelectorAll('.cw-thumb')].every(t => t.dataset.cwPainted === '1')"),
        "every thumbnail painted with no scrolling",
    )
    assert page.evaluate("window.scrollY") == 0
    shot = Image.open(io.BytesIO(page.screenshot(full_page=True))).convert("L")
    box = thumbs.nth(n - 1).evaluate(
        "t => { const r = t.getBoundingClientRect(); return [r.left, r.top + window.scrollY, r.right, r.bottom + window.scrollY]; }"
    )
    assert box[1] > 700, "the last thumbnail should start below the first screen"
    left, top, right, bottom = (float(v) for v in box)
    low, high = shot.crop((left, top, right, bottom)).getextrema()
    assert isinstance(low, int) and isinstance(high, int)
    assert high - low > 40, f"the last thumbnail is blank in the full-page capture ({low}..{high})"
    page_log.assert_offline_clean()


def test_heads_on_one_point_of_the_eigenvalue_scatter_are_each_reachable_by_their_label(
    report: Path, page: Page, page_log: PageLog
) -> None:
    eigen = open_offline(page, page_log, report, ["eigen"])["eigen"]
    wait_status(eigen, r"^L1H5 selected")
    points = eigen.evaluate(
        "v => Object.fromEntries(['1.5', '1.7', '1.9'].map(id => { const g = v.querySelector(`[data-cw-head='${id}']`);"
        " return [id, [Number(g.dataset.cwX), Number(g.dataset.cwY)]]; }))"
    )
    xs, ys = zip(*points.values(), strict=True)
    assert max(xs) - min(xs) < 8 and max(ys) - min(ys) < 8, points  # the three induction heads overlap
    for head in (9, 7, 5):
        eigen.locator(f'[data-cw-label-head="1.{head}"]').first.click()
        wait_status(eigen, rf"^L1H{head} selected")
    page_log.assert_offline_clean()
