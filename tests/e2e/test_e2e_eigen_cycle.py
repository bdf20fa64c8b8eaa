"""Heads drawn on one point of the eigenvalue scatter are each reachable: clicking again cycles through them."""

from __future__ import annotations

import re
from pathlib import Path

from playwright.sync_api import Page

import circuitwidgets as cw

from ._pages import PageLog, open_offline, wait_status, wait_view


def test_clicking_a_point_shared_by_three_induction_heads_cycles_through_them(
    tmp_path: Path, page: Page, page_log: PageLog
) -> None:
    # attn-only-2l-12h: L1H5, L1H7 and L1H9 all score (1.00, 1.00) and are drawn on one spot
    path = cw.save_html(cw.EigenScatter(cw.load_pretrained("attn-only-2l-12h")), tmp_path / "eigen.html")
    open_offline(page, page_log, path, ["eigen"])
    view = wait_view(page, page_log, "eigen")
    point = view.locator('[data-cw-head="1.5"] circle.cw-mark').first
    box = point.bounding_box()
    assert box is not None
    x, y = box["x"] + box["width"] / 2, box["y"] + box["height"] / 2
    seen = []
    for _ in range(4):
        page.mouse.click(x, y)
        page.wait_for_timeout(150)
        status = view.locator(".cw-status").first.text_content() or ""
        seen.append(re.match(r"L(\d+)H(\d+)", status).group(0))  # type: ignore[union-attr]
    assert sorted(seen[:3]) == ["L1H5", "L1H7", "L1H9"] and seen[3] == seen[0], seen
    wait_status(view, r"selected")
