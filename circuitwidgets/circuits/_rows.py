"""Row-wise reductions of every matrix of a stack: diagonal entries, in-row ranks, membership in a row's top k.

For ``M = left · A · C · B · right`` a block of matrices is reduced at once:
``B · right`` (every column) is formed once per block, rows of ``left · A · C``
are formed in chunks (one matrix product for all the block's matrices), and
column tiles of the products are reduced before the next is formed. The copying
summaries of :mod:`.copying` need the diagonal and whether each token's own
entry is among its row's ``k`` largest; both come from one pass.

This module holds the per-tile pieces; the pass over a stack's blocks is
:func:`~circuitwidgets.circuits._stack_factors.row_reductions`, beside the
stack it walks.
"""

from __future__ import annotations

import torch

from circuitwidgets.circuits._precision import left_multiply

#: Rows of a square matrix: all of them (a slice) or some (an index tensor).
Rows = slice | torch.Tensor


def left_rows(outer: torch.Tensor | None, A: torch.Tensor, C: torch.Tensor | None, rows: Rows) -> torch.Tensor:
    """Rows ``rows`` of ``outer · A · C`` ``[*batch, |rows|, r₂]`` for a block's factors ``A [*batch, m₀, r₁]``.

    With an outer factor the rows come from one matrix product against every
    matrix's ``A`` side by side (``[|rows|, m₀] · [m₀, batch · r₁]``), not one small
    product per matrix.
    """
    part = A[..., rows, :] if outer is None else left_multiply(outer[rows], A)
    return part if C is None else part @ C


def _own_entries(tile: torch.Tensor, cols: torch.Tensor, start: int, own: torch.Tensor) -> None:
    """Copy each row's entry in column ``cols[i]`` from ``tile`` (columns ``start..``) into ``own`` where it lies there."""
    inside = torch.nonzero((cols >= start) & (cols < start + tile.shape[-1])).squeeze(1)
    if inside.numel():
        own[..., inside] = tile[..., inside, cols[inside] - start]


def count_above(left: torch.Tensor, right: torch.Tensor, cols: torch.Tensor, step: int) -> torch.Tensor:
    """Per row ``i`` of ``left @ right``, entries strictly above its entry in column ``cols[i]`` (long ``[..., m]``).

    Within the tile that holds a row's own entry it is compared with the tile's
    copy, so rounding cannot count it above itself.
    """
    own = (left * right[..., cols].mT).sum(-1)[..., None]
    batch = torch.broadcast_shapes(left.shape[:-2], right.shape[:-2])  # type: ignore[no-untyped-call]
    total = torch.zeros(*batch, left.shape[-2], dtype=torch.long, device=left.device)
    for start in range(0, right.shape[-1], step):
        tile = left @ right[..., start : start + step]
        inside = (cols >= start) & (cols < start + tile.shape[-1])
        reference = own
        if bool(inside.any()):
            local = (cols - start).clamp(0, tile.shape[-1] - 1)
            mine = tile.gather(-1, local.expand(*tile.shape[:-1])[..., None])
            reference = torch.where(inside[:, None], mine, own)
        total += (tile > reference).sum(-1, dtype=torch.int32)
    return total


#: Columns per group in :func:`within_top`'s screening (a group whose maximum beats a row's entry holds one entry above it).
SCREEN_WIDTH = 64


def within_top(left: torch.Tensor, right: torch.Tensor, cols: torch.Tensor, k: int, step: int) -> torch.Tensor:
    """Per row ``i`` of ``left @ right``: is its entry in column ``cols[i]`` among the row's ``k`` largest? (bool ``[..., m]``)

    That is: are fewer than ``k`` entries strictly larger (ties count for it). A
    screen decides most rows from one maximum per group of :data:`SCREEN_WIDTH`
    columns (``k`` groups whose maximum beats the entry hold ``k`` larger entries:
    not in the top ``k``); only the rows it leaves open are counted exactly, one
    matrix at a time (:func:`count_above`). A row of a random head is decided by
    its first tile; a copying head's own tokens are counted (:func:`_exact_within`).
    """
    batch = torch.broadcast_shapes(left.shape[:-2], right.shape[:-2])  # type: ignore[no-untyped-call]
    m, n = left.shape[-2], right.shape[-1]
    own = (left * right[..., cols].mT).sum(-1)
    above = torch.zeros(*batch, m, dtype=torch.int32, device=left.device)
    width = max(1, min(SCREEN_WIDTH, step))
    step = max(width, step - step % width)
    for start in range(0, n, step):
        tile = left @ right[..., start : start + step]
        reference = own.expand(*batch, m)
        inside = (cols >= start) & (cols < start + tile.shape[-1])
        if bool(inside.any()):
            # within the tile that holds a row's own entry, compare with the tile's copy (rounding)
            local = (cols - start).clamp(0, tile.shape[-1] - 1)
            mine = tile.gather(-1, local.expand(*tile.shape[:-1])[..., None])[..., 0]
            reference = torch.where(inside, mine, reference)
        full = tile.shape[-1] - tile.shape[-1] % width
        if full:
            groups = tile[..., :full].reshape(*tile.shape[:-1], full // width, width).amax(-1)
            above += (groups > reference[..., None]).sum(-1, dtype=torch.int32)
        if full < tile.shape[-1]:
            above += (tile[..., full:].amax(-1) > reference).int()
    result = above < k
    open_rows = torch.nonzero(result.reshape(-1, m))
    if open_rows.numel():
        result = result.reshape(-1, m)
        result[open_rows[:, 0], open_rows[:, 1]] = _exact_within(left, right, cols, k, batch, open_rows, step * m)
        result = result.reshape(*batch, m)
    return result


def _broadcast_index(factor: torch.Tensor, where: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
    """Batch indices ``where`` for a factor whose batch dimensions may be 1 (broadcast): those read index 0."""
    return tuple(i if size > 1 else torch.zeros_like(i) for i, size in zip(where, factor.shape, strict=False))


def _exact_within(
    left: torch.Tensor,
    right: torch.Tensor,
    cols: torch.Tensor,
    k: int,
    batch: tuple[int, ...],
    pairs: torch.Tensor,
    entries: int,
) -> torch.Tensor:
    """Exact top-``k`` membership for ``pairs`` ``[P, 2]`` of (flat matrix, row), whole rows at a time.

    Each row and its own entry come from one product, so they round alike. At
    most ``entries`` row entries are formed at once.
    """
    r2, n = left.shape[-1], right.shape[-1]
    left = left.reshape(*(1,) * (len(batch) + 2 - left.ndim), *left.shape)
    right = right.reshape(*(1,) * (len(batch) + 2 - right.ndim), *right.shape)
    out = torch.empty(pairs.shape[0], dtype=torch.bool, device=left.device)
    chunk = max(1, entries // max(1, n * (r2 + 1)))
    for start in range(0, pairs.shape[0], chunk):
        matrix, row = pairs[start : start + chunk, 0], pairs[start : start + chunk, 1]
        where = torch.unravel_index(matrix, batch)
        rows = left[_broadcast_index(left, where) + (row,)]  # noqa: RUF005 — a starred subscript needs Python 3.11
        values = (rows[:, None, :] @ right[_broadcast_index(right, where)])[:, 0]
        own = values.gather(1, cols[row][:, None])
        out[start : start + chunk] = (values > own).sum(-1) < k
    return out
