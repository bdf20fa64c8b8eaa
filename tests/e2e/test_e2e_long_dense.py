"""Long contexts from dense arrays. JupyterLab 4, live: ``from_arrays`` over LONG_ARRAY_TOKENS paints its overview
and zooms to single cells whose tiles the kernel reads from the user's array (the weights themselves)."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser

from ._hosts import JupyterServer
from ._notebook import NotebookPage
from ._pages import TIMEOUT_MS, wait_for, wait_status, watch

N_TOKENS = 4096

# a causal softmax of random scores, dense [1, 2, N, N] float32, as a TransformerLens cache holds it
BUILD = f"""\
import torch, circuitwidgets as cw
_g = torch.Generator().manual_seed(0)
_s = torch.randn(1, 2, {N_TOKENS}, {N_TOKENS}, generator=_g) * 4
dense = _s.masked_fill_(torch.ones({N_TOKENS}, {N_TOKENS}, dtype=torch.bool).triu_(1), -torch.inf).softmax(-1)
dense_w = cw.AttentionPatterns.from_arrays([f"w{{i}}" for i in range({N_TOKENS})], dense, selected_head=1)
dense_w"""


@pytest.fixture(scope="module")
def lab(jupyter: JupyterServer, browser: Browser) -> Iterator[NotebookPage]:
    context = browser.new_context(viewport={"width": 1400, "height": 1000}, device_scale_factor=1)
    context.set_default_timeout(TIMEOUT_MS)
    try:
        notebook = NotebookPage(context.new_page(), watch(context))
        path = jupyter.write_notebook("long_dense.ipynb")
        notebook.open(jupyter, path)
        yield notebook
    finally:
        context.close()


def test_a_long_dense_array_zooms_to_single_cells_with_the_arrays_own_weights(lab: NotebookPage) -> None:
    seen = len(lab.log.page_errors)
    lab.run("import torch, circuitwidgets as cw", timeout_s=120)
    view = lab.display(BUILD, "attention")
    wait_for(lambda: view.get_attribute("data-cw-painted"), "the overview of the selected head", timeout_s=120)
    assert lab.value("type(dense_w.qk).__name__") == "DensePatterns"
    assert lab.value("dense_w.patterns.shape[2]") == 0  # nothing quantised into the state

    canvas = view.locator(".cw-main canvas").first
    canvas.click(position={"x": 90 + 200, "y": 66 + 200})
    for _ in range(22):
        canvas.press("+")
    zoom = view.locator(".cw-zoom").first

    def zoomed_in() -> re.Match[str] | None:
        m = re.search(r"rows (\d+)–(\d+), columns (\d+)–(\d+)", zoom.text_content() or "")
        return m if m is not None and int(m.group(2)) - int(m.group(1)) + 1 <= 16 else None

    text = wait_for(zoomed_in, "a view zoomed to at most 16 cells a side")
    _, r1, c0, _ = (int(x) for x in text.groups())
    wait_for(lambda: int(view.get_attribute("data-cw-tiles-cached") or 0) > 0, "tiles from the kernel", timeout_s=60)
    wait_for(lambda: view.get_attribute("data-cw-tiles-pending") == "0", "every tile asked for", timeout_s=60)

    dest, src = r1, max(c0, 0) if c0 <= r1 else r1
    lab.run(f"dense_w.selected_dest, dense_w.selected_src = {dest}, {src}")
    status = wait_status(view, rf"destination {dest} .*→ source {src} .*: \d\.\d{{3}}", timeout_s=30)
    shown = float(re.search(r"→ source \d+ “[^”]*”: (\d\.\d{3})", status).group(1))  # type: ignore[union-attr]
    exact = lab.value(f"float(dense[0, 1, {dest}, {src}])")
    assert abs(shown - exact) <= 0.0005 + 1e-9, (shown, exact)
    assert "≤" not in status and "kernel:" not in status
    assert not lab.log.page_errors[seen:], lab.log.page_errors[seen:]
