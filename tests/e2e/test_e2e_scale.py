"""The views at Llama-3-8B's head count, 32 layers × 32 heads, in a real page (issue 20).

One random attention-only model of that shape (small ``d_model`` and vocabulary,
so the kernel side builds in reasonable time) is shown in a CircuitExplorer
exported offline. The tests measure what a researcher meets there: the
scatter's selected label against the selection ring and the other labels, the
composition map's axes, graph and zoom, how the explorer follows a head chosen
by name, and the paint times (printed; run with ``-s`` to read them).
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

import pytest
import torch
from playwright.sync_api import Locator, Page

import circuitwidgets
from circuitwidgets.model import CircuitModel, ModelConfig

from ._pages import PageLog, assert_drawn, wait_for, wait_status, wait_view

N_LAYERS = N_HEADS = 32

#: Generous bounds for a loaded two-core machine (what was measured is printed).
FIRST_PAINT_MS = 30_000
REPAINT_MS = 3_000


def random_model(seed: int = 0) -> CircuitModel:
    """Gaussian weights of an attention-only model with 32 layers × 32 heads (d_model 64, 64 tokens)."""
    g = torch.Generator().manual_seed(seed)
    L, H, d, dh, V, n_ctx = N_LAYERS, N_HEADS, 64, 2, 64, 64

    def r(*shape: int, std: float = 1.0) -> torch.Tensor:
        return torch.randn(*shape, generator=g) * std

    weights = {
        "W_E": r(V, d),
        "W_pos": r(n_ctx, d),
        "W_Q": r(L, H, d, dh, std=d**-0.5),
        "W_K": r(L, H, d, dh, std=d**-0.5),
        "W_V": r(L, H, d, dh, std=d**-0.5),
        "W_O": r(L, H, dh, d, std=(H * dh) ** -0.5),
        "W_U": r(d, V, std=d**-0.5),
    }
    cfg = ModelConfig(L, H, d, dh, V, n_ctx, positional_embedding_type="shortformer")
    return CircuitModel(cfg, weights, name="random-32x32")


@pytest.fixture(scope="module")
def explorer_page(tmp_path_factory: pytest.TempPathFactory, bundle: Path) -> Path:
    """The explorer of the 32 × 32 model, saved offline (built once for the module)."""
    model = random_model()
    started = time.perf_counter()
    explorer = circuitwidgets.CircuitExplorer(
        model,
        list(range(1, 17)),
        k=5,
        profile_k=2,
        trigram_heads=[(1, 1), (20, 17)],
        max_tokens=64,
        progress_bar=False,
        selected_layer=1,
        selected_head=1,
    )
    print(f"\n[scale] CircuitExplorer of 32 x 32 heads built in {time.perf_counter() - started:.1f} s (kernel side)")
    path = Path(circuitwidgets.save_html(explorer, tmp_path_factory.mktemp("scale") / "explorer.html"))
    print(f"[scale] exported page: {path.stat().st_size / 1e6:.1f} MB")
    return path


def open_explorer(page: Page, log: PageLog, path: Path) -> tuple[dict[str, Locator], float]:
    """Open the page; wait until the scatter, the composition map and the explorer are drawn.

    Returns the views and the first paint: ms from navigation start until all three are drawn.
    """
    page.set_viewport_size({"width": 1400, "height": 1000})
    page.goto(path.resolve().as_uri())
    views = {name: wait_view(page, log, name) for name in ("explorer", "eigen", "composition")}
    page.wait_for_function(
        """() => {
          const q = (s) => document.querySelector(s);
          return q('[data-cw-view="eigen"] svg.cw-scatter [data-cw-head]')
            && q('[data-cw-view="composition"] canvas[data-cw-axis-labels]')
            && q('[data-cw-view="composition"] .cw-graph svg [data-cw-edge]');
        }""",
        timeout=FIRST_PAINT_MS,
    )
    first_paint = float(page.evaluate("() => performance.now()"))
    for view in views.values():
        assert_drawn(view)
    return views, first_paint


_REPAINT_JS = """
async ([selector, kind]) => {
  const target = document.querySelector(selector);
  const t0 = performance.now();
  if (kind === "click") target.dispatchEvent(new MouseEvent("click", { bubbles: true }));
  else {
    target.value = kind;
    target.dispatchEvent(new KeyboardEvent("keydown", { key: "Enter", bubbles: true }));
  }
  // the views redraw on the next animation frame; the frame after it is painted
  await new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)));
  return performance.now() - t0;
}
"""

_SCATTER_JS = """
(root) => {
  const svg = root.querySelector("svg.cw-scatter");
  const box = (e) => { const r = e.getBoundingClientRect(); return { x: r.left, y: r.top, w: r.width, h: r.height }; };
  const ring = svg.querySelector(".cw-ring");
  return {
    ring: ring ? box(ring) : null,
    labels: [...svg.querySelectorAll("text.cw-label")].map((t) => ({ text: t.textContent, ...box(t) })),
    points: [...svg.querySelectorAll("[data-cw-head]")].map((g) => [g.dataset.cwHead, +g.dataset.cwX, +g.dataset.cwY]),
    fills: [...new Set([...svg.querySelectorAll("[data-cw-head] .cw-mark")].map((m) => m.getAttribute("fill")))].length,
  };
}
"""


def _circle(b: dict[str, float]) -> tuple[float, float, float]:
    return b["x"] + b["w"] / 2, b["y"] + b["h"] / 2, max(b["w"], b["h"]) / 2


def _covers(label: dict[str, float], circle: tuple[float, float, float]) -> bool:
    cx, cy, r = circle
    nx = min(max(cx, label["x"]), label["x"] + label["w"])
    ny = min(max(cy, label["y"]), label["y"] + label["h"])
    return math.hypot(nx - cx, ny - cy) < r - 0.5


def _overlap(a: dict[str, float], b: dict[str, float], slack: float = 0.5) -> bool:
    return (
        a["x"] + slack < b["x"] + b["w"]
        and b["x"] + slack < a["x"] + a["w"]
        and a["y"] + slack < b["y"] + b["h"]
        and b["y"] + slack < a["y"] + a["h"]
    )


def _crowded_heads(points: list[list[Any]], count: int) -> list[str]:
    """The heads with the most other heads within 15 px: where labels collide if anywhere."""

    def neighbours(p: list[Any]) -> int:
        return sum(1 for q in points if q is not p and math.hypot(p[1] - q[1], p[2] - q[2]) < 15)

    return [p[0] for p in sorted(points, key=neighbours, reverse=True)[:count]]


def _assert_labels_clear(seen: dict[str, Any], selected: str) -> None:
    l, h = selected.split(".")
    name = f"L{l}H{h}"
    labels = seen["labels"]
    assert name in [lab["text"] for lab in labels], f"{name} is not labelled"
    ring = _circle(seen["ring"])
    for i, lab in enumerate(labels):
        assert not _covers(lab, ring), f"{lab['text']} drawn over the selection ring of {name}"
        for other in labels[i + 1 :]:
            assert not _overlap(lab, other), f"labels {lab['text']} and {other['text']} overlap"


def test_scatter_of_1024_heads_names_the_selected_head_clear_of_the_ring_and_other_labels(
    explorer_page: Path, page: Page, page_log: PageLog
) -> None:
    views, first_paint = open_explorer(page, page_log, explorer_page)
    eigen = views["eigen"]
    seen = eigen.evaluate(_SCATTER_JS)
    assert len(seen["points"]) == N_LAYERS * N_HEADS
    assert seen["fills"] >= N_LAYERS, "each of the 32 layers has a colour of its own"
    repaints = []
    # the report's case (L1H1 selected, L1H2 beside it), then the heads in the thickest crowd
    crowded = _crowded_heads(seen["points"], 4)
    for head in ["1.1", "1.2", *crowded]:
        repaints.append(page.evaluate(_REPAINT_JS, [f'[data-cw-view="eigen"] [data-cw-head="{head}"]', "click"]))
        l, h = head.split(".")
        wait_status(eigen, rf"L{l}H{h} selected")
        _assert_labels_clear(eigen.evaluate(_SCATTER_JS), head)
    # one layer in colour: its 32 heads named, no label over another or over the ring
    eigen.locator("select.cw-layer-filter").select_option("20")
    wait_for(lambda: len(eigen.evaluate(_SCATTER_JS)["labels"]) > 5, "layer 20's heads named")
    seen = eigen.evaluate(_SCATTER_JS)
    selected = crowded[-1]
    named = {lab["text"] for lab in seen["labels"]} - {"L" + selected.replace(".", "H")}
    assert named <= {f"L20H{i}" for i in range(32)}, named
    _assert_labels_clear(seen, selected)
    print(f"[scale] first paint of the explorer (scatter, map, every view): {first_paint:.0f} ms")
    print(f"[scale] selecting a head, all views redrawn: {', '.join(f'{t:.0f}' for t in repaints)} ms")
    assert first_paint < FIRST_PAINT_MS
    assert max(repaints) < REPAINT_MS, repaints
    page_log.assert_offline_clean()


_GRAPH_JS = """
(root) => {
  const svg = root.querySelector(".cw-graph svg");
  const box = (e) => { const r = e.getBoundingClientRect(); return { x: r.left, y: r.top, w: r.width, h: r.height }; };
  return {
    edges: svg.querySelectorAll("[data-cw-edge]").length,
    nodes: [...svg.querySelectorAll("[data-cw-head] circle")].map(box),
    columns: [...svg.querySelectorAll("text.cw-graph-layer")].map((t) => ({ text: t.textContent, ...box(t) })),
    maps: [...root.querySelectorAll("canvas[data-kind]")].map((c) => ({
      kind: c.dataset.kind, viewport: c.dataset.cwViewport, labels: JSON.parse(c.dataset.cwAxisLabels || "[]"),
      box: box(c), cssWidth: parseFloat(c.style.width) })),
  };
}
"""


def test_composition_map_of_1024_heads_draws_12_edges_apart_readable_axes_and_zooms(
    explorer_page: Path, page: Page, page_log: PageLog
) -> None:
    views, _ = open_explorer(page, page_log, explorer_page)
    comp = views["composition"]
    seen = comp.evaluate(_GRAPH_JS)
    assert seen["edges"] == 12, "the strongest 12 edges by default"
    assert 2 <= len(seen["nodes"]) <= 25, "only the heads the edges join (and the selected head)"
    for i, a in enumerate(seen["nodes"]):
        for b in seen["nodes"][i + 1 :]:
            assert not _overlap(a, b), "two heads' circles overlap"
    for i, a in enumerate(seen["columns"]):
        for b in seen["columns"][i + 1 :]:
            assert not _overlap(a, b), f"column labels {a['text']} and {b['text']} overlap"
    n = (N_LAYERS - 1) * N_HEADS
    assert [m["viewport"] for m in seen["maps"]] == [f"0,0,{n}"] * 3
    for m in seen["maps"]:
        texts = [lab["text"] for lab in m["labels"]]
        assert "L4" in texts and "L28" in texts, texts
        for i, a in enumerate(m["labels"]):
            for b in m["labels"][i + 1 :]:
                assert not _overlap({**a}, {**b}), f"{m['kind']} map: axis labels {a['text']} and {b['text']} overlap"
    # Ctrl + wheel over the K map zooms all three maps at the pointer, until heads are numbered
    k_map = comp.locator("canvas[data-kind='K']")
    k_map.scroll_into_view_if_needed()
    box = k_map.bounding_box()
    assert box is not None
    page.mouse.move(box["x"] + box["width"] * 0.6, box["y"] + box["height"] * 0.4)
    page.keyboard.down("Control")
    for _ in range(14):
        page.mouse.wheel(0, -100)
        page.wait_for_timeout(30)
    page.keyboard.up("Control")
    wait_for(lambda: int(k_map.get_attribute("data-cw-viewport").split(",")[2]) <= 64, "the maps zoomed in")  # type: ignore[union-attr]
    zoomed = comp.evaluate(_GRAPH_JS)["maps"]
    assert len({m["viewport"] for m in zoomed}) == 1, "the three maps share the zoom"
    numbers = [lab["text"] for lab in zoomed[1]["labels"] if lab["text"].isdigit()]
    assert len(numbers) >= 8, f"zoomed in, heads are numbered: {zoomed[1]['labels']}"
    assert comp.locator(".cw-map-window").text_content().startswith("Zoomed: rows L")  # type: ignore[union-attr]
    # a click on a cell of the zoomed map selects that pair of heads
    r0, c0, size = (int(v) for v in zoomed[1]["viewport"].split(","))
    scale = box["width"] / zoomed[1]["cssWidth"]
    cell = (zoomed[1]["cssWidth"] - 46) / size
    row, col = r0 + 1, c0 + size - 2  # top right: an earlier head's row, a later head's column
    l1, h1, l2, h2 = row // N_HEADS, row % N_HEADS, col // N_HEADS + 1, col % N_HEADS
    assert l1 < l2, "the zoomed window shows pairs of an earlier and a later head"
    page.mouse.click(
        box["x"] + (46 + (col - c0 + 0.5) * cell) * scale, box["y"] + (30 + (row - r0 + 0.5) * cell) * scale
    )
    wait_status(comp, rf"Edge L{l1}H{h1} → L{l2}H{h2} \(K,")
    page_log.assert_offline_clean()


def test_explorer_of_1024_heads_follows_a_head_found_by_name(
    explorer_page: Path, page: Page, page_log: PageLog
) -> None:
    views, _ = open_explorer(page, page_log, explorer_page)
    took = page.evaluate(_REPAINT_JS, ['[data-cw-view="eigen"] .cw-find input', "L20H17"])
    wait_status(views["explorer"], r"L20H17 selected")
    wait_status(views["eigen"], r"L20H17 selected")
    wait_status(views["composition"], r"L20H17 selected")
    trigrams = wait_view(page, page_log, "skiptrigrams")
    wait_for(lambda: "L20H17" in (trigrams.locator(".cw-title").text_content() or ""), "the skip-trigram table follows")
    canvas = views["composition"].locator("canvas[data-kind='Q']")
    columns = json.loads(canvas.get_attribute("data-cw-axis-labels") or "[]")
    assert columns, "the map's axes are labelled"
    print(f"[scale] a head found by name, all views redrawn: {took:.0f} ms")
    assert took < REPAINT_MS
    page_log.assert_offline_clean()
