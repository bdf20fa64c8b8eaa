"""The tiled reductions of a :class:`~circuitwidgets.circuits.LowRankMatrix` (blocks, tiles, diagonal, top-k, ranks).

A mixin over the factors ``A [m, r]`` and ``B [r, n]``: each method checks its
arguments (naming them), lifts the factors to the compute dtype once and runs
the matching reduction of :mod:`.topk_tiles`.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch

from circuitwidgets._checks import check_bool, check_budget, check_int
from circuitwidgets.circuits._index import as_index_tensor
from circuitwidgets.circuits._precision import lift
from circuitwidgets.circuits.topk_tiles import (
    DEFAULT_MEMORY_BUDGET,
    TopEntries,
    TopK,
    check_result,
    rank_in_rows,
    row_blocks,
    tile_shape,
    tiles,
    topk_entries,
    topk_rows,
)
from circuitwidgets.errors import ArgumentError, ShapeError


class TiledReductions:
    """Blocks, tiles, diagonal, top-k and in-row ranks of ``A @ B`` from its factors."""

    A: torch.Tensor
    B: torch.Tensor

    @property
    def _sizes(self) -> tuple[int, int, torch.device]:
        return int(self.A.shape[0]), int(self.B.shape[1]), self.A.device

    def _factors(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The factors in the compute dtype (float32 for half-precision factors, lifted once here)."""
        return lift(self.A), lift(self.B)

    def block_rows(self, memory_budget: int = DEFAULT_MEMORY_BUDGET) -> int:
        """Rows per block so one dense ``[rows, n]`` block fits in ``memory_budget`` bytes."""
        budget = check_budget("memory_budget", memory_budget)
        bytes_per_row = max(self._sizes[1], 1) * lift(self.A[:0]).element_size()
        return max(1, min(self._sizes[0], budget // bytes_per_row))

    def row_blocks(
        self, memory_budget: int = DEFAULT_MEMORY_BUDGET, progress_bar: bool | None = False
    ) -> Iterator[tuple[int, torch.Tensor]]:
        """Yield ``(first_row, block [rows, n])`` dense row blocks of the product (in the compute dtype).

        The blocks are views of one reused buffer (no page faults per block):
        use each before asking for the next, or copy it.
        """
        budget = check_budget("memory_budget", memory_budget, self.A.device)
        A, B = self._factors()
        yield from row_blocks(A, B, budget, progress_bar)

    def tile_shape(self, memory_budget: int = DEFAULT_MEMORY_BUDGET) -> tuple[int, int]:
        """``(rows, cols)`` of the dense tiles used by the chunked reductions.

        Tiles are about ``min(memory_budget, TILE_BYTES)`` bytes and roughly square.
        """
        budget = check_budget("memory_budget", memory_budget)
        m, n, _ = self._sizes
        return tile_shape(m, n, lift(self.A[:0]).element_size(), budget)

    def tiles(
        self, memory_budget: int = DEFAULT_MEMORY_BUDGET, progress_bar: bool | None = False
    ) -> Iterator[tuple[int, int, torch.Tensor]]:
        """Yield ``(first_row, first_col, tile [rows, cols])`` dense tiles, row block by row block.

        Within a row block the tiles go left to right. Each tile is a view of one
        reused buffer: use it before asking for the next. Cost ``O(m r n)`` in all.
        """
        budget = check_budget("memory_budget", memory_budget, self.A.device)
        A, B = self._factors()
        yield from tiles(A, B, budget, progress_bar)

    def diagonal(self, memory_budget: int = DEFAULT_MEMORY_BUDGET) -> torch.Tensor:
        """``diag(AB)`` ``[min(m, n)]`` as row-wise dot products of ``A`` and ``Bᵀ``; cost ``O(min(m, n) r)``."""
        size = min(self._sizes[:2])
        budget = check_budget("memory_budget", memory_budget, self.A.device)
        step = max(1, budget // max(1, int(self.A.shape[1]) * self.A.element_size()))
        parts = []
        for start in range(0, size, step):
            stop = min(start + step, size)
            parts.append(torch.einsum("ir,ri->i", lift(self.A[start:stop]), lift(self.B[:, start:stop])))
        return torch.cat(parts) if parts else lift(self.A).new_zeros(0)

    def topk(
        self,
        k: int,
        largest: bool = True,
        memory_budget: int = DEFAULT_MEMORY_BUDGET,
        progress_bar: bool | None = None,
    ) -> TopEntries:
        """The ``k`` largest (or smallest) entries of the whole matrix, best first.

        Tiles of the product are formed one at a time (:meth:`tiles`), each about
        ``min(memory_budget, TILE_BYTES)`` bytes; a tile row is examined further
        only when its maximum reaches the running k-th best value, so the work
        beyond the products is one reduction per tile. Cost ``O(m r n)`` time.
        ``k`` beyond ``m n`` or a result beyond :data:`MAX_RESULT_BYTES`, and a
        budget larger than the device's memory, are refused.
        """
        m, n, _ = self._sizes
        k = check_int("k", k, 1, m * n + 1)
        check_bool("largest", largest)
        budget = check_budget("memory_budget", memory_budget, self.A.device)
        check_result("k", k, self.A.element_size() + 16, f"the {k:,} best entries with their rows and columns")
        A, B = self._factors()
        if not largest:
            top = topk_entries(-A, B, k, budget, progress_bar)
            return TopEntries(-top.values, top.rows, top.cols)
        return topk_entries(A, B, k, budget, progress_bar)

    def topk_rows(
        self,
        k: int,
        largest: bool = True,
        memory_budget: int = DEFAULT_MEMORY_BUDGET,
        progress_bar: bool | None = None,
    ) -> TopK:
        """Per row, the ``k`` largest (or smallest) entries: ``values [m, k]``, column ``indices [m, k]``.

        A running top-k per row is merged with each tile's. Cost ``O(m r n)`` time,
        at most ``memory_budget`` bytes of product at once.
        """
        m, n, _ = self._sizes
        k = check_int("k", k, 1, n + 1)
        check_bool("largest", largest)
        budget = check_budget("memory_budget", memory_budget, self.A.device)
        check_result("k", m * k, self.A.element_size() + 8, f"{k:,} entries for each of {m:,} rows")
        A, B = self._factors()
        return topk_rows(A, B, k, largest, budget, progress_bar)

    def topk_cols(
        self,
        k: int,
        largest: bool = True,
        memory_budget: int = DEFAULT_MEMORY_BUDGET,
        progress_bar: bool | None = None,
    ) -> TopK:
        """Per column, the ``k`` largest (or smallest) entries: ``values [n, k]``, row ``indices [n, k]``.

        Computed as :meth:`topk_rows` of the transpose. Cost ``O(m r n)``.
        """
        m, n, _ = self._sizes
        k = check_int("k", k, 1, m + 1)
        check_bool("largest", largest)
        budget = check_budget("memory_budget", memory_budget, self.A.device)
        check_result("k", n * k, self.A.element_size() + 8, f"{k:,} entries for each of {n:,} columns")
        A, B = self._factors()
        return topk_rows(B.T, A.T, k, largest, budget, progress_bar)

    def rank_in_rows(
        self, cols: torch.Tensor, memory_budget: int = DEFAULT_MEMORY_BUDGET, progress_bar: bool | None = None
    ) -> torch.Tensor:
        """For each row ``i``, how many entries of row ``i`` are strictly greater than ``M[i, cols[i]]``.

        ``cols`` is ``[m]``; the result ``[m]`` (long) is 0 when the entry is the row's
        maximum, so "``cols[i]`` is among row ``i``'s top k" is ``rank < k`` (ties count
        in its favour). Cost ``O(m r n)``.
        """
        m, n, _ = self._sizes
        cols = as_index_tensor("cols", cols, self.A.device)
        if cols.shape != (m,) or cols.dtype.is_floating_point:
            raise ShapeError(
                f"cols: expected [{m}] integer column indices, got shape {tuple(cols.shape)} dtype {cols.dtype}"
            )
        if m and (int(cols.min()) < 0 or int(cols.max()) >= n):
            raise ArgumentError(f"cols: expected indices in [0, {n}), got range [{int(cols.min())}, {int(cols.max())}]")
        budget = check_budget("memory_budget", memory_budget, self.A.device)
        A, B = self._factors()
        return rank_in_rows(A, B, cols.long(), budget, progress_bar)
