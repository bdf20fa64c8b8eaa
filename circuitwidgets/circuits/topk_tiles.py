"""Reductions over the dense tiles of a factored product ``A @ B``, one tile at a time.

Top-k entries (global, per row) and in-row ranks of an ``[m, n]`` product are
computed from dense tiles ``A[rows] @ B[:, cols]`` formed one at a time into one
reused buffer and reduced before the next is formed, so memory is one tile
(chosen from the caller's memory budget, at most :data:`TILE_BYTES`) plus the
running result, never ``m × n``. The factors come in the compute dtype
(:mod:`._precision`); arguments are checked by the callers.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import NamedTuple

import torch

from circuitwidgets._checks import progress
from circuitwidgets.errors import MemoryBudgetError

#: Bytes one block or tile of the dense product may take in chunked computations.
DEFAULT_MEMORY_BUDGET = 64 * 2**20
#: Largest bytes of one dense tile in the chunked reductions. Smaller tiles stay in
#: cache, larger ones pay fewer thread synchronisations; 32 MiB measured best on a
#: busy 2-core machine (GPT-2-sized full circuits).
TILE_BYTES = 32 * 2**20
#: Largest result (values and indices) the top-k methods return; beyond it, a :class:`MemoryBudgetError`.
MAX_RESULT_BYTES = 2**30


class TopEntries(NamedTuple):
    """Largest (or smallest) entries of a matrix, best first: ``values [k]``, ``rows [k]``, ``cols [k]``."""

    values: torch.Tensor
    rows: torch.Tensor
    cols: torch.Tensor


class TopK(NamedTuple):
    """Top-k along one dimension: ``values [n, k]`` and their ``indices [n, k]``, best first."""

    values: torch.Tensor
    indices: torch.Tensor


def check_result(name: str, entries: int, bytes_per_entry: int, what: str) -> None:
    """Refuse a result of ``entries`` entries beyond :data:`MAX_RESULT_BYTES`."""
    needed = entries * bytes_per_entry
    if needed > MAX_RESULT_BYTES:
        raise MemoryBudgetError(
            f"{name}: returning {what} needs {needed:,} bytes, more than MAX_RESULT_BYTES={MAX_RESULT_BYTES:,}; ask for fewer"
        )


def tile_shape(m: int, n: int, element_size: int, memory_budget: int) -> tuple[int, int]:
    """``(rows, cols)`` of roughly square tiles of about ``min(memory_budget, TILE_BYTES)`` bytes."""
    entries = max(1, min(memory_budget, TILE_BYTES) // element_size)
    cols = max(1, min(n, math.isqrt(entries)))
    rows = max(1, min(m, entries // cols))
    return rows, cols


def row_blocks(
    A: torch.Tensor, B: torch.Tensor, memory_budget: int, progress_bar: bool | None
) -> Iterator[tuple[int, torch.Tensor]]:
    """``(first_row, block [rows, n])`` dense row blocks of ``A @ B``, views of one reused buffer."""
    m, n = A.shape[0], B.shape[1]
    step = max(1, min(m, memory_budget // max(n * A.element_size(), 1)))
    starts = range(0, m, step)
    buffer = A.new_empty(min(step, m), n)
    for start in progress(starts, len(starts), "row blocks", progress_bar):
        rows = A[start : start + step]
        block = buffer[: rows.shape[0]]
        torch.matmul(rows, B, out=block)
        yield start, block


def tiles(
    A: torch.Tensor, B: torch.Tensor, memory_budget: int, progress_bar: bool | None
) -> Iterator[tuple[int, int, torch.Tensor]]:
    """``(first_row, first_col, tile)`` dense tiles of ``A @ B``, row block by row block, left to right.

    Each tile is a view of one reused buffer: use it before asking for the next.
    Cost ``O(m r n)`` in all.
    """
    m, n = A.shape[0], B.shape[1]
    step_rows, step_cols = tile_shape(m, n, A.element_size(), memory_budget)
    panels = [(start, B[:, start : start + step_cols].contiguous()) for start in range(0, n, step_cols)]
    buffer = A.new_empty(min(step_rows, m), min(step_cols, n))
    starts = range(0, m, step_rows)
    for row_start in progress(starts, len(starts), "row blocks", progress_bar):
        rows = A[row_start : row_start + step_rows]
        for col_start, panel in panels:
            tile = buffer[: rows.shape[0], : panel.shape[1]]
            torch.matmul(rows, panel, out=tile)
            yield row_start, col_start, tile


def topk_entries(A: torch.Tensor, B: torch.Tensor, k: int, memory_budget: int, progress_bar: bool | None) -> TopEntries:
    """The ``k`` largest entries of ``A @ B``, best first.

    A tile row is examined further only when its maximum reaches the running
    k-th best value (or the k-th largest row maximum of the tile), so the work
    beyond the products is one reduction per tile.
    """
    values = A.new_empty(0)
    rows = torch.empty(0, dtype=torch.long, device=A.device)
    cols = torch.empty(0, dtype=torch.long, device=A.device)
    for row_start, col_start, tile in tiles(A, B, memory_budget, progress_bar):
        row_max = tile.amax(dim=1)
        threshold = values[-1] if values.numel() == k else row_max.new_tensor(-math.inf)
        if row_max.numel() >= k:
            threshold = torch.maximum(threshold, torch.topk(row_max, k).values[-1])
        candidates = torch.nonzero(row_max >= threshold).squeeze(1)
        if candidates.numel() == 0:
            continue
        best = torch.topk(tile[candidates], min(k, tile.shape[1]), dim=1)
        values = torch.cat([values, best.values.flatten()])
        rows = torch.cat([rows, (row_start + candidates)[:, None].expand_as(best.indices).flatten()])
        cols = torch.cat([cols, (col_start + best.indices).flatten()])
        keep = torch.topk(values, min(k, values.numel())).indices
        values, rows, cols = values[keep], rows[keep], cols[keep]
    return TopEntries(values, rows, cols)


def topk_rows(
    A: torch.Tensor, B: torch.Tensor, k: int, largest: bool, memory_budget: int, progress_bar: bool | None
) -> TopK:
    """Per row of ``A @ B``, the ``k`` largest (or smallest) entries and their columns, merged tile by tile."""
    m, n = A.shape[0], B.shape[1]
    values = A.new_empty(m, k)
    indices = torch.empty(m, k, dtype=torch.long, device=A.device)
    run_values, run_indices = values[:0], indices[:0]
    for row_start, col_start, tile in tiles(A, B, memory_budget, progress_bar):
        stop = row_start + tile.shape[0]
        best = torch.topk(tile, min(k, tile.shape[1]), dim=1, largest=largest)
        if col_start == 0:
            run_values, run_indices = best.values, best.indices
        else:
            run_values = torch.cat([run_values, best.values], dim=1)
            run_indices = torch.cat([run_indices, col_start + best.indices], dim=1)
            merged = torch.topk(run_values, min(k, run_values.shape[1]), dim=1, largest=largest)
            run_values, run_indices = merged.values, run_indices.gather(1, merged.indices)
        if col_start + tile.shape[1] == n:
            values[row_start:stop], indices[row_start:stop] = run_values, run_indices
    return TopK(values, indices)


def rank_in_rows(
    A: torch.Tensor, B: torch.Tensor, cols: torch.Tensor, memory_budget: int, progress_bar: bool | None
) -> torch.Tensor:
    """For each row ``i`` of ``A @ B``, how many entries are strictly greater than ``(A @ B)[i, cols[i]]`` (long ``[m]``)."""
    m = A.shape[0]
    own = torch.einsum("ir,ri->i", A, B[:, cols])[:, None]
    counts = torch.zeros(m, dtype=torch.long, device=A.device)
    for row_start, col_start, tile in tiles(A, B, memory_budget, progress_bar):
        stop = row_start + tile.shape[0]
        # The entry itself is recomputed in the tile; compare against the tile's own copy
        # where it lies in this tile, so rounding cannot count it as larger than itself.
        reference = own[row_start:stop]
        inside = (cols[row_start:stop] >= col_start) & (cols[row_start:stop] < col_start + tile.shape[1])
        if bool(inside.any()):
            local = (cols[row_start:stop] - col_start).clamp(0, tile.shape[1] - 1)[:, None]
            reference = torch.where(inside[:, None], tile.gather(1, local), reference)
        counts[row_start:stop] += (tile > reference).sum(dim=1)
    return counts


def batched_topk(left: torch.Tensor, right: torch.Tensor, k: int, memory_budget: int) -> TopEntries:
    """The ``k`` largest entries of each product ``left[i] @ right[i]`` (``[b, m, r] @ [b, r, n]``), ``[b, k]`` each.

    Tiles of every product at once (one batched product per tile, about
    ``min(memory_budget, TILE_BYTES)`` bytes for the whole batch), a running
    top-k per matrix merged with each tile's: small matrices share tiles,
    large ones are tiled one tile per matrix.
    """
    b, m, n = left.shape[0], left.shape[1], right.shape[2]
    rows, cols = tile_shape(m, n, left.element_size() * b, memory_budget)
    values = left.new_empty(b, 0)
    flat = torch.empty(b, 0, dtype=torch.long, device=left.device)
    for row_start in range(0, m, rows):
        block = left[:, row_start : row_start + rows]
        for col_start in range(0, n, cols):
            tile = block @ right[:, :, col_start : col_start + cols]  # [b, rows, cols]
            width = tile.shape[2]
            best = torch.topk(tile.reshape(b, -1), min(k, tile.shape[1] * width), dim=1)
            where = (row_start + best.indices // width) * n + col_start + best.indices % width
            values = torch.cat([values, best.values], dim=1)
            flat = torch.cat([flat, where], dim=1)
            keep = torch.topk(values, min(k, values.shape[1]), dim=1).indices
            values, flat = values.gather(1, keep), flat.gather(1, keep)
    return TopEntries(values, flat // n, flat % n)
