"""AttentionPatterns over a batch of prompts: in a page saved with ``save_html`` (offline, no kernel), linked with
``cw.link``, and live in JupyterLab.

Choosing a prompt (in the selector or by its small pattern) redraws the view
with that prompt's tokens and pattern; a batch linked to another follows it,
both ways; positions past the chosen prompt's end are cleared. Live, the
choice reaches ``selected_prompt`` in the kernel and a cell's choice reaches
the view.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from playwright.sync_api import Browser, Page

import circuitwidgets as cw
from circuitwidgets.model import CircuitModel, ModelConfig
from circuitwidgets.tokenizer import VocabTokenizer

from ._hosts import JupyterServer
from ._notebook import NotebookPage
from ._pages import TIMEOUT_MS, PageLog, open_offline, wait_for, wait_status, wait_view, watch

#: Three prompts of unequal length (padded on the wire, each shown at its own length).
PROMPTS = ["w1 w2 w3 w4 w1 w2 w3 w4 w5", "w7 <b>w8</b> w9", "w3 w3 w6 w2 w11 w12"]


def random_model(seed: int) -> CircuitModel:
    g = torch.Generator().manual_seed(seed)
    L, H, d, dh, V, n_ctx = 2, 3, 16, 4, 16, 32

    def r(*shape: int, std: float = 1.0) -> torch.Tensor:
        return torch.randn(*shape, generator=g) * std

    weights = {
        "W_E": r(V, d), "W_pos": r(n_ctx, d), "W_Q": r(L, H, d, dh, std=d**-0.5), "W_K": r(L, H, d, dh, std=d**-0.5),
        "W_V": r(L, H, d, dh, std=d**-0.5), "W_O": r(L, H, dh, d, std=(H * dh) ** -0.5), "W_U": r(d, V, std=d**-0.5),
    }  # fmt: skip
    words = ["<bos>", "<b>w8</b>", *(f"w{i}" for i in range(1, V - 1))]
    return CircuitModel(
        ModelConfig(L, H, d, dh, V, n_ctx), weights, tokenizer=VocabTokenizer(words, 0), name=f"r{seed}"
    )


def test_a_saved_batch_switches_prompts_offline_and_a_linked_batch_follows(
    tmp_path: Path, page: Page, page_log: PageLog
) -> None:
    first = cw.AttentionPatterns(random_model(0), PROMPTS, selected_dest=8)
    second = cw.AttentionPatterns(random_model(1), PROMPTS)  # same shapes, other weights: compare across models
    assert cw.link(first, second).names[2] == "selected_prompt"
    path = cw.save_html([first, second], tmp_path / "batch.html")

    open_offline(page, page_log, path, ["attention"])
    one, two = (wait_view(page, page_log, "attention", nth=i) for i in range(2))
    wait_status(one, r"^Prompt 1 of 3 · ")
    assert one.locator("[data-cw-token]").count() == 10
    picker = one.locator('select[data-cw-control="prompt"]')
    assert picker.locator("option").nth(1).text_content() == "2: <bos>w7<b>w8</b>w9 (4 tokens)"  # token text stays text
    assert one.locator("b").count() == 0

    # the selector: prompt 2 (4 tokens) clears destination 8, in both views
    picker.select_option("1")
    wait_status(one, r"^Prompt 2 of 3 · ")
    wait_status(two, r"^Prompt 2 of 3 · ")
    for view in (one, two):
        wait_for(lambda v=view: v.locator("[data-cw-token]").count() == 4, "prompt 2's four tokens")  # type: ignore[misc]
        assert view.locator(".cw-token.cw-dest").count() == 0
    assert "<b>w8</b>" in (one.locator('[data-cw-token="2"]').text_content() or "")

    # the small patterns of the selected head, one per prompt: a click shows that prompt, in the linked view too
    minis = two.locator("[data-cw-prompt]")
    assert minis.count() == 3
    wait_for(lambda: minis.nth(2).get_attribute("data-cw-painted") == "1", "prompt 3's small pattern painted")
    minis.nth(2).click()
    wait_status(two, r"^Prompt 3 of 3 · ")
    wait_status(one, r"^Prompt 3 of 3 · ")
    wait_for(lambda: one.locator("[data-cw-token]").count() == 7, "prompt 3's seven tokens in the linked view")
    assert one.locator('select[data-cw-control="prompt"]').input_value() == "2"

    # a head chosen in one is chosen in the other, for the shown prompt
    one.locator('[data-cw-head="1.2"]').click()
    wait_status(two, r"^Prompt 3 of 3 · Layer 1, head 2")
    page_log.assert_offline_clean()


# (imports what it uses: the cell stands alone)
BUILD = f"""\
import sys; sys.path.insert(0, {str(Path(__file__).parent.parent.parent)!r})
import circuitwidgets as cw
from tests.e2e.test_e2e_attention_batch import random_model, PROMPTS
batch_w = cw.AttentionPatterns(random_model(0), PROMPTS, progress_bar=False)
batch_w"""


@pytest.fixture(scope="module")
def lab(jupyter: JupyterServer, browser: Browser) -> Iterator[NotebookPage]:
    context = browser.new_context(viewport={"width": 1400, "height": 1000}, device_scale_factor=1)
    context.set_default_timeout(TIMEOUT_MS)
    try:
        notebook = NotebookPage(context.new_page(), watch(context))
        path = jupyter.write_notebook("batch.ipynb")
        notebook.open(jupyter, path)
        yield notebook
    finally:
        context.close()


def test_live_a_prompt_chosen_in_the_view_reaches_the_kernel_and_a_cells_choice_reaches_the_view(
    lab: NotebookPage,
) -> None:
    seen = len(lab.log.page_errors)
    view = lab.display(BUILD, "attention", timeout_s=120)
    wait_status(view, r"^Prompt 1 of 3 · ", timeout_s=30)
    view.locator('[data-cw-prompt="1"]').click()
    wait_status(view, r"^Prompt 2 of 3 · ")
    assert lab.value("[batch_w.selected_prompt, batch_w.tokens, batch_w.n_tokens]") == [
        1,
        ["<bos>", "w7", "<b>w8</b>", "w9"],
        4,
    ]
    lab.run("batch_w.selected_prompt, batch_w.selected_dest = 2, 6")
    wait_status(view, r"^Prompt 3 of 3 · .*destination 6 ", timeout_s=30)
    assert view.locator("[data-cw-token]").count() == 7
    assert not lab.log.page_errors[seen:], lab.log.page_errors[seen:]
