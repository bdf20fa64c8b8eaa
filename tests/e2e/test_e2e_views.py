"""What a researcher sees is right and usable, checked in a real page (issues 18 and 22).

Each test opens an exported page from ``file://`` (offline) and measures the
drawn view: tick labels against their gridlines, labels against dots and the
selection ring, the edge a click near a crossing selects, content against a
480 px container, the wheel over a pattern, and what a figure export holds.
"""

from __future__ import annotations

import math
import re
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from playwright.sync_api import Locator, Page

import circuitwidgets

from ._pages import PageLog, open_offline, wait_for, wait_status
from ._widgets import causal_patterns

Point = tuple[float, float]


def _number(text: str) -> float:
    return float(text.replace("\u2212", "-"))


# --- EigenScatter: ticks and labels ---------------------------------------------------------------

_TICKS_JS = """
(root) => [...root.querySelectorAll(".cw-plot svg text.cw-tick-x, .cw-plot svg text.cw-tick-y")].map((t) => {
  const r = t.getBoundingClientRect();
  return { axis: t.classList.contains("cw-tick-x") ? "x" : "y", text: t.textContent,
           x: r.left + r.width / 2, y: r.top + r.height / 2 };
})
"""


def _assert_ticks_name_their_positions(view: Locator) -> list[str]:
    ticks = view.evaluate(_TICKS_JS)
    texts = []
    for axis in ("x", "y"):
        ts = [t for t in ticks if t["axis"] == axis]
        assert len(ts) >= 3, ticks
        values = [_number(t["text"]) for t in ts]
        pos = [t[axis] for t in ts]
        # the label of every tick, mapped through the line of the first and last ticks, lands on that tick
        k = (pos[-1] - pos[0]) / (values[-1] - values[0])
        for v, p, t in zip(values, pos, ts, strict=True):
            assert abs(pos[0] + (v - values[0]) * k - p) < 1.0, (
                f"{axis} tick {t['text']!r} sits at the position of another value"
            )
        texts += [t["text"] for t in ts]
    return texts


def test_eigen_tick_labels_equal_their_positions_with_every_score(
    built: Any, tmp_path: Path, page: Page, page_log: PageLog
) -> None:
    path = circuitwidgets.save_html(built("eigen"), tmp_path / "eigen.html")
    view = open_offline(page, page_log, path, ["eigen"])["eigen"]
    methods = view.locator(".cw-controls button[data-value]").evaluate_all("bs => bs.map(b => b.dataset.value)")
    assert "topk" in methods, methods
    for method in ("topk", "diagonal", "eigen"):
        if method not in methods:
            continue
        button = view.locator(f'.cw-controls button[data-value="{method}"]')
        button.click()
        wait_for(lambda: button.get_attribute("aria-pressed") == "true", method)  # noqa: B023 (used at once)
        texts = _assert_ticks_name_their_positions(view)
        if method == "topk":
            assert "0.25" in texts and "0.75" in texts, texts  # not rounded to 0.3 / 0.8
    page_log.assert_offline_clean()


_LABELS_JS = """
(root) => {
  const svg = root.querySelector(".cw-plot svg");
  const box = (e) => { const r = e.getBoundingClientRect(); return { x: r.left, y: r.top, w: r.width, h: r.height }; };
  const ring = svg.querySelector(".cw-ring");
  return {
    ring: ring ? box(ring) : null,
    marks: [...svg.querySelectorAll("[data-cw-head] .cw-mark")].map((m) => ({ head: m.closest("[data-cw-head]").dataset.cwHead, ...box(m) })),
    labels: [...svg.querySelectorAll("text.cw-label")].map((t) => ({ text: t.textContent, ...box(t) })),
    heads: [...svg.querySelectorAll("[data-cw-head]")].map((g) => g.dataset.cwHead),
  };
}
"""


def _circle(b: dict[str, float]) -> tuple[float, float, float]:
    return b["x"] + b["w"] / 2, b["y"] + b["h"] / 2, max(b["w"], b["h"]) / 2


def _covers(label: dict[str, float], circle: tuple[float, float, float], slack: float = 0.5) -> bool:
    cx, cy, r = circle
    nx = min(max(cx, label["x"]), label["x"] + label["w"])
    ny = min(max(cy, label["y"]), label["y"] + label["h"])
    return math.hypot(nx - cx, ny - cy) < r - slack


def _overlap(a: dict[str, float], b: dict[str, float], slack: float = 0.5) -> bool:
    return (
        a["x"] + slack < b["x"] + b["w"]
        and b["x"] + slack < a["x"] + a["w"]
        and a["y"] + slack < b["y"] + b["h"]
        and b["y"] + slack < a["y"] + a["h"]
    )


def _select_head(view: Locator, head: str) -> None:
    view.locator(f'.cw-plot [data-cw-head="{head}"]').dispatch_event("click")
    l, h = head.split(".")
    wait_status(view, rf"L{l}H{h} selected")


def test_eigen_labels_never_cover_the_selection_ring_dots_or_each_other_and_every_head_is_named(
    built: Any, tmp_path: Path, page: Page, page_log: PageLog
) -> None:
    path = circuitwidgets.save_html(built("eigen"), tmp_path / "eigen.html")
    view = open_offline(page, page_log, path, ["eigen"])["eigen"]
    heads = view.evaluate(_LABELS_JS)["heads"]
    assert len(heads) >= 8
    # the report's case (L1H1 selected, L1H2 beside it), then every other head of layer 1 and two of layer 0
    for head in ["1.1", *[h for h in heads if h.startswith("1.") and h != "1.1"], "0.0", "0.2"]:
        _select_head(view, head)
        seen = view.evaluate(_LABELS_JS)
        assert seen["ring"] is not None
        l, h = head.split(".")
        assert f"L{l}H{h}" in [lab["text"] for lab in seen["labels"]], "the selected head is labelled"
        ring = _circle(seen["ring"])
        for i, lab in enumerate(seen["labels"]):
            assert not _covers(lab, ring), f"{lab['text']} drawn over the selection ring of {head}"
            for m in seen["marks"]:
                assert not _covers(lab, _circle(m)), f"{lab['text']} hides the dot of {m['head']}"
            for other in seen["labels"][i + 1 :]:
                assert not _overlap(lab, other), f"labels {lab['text']} and {other['text']} overlap"
    # every head is named: by its label, or by the hover label when the pointer is on it
    labelled = {lab["text"] for lab in view.evaluate(_LABELS_JS)["labels"]}
    for head in heads:
        l, h = head.split(".")
        name = f"L{l}H{h}"
        if name in labelled:
            continue
        view.locator(f'.cw-plot [data-cw-head="{head}"]').dispatch_event("mouseover")
        shown = view.locator(".cw-plot .cw-hover-label")
        assert shown.get_attribute("visibility") == "visible"
        assert shown.locator("text").text_content() == name
    page_log.assert_offline_clean()


# --- CompositionMap: a click near a crossing -------------------------------------------------------

_EDGES_JS = """
(root) => {
  const svg = root.querySelector(".cw-graph svg");
  const r = svg.getBoundingClientRect();
  const vb = svg.viewBox.baseVal;
  return {
    box: { x: r.left, y: r.top, sx: r.width / vb.width, sy: r.height / vb.height },
    edges: [...svg.querySelectorAll("[data-cw-edge]")].map((g) => ({
      id: g.dataset.cwEdge, kind: g.dataset.cwKind, d: g.querySelector(".cw-edge-line").getAttribute("d") })),
    nodes: [...svg.querySelectorAll("[data-cw-head] circle")].map((c) => [+c.getAttribute("cx"), +c.getAttribute("cy"), +c.getAttribute("r")]),
  };
}
"""


def _bezier(d: str, steps: int = 200) -> np.ndarray:
    nums = [float(v) for v in re.findall(r"-?\d+(?:\.\d+)?", d)]
    p = np.array(nums, dtype=float).reshape(4, 2)
    t = np.linspace(0, 1, steps + 1)[:, None]
    u = 1 - t
    out: np.ndarray = u**3 * p[0] + 3 * u**2 * t * p[1] + 3 * u * t**2 * p[2] + t**3 * p[3]
    return out


def _distance(q: np.ndarray, curve: np.ndarray) -> float:
    a, b = curve[:-1], curve[1:]
    v = b - a
    t = np.clip(((q - a) * v).sum(1) / np.maximum((v * v).sum(1), 1e-12), 0, 1)
    return float(np.min(np.hypot(*(a + t[:, None] * v - q).T)))


def _crossing_clicks(edges: list[dict[str, Any]], nodes: list[list[float]]) -> list[tuple[dict[str, Any], Point]]:
    """Points near a crossing of two edges, each nearer (by ≥ 2.5 px) to one of them: (that edge, point)."""
    curves = [_bezier(e["d"]) for e in edges]
    out: list[tuple[dict[str, Any], Point]] = []
    for i in range(len(edges)):
        for j in range(i + 1, len(edges)):
            if edges[i]["id"] == edges[j]["id"]:
                continue  # the same pair of heads, another kind
            a, b = curves[i], curves[j]
            gaps = np.array([_distance(q, b) for q in a])
            k = int(np.argmin(gaps))
            if gaps[k] > 0.5 or k < 20 or k > len(a) - 20:
                continue  # no crossing in the open
            for mine, other, idx in ((i, j, a), (j, i, b)):
                curve = curves[mine]
                start = int(np.argmin([_distance(q, curves[other]) for q in curve]))
                for step in range(1, 40):
                    q = curve[min(len(curve) - 1, start + step)]
                    d_other = _distance(q, curves[other])
                    if d_other >= 2.5:
                        near_node = any(math.hypot(q[0] - x, q[1] - y) < r + 3 for x, y, r in nodes)
                        if d_other < 8 and not near_node:
                            out.append((edges[mine], (float(q[0]), float(q[1]))))
                        break
                del idx
            if len(out) >= 4:
                return out
    return out


def test_a_click_near_a_crossing_of_edges_selects_the_nearer_edge(
    built: Any, tmp_path: Path, page: Page, page_log: PageLog
) -> None:
    widget = built("composition")
    path = circuitwidgets.save_html(widget, tmp_path / "composition.html")
    view = open_offline(page, page_log, path, ["composition"])["composition"]
    view.get_by_label("strongest").select_option("48")  # many edges: crossings
    wait_for(lambda: len(view.evaluate(_EDGES_JS)["edges"]) > 12, "48 edges drawn")
    seen = view.evaluate(_EDGES_JS)
    clicks = _crossing_clicks(seen["edges"], seen["nodes"])
    assert clicks, "no two drawn edges cross"
    box = seen["box"]
    for edge, (x, y) in clicks:
        page.mouse.click(box["x"] + x * box["sx"], box["y"] + y * box["sy"])
        l1h1, l2h2 = edge["id"].split("-")
        a, b = l1h1.split(".")
        c, d = l2h2.split(".")
        wait_status(view, rf"Edge L{a}H{b} → L{c}H{d} \({edge['kind']},")
    page_log.assert_offline_clean()


# --- 480 px: nothing clipped ---------------------------------------------------------------------

_CLIPPED_JS = """
(root) => {
  const R = root.getBoundingClientRect();
  const bad = [];
  for (const e of root.querySelectorAll("*")) {
    const r = e.getBoundingClientRect();
    if (r.width === 0 || r.height === 0) continue;
    const style = getComputedStyle(e);
    if (style.visibility === "hidden" || e.closest("[visibility=hidden]")) continue;
    if (r.right > R.right + 1 || r.left < R.left - 1) bad.push(`${e.tagName}.${e.getAttribute("class") || ""} ${Math.round(r.left - R.left)}..${Math.round(r.right - R.left)} of ${Math.round(R.width)}`);
    if (e instanceof HTMLElement && /(auto|scroll|hidden)/.test(style.overflowX) && e.scrollWidth > e.clientWidth + 1)
      bad.push(`${e.tagName}.${e.className} scrolls ${e.scrollWidth} > ${e.clientWidth}`);
  }
  return { width: R.width, bad: bad.slice(0, 12) };
}
"""


@pytest.mark.parametrize(
    ("name", "width"),
    [("attention", 480), ("eigen", 480), ("composition", 480), ("explorer", 480), ("explorer", 1200)],
)
def test_a_view_480_px_wide_has_no_clipped_content(
    name: str, width: int, built: Any, tmp_path: Path, page: Page, page_log: PageLog
) -> None:
    """Nothing sticks out of the view or hides behind a scroll bar; 1200 px: the explorer's two columns."""
    path = circuitwidgets.save_html(built(name), tmp_path / f"{name}.html")
    page.set_viewport_size({"width": max(1000, width + 40), "height": 900})
    view = open_offline(page, page_log, path, [name])[name]
    page.evaluate(f"() => {{ document.body.style.margin = '0'; document.body.style.width = '{width}px'; }}")
    wait_for(lambda: view.evaluate("(r) => r.getBoundingClientRect().width") <= width + 1, f"the view {width} px wide")
    page.wait_for_timeout(300)  # a frame to redraw at the new width
    seen = view.evaluate(_CLIPPED_JS)
    assert seen["width"] <= width + 1
    assert not seen["bad"], f"{name} at {width} px: {seen['bad']}"
    page_log.assert_offline_clean()


# --- AttentionPatterns: the wheel, following a selection --------------------------------------------


def _long_attention(tmp_path: Path) -> Path:
    tokens = ["<bos>", *[f" w{i}" for i in range(59)]]
    w = circuitwidgets.AttentionPatterns.from_arrays(tokens, causal_patterns(1, 2, len(tokens), seed=3))
    return Path(circuitwidgets.save_html(w, tmp_path / "long.html"))


def _zoom_text(view: Locator) -> str:
    return view.locator(".cw-zoom").text_content() or ""


def test_wheel_over_a_pattern_scrolls_the_page_without_a_modifier_and_zooms_with_one(
    tmp_path: Path, page: Page, page_log: PageLog
) -> None:
    view = open_offline(page, page_log, _long_attention(tmp_path), ["attention"])["attention"]
    page.evaluate("() => { document.body.style.paddingBottom = '3000px'; window.scrollTo(0, 0); }")
    assert re.search(r"Ctrl/⌘", _zoom_text(view)), "the view says how to zoom"
    canvas = view.locator(".cw-main canvas")
    box = canvas.bounding_box()
    assert box is not None
    page.mouse.move(box["x"] + box["width"] * 0.6, box["y"] + box["height"] * 0.6)
    page.mouse.wheel(0, 240)
    wait_for(lambda: page.evaluate("() => window.scrollY") > 0, "the page to scroll")
    assert "rows" not in _zoom_text(view), "a plain wheel zoomed the pattern"

    box = canvas.bounding_box()
    assert box is not None
    page.mouse.move(box["x"] + box["width"] * 0.6, box["y"] + box["height"] * 0.6)
    scrolled = page.evaluate("() => window.scrollY")
    page.keyboard.down("Control")
    page.mouse.wheel(0, -400)
    page.keyboard.up("Control")
    wait_for(lambda: "rows" in _zoom_text(view), "Ctrl + wheel to zoom")
    assert page.evaluate("() => window.scrollY") == scrolled, "Ctrl + wheel scrolled the page"
    page_log.assert_offline_clean()


def test_a_zoomed_pattern_follows_a_token_selected_outside_it(tmp_path: Path, page: Page, page_log: PageLog) -> None:
    view = open_offline(page, page_log, _long_attention(tmp_path), ["attention"])["attention"]
    canvas = view.locator(".cw-main canvas")
    box = canvas.bounding_box()
    assert box is not None
    page.mouse.move(box["x"] + box["width"] * 0.3, box["y"] + box["height"] * 0.3)
    page.keyboard.down("Control")
    page.mouse.wheel(0, -600)
    page.keyboard.up("Control")
    wait_for(lambda: "rows" in _zoom_text(view), "zoomed in")
    rows = [int(v) for v in re.findall(r"rows (\d+)–(\d+)", _zoom_text(view))[0]]
    assert rows[1] < 55, rows
    view.locator('[data-cw-token="58"]').click()
    wait_for(lambda: re.search(r"rows (\d+)–(\d+)", _zoom_text(view)), "zoom text")

    def shows_58() -> bool:
        m = re.search(r"rows (\d+)–(\d+)", _zoom_text(view))
        return bool(m) and int(m.group(1)) <= 58 <= int(m.group(2))  # type: ignore[union-attr]

    wait_for(shows_58, "the zoomed view to move to row 58")
    page_log.assert_offline_clean()


# --- figure export ---------------------------------------------------------------------------------

CONTROL_TEXT = [
    "Score:",
    "QK axis",
    "Reset zoom",
    "Ctrl/⌘",
    "wheel",
    "selected",
    "Click a",
    "Hover a",
    "strongest",
    "Edges:",
]


def _png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    return int(width), int(height)


@pytest.mark.parametrize("name", ["eigen", "composition", "attention"])
def test_exported_figure_has_no_control_elements_and_png_comes_at_1_2_3x(
    name: str, built: Any, tmp_path: Path, page: Page, page_log: PageLog
) -> None:
    widget = built(name) if name != "attention" else None
    path = (
        circuitwidgets.save_html(widget, tmp_path / f"{name}.html") if widget is not None else _long_attention(tmp_path)
    )
    view = open_offline(page, page_log, path, [name])[name]
    before = view.evaluate("(r) => r.getBoundingClientRect().height")

    with page.expect_download() as info:
        view.locator('[data-cw-export="svg"]').click()
    svg = Path(info.value.path()).read_text()
    texts = re.findall(r"<text[^>]*>([^<]*)</text>", svg)
    joined = " ".join(texts)
    for word in CONTROL_TEXT:
        assert word not in joined, f"{name}: the exported figure holds control text {word!r}"
    assert not re.search(r"\b(SVG|PNG)\b", joined), f"{name}: the export buttons are in the figure"
    title = {
        "eigen": "Copying and matching",
        "composition": "Composition between heads",
        "attention": "Attention patterns",
    }[name]
    assert title in joined, f"{name}: the figure lost its title"
    if name == "eigen":
        assert "OV copying score" in joined and "Re λ ≥ 0 (copying)" in joined
    if name == "composition":
        assert re.search(r"cw-colourbar", svg) and "composition score" in joined
    m = re.search(r'<svg[^>]*\swidth="([\d.]+)"[^>]*\sheight="([\d.]+)"', svg)
    assert m is not None
    width, height = float(m.group(1)), float(m.group(2))
    assert height < before, "the figure is cropped to the figure (controls and status taken out)"
    # the page is as it was
    assert abs(view.evaluate("(r) => r.getBoundingClientRect().height") - before) < 1
    assert view.locator(".cw-controls").is_visible()

    for scale in (1, 3):
        view.locator("[data-cw-export-scale]").select_option(str(scale))
        with page.expect_download() as info:
            view.locator('[data-cw-export="png"]').click()
        assert info.value.suggested_filename.endswith(".png")
        w, h = _png_size(Path(info.value.path()).read_bytes())
        assert (w, h) == (round(width * scale), round(height * scale)), (scale, w, h, width, height)
    page_log.assert_offline_clean()


def test_the_attention_token_strip_fills_the_column_under_the_thumbnails_beside_the_pattern(
    built: Any, tmp_path: Path, page: Page, page_log: PageLog
) -> None:
    """At 1200 px the strip sits under the thumbnails, beside the pattern, where that column used to be blank."""
    path = circuitwidgets.save_html(built("attention"), tmp_path / "attention.html")
    page.set_viewport_size({"width": 1240, "height": 900})
    view = open_offline(page, page_log, path, ["attention"])["attention"]
    page.evaluate("() => { document.body.style.margin = '0'; document.body.style.width = '1200px'; }")
    page.wait_for_timeout(300)
    box = view.evaluate(
        """(r) => Object.fromEntries(['.cw-thumbs', '.cw-tokens', '.cw-main canvas'].map((s) => {
             const b = r.querySelector(s).getBoundingClientRect();
             return [s, { left: b.left, right: b.right, top: b.top, bottom: b.bottom }];
           }))"""
    )
    thumbs, tokens, pattern = box[".cw-thumbs"], box[".cw-tokens"], box[".cw-main canvas"]
    assert tokens["top"] >= thumbs["bottom"] and tokens["top"] < pattern["bottom"], box
    assert tokens["right"] <= pattern["left"], box
    page_log.assert_offline_clean()
