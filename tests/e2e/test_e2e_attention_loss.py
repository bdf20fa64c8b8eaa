"""The attention view's loss strip in a page saved with ``save_html`` (offline, no kernel).

Choosing "Loss" redraws the strip beside the pattern on the loss's scale (the
worst-predicted position darkest, the last position blank), the tokens shade by it,
and hovering a token says its loss: the kernel's number. A batch shows the chosen
prompt's loss. The exported figure carries the strip's legend and no controls.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from playwright.sync_api import Locator, Page

import circuitwidgets as cw

from ._pages import PageLog, open_offline, wait_for, wait_view

TEXT = "def add(self, other):\n    return self.value + other.value"
PROMPTS = ["x = 1\ny = x + 1", "The cat sat on the mat."]


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    model = cw.load_pretrained("gelu-2l")
    one = cw.AttentionPatterns(model, TEXT, selected_layer=1)
    batch = cw.AttentionPatterns(model, PROMPTS, strip="loss")
    path = cw.save_html([one, batch], tmp_path_factory.mktemp("loss") / "loss.html")
    return {"path": path, "one": one, "batch": batch}


def _strip_pixels(view: Locator, n: int) -> list[list[int]]:
    """The RGBA at the middle of each of the strip's ``n`` rows (the strip: 8 px right of the pattern, 12 px wide)."""
    return view.locator(".cw-main canvas").evaluate(
        """(canvas, n) => {
            const dpr = window.devicePixelRatio || 1;
            const width = canvas.width / dpr;
            const size = width - 86 - (8 + 12 + 4);  // (layout.ts: LEFT, and STRIP_GAP + STRIP_W + 4 on the right)
            const x = 86 + size + 8 + 6;
            const ctx = canvas.getContext("2d");
            return [...Array(n).keys()].map((i) => [...ctx.getImageData(Math.floor(x * dpr), Math.floor((62 + (i + 0.5) * size / n) * dpr), 1, 1).data]);
        }""",
        n,
    )


def _hover_loss(view: Locator, i: int) -> float:
    view.locator(f'[data-cw-token="{i}"]').hover()
    text = wait_for(
        lambda: re.search(r"loss predicting “[^”]*”: ([\d.]+) nats", view.locator(".cw-hover").inner_text()),
        f"token {i}'s loss",
    )
    return float(text.group(1))


def test_choosing_the_loss_redraws_the_strip_and_hover_reads_the_kernels_number(
    saved: dict[str, Any], page: Page, page_log: PageLog
) -> None:
    view = open_offline(page, page_log, saved["path"], ["attention"])["attention"]
    loss = saved["one"].per_token_loss
    n = len(loss)
    before = _strip_pixels(view, n)
    view.locator('button[data-value="loss"]').click()
    wait_for(
        lambda: "loss (nats) predicting the next token" in view.locator(".cw-legend").inner_text(), "the loss legend"
    )
    after = _strip_pixels(view, n)
    assert after != before, "the strip did not redraw"
    worst = int(np.nanargmax(loss))
    # the worst-predicted position is the scale's end, ColorBrewer Oranges' darkest #7f2704; the last has no loss
    assert all(abs(a - b) <= 3 for a, b in zip(after[worst][:3], (0x7F, 0x27, 0x04), strict=True)), after[worst]
    assert after[-1][:3] == [244, 244, 244], "the last position has no next token: blank"
    greens = [p for p in after[:-1] if p[1] > p[0]]  # Oranges has red > green everywhere
    assert not greens, f"strip rows not on the loss's scale: {greens[:3]}"
    # the tokens follow the strip; hover says each token's loss, the kernel's number to the 3 decimals shown
    view.locator('button[data-value="strip"]').click()
    assert view.locator('button[data-value="strip"]').inner_text() == "Loss"
    wait_for(
        lambda: view.locator(f'[data-cw-token="{worst}"]').evaluate("e => e.style.backgroundColor") != "",
        "token shading",
    )
    for i in (1, worst, n // 2):
        assert _hover_loss(view, i) == pytest.approx(float(loss[i]), abs=5e-4 + 1e-6), i
    view.locator(f'[data-cw-token="{n - 1}"]').hover()
    wait_for(lambda: "(last token: no next token)" in view.locator(".cw-hover").inner_text(), "the last token's words")
    page_log.assert_offline_clean()


def test_a_batch_shows_the_chosen_prompts_loss(saved: dict[str, Any], page: Page, page_log: PageLog) -> None:
    open_offline(page, page_log, saved["path"], ["attention"])
    view = wait_view(page, page_log, "attention", nth=1)
    batch = saved["batch"]
    assert batch.per_token_loss is not None
    assert view.locator('button[data-value="loss"]').get_attribute("aria-pressed") == "true"
    assert _hover_loss(view, 2) == pytest.approx(float(batch.per_token_loss[0, 2]), abs=5e-4 + 1e-6)
    view.locator('select[data-cw-control="prompt"]').select_option("1")
    wait_for(lambda: view.locator("[data-cw-token]").count() == batch.prompt_lengths[1], "the second prompt's tokens")
    assert _hover_loss(view, 2) == pytest.approx(float(batch.per_token_loss[1, 2]), abs=5e-4 + 1e-6)
    page_log.assert_offline_clean()


def test_the_exported_figure_keeps_the_loss_legend_and_no_controls(
    saved: dict[str, Any], page: Page, page_log: PageLog
) -> None:
    view = open_offline(page, page_log, saved["path"], ["attention"])["attention"]
    view.locator('button[data-value="loss"]').click()
    wait_for(lambda: "loss (nats)" in view.locator(".cw-legend").inner_text(), "the loss legend")
    with page.expect_download() as info:
        view.locator('[data-cw-export="svg"]').click()
    svg = Path(info.value.path()).read_text()
    joined = " ".join(re.findall(r"<text[^>]*>([^<]*)</text>", svg))
    assert "loss (nats) predicting the next token" in joined, "the figure lost the strip's legend"
    for word in ("Strip", "Tokens show", "Logit effect", "Hover", "SVG", "PNG"):
        assert word not in joined, f"the exported figure holds control text {word!r}"
    page_log.assert_offline_clean()
