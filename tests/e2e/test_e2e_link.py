"""Widgets linked with ``cw.link`` stay linked in a page saved with ``save_html``, offline, both ways."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from playwright.sync_api import Page

import circuitwidgets as cw

from ._pages import PageLog, open_offline, wait_status, wait_view


def _scores(top: tuple[int, int]) -> np.ndarray:
    scores = np.linspace(0.0, 0.5, 2 * 4).reshape(2, 4)
    scores[top] = 1.0
    return scores


def test_linked_head_scores_follow_each_other_in_a_saved_page(tmp_path: Path, page: Page, page_log: PageLog) -> None:
    first = cw.HeadScores.from_scores(_scores((0, 0)), name="first")
    second = cw.HeadScores.from_scores(-_scores((0, 1)), name="second")  # signed: a diverging scale
    lone = cw.HeadScores.from_scores(_scores((0, 3)), name="lone")
    cw.link(first, second)
    path = cw.save_html([first, lone, second], tmp_path / "linked.html")

    open_offline(page, page_log, path, ["headscores"])
    views = [wait_view(page, page_log, "headscores", nth=i) for i in range(3)]
    one, alone, two = views
    wait_status(one, r"^L0H0: first 1\.00 selected")
    wait_status(alone, r"^L0H3: lone 1\.00 selected")
    # each heatmap carries a colour bar with numbers
    for view in views:
        ticks = view.locator(".cw-colourbar text").all_text_contents()
        assert len(ticks) >= 2 and all(t.strip() for t in ticks), ticks
    assert "\u2212" in "".join(two.locator(".cw-colourbar text").all_text_contents())  # negative ticks: diverging

    one.locator('[data-cw-layer="1"][data-cw-head="2"] rect').first.click()
    wait_status(one, r"^L1H2: first [^;]*selected")
    wait_status(two, r"^L1H2: second [^;]*selected")
    wait_status(alone, r"^L0H3: lone")  # not linked: unmoved

    two.locator('[data-cw-layer="0"][data-cw-head="3"] rect').first.click()
    wait_status(one, r"^L0H3: first [^;]*selected")
    # hovering a cell says its value
    one.locator('[data-cw-layer="1"][data-cw-head="1"] rect').first.hover()
    value = float(np.round(_scores((0, 0))[1, 1], 2))
    wait_status(one, rf"^L1H1: first {value:.2f}$")
    page_log.assert_offline_clean()
