"""An attribution graph a reader can read, in an exported page, offline: it opens pruned by influence at
circuit-tracer's thresholds; no two nodes overlap at 1,400 or 1,000 px; every feature carries its label (a
hostile one as text, as edited in the kernel); logits show token and probability; the scores stand on the view; a
click highlights the node's edges and dims the rest; the thresholds at their lowest still reach the logits; the
pinned nodes' interventions were computed before export and show; no request leaves the page."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from playwright.sync_api import Locator, Page

import circuitwidgets as cw
from circuitwidgets._text import visible_label
from circuitwidgets.export import save_html
from circuitwidgets.graphs.attribution import attribution_graph

from ._pages import PageLog, open_offline, screenshot, wait_for

HOSTILE = "\u202equote <img src=x onerror=alert(1)> feature"


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    model = cw.load_pretrained("gelu-2l")
    shipped = cw.features.load_pretrained("gelu-2l")
    tcs = [shipped["L0.tc"], shipped["L1.tc"]]
    tokens = model.to_tokens("total_count += 1\ntotal_count")
    graph = attribution_graph(model, tcs, tokens, max_feature_nodes=200)
    view = cw.AttributionGraph(graph, model=model, transcoders=tcs)
    features = [i for i, k in enumerate(view.node_kind) if k == "feature"]
    view.label(features[0], HOSTILE)
    view.pin(features[1])
    path = save_html([view], tmp_path_factory.mktemp("aread") / "aread.html")
    return {"path": path, "view": view, "features": features}


def _overlaps(graph: Locator) -> int:
    """Pairs of node shapes whose boxes intersect, measured in the page."""
    return int(
        graph.evaluate(
            """root => {
              const boxes = [...root.querySelectorAll('[data-cw-node] circle, [data-cw-node] rect')]
                .map(e => e.getBoundingClientRect()).filter(b => b.width > 0);
              let n = 0;
              for (let i = 0; i < boxes.length; i++) for (let j = i + 1; j < boxes.length; j++) {
                const a = boxes[i], b = boxes[j];
                if (a.left < b.right - 0.5 && b.left < a.right - 0.5 && a.top < b.bottom - 0.5 && b.top < a.bottom - 0.5) n++;
              }
              return n;
            }"""
        )
    )


@pytest.mark.parametrize("width", [1400, 1000])
def test_opens_pruned_labelled_without_overlaps(
    made: dict[str, Any], page: Page, page_log: PageLog, width: int
) -> None:
    page.set_viewport_size({"width": width, "height": 1000})
    graph = open_offline(page, page_log, made["path"], ["graph"])["graph"]
    view = made["view"]
    wait_for(lambda: graph.locator(".cw-edge").count() > 0, "edges drawn")
    assert graph.locator('[data-cw-threshold="node"]').input_value() == "0.8"
    assert graph.locator('[data-cw-threshold="edge"]').input_value() == "0.98"
    assert graph.locator(".cw-edge").count() == len(view.edge_src)  # the graph as circuit-tracer pruned it
    assert graph.locator("[data-cw-node]").count() > 20
    assert _overlaps(graph) == 0
    labels = graph.locator(".cw-node-label")
    n_features = sum(1 for k in view.node_kind if k == "feature")
    assert labels.count() >= n_features  # every feature labelled (and each logit)
    assert graph.locator("img").count() == 0 and "\u202e" not in (graph.text_content() or "")
    assert (graph.locator("[data-cw-scores]").text_content() or "").startswith("Replacement ")
    assert "p=" in (graph.locator('[data-cw-kind="logit"]').first.text_content() or "")
    text = graph.text_content() or ""
    assert "pass " not in text and "curve=" not in text  # nothing said to a developer
    screenshot(page, f"graph_reading_{width}")
    page_log.assert_offline_clean()


def test_click_highlights_and_thresholds_never_empty(made: dict[str, Any], page: Page, page_log: PageLog) -> None:
    page.set_viewport_size({"width": 1400, "height": 1000})
    graph = open_offline(page, page_log, made["path"], ["graph"])["graph"]
    view = made["view"]
    wait_for(lambda: graph.locator(".cw-edge").count() > 0, "edges drawn")
    row = made["features"][0]
    graph.locator(f'[data-cw-node="{row}"] circle').click()
    touching = sum(1 for s, d in zip(view.edge_src, view.edge_dst, strict=True) if row in (s, d))
    wait_for(lambda: graph.locator(".cw-edge[data-cw-dim]").count() > 0, "the other edges dimmed")
    assert graph.locator(".cw-edge:not([data-cw-dim])").count() == touching > 0
    assert graph.locator(f'[data-cw-clerp="{row}"]').input_value() == visible_label(HOSTILE)  # as text, escaped
    for name in ("node", "edge"):
        graph.locator(f'[data-cw-threshold="{name}"]').fill("0.01")
    wait_for(lambda: graph.locator(".cw-edge").count() < len(view.edge_src), "pruned further")
    logits = [i for i, k in enumerate(view.node_kind) if k == "logit"]
    assert graph.locator(".cw-edge").count() >= len(logits)  # never empty: each logit keeps its strongest path
    # the pinned node's precomputed interventions show offline
    graph.locator(f'[data-cw-node="{made["features"][1]}"] circle').click()
    wait_for(lambda: graph.locator("[data-cw-result]").count() == 2, "the pinned node's zero and x2")
    assert graph.locator('[data-cw-intervene="zero"]').is_disabled()  # no kernel in an exported page
    screenshot(page, "graph_reading_pruned")
    page_log.assert_offline_clean()


def test_label_text_round_trips(made: dict[str, Any]) -> None:
    view = made["view"]
    assert view.graph.extra["clerps"][view.node_label[made["features"][0]]] == HOSTILE
    assert visible_label(HOSTILE) != HOSTILE  # (the page shows the escaped form; the file keeps the text)
    assert torch.isfinite(torch.tensor([r["measured"] for r in view.interventions])).all()
