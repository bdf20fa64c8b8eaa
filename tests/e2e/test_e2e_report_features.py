"""The gelu-2l report's features part, offline: the features of the induction answer (PromptFeatures on the page's
prompt, a FeatureDashboard of every feature of ``L1.tc``) and the attribution graph of the same prediction with the
induction circuit pinned and grouped; a position chosen in the head views moves the features part's position, a
feature node clicked in the graph opens that feature's dashboard, and the page makes no request."""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import pytest
from playwright.sync_api import Page

import circuitwidgets as cw
from circuitwidgets import features

from ._pages import PageLog, open_offline, screenshot, wait_for, wait_status, wait_view

pytestmark = pytest.mark.slow

NAME = "gelu-2l"


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from circuitwidgets.report import write_report

    model = cw.load_pretrained(NAME)
    path = tmp_path_factory.mktemp("report-features") / "report.html"
    with warnings.catch_warnings():  # (the weight-space views warn that MLP paths are outside them; the page says so)
        warnings.simplefilter("ignore")
        return write_report(model, path, card=cw.pretrained_card(NAME), dictionaries=features.load_pretrained(NAME))


def test_the_features_part_renders_with_its_text_and_the_circuit_pinned(
    report: Path, page: Page, page_log: PageLog
) -> None:
    views = open_offline(page, page_log, report, ["promptfeatures", "featuredashboard", "graph"])
    prompt, dash, graph = views["promptfeatures"], views["featuredashboard"], views["graph"]
    body = page.locator("body").inner_text()
    for heading in ("The features the induction answer reads", "The attribution graph of the induction answer"):
        assert heading in body
    # every view of the page's prompt starts on its last token; the dashboard on the strongest feature there
    status = wait_status(prompt, r"^position 39 .*L1\.tc/\d+ selected")
    feature = re.search(r"L1\.tc/(\d+) selected", status)
    assert feature
    wait_status(dash, rf"^feature L1\.tc/{feature.group(1)} of 4,096 selected")
    assert prompt.locator(".cw-pf-col").count() >= 10
    assert graph.locator('[data-cw-kind="feature"]').count() > 0
    assert graph.locator("[data-cw-pinned]").count() >= 2 and graph.locator("[data-cw-in-group]").count() >= 2
    # one sign convention in every legend of the page: the same words, and the graph's edges in the same two colours
    legends = page.locator(".cw-sign-legend").all_text_contents()
    assert len(legends) >= 3, legends  # (the logit attribution's, the dashboard's, the graph's two rows)
    assert all(("red: positive" in t) != ("blue: negative" in t) or "·" in t for t in legends), legends
    assert sum("red: positive" in t for t in legends) >= 3 and sum("blue: negative" in t for t in legends) >= 3
    strokes = set(graph.locator(".cw-edge").evaluate_all("es => es.map(e => e.getAttribute('stroke'))"))
    assert strokes <= {"#b2182b", "#2166ac"}, strokes
    assert not re.search(r"\b(blue|red|orange)\b[ :,]*(lowers|raises)", page.locator("body").inner_text(), re.I)
    for width in (1400, 1000):
        page.set_viewport_size({"width": width, "height": 1000})
        prompt.scroll_into_view_if_needed()
        screenshot(prompt, f"report-features-prompt-{width}")
        screenshot(dash, f"report-features-dashboard-{width}")
        screenshot(graph, f"report-features-graph-{width}")
    page_log.assert_offline_clean()


def test_a_position_chosen_in_the_head_views_moves_the_features_part(
    report: Path, page: Page, page_log: PageLog
) -> None:
    views = open_offline(page, page_log, report, ["attention", "promptfeatures"])
    prompt = views["promptfeatures"]
    positions = wait_view(page, page_log, "patchingmap", nth=1)
    wait_status(prompt, r"^position 39 ")
    positions.locator('[data-cw-layer="1"][data-cw-col="20"] rect').first.click()
    wait_status(views["attention"], r"destination 20 ")
    wait_status(prompt, r"^position 20 ")
    page_log.assert_offline_clean()


def test_a_feature_node_clicked_in_the_graph_opens_its_dashboard(report: Path, page: Page, page_log: PageLog) -> None:
    views = open_offline(page, page_log, report, ["graph", "featuredashboard"])
    graph, dash = views["graph"], views["featuredashboard"]
    wait_for(lambda: graph.locator('[data-cw-kind="feature"]').count() > 0, "feature nodes")
    nodes = graph.locator('[data-cw-kind="feature"]')
    opened = None
    for i in range(nodes.count()):
        nodes.nth(i).dispatch_event("click")
        status = wait_status(graph, r"^L\d.* selected")
        found = re.match(r"^L1 f(\d+) ", status)
        if found:
            opened = found.group(1)
            break
    assert opened is not None, "no layer-1 feature node in the graph"
    wait_status(dash, rf"^feature L1\.tc/{opened} of 4,096 selected")
    page_log.assert_offline_clean()


def test_a_head_chosen_in_the_head_views_moves_the_features_part_to_the_token_it_reads(
    report: Path, page: Page, page_log: PageLog
) -> None:
    from circuitwidgets.causal.induction import induction_prompts
    from circuitwidgets.widgets.features.prompt import strongest_sources

    model = cw.load_pretrained(NAME)
    table = strongest_sources(model, induction_prompts(model).clean[:1], -1)
    views = open_offline(page, page_log, report, ["attention", "promptfeatures", "graph"])
    prompt = views["promptfeatures"]
    heads = wait_view(page, page_log, "patchingmap", nth=0)
    wait_status(prompt, r"^position 39 ")
    # the caption's example is the table's: the head it names selects the position it says
    said = re.search(r"L(\d)H(\d+), selects position (\d+)", page.locator("body").inner_text())
    assert said and table[int(said.group(1))][int(said.group(2))] == int(said.group(3)), said
    # a layer-0 head, then a layer-1 head reading another token: each click moves the features part and the page
    first = next(h for h in range(model.cfg.n_heads) if table[0][h] != 39)
    second = next(h for h in range(model.cfg.n_heads) if table[1][h] not in (39, table[0][first]))
    for layer, head in ((0, first), (1, second)):
        heads.locator(f'[data-cw-layer="{layer}"][data-cw-col="{head}"] rect').first.click()
        wait_status(prompt, rf"^position {table[layer][head]} ")
        wait_status(views["attention"], rf"destination {table[layer][head]} ")
        # the chosen token is brought into view (its column drawn, the prompt virtualised to what is in view)
        wait_for(lambda: prompt.locator(".cw-pf-selected").count() == 1, "the selected column in view")
        assert prompt.locator(".cw-pf-selected [data-cw-pos]").get_attribute("data-cw-pos") == str(table[layer][head])
    for width in (1400, 1000):
        page.set_viewport_size({"width": width, "height": 1000})
        prompt.scroll_into_view_if_needed()
        screenshot(prompt, f"report-features-head-click-{width}")
    page_log.assert_offline_clean()
