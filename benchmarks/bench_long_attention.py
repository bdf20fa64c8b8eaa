"""Long-context attention: ``AttentionPatterns.from_qk`` on random queries and keys.

Input: ``q, k ~ N(0, 1)``, float32 ``[n_layers, n_heads, N, 64]`` (causal, no window,
no soft-cap), tokens ``t0 … t{N-1}``. Measured, per N, in this process, inside an
asyncio event loop as in a Jupyter kernel (the widget's messages go to a recorder
instead of a comm):

- *first paint data*: from calling ``from_qk`` until the first overview message is sent:
  the selected head's first band of finished overview rows (block max and mean), i.e.
  what the view needs to start painting that head;
- *selected head whole*: until the selected head's last band is sent;
- *all heads*: until every head is summarised and the traits (overview, top-k) are set;
- *peak memory above the inputs*: resident set size sampled every 10 ms, above the RSS
  with ``q`` and ``k`` already allocated (the widget's own float32 copy of q/k counts);
- *tile latency*: a zoom from the overview to single weights around a random point: at
  each level, every unmasked tile covering a 440-pixel viewport is requested through the
  widget's tile protocol (validation, exact computation, encoding); per tile, p50 / p95;
- *exported page*: ``save_html`` (bundle inlined, buffers compressed) size, and the top-k
  kept per row under the export budget.

With ``--value-norms`` the widget also gets value norms ``U(0, 2)`` and logit effects
``N(0, 1)`` per position: the value-weighted pattern is summarised in the same pass
(four overview channels), and the zoom requests its tiles (``kind="value"``).

Timings are wall-clock on whatever machine runs this; the 2-core development machine is
shared with training runs, so read them as indicative. The exact computation is
``O(N² · d_head)`` per head (half of it when causal): on a CPU that, not the view, sets
the time to the first paint at 32K tokens.

Run::

    .venv/bin/python benchmarks/bench_long_attention.py                      # N = 4,096 (2 × 16 heads), 32,768 (1 × 2)
    .venv/bin/python benchmarks/bench_long_attention.py --sizes 32768 --layers 2 --heads 16
    .venv/bin/python benchmarks/bench_long_attention.py --value-norms           # the same, value-weighted too
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import torch

from circuitwidgets import AttentionPatterns
from circuitwidgets.activations.qk_patterns import TILE
from circuitwidgets.export import save_html

VIEW_PX = 440


class PeakRSS:
    """Resident set size sampled every 10 ms in a thread, relative to the start."""

    def __init__(self) -> None:
        import psutil  # type: ignore[import-untyped]

        self.process: Any = psutil.Process()
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

    @property
    def mb(self) -> float:
        return float(self.peak - self.start) / 2**20


def zoom_requests(n: int, block: int, causal: bool, rng: np.random.Generator) -> list[tuple[int, int, int]]:
    """``(level, row, col)`` of the tiles a zoom from the overview to single weights asks for."""
    centre_r = int(rng.integers(n // 4, n))
    centre_c = int(rng.integers(0, centre_r + 1))
    out = []
    level = int(np.log2(block)) - 1
    while level >= 0:
        span = TILE * 2**level
        size = min(n, VIEW_PX * 2**level)
        r0 = max(0, min(n - size, centre_r - size // 2))
        c0 = max(0, min(n - size, centre_c - size // 2))
        for row in range(r0 // span, (r0 + size - 1) // span + 1):
            for col in range(c0 // span, (c0 + size - 1) // span + 1):
                if not (causal and col * span > min(n, (row + 1) * span) - 1):
                    out.append((level, row, col))
        level -= 1
    return out


def measure(n: int, n_layers: int, n_heads: int, d_head: int, seed: int = 0, value: bool = False) -> dict[str, Any]:
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(n_layers, n_heads, n, d_head, generator=g)
    k = torch.randn(n_layers, n_heads, n, d_head, generator=g)
    extra: dict[str, Any] = {}
    if value:
        extra["value_norms"] = 2 * torch.rand(n_layers, n_heads, n, generator=g)
        extra["logit_effect"] = torch.randn(n_layers, n_heads, n, generator=g)
    tokens = [f"t{i}" for i in range(n)]
    sent: list[tuple[float, dict[str, Any], list[Any]]] = []
    result: dict[str, Any] = {"N": n, "heads": f"{n_layers} × {n_heads}", "kind": "value" if value else "raw"}

    async def build() -> AttentionPatterns:
        t0 = time.perf_counter()
        w = AttentionPatterns.from_qk(tokens, q, k, **extra)
        w._send = lambda msg, buffers=None: sent.append((time.perf_counter(), msg, list(buffers or [])))
        result["constructor_s"] = time.perf_counter() - t0
        w._on_custom(w, {"type": "want_heads"}, [])  # as the view does when it renders
        while w.streaming:
            await asyncio.sleep(0.001)
        overviews = [
            (t, m["content"]) for t, m, _ in sent if m.get("method") == "custom" and m["content"]["type"] == "overview"
        ]
        result["first_paint_s"] = (overviews[0][0] - t0) if overviews else float("nan")
        whole = [t for t, c in overviews if c["heads"][0] == [0, 0] and c.get("done", "rows" not in c)]
        result["selected_whole_s"] = (whole[0] - t0) if whole else float("nan")
        result["all_heads_s"] = time.perf_counter() - t0
        return w

    with PeakRSS().sampling() as rss:
        widget = asyncio.run(build())
        tiles = widget._tiles
        assert tiles is not None
        latencies = []
        for level, row, col in zoom_requests(n, tiles.block, True, np.random.default_rng(seed)):
            t = time.perf_counter()
            tiles.answer(
                {
                    "type": "tile",
                    "id": 0,
                    "layer": 0,
                    "head": 0,
                    "level": level,
                    "row": row,
                    "col": col,
                    "kind": result["kind"],
                }
            )
            latencies.append(time.perf_counter() - t)
    result["peak_mb"] = rss.mb
    result["tiles"] = len(latencies)
    result["tile_p50_ms"] = 1000 * statistics.median(latencies)
    result["tile_p95_ms"] = 1000 * float(np.percentile(latencies, 95))
    result["tile_max_ms"] = 1000 * max(latencies)
    with tempfile.TemporaryDirectory() as tmp:
        page = save_html(widget, Path(tmp) / "long.html")
        result["page_mb"] = page.stat().st_size / 2**20
    result["top_k"] = tiles.top_k
    result["overview"] = f"{tiles.grid} × {tiles.grid} (blocks of {tiles.block})"
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=None, help="token counts (default 4096 and 32768)")
    parser.add_argument("--layers", type=int, default=None)
    parser.add_argument("--heads", type=int, default=None)
    parser.add_argument("--d-head", type=int, default=64)
    parser.add_argument("--value-norms", action="store_true", help="value-weighted too (norms and logit effects)")
    args = parser.parse_args()
    plan = (
        [(n, args.layers or 2, args.heads or 16) for n in args.sizes]
        if args.sizes
        else [(4096, 2, 16), (32768, args.layers or 1, args.heads or 2)]
    )
    print(f"torch threads: {torch.get_num_threads()}, CPU: {os.cpu_count()} cores")
    cols = [
        "N",
        "heads",
        "kind",
        "constructor_s",
        "first_paint_s",
        "selected_whole_s",
        "all_heads_s",
        "peak_mb",
        "tiles",
        "tile_p50_ms",
        "tile_p95_ms",
        "tile_max_ms",
        "page_mb",
        "top_k",
        "overview",
    ]
    print(" | ".join(cols))
    for n, layers, heads in plan:
        r = measure(n, layers, heads, args.d_head, value=args.value_norms)
        print(" | ".join(f"{r[c]:.3g}" if isinstance(r[c], float) else str(r[c]) for c in cols), flush=True)


if __name__ == "__main__":
    main()
