"""Long texts. JupyterLab 4, live: a long-context attention widget (from_qk) paints its overview and zooms to single
cells at 32,768 tokens, raw and value-weighted. Offline: a text longer than the context, in windows, says how it was computed.

The kernel holds queries and keys only; the view paints each head's overview
(block max) and, as it zooms, asks the kernel for finer tiles until single
weights, which must equal the kernel's exact softmax.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page

from ._hosts import JupyterServer
from ._notebook import NotebookPage
from ._pages import TIMEOUT_MS, PageLog, open_offline, wait_for, wait_status, wait_view, watch

N_TOKENS = 32_768  # the long context: the kernel serves tiles down to single weights

IMPORTS = "import torch, circuitwidgets as cw"

# (imports again: a no-op once IMPORTS has run, and the cell stands alone if that run was lost to a busy page)
BUILD = f"""\
import torch, circuitwidgets as cw
_g = torch.Generator().manual_seed(0)
q = torch.randn(1, 2, {N_TOKENS}, 16, generator=_g)
k = torch.randn(1, 2, {N_TOKENS}, 16, generator=_g)
norms = torch.rand(1, 2, {N_TOKENS}, generator=_g) * 2
long_w = cw.AttentionPatterns.from_qk([f"w{{i}}" for i in range({N_TOKENS})], q, k, value_norms=norms, selected_head=1)
long_w"""


@pytest.fixture(scope="module")
def lab(jupyter: JupyterServer, browser: Browser) -> Iterator[NotebookPage]:
    context = browser.new_context(viewport={"width": 1400, "height": 1000}, device_scale_factor=1)
    context.set_default_timeout(TIMEOUT_MS)
    try:
        notebook = NotebookPage(context.new_page(), watch(context))
        path = jupyter.write_notebook("long.ipynb")
        notebook.open(jupyter, path)
        yield notebook
    finally:
        context.close()


def test_a_long_context_zooms_to_single_cells_with_exact_tiles_from_the_kernel(lab: NotebookPage) -> None:
    seen = len(lab.log.page_errors)
    lab.run(IMPORTS, timeout_s=120)  # a cell of its own: importing torch can take seconds on a busy machine
    started = time.monotonic()
    view = lab.display(BUILD, "attention")
    # the selected head's overview arrives from the kernel and is painted
    wait_for(lambda: view.get_attribute("data-cw-painted"), "the overview of the selected head", timeout_s=120)
    painted_s = time.monotonic() - started
    assert view.locator("[data-cw-token]").count() <= 1024, "the token strip must stay virtualised"

    canvas = view.locator(".cw-main canvas").first
    canvas.click(position={"x": 90 + 200, "y": 66 + 200})  # focus (and select a cell)
    for _ in range(22):  # keyboard zoom around the centre, down to the fewest cells a side
        canvas.press("+")
    zoom = view.locator(".cw-zoom").first

    def zoomed_in() -> re.Match[str] | None:
        # (the keys are drawn a frame each: wait for the last, not the first view that reads as zoomed)
        m = re.search(r"rows (\d+)–(\d+), columns (\d+)–(\d+)", zoom.text_content() or "")
        return m if m is not None and int(m.group(2)) - int(m.group(1)) + 1 <= 16 else None

    text = wait_for(zoomed_in, "a view zoomed to at most 16 cells a side")
    _, r1, c0, _ = (int(x) for x in text.groups())
    wait_for(lambda: int(view.get_attribute("data-cw-tiles-cached") or 0) > 0, "tiles from the kernel", timeout_s=60)
    wait_for(lambda: view.get_attribute("data-cw-tiles-pending") == "0", "every tile asked for", timeout_s=60)

    # a cell in view, selected from the kernel: the status gives its exact weight
    dest, src = r1, max(c0, 0) if c0 <= r1 else r1
    lab.run(f"long_w.selected_dest, long_w.selected_src = {dest}, {src}")
    status = wait_status(view, rf"destination {dest} .*→ source {src} .*: \d\.\d{{3}}", timeout_s=30)
    shown = float(re.search(r"→ source \d+ “[^”]*”: (\d\.\d{3})", status).group(1))  # type: ignore[union-attr]
    exact = lab.value(f"float(long_w.qk.weights(0, 1, {dest}, {dest} + 1, {src}, {src} + 1)[0, 0])")
    assert abs(shown - exact) <= 0.0005 + 1e-9, (shown, exact)
    assert "≤" not in status and "kernel:" not in status

    # the value-weighted pattern at the same zoom: its own tiles, exact too
    lab.run('long_w.pattern_kind = "value"')
    status = wait_status(
        view, rf"value-weighted pattern\) · destination {dest} .*→ source {src} .*: \d\.\d{{3}}", timeout_s=60
    )
    shown = float(re.search(r"→ source \d+ “[^”]*”: (\d\.\d{3})", status).group(1))  # type: ignore[union-attr]
    exact = lab.value(f"float(long_w.qk.weights(0, 1, {dest}, {dest} + 1, {src}, {src} + 1, 'value')[0, 0])")
    assert abs(shown - exact) <= 0.0005 + 1e-9, (shown, exact)
    assert not lab.log.page_errors[seen:], lab.log.page_errors[seen:]
    print(f"first paint {painted_s:.1f}s after Shift+Enter (the selected head's first band of overview rows)")


def test_a_text_in_windows_is_saved_whole_and_says_how_it_was_computed(
    tmp_path: Path, page: Page, page_log: PageLog
) -> None:
    """Offline: a 100-token text through a model of context 32, in windows; each row as its window computed it."""
    import torch

    import circuitwidgets as cw
    from circuitwidgets.model import CircuitModel, ModelConfig

    g = torch.Generator().manual_seed(0)
    L, H, d, dh, V, n_ctx = 1, 2, 16, 4, 40, 32
    weights = {
        name: torch.randn(*shape, generator=g) * shape[-2] ** -0.5
        for name, shape in {
            "W_E": (V, d), "W_pos": (n_ctx, d), "W_Q": (L, H, d, dh), "W_K": (L, H, d, dh), "W_V": (L, H, d, dh),
            "W_O": (L, H, dh, d), "W_U": (d, V),
        }.items()
    }  # fmt: skip
    model = CircuitModel(ModelConfig(L, H, d, dh, V, n_ctx), weights, name="random-ctx32")
    ids = torch.randint(0, V, (100,), generator=g)
    w = cw.AttentionPatterns(model, ids, window=32, stride=16, selected_dest=99)
    path = cw.save_html(w, tmp_path / "windows.html")
    open_offline(page, page_log, path, ["attention"])
    view = wait_view(page, page_log, "attention")
    subtitle = view.locator(".cw-subtitle").first.text_content() or ""
    assert "100 tokens" in subtitle and "6 windows of 32 tokens, stride 16" in subtitle, subtitle
    # the status gives row 99's strongest weight as the widget holds it (the last window's row)
    status = wait_status(view, r"destination 99 .* attends most to \d+ .*\((\d\.\d{3})\)")
    shown = float(re.search(r"attends most to \d+ [^(]*\((\d\.\d{3})\)", status).group(1))  # type: ignore[union-attr]
    assert abs(shown - float(w.attention[0, 0, 99].max())) <= 0.0005 + 1e-9
    page_log.assert_offline_clean()
