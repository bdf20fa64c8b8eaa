"""The SoLU / GELU neuron comparison in a saved page, offline: two FeatureDashboards over the pair's neurons and
their sparsity histograms, linked as twins (``cw.link(..., twins=True)``): a bar clicked in the histogram opens
that neuron in both dashboards, a neuron picked in one dashboard moves the other and the histogram's marker."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import torch
from playwright.sync_api import Locator, Page

import circuitwidgets as cw
from circuitwidgets import features
from circuitwidgets.features.stream import held_out_tokens

from ._pages import PageLog, open_offline, screenshot, wait_for, wait_status, wait_view

NAMES = ("pair-gelu-1l", "pair-solu-1l")


@pytest.fixture(scope="module")
def page_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        models = [cw.load_pretrained(name) for name in NAMES]
        rows = torch.tensor(held_out_tokens(models[0])[: 16 * 64].astype(np.int64)).view(16, 64)
        dashboards = [
            cw.FeatureDashboard.from_model(m, features.neurons(m, 0), rows, k=6, samples=2, progress=False)
            for m in models
        ]
        hist = cw.NeuronSparsity.from_models(models, rows)
        cw.link(hist, *dashboards, twins=True)
    finally:
        torch.set_num_threads(threads)
    return cw.save_html([hist, *dashboards], tmp_path_factory.mktemp("twins") / "twins.html")


def _open(page: Page, page_log: PageLog, path: Path, width: int) -> tuple[Locator, Locator, Locator]:
    page.set_viewport_size({"width": width, "height": 1000})
    hist = open_offline(page, page_log, path, ["neuronsparsity", "featuredashboard"])["neuronsparsity"]
    return hist, wait_view(page, page_log, "featuredashboard", 0), wait_view(page, page_log, "featuredashboard", 1)


def _marker(hist: Locator) -> list[float]:
    return hist.locator("line.cw-marker").evaluate_all("ls => ls.map(l => Number(l.getAttribute('x1')))")


@pytest.mark.parametrize("width", [1400, 1000])
def test_a_bar_or_a_dashboard_moves_every_twin_view_offline(
    page_path: Path, page: Page, page_log: PageLog, width: int
) -> None:
    hist, gelu, solu = _open(page, page_log, page_path, width)
    wait_for(lambda: hist.locator("rect.cw-bar").count() == 48, "two histograms of 24 bars")
    titles = hist.locator(".cw-chart-title").all_text_contents()
    assert [t.split(":")[0] for t in titles] == list(NAMES) and all("median firing rate" in t for t in titles)
    wait_status(hist, r"^neuron 0: fires on .* of tokens in pair-gelu-1l, .* of tokens in pair-solu-1l$")
    # the fullest bar of SoLU's histogram: its first neuron opens in both dashboards
    bars = hist.locator('rect.cw-bar[data-row="1"]')
    heights = bars.evaluate_all("bs => bs.map(b => Number(b.getAttribute('height')))")
    fullest = bars.nth(int(np.argmax(heights)))
    left, bar_width = (float(fullest.get_attribute(a) or "nan") for a in ("x", "width"))
    fullest.click()

    def in_the_clicked_bar() -> bool:  # (SoLU's marker, the second chart's, on the bar: its neuron is selected)
        markers = _marker(hist)
        return len(markers) == 2 and left - 1 <= markers[1] <= left + bar_width + 1

    # (the status matched before the click too, at neuron 0: wait for the marker and for the histogram's status
    # to name the neuron the dashboards show, then read it)
    wait_for(in_the_clicked_bar, "SoLU's marker on the clicked bar")

    def selected(view: Locator, pattern: str) -> str | None:
        found = re.search(pattern, view.locator("[data-cw-status]").first.text_content() or "")
        return found.group(1) if found else None

    def agreed() -> bool:
        shown = {selected(d, r"^neuron L0N(\d+) of 512 selected") for d in (gelu, solu)}
        return len(shown) == 1 and shown == {selected(hist, r"^neuron (\d+): fires on")} and None not in shown

    wait_for(agreed, "the histogram and both dashboards on one neuron")
    unit = int(selected(hist, r"^neuron (\d+): fires on") or "-1")
    for dash in (gelu, solu):
        wait_status(dash, rf"^neuron L0N{unit} of 512 selected")
    # a neuron picked in the GELU dashboard moves the SoLU one and the histogram's markers
    gelu.locator(".cw-fd-number").fill("123")
    gelu.locator(".cw-fd-number").dispatch_event("change")
    wait_status(solu, r"^neuron L0N123 of 512 selected")
    wait_status(hist, r"^neuron 123: fires on")
    assert len(_marker(hist)) == 2
    screenshot(page, f"twins-neurons-{width}")
    page_log.assert_offline_clean()
