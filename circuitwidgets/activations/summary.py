"""One head of a long context summarised chunk of rows by chunk of rows (DESIGN.md §3b).

A :class:`HeadSummariser` does the pass :meth:`QKPatterns.summarise
<circuitwidgets.activations.qk_patterns.QKPatterns.summarise>` describes one chunk at a
time, so that a kernel can answer messages between chunks and show each band of
overview rows as soon as it is final. A chunk holds at most about
:data:`~circuitwidgets.activations.qk_patterns.CHUNK_BYTES` of scores (one row at
least, whatever the block): whole blocks of rows when they fit, else a few rows
whose block max and sum fold into what the chunks before left in their overview row.

Per chunk the weights are left unnormalised (``e = exp(s − row max)``): the row
total divides the per-row block aggregates (``rows × G`` values) and the top-``k``
weights, never every cell. With value norms the same ``e`` times ``n_j`` gives the
value-weighted pattern's aggregates and log-sum-exp in the same pass (no second
score product); its top-``k`` sources are not kept.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np
import torch
from numpy.typing import NDArray

__all__ = [
    "HeadSummariser",
    "HeadSummary",
    "PatternEngine",
    "ScoreSource",
    "SummaryPass",
    "block_counts_rect",
    "column_blocks",
    "fold_rows",
    "rows_for",
    "top_k_cells",
]


class ScoreSource(Protocol):
    """What a :class:`HeadSummariser` reads of its engine: :class:`~circuitwidgets.activations.qk_patterns.QKPatterns`.

    A protocol, so that this module needs nothing from the engine's module, which builds summarisers.
    """

    n_tokens: int
    q: torch.Tensor
    norms: torch.Tensor | None

    def columns(self, layer: int, r0: int, r1: int) -> tuple[int, int]: ...

    def scores(self, layer: int, head: int, r0: int, r1: int, c0: int, c1: int, kind: str = "raw") -> torch.Tensor: ...

    def _value_norms(self, layer: int, head: int) -> torch.Tensor: ...

    def keep_lse(self, layer: int, head: int, lse: torch.Tensor, kind: str = "raw") -> None: ...


class SummaryPass(Protocol):
    """One head summarised chunk by chunk: :class:`HeadSummariser`, or a dense array's
    (:class:`~circuitwidgets.activations.dense_patterns.DenseSummariser`)."""

    @property
    def done(self) -> bool: ...

    @property
    def rows_done(self) -> int: ...

    def step(self) -> tuple[int, int]: ...

    def band(self, i0: int, i1: int, kind: str = "raw") -> tuple[NDArray[np.float32], NDArray[np.float32]]: ...

    def result(self) -> HeadSummary: ...


class TilePassLike(Protocol):
    """One tile computed chunk by chunk: :class:`~circuitwidgets.activations.tile_pass.TilePass`."""

    @property
    def done(self) -> bool: ...

    def step(self) -> None: ...

    def result(self) -> tuple[NDArray[np.float32], NDArray[np.float32]]: ...


class PatternEngine(Protocol):
    """What a long-context widget reads of its engine: queries and keys
    (:class:`~circuitwidgets.activations.qk_patterns.QKPatterns`) or a dense array
    (:class:`~circuitwidgets.activations.dense_patterns.DensePatterns`)."""

    n_layers: int
    n_heads: int
    n_tokens: int
    causal: bool
    kinds: tuple[str, ...]
    norms: torch.Tensor | None

    def summariser(self, layer: int, head: int, block: int, top_k: int) -> SummaryPass: ...

    def tile_pass(self, layer: int, head: int, level: int, row: int, col: int, kind: str = "raw") -> TilePassLike: ...

    def tile(
        self, layer: int, head: int, level: int, row: int, col: int, kind: str = "raw"
    ) -> tuple[NDArray[np.float32], NDArray[np.float32]]: ...

    def weights(self, layer: int, head: int, r0: int, r1: int, c0: int, c1: int, kind: str = "raw") -> torch.Tensor: ...

    def dense(self, layer: int, head: int, kind: str = "raw") -> torch.Tensor: ...


@dataclass(frozen=True)
class HeadSummary:
    """One head summarised in one chunked pass.

    ``lse [N]`` (float32 log-sum-exp of each row's scores), ``max`` and
    ``mean [G, G]`` (``G = ceil(N / block)``) block aggregates, ``top_sources [N, k]`` (int32, -1
    where a row has fewer than ``k`` allowed sources) and ``top_weights [N, k]`` (float32, 0 there).
    ``value`` holds the value-weighted pattern's ``(lse, max, mean)`` when the engine has value norms.
    """

    lse: torch.Tensor
    max: NDArray[np.float32]
    mean: NDArray[np.float32]
    top_sources: NDArray[np.int32]
    top_weights: NDArray[np.float32]
    value: tuple[torch.Tensor, NDArray[np.float32], NDArray[np.float32]] | None = None


#: A value-weighted row total (relative to the raw row's largest term) below which a chunk is redone exactly.
_REDO_BELOW = 1e-20


class _Aggregates:
    """Block max and sum of one kind of pattern, filled band by band, and its log-sum-exp."""

    def __init__(self, n: int, grid: int, device: torch.device) -> None:
        self.lse = torch.empty(n, dtype=torch.float32, device=device)
        self.bmax = torch.zeros(grid, grid, dtype=torch.float32)
        self.bsum = torch.zeros(grid, grid, dtype=torch.float64)

    def add(self, e: torch.Tensor, inv: torch.Tensor, r0: int, b0: int, block: int) -> torch.Tensor:
        """Fold in chunk ``e [rows, cols]`` from row ``r0`` and column block ``b0`` (unnormalised; ``inv [rows, 1]``
        normalises each row); returns its per-row block maxima.

        A chunk may start or end inside a block of rows: its part of that block's max and sum folds
        into what earlier chunks left there (weights are ``≥ 0``, the grid starts at 0).
        """
        row_max, row_sum = column_blocks(e, block)
        row_max.mul_(inv)
        row_sum.mul_(inv)
        m, sums = fold_rows(row_max, row_sum, block, r0 % block)
        cells = (slice(r0 // block, r0 // block + m.shape[0]), slice(b0, b0 + m.shape[1]))
        self.bmax[cells] = torch.maximum(self.bmax[cells], m.cpu())
        self.bsum[cells] += sums.cpu().double()
        return row_max

    def band(self, i0: int, i1: int, counts: torch.Tensor) -> tuple[NDArray[np.float32], NDArray[np.float32]]:
        return self.bmax[i0:i1].numpy(), (self.bsum[i0:i1] / counts[i0:i1]).float().numpy()


class RowPass:
    """What every summariser keeps while it walks one head's rows in chunks: the overview aggregates (raw and,
    with value norms, value-weighted), each row's top sources, and how far it has got."""

    def _start(
        self, n: int, layer: int, head: int, block: int, top_k: int, chunk: int, device: torch.device, value: bool
    ) -> None:
        self.n_rows, self.layer, self.head, self.block, self.chunk = n, layer, head, block, chunk
        self.grid = -(-n // block)
        self.k = max(0, min(top_k, n))
        self.raw = _Aggregates(n, self.grid, device)
        self.value = _Aggregates(n, self.grid, device) if value else None
        self.top_sources = np.full((n, self.k), -1, dtype=np.int32)
        self.top_weights = np.zeros((n, self.k), dtype=np.float32)
        self.next_row = 0
        self._counts: torch.Tensor | None = None

    @property
    def done(self) -> bool:
        """Whether every row is summarised."""
        return self.next_row >= self.n_rows

    @property
    def rows_done(self) -> int:
        """Overview rows final so far (a prefix: chunks go in order)."""
        return self.grid if self.done else self.next_row // self.block


class HeadSummariser(RowPass):
    """The summary of one head, computed one chunk of rows per :meth:`step`.

    Parameters
    ----------
    engine
        The queries and keys (:class:`~circuitwidgets.activations.qk_patterns.QKPatterns`).
    layer, head
        The head.
    block
        Overview block size (tokens a side).
    top_k
        Sources kept per row.
    chunk
        Rows per step (:func:`rows_for`): a multiple of ``block``, or fewer rows than a block.
    """

    def __init__(self, engine: ScoreSource, layer: int, head: int, block: int, top_k: int, chunk: int) -> None:
        self.engine = engine
        self._start(engine.n_tokens, layer, head, block, top_k, chunk, engine.q.device, engine.norms is not None)

    def step(self) -> tuple[int, int]:
        """Summarise the next chunk of rows; returns the overview rows ``[i0, i1)`` it made final.

        Cost: ``O(chunk · N · d_head)`` time, ``O(chunk · N)`` memory.
        """
        e_, n, block = self.engine, self.engine.n_tokens, self.block
        if self.done:
            return self.rows_done, self.rows_done
        r0, i0 = self.next_row, self.rows_done
        r1 = min(n, r0 + self.chunk)
        c0, c1 = e_.columns(self.layer, r0, r1)
        b0 = c0 // block
        c0 = b0 * block  # align to blocks (masked cells add 0)
        e = e_.scores(self.layer, self.head, r0, r1, c0, c1)
        top = e.amax(-1, keepdim=True)
        total = e.sub_(top).exp_().sum(-1, keepdim=True)
        self.raw.lse[r0:r1] = (top + total.log()).squeeze(-1)
        inv = total.reciprocal_()
        row_max = self.raw.add(e, inv, r0, b0, block)
        if self.k:
            w, idx = top_k_cells(e, row_max, block, self.k)
            kk = w.shape[1]
            weights = w.mul_(inv).clamp_(min=0).cpu().numpy()
            self.top_weights[r0:r1, :kk] = weights
            # rows with fewer allowed sources than k: their extra picks have weight 0
            self.top_sources[r0:r1, :kk] = np.where(weights > 0, (idx + c0).to(torch.int32).cpu().numpy(), -1)
        if self.value is not None:
            self._add_value(self.value, e, top, r0, c0, b0)
        self.next_row = r1
        return i0, self.rows_done

    def _add_value(self, value: _Aggregates, e: torch.Tensor, top: torch.Tensor, r0: int, c0: int, b0: int) -> None:
        """The value-weighted pattern of the chunk: ``e · n_j``, each row over its own total (0 when the total is 0)."""
        rows, cols = e.shape
        norms = self.engine._value_norms(self.layer, self.head)[c0 : c0 + cols]
        e.mul_(norms)  # (e is not needed after this)
        total = e.sum(-1, keepdim=True)
        if bool((total < _REDO_BELOW).any()):
            # a row whose raw weight sits on sources of norm 0 (or nearly) may have its other terms near or under
            # float32's range after exp(s − max): redo the chunk from the value-weighted scores (exact; truly
            # empty rows stay so)
            e = self.engine.scores(self.layer, self.head, r0, r0 + rows, c0, c0 + cols, "value")
            top = e.amax(-1, keepdim=True)
            top.masked_fill_(top == float("-inf"), 0.0)
            total = e.sub_(top).exp_().sum(-1, keepdim=True)
        empty = total == 0
        value.lse[r0 : r0 + rows] = (top + total.log()).masked_fill_(empty, float("inf")).squeeze(-1)
        value.add(e, total.reciprocal_().masked_fill_(empty, 0.0), r0, b0, self.block)

    def band(self, i0: int, i1: int, kind: str = "raw") -> tuple[NDArray[np.float32], NDArray[np.float32]]:
        """Block max and mean of ``kind``'s overview rows ``[i0, i1)`` (final once :attr:`rows_done` ``≥ i1``), ``[i1 − i0, G]`` each."""
        if self._counts is None:
            self._counts = block_counts_rect(self.engine.n_tokens, self.engine.n_tokens, self.block)
        aggregates = self.value if kind == "value" else self.raw
        if aggregates is None:
            raise ValueError("kind: value-weighted patterns need value_norms")
        return aggregates.band(i0, i1, self._counts)

    def result(self) -> HeadSummary:
        """The finished summary (and the head's log-sum-exps kept by the engine for tiles)."""
        if not self.done:
            raise RuntimeError(f"head [{self.layer}, {self.head}]: summary taken before its last chunk")
        self.engine.keep_lse(self.layer, self.head, self.raw.lse)
        bmax, mean = self.band(0, self.grid)
        value = None
        if self.value is not None:
            self.engine.keep_lse(self.layer, self.head, self.value.lse, "value")
            value = (self.value.lse, *self.band(0, self.grid, "value"))
        return HeadSummary(self.raw.lse, bmax, mean, self.top_sources, self.top_weights, value)


def column_blocks(e: torch.Tensor, block: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Max and sum of each row of ``e [rows, cols]`` over blocks of ``block`` columns: two ``[rows, ceil(cols / block)]``.

    A ragged last block is reduced on its own (cells past the edge are masked cells, 0), so ``e``
    is never copied.
    """
    rows, cols = e.shape
    whole = cols // block
    body = e[:, : whole * block].view(rows, whole, block)
    maxes, sums = [body.amax(-1)], [body.sum(-1)]
    if whole * block < cols:
        tail = e[:, whole * block :]
        maxes.append(tail.amax(-1, keepdim=True))
        sums.append(tail.sum(-1, keepdim=True))
    if len(maxes) == 1:
        return maxes[0], sums[0]
    return torch.cat(maxes, 1), torch.cat(sums, 1)


def fold_rows(
    row_max: torch.Tensor, row_sum: torch.Tensor, block: int, offset: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-row block aggregates ``[rows, G]`` folded over blocks of ``block`` rows (zero-padded: weights are ≥ 0).

    The first row sits ``offset`` rows into its block (a chunk that starts inside a block of rows).
    """
    rows, g = row_max.shape
    gr = -(-(offset + rows) // block)
    if offset or gr * block != offset + rows:
        pad = (0, 0, offset, gr * block - rows - offset)
        row_max, row_sum = torch.nn.functional.pad(row_max, pad), torch.nn.functional.pad(row_sum, pad)
    return row_max.view(gr, block, g).amax(1), row_sum.view(gr, block, g).sum(1)


def top_k_cells(e: torch.Tensor, row_max: torch.Tensor, block: int, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row's ``k`` largest cells of ``e [rows, cols]`` (values, column indices), searched among few blocks.

    The ``k`` largest cells of a row lie in the ``k`` blocks with the largest block maxima
    (``row_max``, ``[rows, G]``): a cell at least the ``k``-th largest value has a block
    maximum at least that value, and at most ``k`` blocks can hold such cells. So only
    ``k · block`` candidates per row are ranked, not ``cols``.
    """
    rows, cols = e.shape
    kb = min(k, row_max.shape[1])
    _, blocks = row_max.topk(kb, dim=-1)
    candidates = (blocks[:, :, None] * block + torch.arange(block, device=e.device)).reshape(rows, kb * block)
    past = candidates >= cols  # a ragged last block's cells past the edge
    values = e.gather(1, candidates.clamp_max(cols - 1)).masked_fill_(past, -1.0)
    w, pos = values.topk(min(k, kb * block), dim=-1)
    return w, candidates.gather(1, pos)


def rows_for(budget_bytes: int, width: int, block: int) -> int:
    """Rows of ``width`` float32 columns a chunk may hold within ``budget_bytes``: at least one, whole blocks when one fits."""
    rows = max(1, budget_bytes // (4 * max(1, width)))
    return rows // block * block if rows >= block else rows


def block_counts_rect(rows: int, cols: int, block: int) -> torch.Tensor:
    """Cells of the matrix in each block of a ``rows × cols`` rectangle starting on a block boundary."""

    def sizes(n: int) -> torch.Tensor:
        g = -(-n // block)
        s = torch.full((g,), float(block), dtype=torch.float64)
        s[-1] = n - (g - 1) * block
        return s

    return sizes(rows)[:, None] * sizes(cols)[None, :]
