"""An attribution graph (transcoder features per position, errors, tokens, logits) in the AttributionGraph view of
an exported page, offline: nodes laid out by layer × position, the size slider prunes, a click selects a feature
node, token strings stay text, and the page makes no request."""

from __future__ import annotations

from pathlib import Path

import pytest
from playwright.sync_api import Page

import circuitwidgets as cw
from circuitwidgets.export import save_html
from circuitwidgets.features.dictionary import Dictionary
from circuitwidgets.graphs.attribution import attribution_graph

from ._pages import PageLog, open_offline, screenshot, wait_for, wait_status


@pytest.fixture(scope="module")
def page_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    model = cw.load_pretrained("gelu-2l")
    tcs = [Dictionary.random("transcoder", "topk", 256, 512, layer=i, k=8, seed=i) for i in range(2)]
    tokens = model.to_tokens("The cat sat on the mat. The cat sat on the")
    # random transcoders explain little (errors carry most influence), so keep every node and most edges
    graph = attribution_graph(model, tcs, tokens, batch=128, node_threshold=1.0, edge_threshold=1.0)
    assert {"feature", "error", "embedding", "logit"} <= set(graph.nodes.kind)
    view = cw.AttributionGraph(graph, size=min(300, len(graph.edges)), title="Attribution graph (circuit tracing)")
    return save_html([view], tmp_path_factory.mktemp("agraph") / "agraph.html")


def test_attribution_graph_draws_by_position_prunes_and_selects(page_path: Path, page: Page, page_log: PageLog) -> None:
    graph = open_offline(page, page_log, page_path, ["graph"])["graph"]
    wait_for(lambda: graph.locator(".cw-edge").count() > 0, "edges drawn")
    drawn = graph.locator(".cw-edge").count()
    size = graph.locator('[data-cw-threshold="edge"]').input_value()  # (pruned by influence, not edge count)
    features = graph.locator('[data-cw-kind="feature"]')
    assert features.count() > 0 and graph.locator('[data-cw-kind="logit"]').count() >= 1
    assert graph.locator('[data-cw-kind="embedding"]').count() >= 1
    # per-position layout: feature nodes sit in more than one column
    xs = {round(features.nth(i).bounding_box()["x"]) for i in range(min(features.count(), 40))}  # type: ignore[index]
    assert len(xs) > 1
    screenshot(graph, "attribution-graph")
    slider = graph.locator('[data-cw-threshold="edge"]')
    slider.fill("0.05")
    wait_for(lambda: graph.locator(".cw-edge").count() < drawn, "fewer edges after pruning")
    slider.fill(size)
    wait_for(lambda: graph.locator(".cw-edge").count() == drawn, "all edges back")
    features.last.dispatch_event("click")  # (feature nodes of one cell overlap: no pointer position is needed)
    status = wait_status(graph, r"^L\d.* selected; hover")  # (not "Nothing selected; hover …")
    assert status.startswith("L") and " f" in status and "@" in status
    assert graph.locator("[data-cw-selected]").count() == 1
    page_log.assert_offline_clean()
