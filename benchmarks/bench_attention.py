"""Attention patterns at scale: circuitwidgets ``AttentionPatterns`` against CircuitsVis ``attention_heads``.

Input: 12 heads of synthetic causal attention (softmax of Gaussian scores
with a previous-token head, a first-token head and a diffuse head in every
three), float32 ``[12, N, N]``, N ∈ {128, 512, 1024, 2048}; the same array
goes to both libraries.

Measured, each (library, N) in a fresh Python process:

- Python time: ``AttentionPatterns.from_arrays(tokens, attention)`` (validation,
  uint8 quantisation, lower-triangle packing) / ``circuitsvis.attention.attention_heads``
  (which builds both its CDN and its inline-JavaScript HTML strings);
- size: ours, the widget state as sent to the front end (binary buffers plus
  JSON, without the 0.1 MB JavaScript bundle) and the page written by
  ``save_html`` (bundle inlined, buffers zlib + base64, no network needed);
  theirs, the HTML string (``str(html)``, which loads its JavaScript from unpkg.com);
- peak memory: resident set size sampled every 10 ms during the call(s), above the
  process's RSS just before (ours: from_arrays + save_html; theirs: attention_heads);
- first paint in headless Chromium (``/usr/bin/chromium``, network requests
  aborted), from navigation start: ours, the exported page, until the large
  pattern and the tokens are drawn (the view stamps ``data-cw-painted`` with
  ``performance.now()``); theirs, their *offline* output
  (``RenderedHTML.local_src``: the same props with their 1.3 MB ``iife.js``
  inlined instead of the unpkg.com import, since the machine is offline), until
  the animation frame after their first canvas appears (a MutationObserver
  injected before the page loads). A page gets ``--paint-timeout`` seconds;
  one whose inline script is longer than V8's maximum string length cannot
  run and is not tried;
- hover redraw (ours): 10 hovers over tokens and 10 over cells of the large
  pattern; per hover, the view's draw (``data-cw-draw-ms``) plus the style and
  layout it causes (forced in a later callback of the same frame).

A second table streams 12 layers × 12 heads × 2048 tokens (a view of 12
distinct heads, 302 MB of uint8 on the wire) inside an asyncio event loop, as
in a Jupyter kernel: how long the constructor blocks (validation), when the
selected head is sent, the longest the loop is blocked while the rest
encodes, and when the complete traits are set.

Timings are wall-clock on a shared CPU (other jobs, for example model
training, may be running), so read them as indicative.

Run::

    .venv/bin/python benchmarks/bench_attention.py            # everything, < 10 min
    .venv/bin/python benchmarks/bench_attention.py --sizes 128 512 --no-browser
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import runpy
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

HEADS = 12
#: V8's maximum string length (2**29 - 24 characters): a page whose script is longer cannot run.
V8_MAX_STRING = 2**29 - 24
_BROWSER = runpy.run_path(str(Path(__file__).resolve().parents[1] / "tests" / "e2e" / "chromium.py"))
CHROMIUM = str(_BROWSER["CHROMIUM"])
CHROMIUM_ARGS: list[str] = _BROWSER["CHROMIUM_ARGS"]


# ---------------------------------------------------------------- data


def synthetic_attention(n_heads: int, n: int, seed: int = 0) -> np.ndarray:
    """Causal softmax attention ``[n_heads, n, n]`` float32: previous-token, first-token and diffuse heads."""
    rng = np.random.default_rng(seed)
    out = np.empty((n_heads, n, n), dtype=np.float32)
    above = ~np.tri(n, dtype=bool)
    for h in range(n_heads):
        s = rng.standard_normal((n, n), dtype=np.float32) * 2
        if h % 3 == 0:
            s[np.arange(1, n), np.arange(n - 1)] += 8
        elif h % 3 == 1:
            s[:, 0] += 4
        s[above] = -np.inf
        s -= s.max(-1, keepdims=True)
        np.exp(s, out=s)
        s /= s.sum(-1, keepdims=True)
        out[h] = s
    return out


def tokens_for(n: int) -> list[str]:
    words = [
        "The",
        " cat",
        " sat",
        " on",
        " the",
        " mat",
        ".",
        "\n",
        " def",
        " f",
        "(",
        "x",
        ")",
        ":",
        " return",
        " <b>",
    ]
    return [words[i % len(words)] for i in range(n)]


# ---------------------------------------------------------------- measuring


class PeakRSS:
    """Resident set size sampled every 10 ms in a thread, relative to the start."""

    def __init__(self) -> None:
        import psutil

        self.process = psutil.Process()
        self.start = self.process.memory_info().rss
        self.peak = self.start
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self.process.memory_info().rss)
            time.sleep(0.01)

    @contextmanager
    def sampling(self) -> Iterator[PeakRSS]:
        self._thread.start()
        try:
            yield self
        finally:
            self._stop.set()
            self._thread.join()
            self.peak = max(self.peak, self.process.memory_info().rss)

    @property
    def mb(self) -> float:
        return (self.peak - self.start) / 2**20


def wire_bytes(state: dict[str, Any]) -> int:
    """Bytes of a widget state as sent: binary buffers raw, the rest as compact JSON (bundle left out)."""
    from ipywidgets.widgets.widget import _remove_buffers

    state = {k: v for k, v in state.items() if k != "_esm"}
    json_state, _, buffers = _remove_buffers(state)
    return sum(memoryview(b).nbytes for b in buffers) + len(json.dumps(json_state, separators=(",", ":")).encode())


def worker_ours(n: int, out_dir: Path) -> dict[str, Any]:
    from circuitwidgets import AttentionPatterns
    from circuitwidgets.export import save_html

    attention, tokens = synthetic_attention(HEADS, n), tokens_for(n)
    gc.collect()
    rss = PeakRSS()
    with rss.sampling():
        t0 = time.perf_counter()
        widget = AttentionPatterns.from_arrays(tokens, attention)
        python_s = time.perf_counter() - t0
        state_bytes = wire_bytes(widget.get_state())
        t1 = time.perf_counter()
        page = save_html(widget, out_dir / f"ours-{n}.html", title=f"AttentionPatterns {n}")
        html_s = time.perf_counter() - t1
    return {
        "python_s": python_s,
        "state_bytes": state_bytes,
        "html_s": html_s,
        "page_bytes": page.stat().st_size,
        "peak_mb": rss.mb,
        "page": str(page),
    }


def worker_circuitsvis(n: int, out_dir: Path) -> dict[str, Any]:
    from circuitsvis.attention import attention_heads

    attention, tokens = synthetic_attention(HEADS, n), tokens_for(n)
    gc.collect()
    rss = PeakRSS()
    with rss.sampling():
        t0 = time.perf_counter()
        html = attention_heads(attention=attention, tokens=tokens)
        python_s = time.perf_counter() - t0
    size = len(str(html).encode("utf-8"))
    out: dict[str, Any] = {"python_s": python_s, "html_bytes": size, "peak_mb": rss.mb}
    if len(html.local_src) > V8_MAX_STRING:
        out["paint_error"] = "not loadable: its inline script exceeds V8's maximum string length"
        return out
    page = out_dir / f"circuitsvis-{n}.html"
    with page.open("w", encoding="utf-8") as f:
        f.write("<!doctype html><html><head><meta charset='utf-8'></head><body>\n")
        f.write(html.local_src)
        f.write("\n</body></html>\n")
    out["page"] = str(page)
    return out


def worker_stream(n: int, layers: int) -> dict[str, Any]:
    """Stream layers × 12 heads × n inside an event loop, as in a Jupyter kernel."""
    from circuitwidgets import AttentionPatterns

    distinct = synthetic_attention(HEADS, n)
    attention = np.broadcast_to(distinct, (layers, HEADS, n, n))  # a view: 12 distinct heads, no copy
    tokens = tokens_for(n)
    result: dict[str, Any] = {}

    async def run() -> None:
        loop = asyncio.get_running_loop()
        blocked = 0.0
        done = asyncio.Event()

        async def watchdog() -> None:  # how late the loop runs a 5 ms timer: time the kernel could not respond
            nonlocal blocked
            while not done.is_set():
                t = loop.time()
                await asyncio.sleep(0.005)
                blocked = max(blocked, loop.time() - t - 0.005)

        t0 = time.perf_counter()
        widget = AttentionPatterns.from_arrays(tokens, attention, selected_layer=layers - 1, selected_head=5)
        result["constructor_s"] = time.perf_counter() - t0
        result["streaming"] = widget.streaming
        sent: list[tuple[float, int]] = []

        def record(msg: dict[str, Any], buffers: Any = None) -> None:
            sent.append((time.perf_counter() - t0, sum(memoryview(b).nbytes for b in buffers or [])))

        widget._send = record  # type: ignore[method-assign]  # no comm here: count what would be sent
        widget._handle_custom_msg({"type": "want_heads"}, [])  # the view renders and asks
        dog = loop.create_task(watchdog())
        while widget.streaming:
            await asyncio.sleep(0.001)
        done.set()
        await dog
        result["first_head_s"] = sent[0][0] if sent else float("nan")
        result["complete_s"] = time.perf_counter() - t0
        result["loop_blocked_ms"] = blocked * 1000
        result["sent_mb"] = sum(b for _, b in sent) / 2**20
        result["messages"] = len(sent)
        stream_step = widget.patterns.shape
        result["patterns_shape"] = list(stream_step)

    asyncio.run(run())
    return result


def run_worker(*args: str, timeout: float) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--worker", *args]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"over {timeout:.0f} s"}
    if proc.returncode != 0:
        return {"error": (proc.stderr.strip().splitlines() or ["failed"])[-1]}
    out: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return out


# ---------------------------------------------------------------- browser


HOVER_JS = """
async (count) => {
  const root = document.querySelector('[data-cw-view="attention"]');
  const frame = () => new Promise((r) => requestAnimationFrame(() => r()));
  const settle = async () => { for (let i = 0; i < 3; i++) await frame(); };
  const afterDraw = () => new Promise((r) => requestAnimationFrame(() => {
    const s = performance.now(); document.body.offsetHeight; r(performance.now() - s);
  }));
  await settle();
  const out = [];
  const tokens = root.querySelectorAll('[data-cw-token]');
  for (let k = 0; k < count; k++) {
    const t = tokens[Math.floor(((k + 0.5) * tokens.length) / count)];
    t.dispatchEvent(new MouseEvent('mouseover', { bubbles: true }));
    const layout = await afterDraw();
    out.push(Number(root.dataset.cwDrawMs) + layout);
    await frame();
  }
  const canvas = root.querySelector('.cw-main canvas');
  const rect = canvas.getBoundingClientRect();
  for (let k = 0; k < count; k++) {
    const f = (k + 0.5) / count;
    canvas.dispatchEvent(new PointerEvent('pointermove', { bubbles: true, clientX: rect.left + 90 + f * (rect.width - 120), clientY: rect.top + 70 + (1 - f) * (rect.height - 80) }));
    const layout = await afterDraw();
    out.push(Number(root.dataset.cwDrawMs) + layout);
    await frame();
  }
  return out;
}
"""


#: Stamps ``window.__cwFirstCanvas`` with the time of the first animation frame after a canvas appears (CircuitsVis).
CANVAS_PROBE = """
new MutationObserver((mutations, observer) => {
  for (const m of mutations) for (const node of m.addedNodes) {
    const canvas = node.nodeType === 1 && (node.tagName === 'CANVAS' ? node : node.querySelector?.('canvas'));
    if (canvas) { observer.disconnect(); requestAnimationFrame(() => { window.__cwFirstCanvas = performance.now(); }); return; }
  }
}).observe(document, { childList: true, subtree: true });
"""


def worker_paint(lib: str, path: str, timeout_s: float) -> dict[str, Any]:
    """First paint (and hover, for ours) of one page in headless Chromium."""
    from playwright.sync_api import Error as PlaywrightError
    from playwright.sync_api import sync_playwright

    res: dict[str, Any] = {}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 1000})
        page.route("http*://**", lambda route: route.abort())  # offline: nothing may come from the network
        page.add_init_script(CANVAS_PROBE)
        try:
            page.goto(Path(path).as_uri(), wait_until="commit", timeout=timeout_s * 1000)
            if lib == "ours":
                page.wait_for_selector("[data-cw-painted]", state="attached", timeout=timeout_s * 1000)
                res["paint_ms"] = float(page.get_attribute('[data-cw-view="attention"]', "data-cw-painted") or "nan")
                hovers = sorted(page.evaluate(HOVER_JS, 10))
                res["hover_p50_ms"] = hovers[len(hovers) // 2]
                res["hover_max_ms"] = hovers[-1]
            else:
                page.wait_for_function(
                    "() => window.__cwFirstCanvas !== undefined", polling=100, timeout=timeout_s * 1000
                )
                res["paint_ms"] = float(page.evaluate("() => window.__cwFirstCanvas"))
        except PlaywrightError as exc:
            res["error"] = f"none in {timeout_s:.0f} s" if "Timeout" in str(exc) else str(exc).splitlines()[0][:60]
        browser.close()
    return res


def measure_page(lib: str, path: str, timeout_s: float) -> dict[str, Any]:
    """`worker_paint` in its own process, killed if the browser hangs."""
    res = run_worker("paint", lib, path, str(timeout_s), timeout=timeout_s + 20)
    if str(res.get("error", "")).startswith("over "):
        res["error"] = f"none in {timeout_s:.0f} s (browser unresponsive)"
    return res


# ---------------------------------------------------------------- report


def mb(x: float) -> str:
    return f"{x / 2**20:.1f} MB" if x >= 2**20 / 10 else f"{x / 1024:.0f} kB"


def fmt_s(x: float | None) -> str:
    return "–" if x is None else f"{x:.2f} s" if x >= 0.1 else f"{x * 1000:.0f} ms"


def table(rows: list[list[str]], header: list[str]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[128, 512, 1024, 2048])
    parser.add_argument("--no-browser", action="store_true", help="skip first paint and hover")
    parser.add_argument("--no-stream", action="store_true", help="skip the 12 × 12 × 2048 streaming run")
    parser.add_argument("--paint-timeout", type=float, default=30.0, help="seconds per page before giving up")
    parser.add_argument("--worker", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.worker:
        kind = args.worker[0]
        if kind == "stream":
            print(json.dumps(worker_stream(int(args.worker[1]), int(args.worker[2]))))
        elif kind == "paint":
            print(json.dumps(worker_paint(args.worker[1], args.worker[2], float(args.worker[3]))))
        else:
            fn: Callable[[int, Path], dict[str, Any]] = worker_ours if kind == "ours" else worker_circuitsvis
            print(json.dumps(fn(int(args.worker[1]), Path(args.worker[2]))))
        return

    started = time.perf_counter()
    out_dir = Path(tempfile.mkdtemp(prefix="bench-attention-"))
    results: dict[tuple[str, int], dict[str, Any]] = {}
    for n in args.sizes:
        for lib in ("ours", "circuitsvis"):
            results[(lib, n)] = run_worker(lib, str(n), str(out_dir), timeout=300)
            print(f"  {lib:<11} N={n:<5} {results[(lib, n)]}", file=sys.stderr, flush=True)
    if not args.no_browser and Path(CHROMIUM).exists():
        for (lib, n), r in results.items():
            if "page" in r:
                res = measure_page(lib, r["page"], args.paint_timeout)
                if "error" in res:
                    res["paint_error"] = res.pop("error")
                r.update(res)
                print(f"  paint {lib} N={n}: {r.get('paint_ms', r.get('paint_error'))}", file=sys.stderr, flush=True)
    stream = None if args.no_stream else run_worker("stream", "2048", "12", timeout=300)

    def paint(r: dict[str, Any]) -> str:
        if "paint_ms" in r:
            return f"{r['paint_ms']:.0f} ms"
        return str(r.get("paint_error", "–"))

    rows = []
    for n in args.sizes:
        o, c = results[("ours", n)], results[("circuitsvis", n)]
        if "error" in o or "error" in c:
            rows.append([str(n), f"ours: {o.get('error', 'ok')}; theirs: {c.get('error', 'ok')}", "", "", "", "", ""])
            continue
        rows.append(
            [
                str(n),
                f"{fmt_s(o['python_s'])} / {fmt_s(c['python_s'])} ({c['python_s'] / o['python_s']:.0f}×)",
                f"{mb(o['state_bytes'])} / {mb(c['html_bytes'])} ({c['html_bytes'] / o['state_bytes']:.0f}×)",
                f"{mb(o['page_bytes'])} ({fmt_s(o['html_s'])})",
                f"{o['peak_mb']:.0f} / {c['peak_mb']:.0f} MB",
                f"{paint(o)} / {paint(c)}",
                f"{o['hover_p50_ms']:.1f} / {o['hover_max_ms']:.1f} ms" if "hover_p50_ms" in o else "–",
            ]
        )
    print(
        f"\n### AttentionPatterns vs CircuitsVis attention_heads, {HEADS} heads of synthetic causal attention (ours / theirs)\n"
    )
    print(
        table(
            rows,
            [
                "N",
                "Python time",
                "size: our state / their HTML",
                "our save_html page (time)",
                "peak RSS",
                "first paint",
                "our hover redraw p50 / max",
            ],
        )
    )
    if stream is not None:
        print("\n### Streaming 12 layers × 12 heads × 2048 tokens in an event loop (as in a Jupyter kernel)\n")
        if "error" in stream:
            print(f"failed: {stream['error']}")
        else:
            print(
                table(
                    [
                        [
                            fmt_s(stream["constructor_s"]),
                            fmt_s(stream["first_head_s"]),
                            f"{stream['loop_blocked_ms']:.0f} ms",
                            fmt_s(stream["complete_s"]),
                            f"{stream['sent_mb']:.0f} MB in {stream['messages']} messages",
                        ]
                    ],
                    [
                        "constructor returns (validation)",
                        "selected head sent",
                        "longest loop block while encoding",
                        "complete traits set",
                        "streamed",
                    ],
                )
            )
    print(
        f"\nload average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs (shared); total {time.perf_counter() - started:.0f} s; pages in {out_dir}"
    )


if __name__ == "__main__":
    main()
