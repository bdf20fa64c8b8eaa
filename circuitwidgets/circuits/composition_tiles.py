"""Tiles of the ``[d_model, d_model]`` Gram planes that composition scores are inner products of.

Each head's side ``S = X G Xᵀ`` (:mod:`.composition`) is never formed whole: a
row block's panel ``X[rows] G`` is computed once and multiplied by each column
block's ``X[cols]ᵀ``, for every head at once, into buffers reused from tile to
tile.
"""

from __future__ import annotations

import math

import torch

from circuitwidgets.circuits._precision import compute_dtype

#: ``(X, G)`` of a side ``X G Xᵀ``: ``X [..., d_model, d_head]`` (a view of the weights), ``G [..., d_head, d_head]``.
Side = tuple[torch.Tensor, torch.Tensor]


class Scratch:
    """Flat buffers reused from tile to tile, handed out as views of the shapes asked for.

    A fresh tensor of tens of megabytes is new memory the operating system
    must map and zero page by page: lifting a bfloat16 block into a fresh
    tensor took 3.5× as long as into a reused one, and every tile needs
    several such blocks.
    """

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self._buffers: dict[str, torch.Tensor] = {}

    def take(self, name: str, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        """A contiguous ``shape`` view of buffer ``name`` (grown when too small); its contents are garbage."""
        count = math.prod(shape)
        buffer = self._buffers.get(name)
        if buffer is None or buffer.numel() < count or buffer.dtype != dtype:
            buffer = self._buffers[name] = torch.empty(count, dtype=dtype, device=self.device)
        return buffer[:count].view(shape)

    def lifted(self, name: str, source: torch.Tensor) -> torch.Tensor:
        """``source`` in its compute dtype: itself when it is already, else lifted into buffer ``name``."""
        target = compute_dtype(source.dtype)
        if source.dtype == target:
            return source
        return self.take(name, tuple(source.shape), target).copy_(source)


def row_panel(side: Side, layers: slice, rows: slice, scratch: Scratch, name: str) -> torch.Tensor:
    """``X[rows] G`` ``[..., |rows|, d_head]`` of every head of ``layers``, in buffer ``name``: shared by the row block's tiles."""
    X, G = side
    lifted = scratch.lifted("lifted", X[layers][..., rows, :])
    gram = G[layers]
    batch = (max(a, b) for a, b in zip(lifted.shape[:-2], gram.shape[:-2], strict=True))  # sizes 1 and m broadcast
    shape = (*batch, lifted.shape[-2], gram.shape[-1])
    return torch.matmul(lifted, gram, out=scratch.take(name, shape, gram.dtype))


def tile(out: torch.Tensor, panel: torch.Tensor, side: Side, layers: slice, cols: slice, scratch: Scratch) -> None:
    """Write ``X[rows] G X[cols]ᵀ`` of every head of ``layers`` into ``out`` ``[heads, |rows| |cols|]`` (contiguous).

    ``panel`` is the heads' row panel (:func:`row_panel`). A key or value side's
    ``X`` is its group's: the group's heads' panels are stacked and multiplied by
    the shared columns once (``[m |rows|, d_head] · [d_head, |cols|]`` per
    group), with the same layout as one product per head.
    """
    columns = scratch.lifted("lifted", side[0][layers][..., cols, :])
    if columns.shape[-3] == 1 and panel.shape[-3] > 1:
        panel, columns = panel.flatten(-3, -2), columns.squeeze(-3)
    panel = panel.reshape(-1, *panel.shape[-2:])
    columns = columns.reshape(-1, *columns.shape[-2:])
    torch.bmm(panel, columns.mT, out=out.view(panel.shape[0], panel.shape[1], columns.shape[1]))


def tile_size(d: int, r: int, kinds: int, heads: int, block: int, element_size: int, memory_budget: int) -> int:
    """Tile width ``b``: the largest whose panels, tiles and lifted columns fit ``memory_budget``.

    Held at once: the row panels of the earlier side and of every kind
    (``(1 + kinds) · heads · b · r`` entries), the earlier heads' tile
    (``heads · b²``), one block's tiles of every kind (``kinds · block · b²``)
    and the earlier heads' lifted rows or columns (``heads · b · r``, one buffer: rows
    are lifted for the panels before any tile lifts its columns). At most ``d / 2``
    (rounded to 8): a diagonal tile is formed whole, both its triangles, which
    wastes ``b / d`` of the work, but fewer, larger products are faster up to
    there (each tile lifts its columns again and the pair products' inner
    dimension is ``b²``).
    """
    square = (heads + kinds * min(block, heads)) * element_size
    linear = (2 + kinds) * heads * r * element_size
    b = int((-linear + math.sqrt(linear * linear + 4 * square * memory_budget)) / (2 * square))
    b = min(b, max(16, d // 2))
    return max(1, min(d, b - b % 8 if b > 16 else b))
