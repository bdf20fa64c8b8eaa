"""At 32 × 32 = 1,024 heads only the thumbnails on screen are painted; scrolling paints the rest (a saved page, offline).

Prints the measured paint time of the first screen of thumbnails (run with ``-s``).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import torch
from playwright.sync_api import Locator, Page

import circuitwidgets as cw
from circuitwidgets.model import CircuitModel, ModelConfig

from ._pages import PageLog, open_offline, wait_for, wait_view

L, H = 32, 32

#: The margin around the visible area within which thumbnails are painted ahead (js/src/views/attention/visible.ts).
MARGIN_PX = 48

#: Per thumbnail: painted, and whether it lies within the visible area (clipped by the grid's box and the window).
_THUMBS_JS = """
(view, margin) => {
  const box = view.querySelector('.cw-thumbs');
  const b = box.getBoundingClientRect();
  const top = Math.max(b.top, 0), bottom = Math.min(b.bottom, window.innerHeight);
  const left = Math.max(b.left, 0), right = Math.min(b.right, window.innerWidth);
  return Array.from(view.querySelectorAll('.cw-thumb'), (t) => {
    const r = t.getBoundingClientRect();
    const inside = (m) => r.bottom > top - m && r.top < bottom + m && r.right > left - m && r.left < right + m;
    return { painted: t.dataset.cwPainted === '1', visible: inside(0), near: inside(margin),
             whole: r.top >= top && r.bottom <= bottom && r.left >= left && r.right <= right };
  });
}
"""


#: Opacity of the shared thumbnail canvas at the centre of a head's cell (0: nothing drawn there).
_PIXEL_JS = """
(view, head) => {
  const box = view.querySelector('.cw-thumbs');
  const canvas = box.querySelector('.cw-thumbs-canvas');
  const cell = box.querySelector(`[data-cw-head="${head}"] .cw-thumb-cell`);
  const dpr = window.devicePixelRatio || 1;
  const x = Math.round((cell.offsetLeft + cell.offsetWidth / 2) * dpr), y = Math.round((cell.offsetTop + cell.offsetHeight / 2) * dpr);
  return canvas.width > x && canvas.height > y ? canvas.getContext('2d').getImageData(x, y, 1, 1).data[3] : 0;
}
"""


def model_32x32() -> CircuitModel:
    g = torch.Generator().manual_seed(0)
    d, dh, V, n_ctx = 32, 4, 64, 32

    def r(*shape: int, std: float = 1.0) -> torch.Tensor:
        return torch.randn(*shape, generator=g) * std

    weights = {
        "W_E": r(V, d), "W_pos": r(n_ctx, d), "W_Q": r(L, H, d, dh, std=d**-0.5), "W_K": r(L, H, d, dh, std=d**-0.5),
        "W_V": r(L, H, d, dh, std=d**-0.5), "W_O": r(L, H, dh, d, std=(H * dh) ** -0.5), "W_U": r(d, V, std=d**-0.5),
    }  # fmt: skip
    return CircuitModel(ModelConfig(L, H, d, dh, V, n_ctx), weights, name="random-32x32")


def settled(view: Locator) -> dict[str, Any]:
    """The thumbnails once painting has stopped (no new paint for half a second)."""
    box = view.locator(".cw-thumbs").first
    last = None
    while True:
        now = (box.get_attribute("data-cw-thumbs-painted"), box.get_attribute("data-cw-thumbs-at"))
        if now == last and now[0] is not None:
            return {
                "painted": int(now[0]),
                "at_ms": float(now[1] or 0),
                "paint_ms": float(box.get_attribute("data-cw-thumbs-ms") or 0),
            }
        last = now
        time.sleep(0.5)


def test_only_visible_thumbnails_of_1024_heads_are_painted_and_scrolling_paints_the_rest(
    tmp_path: Path, page: Page, page_log: PageLog
) -> None:
    ids = torch.randint(0, 64, (24,), generator=torch.Generator().manual_seed(1))
    widget = cw.AttentionPatterns(model_32x32(), ids, selected_layer=0, selected_head=0)
    path = cw.save_html(widget, tmp_path / "heads-1024.html")

    open_offline(page, page_log, path, ["attention"])
    view = wait_view(page, page_log, "attention")
    assert view.locator(".cw-thumb").count() == L * H
    first = settled(view)
    thumbs = view.evaluate(_THUMBS_JS, MARGIN_PX)
    painted = [t for t in thumbs if t["painted"]]
    assert 0 < len(painted) < L * H, f"{len(painted)} of {L * H} thumbnails painted"
    assert sum(not t["near"] for t in thumbs) >= 4 * H, "the grid should hold rows out of view (it scrolls)"
    assert all(t["near"] for t in painted), "a thumbnail out of view was painted"
    assert all(t["painted"] for t in thumbs if t["visible"]), "a thumbnail in view was not painted"
    # pixels where the flags say: the first layer is drawn, the last is not (yet)
    assert view.evaluate(_PIXEL_JS, "0.0") == 255 and view.evaluate(_PIXEL_JS, "31.31") == 0

    # scroll the grid to its end: the last layers are painted as they come into view
    view.locator(".cw-thumbs").evaluate("box => { box.scrollTop = box.scrollHeight; }")
    wait_for(
        lambda: view.locator('[data-cw-head="31.0"]').get_attribute("data-cw-painted") == "1",
        "layer 31 painted",
        timeout_s=30,
    )
    after = settled(view)
    thumbs = view.evaluate(_THUMBS_JS, MARGIN_PX)
    assert all(t["painted"] for t in thumbs if t["visible"])
    assert first["painted"] < after["painted"] <= L * H
    assert view.locator('[data-cw-head="0.0"]').get_attribute("data-cw-painted") == "1"  # painted once, kept
    assert view.evaluate(_PIXEL_JS, "31.31") == 255
    page_log.assert_offline_clean()
    print(
        f"\n1,024 heads: first screen {first['painted']} thumbnails painted in {first['paint_ms']:.1f} ms of painting "
        f"({first['paint_ms'] / first['painted']:.2f} ms each), the last {first['at_ms']:.0f} ms after the page began loading; "
        f"after scrolling to the end {after['painted']} painted in all ({after['paint_ms']:.1f} ms)"
    )
