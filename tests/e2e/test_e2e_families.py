"""Llama- and Gemma-4-shaped models' views drawn in an exported page, offline, with the rotary offset they read."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from playwright.sync_api import Page

import circuitwidgets

from ._pages import PageLog, open_offline

pytestmark = pytest.mark.filterwarnings("ignore::circuitwidgets._checks.MLPPathsExcludedWarning")


def _family(case_id: str) -> circuitwidgets.CircuitModel:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from families import CASES_BY_ID

    return circuitwidgets.from_hf(CASES_BY_ID[case_id].build())


def _llama() -> circuitwidgets.CircuitModel:
    return _family("llama-gqa2-biases-llama3rope")


def test_a_llama_model_draws_offline_and_each_view_names_its_rotary_offset(
    tmp_path: Path, page: Page, page_log: PageLog
) -> None:
    model = _llama()
    widgets = [
        circuitwidgets.EigenScatter(model, offset=1),
        circuitwidgets.SkipTrigramTable(model, k=5, offset=1),
        circuitwidgets.CompositionMap(model, offset=1),
        circuitwidgets.AttentionPatterns(model, [1, 5, 9, 12, 5, 9, 30]),
    ]
    path = circuitwidgets.save_html(widgets, tmp_path / "llama.html")
    views = open_offline(page, page_log, path, ["eigen", "skiptrigrams", "composition", "attention"])
    for name in ("eigen", "skiptrigrams", "composition"):
        control = views[name].locator("[data-cw-offset]")
        assert control.is_visible(), name
        select = control.locator("select")
        assert select.input_value() == "1"
        assert select.is_disabled()  # an exported page holds one offset
        assert "previous token" in (select.locator("option:checked").text_content() or "")
        assert "live kernel" in (control.get_attribute("title") or "")
    assert views["attention"].locator("[data-cw-offset]").count() == 0
    page_log.assert_offline_clean()


def test_a_gemma4_model_with_two_head_widths_and_shared_keys_draws_offline(
    tmp_path: Path, page: Page, page_log: PageLog
) -> None:
    model = _family("gemma4-e2b-shaped")
    widgets = [
        circuitwidgets.EigenScatter(model, offset=0),
        circuitwidgets.CompositionMap(model, offset=0),
        circuitwidgets.AttentionPatterns(model, [1, 5, 9, 12, 5, 9, 30]),
    ]
    path = circuitwidgets.save_html(widgets, tmp_path / "gemma4.html")
    views = open_offline(page, page_log, path, ["eigen", "composition", "attention"])
    for name in ("eigen", "composition"):
        select = views[name].locator("[data-cw-offset] select")
        assert select.input_value() == "0", name
        assert "same position" in (select.locator("option:checked").text_content() or ""), name
    page_log.assert_offline_clean()


def test_a_model_without_rotary_shows_no_offset_control(tmp_path: Path, page: Page, page_log: PageLog) -> None:
    widget = circuitwidgets.EigenScatter(circuitwidgets.load_pretrained("attn-only-2l"))
    path = circuitwidgets.save_html(widget, tmp_path / "shipped.html")
    view = open_offline(page, page_log, path, ["eigen"])["eigen"]
    assert not view.locator("[data-cw-offset]").is_visible()
