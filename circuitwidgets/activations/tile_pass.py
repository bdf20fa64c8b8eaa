"""One tile of a long-context pattern computed chunk of rows by chunk of rows, each chunk bounded.

A coarse tile covers ``(TILE · 2^level)²`` cells: at 262,144 tokens the coarsest
covers 32,768² (seconds of work), at 10⁶ tokens 131,072². A :class:`TilePass`
does that work one chunk per :meth:`TilePass.step`, so that a kernel can answer
messages between chunks (and drop a request cancelled half-way), and so that
no chunk holds more than about ``chunk_cells`` float32 scores, whatever the level.

A pass has up to two phases over the tile's rows:

1. *row normalisers* (when the engine has none kept for the head): each row's
   log-sum-exp, or its value-weighted total, over every column the row can see;
2. *the tile*: each chunk's exact weights reduced to block max and block sum,
   folded into the tile's ``[rows, cols]`` grid (a chunk may start or end inside
   a block of rows: max and sum fold across chunks exactly, since weights are ``≥ 0``).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
from numpy.typing import NDArray

from circuitwidgets.activations.summary import block_counts_rect, column_blocks, fold_rows, rows_for
from circuitwidgets.errors import ArgumentError

__all__ = ["TilePass", "tile_bounds"]

#: ``visible(a, b)``: the columns ``[lo, hi)`` rows ``a..b-1`` may attend to at all.
Visible = Callable[[int, int], tuple[int, int]]
#: ``norm(a, b)``: the normalisers ``[b − a]`` of rows ``a..b-1`` (log-sum-exp, or value-weighted totals).
Norm = Callable[[int, int], torch.Tensor]
#: ``weights(a, b, lo, hi, norms)``: exact weights ``[b − a, hi − lo]`` float32 given the rows' normalisers.
Weights = Callable[[int, int, int, int, torch.Tensor | None], torch.Tensor]


def tile_bounds(n: int, tile: int, level: int, row: int, col: int) -> tuple[int, int, int, int]:
    """Rows ``[r0, r1)`` and columns ``[c0, c1)`` of tile ``(row, col)`` at ``level`` of an ``n × n`` matrix.

    Raises :class:`ArgumentError` for a tile outside the matrix.
    """
    span = tile * 2**level
    r0, c0 = row * span, col * span
    if level < 0 or not (0 <= r0 < n and 0 <= c0 < n):
        raise ArgumentError(f"tile: ({row}, {col}) at level {level} lies outside the {n} × {n} matrix")
    return r0, min(n, r0 + span), c0, min(n, c0 + span)


class TilePass:
    """The block max and mean of one tile, computed in bounded chunks of rows (see the module docs).

    Parameters
    ----------
    bounds
        ``(r0, r1, c0, c1)`` of the tile (:func:`tile_bounds`).
    block
        Tokens a side of each of the tile's cells (``2^level``).
    visible
        The columns a range of rows can see (outside them every weight is 0).
    weights
        Exact weights of a chunk, given its rows' normalisers.
    norm
        Normalisers of a range of rows, or ``None`` when ``weights`` needs none (or has them kept).
    chunk_cells
        Scores held at once at most (float32 cells; one row at least).
    """

    def __init__(
        self,
        bounds: tuple[int, int, int, int],
        block: int,
        visible: Visible,
        weights: Weights,
        norm: Norm | None,
        chunk_cells: int,
    ) -> None:
        self.r0, self.r1, self.c0, self.c1 = bounds
        self.block, self.visible, self.weights, self.norm = block, visible, weights, norm
        self.chunk_cells = max(1, int(chunk_cells))
        self.shape = (-(-(self.r1 - self.r0) // block), -(-(self.c1 - self.c0) // block))
        self.bmax = torch.zeros(self.shape, dtype=torch.float32)
        self.bsum = torch.zeros(self.shape, dtype=torch.float64)
        self.norms: torch.Tensor | None = None if norm is None else torch.empty(self.r1 - self.r0)
        self.next_norm = self.r0 if norm is not None else self.r1
        lo, hi = visible(self.r0, self.r1)
        self.next_row = self.r1 if hi <= self.c0 or lo >= self.c1 else self.r0  # wholly masked: nothing to do
        #: Most cells one chunk held so far (for budgets and their tests).
        self.largest_chunk = 0

    @property
    def done(self) -> bool:
        """Whether every chunk is folded in."""
        return self.next_norm >= self.r1 and self.next_row >= self.r1

    def step(self) -> None:
        """Compute the next chunk: rows' normalisers first, then the tile. Cost: ``O(chunk_cells · d_head)``."""
        if self.next_norm < self.r1:
            self._norm_step()
        elif self.next_row < self.r1:
            self._tile_step()

    def _norm_step(self) -> None:
        assert self.norm is not None and self.norms is not None
        a = self.next_norm
        lo, hi = self.visible(a, self.r1)
        b = min(self.r1, a + rows_for(4 * self.chunk_cells, hi - lo, 1))
        self.norms[a - self.r0 : b - self.r0] = self.norm(a, b)
        self.largest_chunk = max(self.largest_chunk, (b - a) * (hi - lo))
        self.next_norm = b

    def _tile_step(self) -> None:
        block, a = self.block, self.next_row
        b = min(self.r1, a + rows_for(4 * self.chunk_cells, self.c1 - self.c0, block))
        self.next_row = b
        lo, hi = self.visible(a, b)
        lo = self.c0 + max(0, lo - self.c0) // block * block  # whole blocks of the tile
        hi = min(self.c1, self.c0 + -(-(hi - self.c0) // block) * block)
        if hi <= lo:
            return
        norms = None if self.norms is None else self.norms[a - self.r0 : b - self.r0]
        w = self.weights(a, b, lo, hi, norms)
        self.largest_chunk = max(self.largest_chunk, w.numel())
        row_max, row_sum = column_blocks(w, block)
        m, total = fold_rows(row_max, row_sum, block, (a - self.r0) % block)
        i, j = (a - self.r0) // block, (lo - self.c0) // block
        cells = (slice(i, i + m.shape[0]), slice(j, j + m.shape[1]))
        self.bmax[cells] = torch.maximum(self.bmax[cells], m.cpu())
        self.bsum[cells] += total.cpu().double()

    def result(self) -> tuple[NDArray[np.float32], NDArray[np.float32]]:
        """Block max and mean ``[rows, cols]`` float32 (after the last step)."""
        if not self.done:
            raise RuntimeError("tile taken before its last chunk")
        counts = block_counts_rect(self.r1 - self.r0, self.c1 - self.c0, self.block)
        return self.bmax.numpy(), (self.bsum / counts).float().numpy()

    def run(self) -> tuple[NDArray[np.float32], NDArray[np.float32]]:
        """Every remaining chunk now (blocking), then :meth:`result`."""
        while not self.done:
            self.step()
        return self.result()
