"""The feature dashboard says what it shows, one test per defect a new user met (issue 56), on a shipped
transcoder of gelu-2l (``L1.tc``) read over held-out code, offline:

- the histogram's x-axis ends at the header's "largest activation", and it has a y-axis of token counts;
- a feature that never fired says so, with no empty examples, headings or histogram;
- a dashboard built with ``samples=0`` shows no "random sample" heading;
- indentation tokens are written compactly and distinctly (``⏎·×12``) and never run into their numbers at 1,000 px;
- a token search labels each hit by the token that matched, not by the unit's own top token;
- a dense feature is marked in the dashboard and on its chips in the prompt view; the logit effects state their unit.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import torch
from playwright.sync_api import Locator, Page

import circuitwidgets as cw
from circuitwidgets.export import save_html
from circuitwidgets.features.pretrained import load_pretrained

from ._pages import PageLog, open_offline, screenshot, wait_for, wait_status
from .test_e2e_features import PROMPT, _held_out_rows

SITE = "L1.tc"


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, cw.FeatureDashboard]:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        model = cw.load_pretrained("gelu-2l")
        dictionary = load_pretrained("gelu-2l")[SITE]
        dashboard = cw.FeatureDashboard.from_model(
            model, dictionary, _held_out_rows(model, 32, 64), k=8, samples=0, progress=False
        )
        prompt = cw.PromptFeatures(model, dictionary, PROMPT, k=5, density=dashboard.density)
        cw.link(dashboard, prompt)
    finally:
        torch.set_num_threads(threads)
    path = tmp_path_factory.mktemp("dashboard") / "dashboard.html"
    return save_html([dashboard, prompt], path), dashboard


def _open(page: Page, page_log: PageLog, path: Path, width: int = 1400) -> tuple[Locator, Locator]:
    page.set_viewport_size({"width": width, "height": 1000})
    views = open_offline(page, page_log, path, ["featuredashboard", "promptfeatures"])
    return views["featuredashboard"], views["promptfeatures"]


def _pick(dash: Locator, unit: int) -> None:
    dash.locator(".cw-fd-number").fill(str(unit))
    dash.locator(".cw-fd-number").dispatch_event("change")
    wait_status(dash, rf"^feature {re.escape(SITE)}/{unit} of")


def test_the_histogram_spans_the_header_range_and_has_a_y_axis(
    built: tuple[Path, cw.FeatureDashboard], page: Page, page_log: PageLog
) -> None:
    path, dashboard = built
    dash, _ = _open(page, page_log, path)
    live = [int(u) for u in np.argsort(-dashboard.density)[:40:8]]  # five live features of different densities
    for unit in live:
        _pick(dash, unit)
        header = re.search(r"largest activation (\S+)", dash.locator(".cw-fd-stats").inner_text())
        assert header, dash.locator(".cw-fd-stats").inner_text()
        assert dash.locator(".cw-fd-xmax").text_content() == header.group(1), unit
        counts = [
            int(c or 0) for c in dash.locator(".cw-fd-hist rect").evaluate_all("rs => rs.map(r => r.dataset.cwCount)")
        ]
        assert dash.locator(".cw-fd-ymax").text_content() == f"{max(counts):,}"
        assert dash.locator(".cw-fd-y0").text_content() == "0"
        assert "tokens" in (dash.locator(".cw-fd-hist").text_content() or "")
        assert "activation" in (dash.locator(".cw-fd-xlabel").text_content() or "")
    screenshot(dash, "feature-dashboard-1400")
    page_log.assert_offline_clean()


def test_a_dead_feature_says_it_never_fires_and_samples_0_shows_no_sample_heading(
    built: tuple[Path, cw.FeatureDashboard], page: Page, page_log: PageLog
) -> None:
    path, dashboard = built
    dash, _ = _open(page, page_log, path)
    dead = int(np.flatnonzero(dashboard.density == 0)[0])
    _pick(dash, dead)
    stats = dash.locator(".cw-fd-stats").inner_text()
    assert f"never fires on the {dashboard.n_tokens_read:,} tokens read" in stats, stats
    assert "largest" not in stats and "%" not in stats
    assert dash.locator(".cw-fd-hist").count() == 0 and dash.locator(".cw-fd-example").count() == 0
    headings = dash.locator(".cw-fd-left .cw-fd-heading").all_text_contents()
    assert headings == [], headings
    live = int(np.argmax(dashboard.density))
    _pick(dash, live)
    assert dash.locator(".cw-fd-example").count() > 0
    assert not [h for h in dash.locator(".cw-fd-heading").all_text_contents() if "sample" in h]
    page_log.assert_offline_clean()


def test_whitespace_tokens_are_compact_distinct_and_clear_of_their_numbers_at_1000_px(
    built: tuple[Path, cw.FeatureDashboard], page: Page, page_log: PageLog
) -> None:
    path, dashboard = built
    dash, _ = _open(page, page_log, path, width=1000)
    blank = [
        u
        for u in range(dashboard.n_units)
        if sum(t.strip() == "" and len(t) > 3 for t, _ in dashboard.promoted(u)) >= 3
    ]
    unit = blank[0]
    _pick(dash, unit)
    raw = [t for t, _ in dashboard.promoted(unit)]
    rows = dash.locator(".cw-fd-up .cw-fd-logit")
    shown = rows.locator(".cw-token").all_text_contents()
    assert len(set(shown)) == len(set(raw)), (shown, raw)
    assert any("×" in s for s in shown), shown
    assert max(len(s) for s, r in zip(shown, raw, strict=True) if r.strip() == "") <= 8, shown
    for row in rows.all() + dash.locator(".cw-fd-down .cw-fd-logit").all():
        token = row.locator(".cw-token").bounding_box()
        number = row.locator(".cw-fd-num").bounding_box()
        assert token and number and token["x"] + token["width"] <= number["x"] + 0.5, row.inner_text()
    unit_note = dash.locator(".cw-fd-unit").inner_text()
    assert "logit change per unit of activation" in unit_note and "3 significant figures" in unit_note
    assert all(
        re.fullmatch(r"[+-]?\d\.\d\d(e[+-]\d+)?|[+-]?0\.0*\d{3}|[+-]?\d{2}\.\d|[+-]?\d{3}", n)
        for n in rows.locator(".cw-fd-num").all_text_contents()
    )
    screenshot(dash, "feature-dashboard-1000")
    page_log.assert_offline_clean()


def test_search_hits_are_labelled_by_the_matched_token_and_dense_features_are_marked(
    built: tuple[Path, cw.FeatureDashboard], page: Page, page_log: PageLog
) -> None:
    path, dashboard = built
    dash, prompt = _open(page, page_log, path)
    dash.locator(".cw-fd-search").fill("return")
    wait_for(lambda: dash.locator(".cw-fd-hit").count() > 0, "search hits")
    hits = dash.locator(".cw-fd-hit")
    expected = dashboard.search_tokens("return")[: hits.count()]
    assert [int(h.get_attribute("data-cw-unit") or -1) for h in hits.all()] == [u for u, _ in expected]
    assert [h.get_attribute("data-cw-matched") for h in hits.all()] == [t for _, t in expected]
    assert all("return" in t for t in hits.all_text_contents()), hits.all_text_contents()[:5]
    dash.locator(".cw-fd-search").fill("")
    dense = int(np.argmax(dashboard.density))
    assert dashboard.density[dense] > dashboard.dense_share
    _pick(dash, dense)
    assert "dense: active on more than 10.0% of tokens" in dash.locator(".cw-fd-dense").inner_text()
    chips = prompt.locator(f'.cw-pf-chip[data-cw-unit="{dense}"]')
    assert chips.count() > 0 and chips.count() == prompt.locator(f'.cw-pf-dense[data-cw-unit="{dense}"]').count()
    assert "dense" in prompt.locator(".cw-pf-legend").inner_text()
    screenshot(prompt, "prompt-features-dense")
    page_log.assert_offline_clean()
