"""The feature views in an exported page, offline: the dashboard draws a unit's contexts as text, its picker and
search switch units, a feature clicked in the prompt view opens in the dashboard and moves the linked attention
view to its token; a page holding every feature of a dictionary of the shipped width stays small and opens fast."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import torch
from playwright.sync_api import Page

import circuitwidgets as cw
from circuitwidgets import features
from circuitwidgets.export import save_html
from circuitwidgets.features.dictionary import Dictionary
from circuitwidgets.training.corpus import load_stdlib_corpus

from ._pages import PageLog, open_offline, screenshot, wait_for, wait_status

PROMPT = "def greet(name):\n    print('hello ' + name)\n    return name\n"


def _held_out_rows(model: cw.CircuitModel, rows: int, n_ctx: int) -> torch.Tensor:
    ids: list[int] = []
    for text in load_stdlib_corpus().val:
        ids.extend(model.tokenizer.encode(text))
        if len(ids) > rows * (n_ctx - 1):
            break
    body = torch.tensor(ids[: rows * (n_ctx - 1)]).view(rows, n_ctx - 1)
    return torch.cat([torch.zeros(rows, 1, dtype=torch.long), body], dim=1)


@pytest.fixture(scope="module")
def page_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        model = cw.load_pretrained("gelu-2l")
        units = features.neurons(model, 1)
        dashboard = cw.FeatureDashboard.from_model(
            model, units, _held_out_rows(model, 48, 64), k=8, samples=4, progress=False
        )
        prompt = cw.PromptFeatures(model, units, PROMPT, k=5)
        attention = cw.AttentionPatterns(model, model.to_tokens(PROMPT)[0])
        cw.link(dashboard, prompt, attention)
    finally:
        torch.set_num_threads(threads)
    path = tmp_path_factory.mktemp("features") / "features.html"
    return save_html([dashboard, prompt, attention], path)


def test_a_feature_clicked_in_the_prompt_opens_in_the_dashboard_and_moves_the_attention_view(
    page_path: Path, page: Page, page_log: PageLog
) -> None:
    views = open_offline(page, page_log, page_path, ["featuredashboard", "promptfeatures", "attention"])
    dash, prompt, attention = views["featuredashboard"], views["promptfeatures"], views["attention"]
    wait_status(dash, r"^neuron L1N0 of 1,024 selected")
    assert dash.locator(".cw-fd-example").count() >= 8 and dash.locator(".cw-fd-centre").count() >= 8
    chip = prompt.locator(".cw-pf-col").nth(10).locator("[data-cw-unit]").first
    unit = chip.get_attribute("data-cw-unit")
    chip.click()
    wait_status(dash, rf"^neuron L1N{unit} of 1,024 selected")
    wait_status(prompt, rf"^position 10 .*L1N{unit} selected")
    wait_status(attention, r"destination 10 ")
    screenshot(dash, "feature-dashboard")
    screenshot(prompt, "prompt-features")
    # the picker: next, a typed number, a search by token then a hit
    dash.locator(".cw-controls button").nth(1).click()
    wait_status(dash, rf"^neuron L1N{int(unit or 0) + 1} of")
    dash.locator(".cw-fd-number").fill("317")
    dash.locator(".cw-fd-number").dispatch_event("change")
    wait_status(dash, r"^neuron L1N317 of")
    # L1N317 (the quote → newline neuron): its top contexts' own token is a quote
    centres = dash.locator(".cw-fd-centre").all_text_contents()[:8]
    assert sum("'" in c or '"' in c for c in centres) >= 6, centres
    dash.locator(".cw-fd-search").fill("'")
    wait_for(lambda: dash.locator(".cw-fd-hit").count() > 0, "search hits")
    hit = dash.locator(".cw-fd-hit").first
    target = hit.get_attribute("data-cw-unit")
    hit.click()
    wait_status(dash, rf"^neuron L1N{target} of")
    page_log.assert_offline_clean()


@pytest.mark.slow
def test_a_page_with_every_feature_of_a_shipped_width_dictionary_is_small_and_opens_fast(
    tmp_path: Path, page: Page, page_log: PageLog
) -> None:
    # every feature of a 4,096-wide transcoder of gelu-2l (the shipped width; random, so every feature fires)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        model = cw.load_pretrained("gelu-2l")
        d = Dictionary.random("transcoder", "topk", 256, 4096, layer=1, k=32, seed=0)
        dashboard = cw.FeatureDashboard.from_model(
            model, d, _held_out_rows(model, 128, 128), k=16, samples=8, progress=False
        )
    finally:
        torch.set_num_threads(threads)
    path = save_html([dashboard], tmp_path / "every-feature.html")
    size = path.stat().st_size
    assert size < 25 * 2**20, f"{size / 2**20:.1f} MiB"
    start = time.perf_counter()
    page.goto(path.resolve().as_uri())
    view = page.locator('[data-cw-view="featuredashboard"]').first
    wait_status(view, r"^feature L1\.tc/0 of 4,096 selected", timeout_s=30)
    seconds = time.perf_counter() - start
    print(f"every-feature page: {size / 2**20:.1f} MiB, drawn {seconds:.2f} s after navigation")
    assert seconds < 2.0
    page_log.assert_offline_clean()
