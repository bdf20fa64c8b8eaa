"""Long contexts in the attention widget: overview streaming, top-k for export, the tile protocol.

A widget built by :meth:`AttentionPatterns.from_qk` holds a
:class:`~circuitwidgets.activations.qk_patterns.QKPatterns` and never an ``N × N`` array;
one built by :meth:`AttentionPatterns.from_arrays` over
:data:`~circuitwidgets.widgets.attention.arrays.LONG_ARRAY_TOKENS` tokens holds a
:class:`~circuitwidgets.activations.dense_patterns.DensePatterns` over the user's array
(summarised and tiled from it, never quantised whole). Both are a
:class:`~circuitwidgets.activations.summary.PatternEngine`.

Overview
    Every head is summarised once (one chunked pass: log-sum-exp, block max and
    mean over ``tile_block × tile_block`` tokens, each row's top-``k`` sources).
    With an event loop the work goes in slices of about :data:`SLICE_S` seconds
    (a few chunks of rows), selected head first, yielding to the loop in between
    so that tile requests and selections are answered within a slice, not after a
    whole head (seconds at 32K tokens). Once the view has asked (``want_heads``),
    finished heads go to it as ``{"type": "overview", "heads": [[l, h], ...]}``
    with one float16 buffer ``[C, G, G]`` per head, and a head in
    progress as bands of finished overview rows, at most one per
    :data:`BAND_INTERVAL_S` (the first at once): ``{"type": "overview", "heads":
    [[l, h]], "rows": [i0, i1], "done": bool}`` with one buffer ``[C, i1 − i0,
    G]``; ``done`` marks the head's last band. The ``C`` channels are the raw
    pattern's block max and mean, then (``C = 4``, when the engine has value
    norms) the value-weighted pattern's, computed in the same pass. When all are done the traits
    ``overview``, ``top_sources`` and ``top_weights`` are set, so saved state and
    exported pages hold them.

Export budget
    ``overview`` (float16 ``[L, H, C, G, G]``, ``G ≤ 256``) and, for every
    query row, its top-``k`` sources (int32) and weights (float16), with ``k``
    the largest (≤ :data:`MAX_TOP_K`) whose bytes fit :data:`EXPORT_BUDGET_BYTES`
    together with the overview. Anything finer needs a live kernel.

Tile protocol (custom messages)
    view → kernel ``{"type": "tile", "id": int, "layer", "head", "level", "row", "col", "kind"?}``:
    the block max and mean of tile ``(row, col)`` at ``level`` (blocks of ``2^level``
    tokens, ``TILE`` blocks a side) of the ``"raw"`` (default) or ``"value"`` pattern; ``{"type": "cancel", "ids": [int, ...]}`` drops
    requests not yet answered. With an event loop a tile is computed in slices of about
    :data:`~circuitwidgets.widgets.attention.tile_requests.TILE_SLICE_S` (bounded chunks of rows),
    newest request first, so that no request holds the kernel for long.
    kernel → view ``{"type": "tile", "id", "layer", "head", "level", "row", "col",
    "kind", "rows", "cols"}`` with two float32 buffers ``[rows, cols]`` (max, mean), or
    ``{"type": "tile_error", "id": int | None, "message": str}`` for a request that
    is malformed, out of range or oversized (never an exception in the kernel).
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from numpy.typing import NDArray

from circuitwidgets.activations.qk_patterns import TILE, overview_block
from circuitwidgets.activations.summary import PatternEngine, SummaryPass
from circuitwidgets.errors import MemoryBudgetError
from circuitwidgets.widgets.attention.source import YIELD_S, running_loop
from circuitwidgets.widgets.attention.tile_requests import MAX_PENDING, TileJob, TileRequests

__all__ = [
    "BACKGROUND_THREADS",
    "BAND_INTERVAL_S",
    "EXPORT_BUDGET_BYTES",
    "MAX_PENDING",
    "MAX_TOP_K",
    "OVERVIEW_BUDGET_BYTES",
    "SLICE_S",
    "TILE_SHARE",
    "LongText",
    "TileSource",
    "on_custom",
    "top_k_for_budget",
]

#: Bytes an exported page may spend on a long-context widget's data (overview plus top-k).
EXPORT_BUDGET_BYTES = 48 * 2**20

#: The overview alone may take at most this (bytes); more heads than that are refused.
OVERVIEW_BUDGET_BYTES = 256 * 2**20

#: Most sources kept per query row for exported pages.
MAX_TOP_K = 16

#: Seconds of summarising between two turns of the event loop (a turn answers waiting messages).
SLICE_S = 0.02

#: Share of the kernel's time tile requests get while the summaries run and a request waits. A tile is what
#: the user is looking at, the summaries are background: with a slice each in turn, tiles had 41-43 % of the
#: time (tests/test_tile_slices.py), and a coarse tile at 262K tokens (47.6 s of work alone) was not answered
#: after 120 s. The summaries keep the rest, so the overview still fills while the view pans.
TILE_SHARE = 0.8

#: Torch threads the background summaries use. In a kernel they share the machine with the
#: browser drawing them and with the Jupyter server: two threads on two cores made the 4,096-token
#: × 12-head view take 2.6-3.6 s to have every thumbnail (OpenMP threads spin while one of them is
#: descheduled), one thread 1.5-1.8 s (benchmarks/bench_lab_paint.py). Restored after each slice.
BACKGROUND_THREADS = 1

#: Seconds at least between two bands of the same unfinished head (its first band goes at once).
BAND_INTERVAL_S = 0.1

Send = Callable[[dict[str, Any], list[memoryview]], None]


def top_k_for_budget(
    n_layers: int, n_heads: int, n_tokens: int, grid: int, budget: int = EXPORT_BUDGET_BYTES, channels: int = 2
) -> int:
    """Largest ``k ≤ MAX_TOP_K`` whose top-``k`` arrays (6 bytes a source) fit ``budget`` beside the overview (0 if none)."""
    left = budget - n_layers * n_heads * channels * grid * grid * 2
    per_k = n_layers * n_heads * n_tokens * 6
    return max(0, min(MAX_TOP_K, n_tokens, left // per_k))


@dataclass(frozen=True)
class LongText:
    """What a long-context widget starts from: its tokens, the engine, and optionally each position's logit
    effect ``[n_layers, n_heads, N]`` and loss ``[N]``."""

    tokens: list[str]
    engine: PatternEngine
    logit_effect: NDArray[np.float32] | None = None
    per_token_loss: NDArray[np.float32] | None = None

    @property
    def per_position_bytes(self) -> int:
        """Bytes of the per-position traits an exported page carries besides the overview (value norms, logit
        effects, per-token loss)."""
        e = self.engine
        norms = 0 if e.norms is None else 4 * e.n_layers * e.n_heads * e.n_tokens
        extra = (a for a in (self.logit_effect, self.per_token_loss) if a is not None)
        return norms + sum(int(a.nbytes) for a in extra)


class TileSource(TileRequests):
    """The kernel side of a long-context widget: summaries, their stream, and tile requests.

    Parameters
    ----------
    engine
        Queries and keys of every head.
    send
        Sends a custom message with buffers to the view (the widget's ``send``).
    exported_bytes
        Bytes an exported page spends on the widget's other data (value norms, logit
        effects): taken from :data:`EXPORT_BUDGET_BYTES` before ``k`` is chosen.
    """

    def __init__(self, engine: PatternEngine, send: Send, exported_bytes: int = 0) -> None:
        self.engine, self.send = engine, send
        n_layers, n_heads, n = engine.n_layers, engine.n_heads, engine.n_tokens
        self.block = overview_block(n)
        self.grid = -(-n // self.block)
        self.kinds = engine.kinds
        channels = 2 * len(self.kinds)
        overview_bytes = n_layers * n_heads * channels * self.grid * self.grid * 2
        if overview_bytes > OVERVIEW_BUDGET_BYTES:
            raise MemoryBudgetError(
                f"q: {n_layers} layers × {n_heads} heads would need {overview_bytes:,} bytes of overview, over the budget "
                f"of {OVERVIEW_BUDGET_BYTES:,}; pass fewer layers or heads"
            )
        budget = max(0, EXPORT_BUDGET_BYTES - exported_bytes)
        self.top_k = top_k_for_budget(n_layers, n_heads, n, self.grid, budget, channels=channels)
        self.max_level = max(0, int(math.log2(self.block)) - 1)
        self.overview = np.zeros((n_layers, n_heads, channels, self.grid, self.grid), dtype=np.float16)
        self.top_sources = np.full((n_layers, n_heads, n, self.top_k), -1, dtype=np.int32)
        self.top_weights = np.zeros((n_layers, n_heads, n, self.top_k), dtype=np.float16)
        self.ready = np.zeros((n_layers, n_heads), dtype=bool)
        self.queue: list[tuple[int, int]] = [(l, h) for l in range(n_layers) for h in range(n_heads)]
        self.active: dict[tuple[int, int], SummaryPass] = {}  # heads begun, by a switch of priority left unfinished
        self.sent_rows: dict[tuple[int, int], tuple[int, float]] = {}  # unfinished heads: overview rows sent, when
        self.view_wants = False
        self.pending: list[TileJob] = []
        self.on_done: Callable[[], None] | None = None
        self.task: asyncio.Task[None] | None = None
        self.tile_task: asyncio.Task[None] | None = None

    # ------------------------------------------------------------ the widget's side

    def initial_traits(self, text: LongText) -> dict[str, Any]:
        """The widget's data traits before any head is summarised (value norms and logit effects when known)."""
        shape = (self.engine.n_layers, self.engine.n_heads)
        norms = self.engine.norms
        return {
            "tokens": text.tokens,
            "value_norms": None if norms is None else norms.to("cpu").numpy(),
            "logit_effect": text.logit_effect,
            "per_token_loss": text.per_token_loss,
            "causal": self.engine.causal,
            "patterns": np.zeros((*shape, 0), dtype=np.uint8),
            "overview": np.zeros((*shape, self.overview.shape[2], 0, 0), dtype=np.float16),
            "tile_block": self.block,
            "tile_size": TILE,
            "diagonals": [{"offset": 1, "label": "previous token"}],
        }

    def start(self, widget: Any, loop: asyncio.AbstractEventLoop | None) -> None:
        """Summarise every head for ``widget`` (selected head first): now without a loop, else as a task on it."""

        def commit() -> None:
            if widget._tiles is self:
                with widget.hold_sync():
                    widget.overview, widget.top_sources, widget.top_weights = (
                        self.overview,
                        self.top_sources,
                        self.top_weights,
                    )

        self.on_done = commit
        self.prioritise(widget.selected_layer, widget.selected_head)
        if loop is None:
            self.finish()
        else:
            self.task = loop.create_task(self.run(lambda: widget.comm is None or widget._tiles is not self))

    # ------------------------------------------------------------ overview

    @property
    def done(self) -> bool:
        """Whether every head is summarised."""
        return not self.queue

    def prioritise(self, layer: int, head: int) -> None:
        """Summarise ``[layer, head]`` next."""
        if (layer, head) in self.queue:
            self.queue.remove((layer, head))
            self.queue.insert(0, (layer, head))

    def _keep(self, layer: int, head: int, summariser: SummaryPass) -> None:
        summary = summariser.result()
        self.overview[layer, head, 0] = summary.max
        self.overview[layer, head, 1] = summary.mean
        if summary.value is not None:
            self.overview[layer, head, 2:4] = summary.value[1:]
        self.top_sources[layer, head] = summary.top_sources
        self.top_weights[layer, head] = summary.top_weights
        self.ready[layer, head] = True

    def _send_overview(self, heads: list[tuple[int, int]]) -> None:
        buffers = [memoryview(self.overview[l, h].tobytes()) for l, h in heads]
        self.send({"type": "overview", "heads": [[l, h] for l, h in heads]}, buffers)

    def _send_band(self, layer: int, head: int, i0: int, i1: int, done: bool) -> None:
        band = np.ascontiguousarray(self.overview[layer, head, :, i0:i1])
        header = {"type": "overview", "heads": [[layer, head]], "rows": [i0, i1], "done": done}
        self.send(header, [memoryview(band.tobytes())])
        self.sent_rows[layer, head] = (i1, time.monotonic())

    def send_ready(self) -> None:
        """Send every head summarised so far, and the finished rows of those begun (the view asked)."""
        self.view_wants = True
        ready = [(int(l), int(h)) for l, h in zip(*np.nonzero(self.ready), strict=True)]
        for i in range(0, len(ready), 64):
            self._send_overview(ready[i : i + 64])
        for (layer, head), summariser in self.active.items():
            if summariser.rows_done:
                self._send_band(layer, head, 0, summariser.rows_done, False)

    def step(self) -> bool:
        """Summarise the next chunk of rows of the first queued head (and send what it finished).

        Calls ``on_done`` after the last chunk of the last head. Returns whether work remains.
        """
        if not self.queue:
            return False
        layer, head = self.queue[0]
        summariser = self.active.get((layer, head))
        if summariser is None:
            summariser = self.active[layer, head] = self.engine.summariser(layer, head, self.block, self.top_k)
        i0, i1 = summariser.step()
        for c, kind in enumerate(self.kinds):
            self.overview[layer, head, 2 * c : 2 * c + 2, i0:i1] = summariser.band(i0, i1, kind)
        if summariser.done:
            self.queue.pop(0)
            del self.active[layer, head]
            self._keep(layer, head, summariser)
            if self.view_wants:
                if (layer, head) in self.sent_rows:
                    self._send_band(layer, head, self.sent_rows[layer, head][0], self.grid, True)
                else:
                    self._send_overview([(layer, head)])
            self.sent_rows.pop((layer, head), None)
            if not self.queue and self.on_done is not None:
                self.on_done()
        elif self.view_wants:
            sent, at = self.sent_rows.get((layer, head), (0, -math.inf))
            if i1 > sent and time.monotonic() - at >= BAND_INTERVAL_S:
                self._send_band(layer, head, sent, i1, False)
        return bool(self.queue)

    def finish(self) -> None:
        """Summarise every remaining head now (blocking)."""
        self.view_wants = False
        while self.step():
            pass

    async def run(self, closed: Callable[[], bool]) -> None:
        """Summarise chunk after chunk, yielding to the event loop every :data:`SLICE_S` seconds, and giving
        tile requests :data:`TILE_SHARE` of the time while any wait."""
        while self.queue and not closed():
            with _torch_threads(BACKGROUND_THREADS):
                start = time.monotonic()
                while self.step() and time.monotonic() - start < SLICE_S:
                    pass
            spent = time.monotonic() - start
            # a zero sleep is one turn of the loop, too few for a message to reach its handler
            await asyncio.sleep(YIELD_S)
            await self.give_way(spent)

    def slice_threads(self) -> AbstractContextManager[None]:
        """Tile work in the kernel runs on the summaries' :data:`BACKGROUND_THREADS`: sharing the machine with the
        browser and the server, two threads took 35-70× one thread's time on a loaded 2-core machine (4 coarse
        tiles at 4,096 tokens: 7.7 s against 0.12 s)."""
        return _torch_threads(BACKGROUND_THREADS)

    async def give_way(self, spent: float) -> None:
        """After a summary slice of ``spent`` seconds, wait while tile requests are served, until they have had
        :data:`TILE_SHARE` of the time (or none wait)."""
        end = time.monotonic() + spent * TILE_SHARE / (1 - TILE_SHARE)
        while self.pending and time.monotonic() < end:
            await asyncio.sleep(YIELD_S)


@contextmanager
def _torch_threads(n: int) -> Iterator[None]:
    """Run with ``n`` torch intra-op threads (at most as many as now), then restore the user's setting."""
    before = torch.get_num_threads()
    if n >= before:
        yield
        return
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def on_custom(widget: Any, stream: Any, tiles: TileSource | None, content: Any) -> None:
    """A custom message from the view: ``want_heads`` (streamed heads or overviews), ``tile`` or ``cancel``."""
    if not isinstance(content, dict):
        return
    kind = content.get("type")
    if kind == "want_heads" and stream is not None:
        stream.send_ready()
    elif kind == "want_heads" and tiles is not None:
        tiles.send_ready()
    elif kind in ("tile", "cancel"):
        if tiles is None:
            widget.send({"type": "tile_error", "id": None, "message": "tiles need a long-context widget (from_qk)"})
        else:
            tiles.receive(content, running_loop())
