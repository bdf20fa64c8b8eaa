"""The grokking scrubber in a real browser, offline: the three phase bands drawn, the slider scrubbing the
Fourier norms and the neuron map with no kernel, and no network request."""

from __future__ import annotations

import re
from pathlib import Path

from playwright.sync_api import Page

import circuitwidgets
from circuitwidgets.training import grokking
from circuitwidgets.widgets import GrokkingScrubber

from ._pages import PageLog, open_offline, screenshot, wait_for, wait_status


def _state(view: object) -> dict[str, object]:
    return view.evaluate(  # type: ignore[attr-defined, no-any-return]
        """v => ({
            bands: v.querySelectorAll('rect.cw-phase').length,
            lines: v.querySelectorAll('polyline').length,
            scrub: Number(v.querySelector('line.cw-scrub')?.getAttribute('x1') ?? 'NaN'),
            bars: Array.from(v.querySelectorAll('rect.cw-bar')).map(b => Number(b.getAttribute('height'))),
            keys: v.querySelectorAll('rect.cw-key').length,
            map: v.querySelector('canvas.cw-neuron-map')?.toDataURL() ?? '',
        })"""
    )


def test_scrubbing_moves_the_step_the_norms_and_the_neuron_map_offline(
    tmp_path: Path, page: Page, page_log: PageLog
) -> None:
    run = grokking.train(13, 0.6, steps=300, d_model=16, n_heads=2, d_head=8, d_mlp=32, lr=1e-2, checkpoint_every=50)
    view_widget = GrokkingScrubber.from_history(run)
    path = circuitwidgets.save_html(view_widget, tmp_path / "grokking.html")
    view = open_offline(page, page_log, path, ["grokking"])["grokking"]
    last = wait_for(lambda: (s := _state(view)) and s["lines"] and s, "the loss curves drawn")
    assert last["bands"] >= 1 and len(last["bars"]) == 6  # type: ignore[arg-type]
    wait_status(view, r"step 300 \(")
    slider = view.locator('input[aria-label="checkpoint"]')
    slider.evaluate("s => { s.value = '0'; s.dispatchEvent(new Event('input', { bubbles: true })); }")
    text = wait_status(view, r"step 0 \(memorisation\)")
    assert re.search(r"key frequencies \d", text)
    first = _state(view)
    assert first["scrub"] < last["scrub"]  # type: ignore[operator]
    assert first["bars"] != last["bars"] and first["map"] != last["map"]
    screenshot(view, "grokking_scrubber")
    page_log.assert_offline_clean()
