"""Exported attention pages, ours against CircuitsVis's, opened offline in headless Chromium.

The peer: CircuitsVis (``pip install --no-deps circuitsvis``; its wheel carries its
browser bundle, ``circuitsvis/dist/cdn/iife.js``, which its ``render_local`` inlines, so
the page needs no network). Not a dependency of ours: this script says so and stops when
it is missing.

Input, per N: ``heads`` causal patterns, the softmax of ``N(0, 1)`` scores (seeded),
float32 ``[heads, N, N]``, tokens ``t0 … t{N-1}``.

- CircuitsVis: ``render_local("AttentionHeads", attention=a, tokens=tokens)`` (what
  ``circuitsvis.attention.attention_heads`` renders: a thumbnail per head and the
  selected head in full), in a minimal HTML page;
- ours: ``AttentionPatterns.from_arrays(tokens, a[None])`` saved by ``save_html``.

Measured, each page in a fresh browser page with the network cut (Playwright routes every
request that is not ``file:`` to an abort): the page's size; the seconds from the start
of navigation until the view is *painted* and the page answers again. Painted means, for
CircuitsVis, one canvas per head plus the main one, the main one not blank (a pixel that is
not white); for ours, the selected head drawn (``data-cw-painted``) and every thumbnail on
screen drawn. The page is polled every 50 ms with a script, which runs only when the page's
main thread is free, so a page busy rendering is seen as not painted; the wait is bounded
by the driver's clock. A page not painted within ``--timeout`` seconds is reported as such, and CircuitsVis is not tried at larger N
(its page keeps the browser busy long after: at N = 1,024 and 12 heads, 6 GB and minutes).

Measured 2026-12-07 (issue 57: "serialisation 0.057–0.066 of CircuitsVis's time, was ≤ 0.05"): the Python side,
ours (``from_arrays`` + ``save_html``) over CircuitsVis's ``render_local``, 12 heads × 512 tokens. 9/10 of ours was
``zlib.compress(level=6)`` of the 1.5 MB of packed patterns; the same at this benchmark's first commit (21f20e8:
0.49 s there, 0.45 s at main, one after the other at load 8), so no commit made it slower: the ratio moves with how
a loaded machine slows C compression against CircuitsVis's Python. Buffers of 1 MiB or more are now deflated at
level 4 (``widgets/core/page.py``). Alternating in one process, 3 rounds, medians, load 12.2 (CircuitsVis 2.24 s)::

    level 6 (before): ours 0.312 s, 0.139 of CircuitsVis (0.333, 0.139, 0.090), page 0.92 MiB
    level 4 (after):  ours 0.071 s, 0.028 of CircuitsVis (0.028, 0.021, 0.047), page 0.96 MiB

Both pages paint offline in Chromium (512 and 2,048 tokens, no page errors).

Run::

    .venv/bin/python benchmarks/bench_circuitsvis.py                       # N = 256 … 2,048, 12 heads
    .venv/bin/python benchmarks/bench_circuitsvis.py --sizes 512 --heads 4
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))  # the browser tests' chromium settings

from e2e.chromium import CHROMIUM, CHROMIUM_ARGS  # noqa: E402

POLL_S = 0.05

CV_STATE = """(heads) => {
  const root = document.querySelector('[id^="circuits-vis"]');
  if (!root) return {painted: false, canvases: 0};
  const canvases = [...root.querySelectorAll('canvas')];
  let blank = true;
  const main = canvases.at(-1);
  if (main && main.width > 0 && main.height > 0) {
    const data = main.getContext('2d').getImageData(0, 0, main.width, main.height).data;
    for (let i = 0; i < data.length; i += 4) if (data[i + 3] > 0 && (data[i] < 250 || data[i + 1] < 250 || data[i + 2] < 250)) { blank = false; break; }
  }
  return {painted: canvases.length >= heads + 1 && !blank, canvases: canvases.length, blank};
}"""

OURS_STATE = """(_) => {
  const view = document.querySelector('[data-cw-view="attention"]');
  if (!view) return {painted: false};
  const thumbs = [...view.querySelectorAll('button.cw-thumb')];
  const unpainted = thumbs.filter((b) => b.dataset.cwPainted !== '1').length;
  return {painted: view.dataset.cwPainted !== undefined && thumbs.length > 0 && unpainted === 0, thumbs: thumbs.length, unpainted};
}"""


def patterns(heads: int, n: int, seed: int = 0) -> np.ndarray:
    """Causal softmax of standard normal scores, ``[heads, n, n]`` float32."""
    rng = np.random.default_rng(seed)
    s = rng.standard_normal((heads, n, n), dtype=np.float32)
    s[:, np.triu_indices(n, 1)[0], np.triu_indices(n, 1)[1]] = -np.inf
    s -= s.max(-1, keepdims=True)
    np.exp(s, out=s)
    s /= s.sum(-1, keepdims=True)
    return s


def circuitsvis_page(a: np.ndarray, tokens: list[str], path: Path) -> float:
    """Write CircuitsVis's page; returns the seconds its Python side took."""
    from circuitsvis.utils.render import render_local  # type: ignore[import-not-found]

    t = time.perf_counter()
    html = render_local("AttentionHeads", attention=a, tokens=tokens)
    path.write_text(f"<!doctype html><html><head><meta charset='utf-8'></head><body>{html}</body></html>")
    return time.perf_counter() - t


def our_page(a: np.ndarray, tokens: list[str], path: Path) -> float:
    """Write our exported page; returns the seconds its Python side took."""
    from circuitwidgets import AttentionPatterns
    from circuitwidgets.export import save_html

    t = time.perf_counter()
    save_html(AttentionPatterns.from_arrays(tokens, a[None]), path)
    return time.perf_counter() - t


def open_and_wait(browser: Any, path: Path, state: str, arg: Any, timeout_s: float) -> dict[str, Any]:
    """Open ``path`` offline and poll ``state`` until it says painted (or ``timeout_s``)."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000}, device_scale_factor=1)
    context.route("**/*", lambda route: route.continue_() if route.request.url.startswith("file:") else route.abort())
    page = context.new_page()
    page.set_default_timeout(timeout_s * 1000)
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)[:200]))
    start = time.monotonic()
    try:
        page.goto(path.as_uri(), wait_until="commit", timeout=timeout_s * 1000)
        left_ms = max(1.0, (timeout_s - (time.monotonic() - start)) * 1000)
        # the driver's own clock bounds the wait, even while the page's main thread is stuck
        # a function (called by the driver), not an expression: our pages' CSP forbids eval
        page.wait_for_function(f"(a) => ({state})(a).painted", arg=arg, timeout=left_ms, polling=POLL_S * 1000)
        return {"painted_s": time.monotonic() - start, "errors": errors}
    except Exception as exc:  # a hung or crashed page is a result here, not a failure of the script
        return {"painted_s": None, "why": f"{type(exc).__name__}: {str(exc).splitlines()[0][:120]}", "errors": errors}
    finally:
        context.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[256, 512, 1024, 2048], help="token counts")
    parser.add_argument("--heads", type=int, default=12)
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per page at most")
    args = parser.parse_args()
    try:
        import circuitsvis  # type: ignore[import-not-found]
    except ImportError:
        sys.exit("CircuitsVis is not installed: pip install --no-deps circuitsvis (its wheel carries its bundle)")

    from playwright.sync_api import sync_playwright

    rows = []
    peer_ok = True
    with tempfile.TemporaryDirectory() as tmp, sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, timeout=60_000)
        try:
            for n in args.sizes:
                a = patterns(args.heads, n)
                tokens = [f"t{i}" for i in range(n)]
                row: dict[str, Any] = {"N": n, "cv_mb": float("nan"), "cv_python_s": float("nan"), "cv_painted_s": None}
                pages = [("ours", our_page, OURS_STATE, 0)]
                if peer_ok:  # past the first N it could not paint, the peer is not tried (its page hangs the browser)
                    pages.insert(0, ("cv", circuitsvis_page, CV_STATE, args.heads))
                for name, write, state, arg in pages:
                    path = Path(tmp) / f"{name}-{n}.html"
                    print(f"N = {n}: {name} …", file=sys.stderr, flush=True)
                    row[f"{name}_python_s"] = write(a, tokens, path)
                    row[f"{name}_mb"] = path.stat().st_size / 2**20
                    got = open_and_wait(browser, path, state, arg, args.timeout)
                    row[f"{name}_painted_s"] = got["painted_s"]
                    peer_ok = peer_ok and (name != "cv" or got["painted_s"] is not None)
                    if got.get("why") or got["errors"]:
                        print(f"  {name}: {got.get('why', '')} {got['errors'][:2]}", file=sys.stderr)
                    path.unlink()
                rows.append(row)
                print(f"  {row}", file=sys.stderr, flush=True)
        finally:
            browser.close()

    def secs(v: float | None) -> str:
        return f"not painted in {args.timeout:.0f}" if v is None else f"{v:.2f}"

    print(f"CircuitsVis {circuitsvis.__version__}, {args.heads} heads, causal softmax of random scores")
    print(
        "| N | CircuitsVis page (MB) | ours (MB) | CircuitsVis painted (s) | ours (s) | CircuitsVis Python (s) | ours (s) "
        "| ours / CircuitsVis, Python |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['N']:,} | {r['cv_mb']:.1f} | {r['ours_mb']:.1f} "
            f"| {'not tried' if r['cv_mb'] != r['cv_mb'] else secs(r['cv_painted_s'])} "
            f"| {secs(r['ours_painted_s'])} | {r['cv_python_s']:.2f} | {r['ours_python_s']:.2f} "
            f"| {r['ours_python_s'] / r['cv_python_s']:.3f} |"
        )


if __name__ == "__main__":
    main()
