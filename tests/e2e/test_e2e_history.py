"""The training-history view in a real browser, offline: the phase change drawn, a head chosen
in it moving a linked scatter (and back), and a model trained before some curves were logged
saying so instead of drawing an empty chart.
"""

from __future__ import annotations

import re
from pathlib import Path

from playwright.sync_api import Page

import circuitwidgets
from circuitwidgets.sources.pretrained import pretrained_card
from circuitwidgets.widgets import EigenScatter, TrainingHistory

from ._pages import PageLog, open_offline, wait_for, wait_status


def _charts(view: object) -> list[dict[str, object]]:
    return view.locator(".cw-history-chart").evaluate_all(  # type: ignore[attr-defined, no-any-return]
        """els => els.map(e => ({
            title: e.querySelector('.cw-chart-title')?.textContent ?? '',
            lines: e.querySelectorAll('polyline').length,
            band: e.querySelectorAll('rect.cw-formation').length,
            legend: Array.from(e.querySelectorAll('.cw-legend-item')).map(i => i.textContent),
            empty: e.querySelector('.cw-not-logged')?.textContent ?? '',
        }))"""
    )


def test_history_draws_the_phase_change_and_moves_a_linked_scatter_offline(
    tmp_path: Path, page: Page, page_log: PageLog
) -> None:
    model = circuitwidgets.load_pretrained("attn-only-2l-12h")
    history = TrainingHistory.from_model(model)
    scatter = EigenScatter(model)
    circuitwidgets.link(history, scatter)
    path = circuitwidgets.save_html([history, scatter], tmp_path / "history.html")
    views = open_offline(page, page_log, path, ["history", "eigen"])
    view = views["history"]

    charts = wait_for(lambda: (c := _charts(view)) and len(c) == 3 and c, "three history charts drawn")
    assert all(c["lines"] for c in charts), charts  # every chart has its curves (no empty chart)
    assert all(c["band"] == 1 for c in charts), charts  # the formation window is shaded on each
    assert not any(c["empty"] for c in charts), charts
    assert re.search(r"Induction heads form around step \d+", view.locator(".cw-note").last.text_content() or "")

    view.locator('select[aria-label="head"]').select_option("1,5")
    wait_status(view, r"L1H5 at step \d+: induction \d\.\d\d")
    wait_status(views["eigen"], r"L1H5 selected")  # the linked scatter follows, no kernel
    assert "L1H5 over training" in str(_charts(view)[2]["title"])
    page_log.assert_offline_clean()


def test_a_history_logged_before_icl_and_k_composition_says_they_were_not_logged(
    tmp_path: Path, page: Page, page_log: PageLog
) -> None:
    card = pretrained_card("attn-only-2l")
    log = [{k: v for k, v in r.items() if k not in ("icl_score", "k_composition")} for r in card["training"]["log"]]
    history = TrainingHistory.from_log(log, model_name="old run", selected_layer=1, selected_head=0)
    path = circuitwidgets.save_html(history, tmp_path / "old.html")
    view = open_offline(page, page_log, path, ["history"])["history"]
    charts = wait_for(lambda: (c := _charts(view)) and len(c) == 3 and c, "three history charts drawn")
    icl, head = charts[1], charts[2]
    assert icl["lines"] == 0 and icl["empty"] == "not logged for this model", icl
    assert any("K-composition" in str(t) and "not logged" in str(t) for t in head["legend"]), head  # type: ignore[attr-defined]
    assert head["lines"] >= 2, head  # the curves that were logged are still drawn
    page_log.assert_offline_clean()
