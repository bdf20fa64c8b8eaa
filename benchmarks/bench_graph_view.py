"""How fluid the AttributionGraph view is on a large graph: page size, load time and frame times in chromium.

Exports a saved :class:`~circuitwidgets.graphs.Graph` (``graph.save``) as an offline page, opens it in Debian's
chromium (headless, the browser tests' flags) and measures:

- the page's size on disk;
- time to first paint and until the graph is drawn (``performance.now()`` when the view's nodes exist);
- frame times (``requestAnimationFrame`` timestamps collected in the page) while panning (horizontal wheel,
  then a drag), zooming (ctrl + wheel, then the zoom buttons where the view has them), moving the edges-kept
  slider (20 steps from all edges down to 50) and hovering (the pointer swept across the graph): the median,
  95th percentile and longest interval between two frames, in ms. A frame the view stalls shows up as one long
  interval; at 60 Hz an idle page gives about 16.7 ms.

Real input (Playwright's mouse and keyboard), sent as fast as the browser takes it: each step waits for the
page to answer, so a slow view gets fewer, longer frames. Build a 1,024-token graph first (see
``docs/attribution-graphs.md``, *Large graphs*), then, from the repository root::

    nice -n 10 .venv/bin/python benchmarks/bench_graph_view.py runs/g1024.cwgraph --out runs/view1024

Prints one JSON line per phase and a markdown row; saves the page and screenshots (zoomed out, zoomed in) under
``--out``. The machine's load average is printed with the numbers: under load every frame is slower.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import runpy
import statistics
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

#: Collects every animation frame's timestamp while ``window.__cwRecording`` is set.
FRAMES_JS = """
window.__cwFrames = [];
window.__cwRecording = false;
const tick = (t) => { if (window.__cwRecording) window.__cwFrames.push(t); requestAnimationFrame(tick); };
requestAnimationFrame(tick);
"""


def _stats(stamps: list[float]) -> dict[str, float]:
    gaps = sorted(b - a for a, b in itertools.pairwise(stamps))
    if not gaps:
        return {"frames": 0, "median_ms": float("nan"), "p95_ms": float("nan"), "max_ms": float("nan")}
    p95 = gaps[min(len(gaps) - 1, round(0.95 * (len(gaps) - 1)))]
    return {"frames": len(gaps), "median_ms": statistics.median(gaps), "p95_ms": p95, "max_ms": gaps[-1]}


def _record(page: Any, name: str, act: Any) -> dict[str, Any]:
    """Frame-time statistics of the page while ``act()`` runs (plus two frames after it)."""
    page.evaluate("() => { window.__cwFrames = []; window.__cwRecording = true; }")
    start = time.perf_counter()
    act()
    page.evaluate("() => new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)))")
    seconds = time.perf_counter() - start
    stamps = page.evaluate("() => { window.__cwRecording = false; return window.__cwFrames; }")
    print(f"{name}: {time.perf_counter() - start:.1f} s", flush=True)  # (a slow page: see how far it got)
    return {"phase": name, "seconds": round(seconds, 2), **_stats(stamps), "load": round(os.getloadavg()[0], 1)}


def _view_box(view: Any) -> dict[str, float]:
    plot = view.locator(".cw-plot").first
    box = plot.bounding_box()
    assert box is not None, "the graph's plot is not on screen"
    return dict(box)


def measure(page_path: Path, out: Path) -> list[dict[str, Any]]:
    """Open ``page_path`` and measure it (module docstring); screenshots go to ``out``."""
    from playwright.sync_api import sync_playwright

    browser_conf = runpy.run_path(str(ROOT / "tests" / "e2e" / "chromium.py"))
    results: list[dict[str, Any]] = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=str(browser_conf["CHROMIUM"]), args=browser_conf["CHROMIUM_ARGS"], timeout=60_000
        )
        context = browser.new_context(viewport={"width": 1280, "height": 900}, device_scale_factor=1)
        context.set_default_timeout(900_000)
        page = context.new_page()
        page.add_init_script(FRAMES_JS)
        started = time.perf_counter()
        page.goto(page_path.resolve().as_uri(), wait_until="commit")
        view = page.locator('[data-cw-view="graph"]').first
        view.locator("[data-cw-node], [data-cw-bin]").first.wait_for(state="attached")
        drawn_s = time.perf_counter() - started
        paint = page.evaluate(
            "() => Object.fromEntries(performance.getEntriesByType('paint').map((e) => [e.name, e.startTime]))"
        )
        results.append({
            "phase": "load", "page_mb": round(page_path.stat().st_size / 1e6, 2),
            "first_paint_ms": round(float(paint.get("first-paint", float("nan"))), 1),
            "drawn_s": round(drawn_s, 2), "load": round(os.getloadavg()[0], 1),
        })  # fmt: skip
        status = view.locator("[data-cw-lod]")
        if status.count():
            results[-1]["lod_text"] = status.first.text_content()
        view.screenshot(path=str(out / "zoomed-out.png"))
        box = _view_box(view)
        cx, cy = box["x"] + min(box["width"], 1000) / 2, box["y"] + box["height"] / 2
        page.mouse.move(cx, cy)

        def pan() -> None:
            for _ in range(30):
                page.mouse.wheel(240, 0)
            page.mouse.move(cx, cy)
            page.mouse.down()
            for k in range(30):
                page.mouse.move(cx - 10 * k, cy, steps=1)
            page.mouse.up()

        results.append(_record(page, "pan", pan))

        def zoom() -> None:
            page.keyboard.down("Control")
            for _ in range(15):
                page.mouse.wheel(0, -120)
            for _ in range(15):
                page.mouse.wheel(0, 120)
            page.keyboard.up("Control")

        results.append(_record(page, "zoom", zoom))
        slider = view.locator("[data-cw-size]").first
        total = int(slider.get_attribute("max") or 0)

        def prune() -> None:
            for k in range(20):
                slider.fill(str(max(50, int(total * (1 - k / 19)))))
            slider.fill(str(total))

        results.append(_record(page, "slider", prune))

        def hover() -> None:
            for k in range(60):
                page.mouse.move(box["x"] + 60 + k * (min(box["width"], 1100) - 80) / 60, cy + 20 * ((k % 5) - 2))

        results.append(_record(page, "hover", hover))
        zoom_in = view.locator("[data-cw-zoom-in]")
        if zoom_in.count():
            for _ in range(6):
                zoom_in.first.click()
            deadline = time.monotonic() + 60
            while "drawing" in (status.first.text_content() or "") and time.monotonic() < deadline:
                time.sleep(0.2)  # (the weaker edges are drawn once the view rests)
            if status.count():
                results.append({"phase": "zoomed in", "lod_text": status.first.text_content()})
        view.screenshot(path=str(out / "zoomed-in.png"))
        browser.close()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("graph", type=Path, help="a graph saved with Graph.save")
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "graph-view")
    parser.add_argument("--page", type=Path, default=None, help="measure this exported page instead of making one")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    page_path = args.page
    if page_path is None:
        import circuitwidgets as cw
        from circuitwidgets.export import save_html
        from circuitwidgets.graphs import Graph

        graph = Graph.load(args.graph)
        start = time.perf_counter()
        page_path = save_html([cw.AttributionGraph(graph, title=args.graph.stem)], args.out / "graph.html")
        print(f"exported {len(graph.nodes):,} nodes, {len(graph.edges):,} edges in {time.perf_counter() - start:.1f} s")
    results = measure(page_path, args.out)
    for r in results:
        print(json.dumps(r))
    print(f"\nload average now {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs\n")
    print("| phase | frames | median ms | p95 ms | max ms | load |")
    print("|---|---|---|---|---|---|")
    for r in results:
        if "median_ms" in r:
            print(
                f"| {r['phase']} | {r['frames']} | {r['median_ms']:.1f} | {r['p95_ms']:.1f} | {r['max_ms']:.1f} | {r['load']} |"
            )


if __name__ == "__main__":
    main()
