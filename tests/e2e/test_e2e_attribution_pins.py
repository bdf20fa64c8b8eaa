"""Pins, supernodes, hover contexts and links of an attribution graph in an exported page, offline: the pins and the
group a cell set survive the export (the group's hostile label as text), shift-clicks pin, the label box groups, the
pinned subgraph merges a supernode's edges as the kernel's rule does, hovering a feature shows its dashboard's top
contexts, and a click selects the feature in the linked dashboard and the token in the linked attention view."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest
import torch
from playwright.sync_api import Locator, Page

import circuitwidgets as cw
from circuitwidgets._text import visible_label
from circuitwidgets.export import save_html
from circuitwidgets.features.dictionary import Dictionary
from circuitwidgets.graphs.attribution import attribution_graph

from ._pages import PageLog, open_offline, screenshot, wait_for, wait_status

HOSTILE = "\u202eevil <img src=x onerror=alert(1)> group"


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    model = cw.load_pretrained("gelu-2l")
    tcs = [Dictionary.random("transcoder", "topk", 256, 256, layer=i, k=8, seed=i) for i in range(2)]
    tokens = model.to_tokens("The cat sat on the mat. The cat sat on the")
    graph = attribution_graph(model, tcs, tokens, batch=128, node_threshold=1.0, edge_threshold=1.0)
    rows = torch.randint(1, 2048, (6, 16), generator=torch.Generator().manual_seed(0))
    boards = [
        cw.FeatureDashboard.from_model(model, tc, rows, k=3, samples=2, batch_size=6, progress=False) for tc in tcs
    ]
    view = cw.AttributionGraph(graph, dashboards=boards, size=min(200, len(graph.edges)), title="Attribution graph")
    l0 = [i for i, k in enumerate(view.node_kind) if k == "feature" and view.node_layer[i] == 0]
    view.group(HOSTILE, l0[:2])
    attention = cw.AttentionPatterns(model, tokens[0])
    cw.link(view, boards[1], attention)
    path = save_html([view, boards[1], attention], tmp_path_factory.mktemp("apins") / "apins.html")
    return {"path": path, "view": view}


def _node(graph: Locator, i: int) -> Locator:
    return graph.locator(f'[data-cw-node="{i}"]')


def _merged_edges(view: Any, pinned: list[int], groups: list[list[int]]) -> int:
    """Edges of the pinned subgraph by the kernel's rule: members of a group are one node, edges inside it dropped."""
    owner = {n: f"n{n}" for n in pinned} | {n: f"g{k}" for k, g in enumerate(groups) for n in g}
    pairs = {
        (owner[s], owner[d])
        for s, d in zip(view.edge_src.tolist(), view.edge_dst.tolist(), strict=True)
        if s in owner and d in owner and owner[s] != owner[d]
    }
    return len(pairs)


def test_kernel_pins_survive_export_and_the_label_stays_text(
    made: dict[str, Any], page: Page, page_log: PageLog
) -> None:
    view = made["view"]
    graph = open_offline(page, page_log, made["path"], ["graph"])["graph"]
    wait_for(lambda: graph.locator("[data-cw-pinned]").count() == len(view.pinned), "the kernel's pins drawn")
    row = graph.locator('[data-cw-supernode="0"]')
    assert row.locator(".cw-graph-group-label").text_content() == visible_label(HOSTILE)
    assert graph.locator("img").count() == 0 and "\u202e" not in (graph.text_content() or "")
    assert graph.locator("[data-cw-in-group]").count() == 2
    page_log.assert_offline_clean()


def test_pin_group_and_the_merged_subgraph(made: dict[str, Any], page: Page, page_log: PageLog) -> None:
    view = made["view"]
    graph = open_offline(page, page_log, made["path"], ["graph"])["graph"]
    wait_for(lambda: graph.locator(".cw-edge").count() > 0, "edges drawn")
    logit = view.node_kind.index("logit")
    into = [int(s) for s, d in zip(view.edge_src, view.edge_dst, strict=True) if d == logit]
    feature = next(s for s in into if view.node_kind[s] == "feature")
    for i in (logit, feature):
        _node(graph, i).dispatch_event("click", {"shiftKey": True})
    wait_for(lambda: graph.locator("[data-cw-pinned]").count() == 4, "two more pins")
    graph.locator("[data-cw-group-label]").fill("logit and its feature")
    graph.locator("[data-cw-group]").click()
    wait_for(lambda: graph.locator("[data-cw-supernode]").count() == 2, "a second supernode")
    assert graph.locator('[data-cw-supernode="1"] .cw-graph-group-label').text_content() == "logit and its feature"
    graph.locator("[data-cw-subgraph]").check()
    wait_for(lambda: graph.locator("[data-cw-supernode-node]").count() == 2, "the subgraph drawn")
    groups = [view.supernodes[0]["nodes"], [logit, feature]]
    expected = _merged_edges(view, [], groups)
    wait_for(lambda: graph.locator(".cw-edge").count() == expected, f"{expected} merged edges")
    assert graph.locator("[data-cw-node]").count() == 0  # (every pin is in a group)
    screenshot(graph, "attribution-graph-subgraph")
    # ungrouping the browser's group draws its two nodes again, still pinned
    graph.locator('[data-cw-ungroup="1"]').click()
    wait_for(lambda: graph.locator("[data-cw-node]").count() == 2, "the ungrouped nodes drawn")
    expected = _merged_edges(view, [logit, feature], groups[:1])
    wait_for(lambda: graph.locator(".cw-edge").count() == expected, f"{expected} edges after ungrouping")
    page_log.assert_offline_clean()


def test_hover_shows_top_contexts_and_a_click_selects_in_linked_views(
    made: dict[str, Any], page: Page, page_log: PageLog
) -> None:
    view = made["view"]
    views = open_offline(page, page_log, made["path"], ["graph", "featuredashboard", "attention"])
    graph, dash, attention = views["graph"], views["featuredashboard"], views["attention"]
    wait_for(lambda: graph.locator(".cw-edge").count() > 0, "edges drawn")
    l1 = [i for i, k in enumerate(view.node_kind) if k == "feature" and view.node_layer[i] == 1]
    node = max(l1, key=lambda i: int(np.sum(~np.isnan(view.ctx_value[i]))))
    n_contexts = int(np.sum(~np.isnan(view.ctx_value[node])))
    assert n_contexts > 0
    _node(graph, node).dispatch_event("mouseover")
    card = graph.locator(f'[data-cw-card="{node}"]')
    wait_for(lambda: card.count() == 1, "the hover card")
    assert card.locator("[data-cw-context]").count() == n_contexts
    assert card.locator(".cw-graph-ctx-centre").count() == n_contexts
    screenshot(graph, "attribution-graph-hover")
    _node(graph, node).dispatch_event("click")
    index, pos = int(view.node_index[node]), int(view.node_pos[node])
    wait_status(dash, rf"^feature \S*{index} of 256 selected")
    wait_status(attention, rf"destination {pos} ")
    assert _node(graph, node).get_attribute("data-cw-selected") is not None
    bold = graph.locator(f'[data-cw-column="{pos}"]').get_attribute("font-weight")
    assert bold == "bold"
    # and back: a feature picked in the dashboard selects its node in the graph, when the graph has it
    other = next((i for i in l1 if int(view.node_index[i]) != index), None)
    if other is not None:
        number = dash.locator(".cw-fd-number")
        number.fill(str(int(view.node_index[other])))
        number.dispatch_event("change")
        wait_for(
            lambda: re.search(
                rf"f{int(view.node_index[other])} @\d+ selected", graph.locator("[data-cw-status]").text_content() or ""
            ),
            "the graph follows the dashboard",
        )
    page_log.assert_offline_clean()
