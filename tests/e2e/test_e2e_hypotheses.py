"""Causal tracing and probe accuracy maps in an exported page, offline: both draw in the patching view, a trace
cell moves a linked attention view to its layer and token, a scrubbed hypothesis draws as a graph of the paths it
keeps (its refinements' recovered shares in the caption) whose head node moves the attention view, and the page makes
no request."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from playwright.sync_api import Page

import circuitwidgets as cw
from circuitwidgets.export import save_html
from circuitwidgets.graphs.hypothesis import hypothesis_graph

from ._pages import PageLog, assert_drawn, open_offline, wait_for, wait_status, wait_view

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
    first = torch.randint(1, 2048, (8, 6), generator=gen)
    repeated = torch.cat([torch.zeros(8, 1, dtype=torch.long), first, first], dim=1)
    kept = cw.Hypothesis([("L0H3 -> L1H6.k -> logits", None), ("embed -> L1H6.q -> logits", None)], name="k path")
    results = [cw.scrub(gelu, h, repeated, resamples=2) for h in (cw.Hypothesis.full(gelu), kept)]
    hypothesis = cw.AttributionGraph(hypothesis_graph(gelu, kept, results))
    cw.link(hypothesis, attention)
    path = tmp_path_factory.mktemp("hypotheses") / "hypotheses.html"
    return save_html([trace, accuracy, attention, hypothesis], path)


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


def test_a_scrubbed_hypothesis_draws_its_kept_paths_and_a_head_node_moves_the_attention_view(
    page_path: Path, page: Page, page_log: PageLog
) -> None:
    views = open_offline(page, page_log, page_path, ["graph", "attention"])
    graph, attention = views["graph"], views["attention"]
    wait_for(lambda: graph.locator(".cw-edge").count() > 0, "the kept paths' edges drawn")
    text = graph.inner_text()
    assert "Hypothesis (causal scrubbing)" in text and "recovered: full model 100.0 % → k path" in text
    assert "a kept path" in text  # the legend says what an edge is
    graph.locator('[data-cw-node][data-cw-kind="head"]').first.locator("circle").click()
    wait_status(attention, r"^Layer [01], head [0-9] ")
    shots = os.environ.get("CW_SCREENSHOTS")
    if shots:
        graph.screenshot(path=str(Path(shots) / "hypothesis-graph.png"))
    page_log.assert_offline_clean()
