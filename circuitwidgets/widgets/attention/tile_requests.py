"""The tile protocol of a long-context attention widget: requests checked, queued, answered or refused.

See :mod:`circuitwidgets.widgets.attention.tiles` for the messages. A request is
checked field by field (integers in range, a kind the engine has) and answered
with a ``tile_error`` message naming what is wrong; nothing a view sends raises in
the kernel or reads outside the matrix. With an event loop requests queue (at most
:data:`MAX_PENDING`) and are answered newest first, so the view's latest viewport
comes first; ``cancel`` drops those not yet answered, even half-computed.

A tile is computed in slices, like the summaries: a few bounded chunks of rows
(:class:`~circuitwidgets.activations.tile_pass.TilePass`) for at most about
:data:`TILE_SLICE_S` seconds, then a turn of the event loop. A coarse tile is seconds of
work at 262K tokens (47.6 s in one piece before slicing), so the kernel answers messages
between slices; a request that arrives meanwhile goes first (newest first), and the one
it interrupted resumes where it stopped, unless the view cancels it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from circuitwidgets.activations.qk_patterns import TILE
from circuitwidgets.activations.summary import PatternEngine, TilePassLike
from circuitwidgets.errors import ArgumentError
from circuitwidgets.widgets.attention.source import YIELD_S

__all__ = ["MAX_PENDING", "TILE_SLICE_S", "TileJob", "TileRequests"]

#: Tile requests waiting at most; more are answered with an error.
MAX_PENDING = 256

#: Seconds of tile work between two turns of the event loop (each slice is one chunk at least).
TILE_SLICE_S = 0.02

_ID_LIMIT = 2**31


@dataclass
class TileJob:
    """A queued tile request: the view's message and, once begun, its pass (``None`` until then)."""

    content: dict[str, Any]
    work: TilePassLike | None = None
    fields: tuple[int, int, int, int, int, int, str] | None = None


class TileRequests:
    """Tile requests of :class:`~circuitwidgets.widgets.attention.tiles.TileSource` (a mixin: it sets the attributes)."""

    engine: PatternEngine
    kinds: tuple[str, ...]
    max_level: int
    send: Callable[[dict[str, Any], list[memoryview]], None]
    pending: list[TileJob]
    tile_task: asyncio.Task[None] | None

    def check_request(self, content: dict[str, Any]) -> tuple[int, int, int, int, int, int, str]:
        """``(id, layer, head, level, row, col, kind)`` of a tile request, or :class:`ArgumentError` saying what is wrong."""
        e = self.engine
        fields = ("id", "layer", "head", "level", "row", "col")
        values = {f: content.get(f) for f in fields}
        bad = [f for f, v in values.items() if isinstance(v, bool) or not isinstance(v, int)]
        if bad:
            raise ArgumentError(
                f"tile request: expected integer {', '.join(bad)}, got {', '.join(repr(values[f])[:20] for f in bad)}"
            )
        rid, layer, head, level, row, col = (int(str(values[f])) for f in fields)
        if not 0 <= rid < _ID_LIMIT:
            raise ArgumentError(f"tile request: id must be in [0, {_ID_LIMIT}), got {rid}")
        if not (0 <= layer < e.n_layers and 0 <= head < e.n_heads):
            raise ArgumentError(f"tile request: no head [{layer}, {head}] (layers < {e.n_layers}, heads < {e.n_heads})")
        if not 0 <= level <= self.max_level:
            raise ArgumentError(
                f"tile request: level {level} is out of range [0, {self.max_level}] (coarser than that is the overview)"
            )
        per_side = -(-e.n_tokens // (TILE * 2**level))
        if not (0 <= row < per_side and 0 <= col < per_side):
            raise ArgumentError(
                f"tile request: tile ({row}, {col}) lies outside the {per_side} × {per_side} tiles of level {level}"
            )
        kind = content.get("kind", "raw")
        if kind not in self.kinds:
            why = " (this widget has no value norms)" if kind == "value" else ""
            raise ArgumentError(f"tile request: kind must be one of {list(self.kinds)}{why}, got {repr(kind)[:20]}")
        return rid, layer, head, level, row, col, str(kind)

    def answer(self, content: dict[str, Any]) -> None:
        """Compute and send one tile (or an error message) now, blocking."""
        job = TileJob(content)
        while not self.work_on(job, None):
            pass

    def work_on(self, job: TileJob, until: float | None) -> bool:
        """Compute ``job`` chunk by chunk until it is done or ``time.monotonic()`` passes ``until`` (one chunk at least).

        Sends the tile (or an error message) when done; returns whether it is.
        """
        raw_id = job.content.get("id")
        rid = raw_id if isinstance(raw_id, int) and not isinstance(raw_id, bool) else None
        try:
            if job.work is None:
                job.fields = self.check_request(job.content)
                job.work = self.engine.tile_pass(*job.fields[1:])
            work = job.work
            while not work.done:
                work.step()
                if until is not None and time.monotonic() >= until:
                    break
            if not work.done:
                return False
            bmax, bmean = work.result()
        except (ArgumentError, MemoryError) as exc:
            self.send({"type": "tile_error", "id": rid, "message": str(exc)}, [])
            return True
        assert job.fields is not None
        rid, layer, head, level, row, col, kind = job.fields
        header = {"type": "tile", "id": rid, "layer": layer, "head": head, "level": level, "row": row, "col": col}
        header["kind"] = kind
        header |= {"rows": int(bmax.shape[0]), "cols": int(bmax.shape[1])}
        self.send(header, [_bytes(bmax), _bytes(bmean)])
        return True

    def receive(self, content: dict[str, Any], loop: asyncio.AbstractEventLoop | None) -> None:
        """Handle a ``tile`` or ``cancel`` message: queue it (with a loop) or answer at once."""
        kind = content.get("type")
        if kind == "cancel":
            ids = content.get("ids")
            if not isinstance(ids, list) or len(ids) > 10 * MAX_PENDING:
                self.send(
                    {"type": "tile_error", "id": None, "message": "cancel: expected 'ids', a list of request ids"}, []
                )
                return
            drop = {i for i in ids if isinstance(i, int)}
            self.pending = [p for p in self.pending if p.content.get("id") not in drop]
            return
        if loop is None:
            self.answer(content)
            return
        if len(self.pending) >= MAX_PENDING:
            self.send(
                {
                    "type": "tile_error",
                    "id": content.get("id") if isinstance(content.get("id"), int) else None,
                    "message": f"tile request: more than {MAX_PENDING} requests waiting; cancel some first",
                },
                [],
            )
            return
        self.pending.append(TileJob(content))
        if self.tile_task is None or self.tile_task.done():
            self.tile_task = loop.create_task(self._serve())

    async def _serve(self) -> None:
        """Answer waiting requests, newest first (the view's latest viewport), in slices of :data:`TILE_SLICE_S`.

        Between slices the loop answers messages: a newer request goes before the one begun
        (which resumes later), a cancel drops a request even half-computed.
        """
        await asyncio.sleep(YIELD_S)  # let cancels that arrive with the requests land first
        while self.pending:
            until = time.monotonic() + TILE_SLICE_S
            with self.slice_threads():
                while self.pending:
                    job = self.pending[-1]
                    if not self.work_on(job, until):
                        break
                    self.pending.remove(job)
                    if time.monotonic() >= until:
                        break
            await asyncio.sleep(YIELD_S)

    def slice_threads(self) -> AbstractContextManager[None]:
        """The torch threads a slice of tile work runs with (as they are, unless a subclass says)."""
        return nullcontext()


def _bytes(a: NDArray[np.float32]) -> memoryview:
    return memoryview(np.ascontiguousarray(a, dtype=np.float32).tobytes())
