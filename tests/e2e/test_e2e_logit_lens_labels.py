"""The logit lens's row labels stay in view while its grid scrolls (issue 56): on a long prompt at 1,000 px the view
scrolls itself to the selected last position and "before L0", "before L1", "final" stay beside the grid; after a
resize the selected column is brought back into view."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from playwright.sync_api import Locator, Page

import circuitwidgets as cw
from circuitwidgets.export import save_html

from ._pages import PageLog, open_offline, screenshot, wait_for, wait_status

N_TOKENS = 60


@pytest.fixture(scope="module")
def page_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    model = cw.load_pretrained("attn-only-2l")
    tokens = torch.randint(1, model.cfg.d_vocab, (N_TOKENS,), generator=torch.Generator().manual_seed(0))
    lens = cw.LogitLens(model, tokens, selected_pos=N_TOKENS - 1)
    return save_html([lens], tmp_path_factory.mktemp("lens") / "lens.html")


def _column_visible(lens: Locator, pos: int) -> bool:
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


def _labels_in_view(lens: Locator) -> list[str]:
    """The row labels drawn fully inside the view's box and left of the grid's scroller."""
    return list(
        lens.evaluate(
            """view => {
                const box = view.getBoundingClientRect();
                const plot = view.querySelector('.cw-scroll').getBoundingClientRect();
                return [...view.querySelectorAll('[data-cw-row-label]')]
                    .filter(t => { const r = t.getBoundingClientRect();
                                   return r.width > 0 && r.left >= box.left - 1 && r.right <= plot.left + 1; })
                    .map(t => t.textContent);
            }"""
        )
    )


def test_row_labels_stay_while_the_grid_scrolls_and_a_resize_keeps_the_selection_in_view(
    page_path: Path, page: Page, page_log: PageLog
) -> None:
    page.set_viewport_size({"width": 1000, "height": 800})
    lens = open_offline(page, page_log, page_path, ["logitlens"])["logitlens"]
    wait_status(lens, rf"pos {N_TOKENS - 1} .*\(selected\)")
    wait_for(lambda: _column_visible(lens, N_TOKENS - 1), "the grid scrolls to the selected last position")
    assert lens.locator(".cw-scroll").evaluate("p => p.scrollLeft") > 0
    assert _labels_in_view(lens) == ["before L0", "before L1", "final"]
    screenshot(lens, "logit-lens-1000")
    lens.locator(".cw-scroll").evaluate("p => { p.scrollLeft = 0; }")
    assert _labels_in_view(lens) == ["before L0", "before L1", "final"]
    page.set_viewport_size({"width": 640, "height": 800})
    wait_for(lambda: _column_visible(lens, N_TOKENS - 1), "the selected column back in view after a resize")
    assert _labels_in_view(lens) == ["before L0", "before L1", "final"]
    page.set_viewport_size({"width": 1400, "height": 800})
    wait_for(lambda: _column_visible(lens, N_TOKENS - 1), "still in view at 1,400 px")
    screenshot(lens, "logit-lens-1400")
    page_log.assert_offline_clean()
