"""Rows or columns of a factor selected by an int, a slice, a sequence of ints, an index tensor or a mask."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from circuitwidgets.errors import ArgumentError, ArgumentTypeError, ShapeError

#: What selects rows (or columns) of a low-rank matrix.
Index = int | slice | Sequence[int] | torch.Tensor


def as_index_tensor(name: str, index: object, device: torch.device) -> torch.Tensor:
    """``index`` as a tensor on ``device``, or an :class:`ArgumentTypeError` naming ``name``."""
    if isinstance(index, (str, bytes)) or index is None:
        raise ArgumentTypeError(f"{name}: expected an int, slice or sequence of ints, got {type(index).__name__}")
    try:
        return torch.as_tensor(index, device=device)
    except (TypeError, ValueError, RuntimeError, OverflowError) as exc:
        raise ArgumentTypeError(
            f"{name}: expected an int, slice or sequence of ints, got {type(index).__name__} ({exc})"
        ) from None


def index_rows(x: torch.Tensor, index: Index, size: int, name: str) -> torch.Tensor:
    """Rows of ``x`` selected by an int, slice, sequence of ints or index tensor (ints keep the dim)."""
    if isinstance(index, bool):
        raise ArgumentTypeError(f"{name}: expected an int, slice or sequence of ints, got bool")
    if isinstance(index, int):
        if not -size <= index < size:
            raise ArgumentError(f"{name}: expected an index in [{-size}, {size}), got {index}")
        return x[index % size][None]
    if isinstance(index, slice):
        try:
            return x[index]
        except (TypeError, ValueError) as exc:
            raise ArgumentTypeError(f"{name}: expected a slice of ints, got {index!r} ({exc})") from None
    idx = as_index_tensor(name, index, x.device)
    if idx.dtype == torch.bool:
        if idx.shape != (size,):
            raise ShapeError(f"{name}: expected a boolean mask of shape ({size},), got {tuple(idx.shape)}")
        return x[idx]
    if idx.dtype.is_floating_point or idx.ndim != 1:
        raise ArgumentError(
            f"{name}: expected a 1-D sequence of int indices, got shape {tuple(idx.shape)} dtype {idx.dtype}"
        )
    if idx.numel() and (int(idx.min()) < -size or int(idx.max()) >= size):
        raise ArgumentError(
            f"{name}: expected indices in [{-size}, {size}), got range [{int(idx.min())}, {int(idx.max())}]"
        )
    return x[idx.long()]
