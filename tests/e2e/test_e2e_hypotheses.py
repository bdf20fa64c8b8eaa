"""Causal tracing and probe accuracy maps in an exported page, offline: both draw in the patching view, a trace
cell moves a linked attention view to its layer and token, and the page makes no request."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from playwright.sync_api import Page

import circuitwidgets as cw
from circuitwidgets.export import save_html

from ._pages import PageLog, assert_drawn, open_offline, wait_status, wait_view

PROMPT = "total = values + 1\nresult = compute_total(values)\nprint(compute_t"


@pytest.fixture(scope="module")
def page_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    gelu = cw.load_pretrained("gelu-2l")
    ids = gelu.to_tokens(PROMPT)
    first = gelu.to_str_tokens(ids[0]).index(" comp")
    trace = cw.PatchingMap(cw.causal_trace(gelu, ids, corrupt=range(first, first + 6), answer="ot", samples=4))
    gen = torch.Generator().manual_seed(0)
    tokens = torch.randint(1, 2048, (12, ids.shape[1]), generator=gen)
    probes = cw.probe(gelu, "resid_post", tokens, tokens % 2)
    assert isinstance(probes, cw.hypotheses.Probes)
    accuracy = cw.PatchingMap(probes.accuracy_map)
    attention = cw.AttentionPatterns(gelu, ids[0])
    cw.link(trace, attention)
    path = tmp_path_factory.mktemp("hypotheses") / "hypotheses.html"
    return save_html([trace, accuracy, attention], path)


def test_a_trace_and_a_probe_map_draw_and_a_trace_cell_moves_the_attention_view(
    page_path: Path, page: Page, page_log: PageLog
) -> None:
    views = open_offline(page, page_log, page_path, ["patchingmap", "attention"])
    trace, attention = views["patchingmap"], views["attention"]
    accuracy = wait_view(page, page_log, "patchingmap", nth=1)
    assert_drawn(trace)
    assert_drawn(accuracy)
    assert "causal tracing" in trace.inner_text() or "p('ot')" in trace.inner_text()
    trace.locator('[data-cw-layer="0"][data-cw-col="15"] rect').first.click()
    wait_status(trace, r"^L0 · pos 15 'ot': [\d.]+ \(?selected")
    wait_status(attention, r"^Layer 0, head \d+ .*destination 15 ")
    accuracy.locator('[data-cw-layer="1"][data-cw-col="3"] rect').first.hover()
    wait_status(accuracy, r"^L1 · pos 3 .*: [\d.]+$")
    shots = os.environ.get("CW_SCREENSHOTS")
    if shots:
        page.screenshot(path=str(Path(shots) / "hypotheses.png"), full_page=True)
    page_log.assert_offline_clean()
