"""The AttributionGraph view in an exported page, offline: it draws a component graph of edge attribution, its
size slider prunes it (the curve's marker follows), a click on a head selects that head in the kernel's traits'
page state and in a linked attention view, and the page makes no request."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from playwright.sync_api import Page

import circuitwidgets as cw
from circuitwidgets import causal, graphs
from circuitwidgets.export import save_html

from ._pages import PageLog, open_offline, screenshot, wait_for, wait_status


@pytest.fixture(scope="module")
def page_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    model = cw.load_pretrained("attn-only-2l-12h")
    gen = torch.Generator().manual_seed(0)
    first, other = torch.randint(1, 2048, (2, 6, 8), generator=gen)
    bos = torch.zeros(6, 1, dtype=torch.long)
    clean = torch.cat([bos, first, first[:, :7]], dim=1)
    corrupted = torch.cat([bos, other, first[:, :7]], dim=1)
    metric = causal.logit_diff(first[:, 7].tolist(), other[:, 7].tolist())
    graph = graphs.edge_attribution(model, clean, corrupted, metric, method="eap-ig-inputs")
    curve = graphs.faithfulness_curve(model, graph, clean, corrupted, metric)
    view = cw.AttributionGraph(graph, curve, size=20)
    attention = cw.AttentionPatterns(model, clean[0])
    cw.link(view, attention)
    return save_html([view, attention], tmp_path_factory.mktemp("graph") / "graph.html")


def test_the_graph_draws_prunes_and_selects_a_head_in_the_linked_view(
    page_path: Path, page: Page, page_log: PageLog
) -> None:
    views = open_offline(page, page_log, page_path, ["graph", "attention"])
    graph, attention = views["graph"], views["attention"]
    wait_for(lambda: graph.locator(".cw-edge").count() > 0, "edges drawn")
    drawn = graph.locator(".cw-edge").count()
    assert 0 < drawn <= 20
    assert graph.locator('[data-cw-kind="head"]').count() == 24 and graph.locator('[data-cw-kind="logit"]').count() == 1
    assert graph.locator(".cw-curve-point").count() == 10
    assert graph.locator(".cw-curve-marker").get_attribute("data-cw-size") == "20"
    screenshot(graph, "graph-20-edges")
    # the slider prunes: more edges drawn, the curve's marker moves
    slider = graph.locator("[data-cw-size]").first
    slider.fill("120")
    wait_for(lambda: graph.locator(".cw-curve-marker").get_attribute("data-cw-size") == "120", "marker at 120")
    wait_for(lambda: graph.locator(".cw-edge").count() > drawn, "more edges drawn")
    screenshot(graph, "graph-120-edges")
    # a click on a head selects it here and in the linked attention view
    graph.locator('[data-cw-kind="head"][data-cw-node]').nth(13).click()  # the second layer's H1 (rows: L0 heads, …)
    status = wait_status(graph, r"selected; hover")
    layer_head = status.split(" selected")[0]
    assert layer_head.startswith("L")
    layer, head = layer_head[1:].split("H")
    wait_status(attention, rf"^Layer {layer}, head {head} ")
    assert graph.locator("[data-cw-selected]").count() == 1
    page_log.assert_offline_clean()
