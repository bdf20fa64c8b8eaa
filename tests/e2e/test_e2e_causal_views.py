"""The causal views in an exported page, offline: a patching map moves a linked attention view to its head and
token; the logit lens and the logit attribution draw and answer hover; their figures carry no controls; the
report's "Testing the circuit" views draw and move the page's other views."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from playwright.sync_api import Page

import circuitwidgets as cw
from circuitwidgets import causal, circuits
from circuitwidgets.export import save_html

from ._pages import PageLog, assert_drawn, assert_figure_has_no_controls, open_offline, wait_status, wait_view


@pytest.fixture(scope="module")
def page_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    model = cw.load_pretrained("attn-only-2l-12h")
    gen = torch.Generator().manual_seed(0)
    first, other = torch.randint(1, 2048, (2, 1, 20), generator=gen)
    bos = torch.zeros(1, 1, dtype=torch.long)
    clean = torch.cat([bos, first, first[:, :19]], dim=1)
    corrupted = torch.cat([bos, other, first[:, :19]], dim=1)
    metric = causal.normalised(causal.logit_diff(first[:, 19].tolist(), other[:, 19].tolist()))
    heads = cw.PatchingMap(causal.patch(model, clean, corrupted, metric, site="z", by=("layer", "head")))
    positions = cw.PatchingMap(causal.patch(model, clean, corrupted, metric, site="z", by=("layer", "pos", "head")))
    attention = cw.AttentionPatterns(model, clean[0])
    cw.link(heads, positions, attention)
    gelu = cw.load_pretrained("gelu-2l")
    ids = gelu.to_tokens("def add(self, other):\n    return self.value + other.value")
    lens = cw.LogitLens(causal.logit_lens(gelu, ids))
    bars = cw.LogitAttribution(causal.logit_attribution(gelu, ids, int(ids[0, -1]), by="head", pos=-2))
    path = tmp_path_factory.mktemp("causal") / "causal.html"
    return save_html([heads, positions, attention, lens, bars], path)


def _views(page: Page, page_log: PageLog, path: Path) -> dict[str, Any]:
    found = open_offline(page, page_log, path, ["patchingmap", "attention", "logitlens", "logitattribution"])
    found["positions"] = wait_view(page, page_log, "patchingmap", nth=1)
    return found


def test_a_patching_map_click_moves_the_linked_attention_view_to_its_head_and_token(
    page_path: Path, page: Page, page_log: PageLog
) -> None:
    views = _views(page, page_log, page_path)
    heads, positions, attention = views["patchingmap"], views["positions"], views["attention"]
    heads.locator('[data-cw-layer="1"][data-cw-col="5"] rect').first.click()
    wait_status(heads, r"^L1H5: [−\d.]+ \(?selected")
    wait_status(attention, r"^Layer 1, head 5 ")
    wait_status(positions, r"\[H5\]: [−\d.]+ selected")  # its head panel follows
    assert positions.locator("[data-cw-panel-picker]").input_value() == "5"
    positions.locator('[data-cw-layer="0"][data-cw-col="21"] rect').first.click()
    wait_status(positions, r"^L0 · pos 21 '[^']*' \[H5\]: [−\d.]+ \(?selected")
    wait_status(attention, r"^Layer 0, head 5 .*destination 21 ")  # (the cell is head 5 of layer 0, at token 21)
    # hover says the value; a NaN-free map has numbers, the normalised scale its meaning
    heads.locator('[data-cw-layer="0"][data-cw-col="2"] rect').first.hover()
    wait_status(heads, r"^L0H2: [−\d.]+$")
    assert "1 = clean behaviour restored" in heads.locator(".cw-caption").inner_text()
    page_log.assert_offline_clean()


def test_the_lens_and_the_attribution_draw_and_answer_hover(page_path: Path, page: Page, page_log: PageLog) -> None:
    views = _views(page, page_log, page_path)
    lens, bars = views["logitlens"], views["logitattribution"]
    # (rows: before L0, before L1, final; 17 tokens)
    assert lens.locator("[data-cw-row][data-cw-pos]").count() == 3 * 17
    lens.locator('[data-cw-row="2"][data-cw-pos="4"] rect').first.hover()
    status = wait_status(lens, r"^final · pos 4 '[^']*' predicts '[^']*' [\d.]+%, ")
    assert status.count("%") == 5
    lens.locator('[data-cw-row="1"][data-cw-pos="3"] rect').first.click()
    lens.locator(".cw-title").hover()
    wait_status(lens, r"^before L1 · pos 3 .*\(selected\)$")
    assert bars.locator(".cw-total").count() == 1 and bars.locator(".cw-logit").count() == 1
    assert re.search(
        r"the parts sum to [\d.]+; the model's logit is [\d.]+ \(equal\)", bars.locator(".cw-caption").inner_text()
    )
    bars.locator('[data-cw-layer="0"][data-cw-head="3"] rect').first.hover()
    wait_status(bars, r"^L0H3: [+−][\d.]+ \(running sum [−\d.]+\)$")
    page_log.assert_offline_clean()


#: The title each view's exported figure keeps.
FIGURE_TITLES = {
    "patchingmap": "activation patching of z",
    "logitlens": "Logit lens",
    "logitattribution": "Direct logit attribution",
}


@pytest.mark.parametrize("name", list(FIGURE_TITLES))
def test_their_figures_carry_no_controls(name: str, page_path: Path, page: Page, page_log: PageLog) -> None:
    assert_figure_has_no_controls(page, _views(page, page_log, page_path)[name], FIGURE_TITLES[name])
    page_log.assert_offline_clean()


@pytest.fixture(scope="module")
def report_path(report_12h: Path) -> tuple[Path, tuple[int, int]]:
    """The report of the default model, and the head its views start on (the strongest induction head)."""
    model = cw.load_pretrained("attn-only-2l-12h")
    induction = circuits.head_scores(model, kind="induction")
    layer, head = (int(i) for i in np.unravel_index(int(np.argmax(induction)), induction.shape))
    return report_12h, (layer, head)


def test_the_reports_causal_views_draw_and_a_head_cell_moves_the_attention_view(
    report_path: tuple[Path, tuple[int, int]], page: Page, page_log: PageLog
) -> None:
    path, (layer, head) = report_path
    views = open_offline(page, page_log, path, ["attention", "patchingmap", "logitattribution"])
    heads, attention, bars = views["patchingmap"], views["attention"], views["logitattribution"]
    paths = wait_view(page, page_log, "patchingmap", nth=2)  # (nth=1: the (layer, position) map)
    assert_drawn(paths)
    assert "head patching, corruption A" in heads.inner_text()
    assert "path patching from L0H11 into each receiver's keys" in paths.inner_text()
    assert paths.locator("text", has_text="n/a").count() >= 12  # layer 0 cannot read the layer-0 sender
    # every view starts on the page's head
    wait_status(heads, rf"^L{layer}H{head}: [−\d.]+ \(?selected")
    wait_status(paths, rf"^L{layer}H{head}: [−\d.]+ \(?selected")
    wait_status(bars, rf"^L{layer}H{head}: [+−][\d.]+ .*selected")
    wait_status(attention, rf"^Layer {layer}, head {head} ")
    # a click on another head's cell of the head-patching map moves the attention view, the path map and the bars
    other = 5 if head != 5 else 7
    heads.locator(f'[data-cw-layer="1"][data-cw-col="{other}"] rect').first.click()
    wait_status(heads, rf"^L1H{other}: [−\d.]+ \(?selected")
    wait_status(attention, rf"^Layer 1, head {other} ")
    wait_status(paths, rf"^L1H{other}: [−\d.]+ \(?selected")
    wait_status(bars, rf"^L1H{other}: [+−][\d.]+ .*selected")
    page_log.assert_offline_clean()
