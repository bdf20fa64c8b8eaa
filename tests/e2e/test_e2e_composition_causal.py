"""Causal beside weights, in an exported page, offline: a path-patching composition map says its title and
note (never "composition score"), and the scatter of K-composition against path patching answers hover and
click, moving the linked maps to the later head; their figures keep the title and the note."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import torch
from playwright.sync_api import Page

import circuitwidgets as cw
from circuitwidgets import causal
from circuitwidgets.export import save_html

from ._pages import PageLog, open_offline, wait_status, wait_view

TITLE = "Path patching: normalised logit_diff(pos=-1)"


@pytest.fixture(scope="module")
def page_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Notebook 04's corruption B (only the earlier copy of the last token replaced), path patching via k."""
    model = cw.load_pretrained("attn-only-2l-12h")
    gen = torch.Generator().manual_seed(0)
    B, n = 8, 20
    first = torch.randint(1, 2048, (B, n), generator=gen)
    other = torch.randint(1, 2048, (B, n), generator=gen)
    bos = torch.zeros(B, 1, dtype=torch.long)
    clean = torch.cat([bos, first, first[:, : n - 1]], dim=1)
    first_b = first.clone()
    first_b[:, n - 2] = other[:, 0]
    corrupted = torch.cat([bos, first_b, first[:, : n - 1]], dim=1)
    metric = causal.normalised(causal.logit_diff(first[:, n - 1].tolist(), other[:, 1].tolist()))
    k = causal.path_patch(model, clean, corrupted, metric, via="k")
    weights = cw.CompositionMap(model, n_samples=20)
    paths = cw.CompositionMap.from_path_patching(k)
    plot = cw.CompositionVsPatching(model, k, n_samples=20)
    cw.link(weights, paths, plot)
    path = tmp_path_factory.mktemp("comp_causal") / "causal_beside_weights.html"
    return save_html([weights, paths, plot], path)


def _views(page: Page, page_log: PageLog, path: Path) -> dict[str, Any]:
    found = open_offline(page, page_log, path, ["composition", "compvspatching"])
    found["paths"] = wait_view(page, page_log, "composition", nth=1)
    return found


def test_a_path_patching_map_says_its_title_and_note_not_composition(
    page_path: Path, page: Page, page_log: PageLog
) -> None:
    paths = _views(page, page_log, page_path)["paths"]
    assert paths.locator(".cw-title").inner_text().startswith(TITLE)
    assert paths.locator(".cw-map-title").all_inner_texts() == ["via k"]  # (q and v were not run)
    assert TITLE in paths.locator(".cw-bar-box").inner_text()
    note = paths.locator("[data-cw-note]").inner_text()
    assert "Corruption: 8 prompt pairs of 40 tokens" in note and "k input only" in note
    shown = paths.inner_text()
    assert "composition score" not in shown and "Q-composition" not in shown and "K-composition" not in shown
    # a cell's hover line says the pair and the value, in the map's words
    canvas = paths.locator("canvas").first
    canvas.scroll_into_view_if_needed()
    box = canvas.bounding_box()
    assert box is not None
    canvas.hover(position={"x": box["width"] - 5, "y": box["height"] - 5})  # the last cell: L0H11 → L1H11
    assert re.fullmatch(r"L0H11 → L1H11 via k: −?[\d.]+", paths.locator(".cw-cell-value").inner_text())
    page_log.assert_offline_clean()


def test_the_scatter_labels_pairs_on_hover_and_a_click_selects_the_pair(
    page_path: Path, page: Page, page_log: PageLog
) -> None:
    views = _views(page, page_log, page_path)
    plot, weights, paths = views["compvspatching"], views["composition"], views["paths"]
    assert plot.locator("[data-cw-pair]").count() == 12 * 12
    axes = plot.locator(".cw-axes").text_content() or ""
    assert (
        "K-composition score − random baseline" in axes and "path patching via k: normalised logit_diff(pos=-1)" in axes
    )
    # the induction heads are labelled, top right, and the strongest effect is selected
    labels = plot.locator(".cw-pair-labels").text_content() or ""
    assert all(f"L0H11 → L1H{h}" in labels for h in (5, 7, 9))
    wait_status(
        plot, r"^L0H11 → L1H5: K-composition 0\.1\d\d above baseline, path patching via k 0\.3\d\d \(selected\)$"
    )
    plot.locator('[data-cw-pair="0.11-1.9"] .cw-dot').hover()
    wait_status(plot, r"^L0H11 → L1H9: K-composition 0\.1\d\d above baseline, path patching via k 0\.2\d\d$")
    plot.locator('[data-cw-pair="0.11-1.7"] .cw-dot').click()
    plot.locator(".cw-title").hover()
    wait_status(plot, r"^L0H11 → L1H7: .* \(selected\)$")
    wait_status(weights, r"L1H7 selected$")  # the linked maps follow the later head
    wait_status(paths, r"L1H7 selected$")
    assert "Pearson r = 0.7" in plot.locator(".cw-note").first.inner_text()
    page_log.assert_offline_clean()


@pytest.mark.parametrize("which", ["paths", "compvspatching"])
def test_their_figures_keep_the_title_and_the_note(which: str, page_path: Path, page: Page, page_log: PageLog) -> None:
    view = _views(page, page_log, page_path)[which]
    with page.expect_download() as info:
        view.locator('[data-cw-export="svg"]').click()
    svg = Path(info.value.path()).read_text()
    joined = " ".join(re.findall(r"<text[^>]*>([^<]*)</text>", svg))
    assert "Corruption: 8 prompt pairs" in joined.replace("\n", " "), f"{which}: the figure lost its note"
    expected = TITLE if which == "paths" else "Composition beside path patching"
    assert expected in joined, f"{which}: the figure lost its title"
    for word in ("Hover", "Click", "SVG", "PNG"):
        assert word not in joined, f"{which}: the exported figure holds control text {word!r}"
    if which == "paths":
        assert "composition score" not in joined
    page_log.assert_offline_clean()
