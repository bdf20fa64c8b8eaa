"""One batch of a layer's unit activations as the streaming pass reads it: dense, or each token's top-k entries.

:func:`circuitwidgets.features.max_activating` needs of a batch of ``n_tok``
tokens (``rows × n_pos``, flattened row-major) and ``n_units`` units:

- its positive entries ``(token, unit, value)``, in row-major order of the
  dense ``[n_tok, n_units]`` matrix (the random sample's keys are drawn in this
  order, so both forms draw the same sample);
- the activations of given units over context windows around given tokens;
- rarely (dense units), the dense matrix itself.

:class:`DenseBatch` holds the matrix. :class:`TopBatch` holds, for units of
which at most ``k`` per token are nonzero (a TopK dictionary's features),
only ``[n_tok, k]`` values and unit indices: ``k / n_units`` of the memory and
of the work per batch (for 4,096 features at k = 32, 1/128), and the same
numbers. A window's value is found by binary search among the batch's sorted
``token · n_units + unit`` keys (absent: the unit is 0 there).

:func:`read_in_order` reads batches ahead on several threads, handing them over in order.
"""

from __future__ import annotations

import contextlib
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

import torch

B = TypeVar("B")


def _window_positions(token: torch.Tensor, n_pos: int, before: int, after: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(flat, inside)`` ``[n, before + 1 + after]``: the batch tokens of each window (clamped to its row) and
    whether each lies inside the row."""
    row, pos = token // n_pos, token % n_pos
    at = pos[:, None] + torch.arange(-before, after + 1)
    inside = (at >= 0) & (at < n_pos)
    return row[:, None] * n_pos + at.clamp(0, n_pos - 1), inside


class DenseBatch:
    """A batch held as its dense activations ``[rows, n_pos, n_units]``."""

    def __init__(self, acts: torch.Tensor) -> None:
        self.n_pos, self.n_units = acts.shape[1], acts.shape[2]
        self.flat = acts.reshape(-1, self.n_units)
        self.n_tok = self.flat.shape[0]
        self.token, self.unit = (self.flat > 0).nonzero(as_tuple=True)
        self.value = self.flat[self.token, self.unit]

    def dense(self) -> torch.Tensor:
        """``[n_tok, n_units]`` activations."""
        return self.flat

    def windows(self, token: torch.Tensor, unit: torch.Tensor, before: int, after: int) -> torch.Tensor:
        """``[n, before + 1 + after]`` activations of ``unit`` around batch tokens ``token`` (NaN beyond the row)."""
        at, inside = _window_positions(token, self.n_pos, before, after)
        values = self.flat[at, unit[:, None]]
        return torch.where(inside, values, torch.full_like(values, float("nan")))


class TopBatch:
    """A batch held as each token's top-k entries: ``values, units [rows, n_pos, k]`` (``values >= 0``)."""

    def __init__(self, values: torch.Tensor, units: torch.Tensor, n_units: int) -> None:
        self.n_pos, self.n_units = values.shape[1], n_units
        k = values.shape[-1]
        # each token's entries by unit (row-major order of the dense matrix), the zeros dropped
        units, order = units.reshape(-1, k).sort(dim=1)
        values = values.reshape(-1, k).gather(1, order)
        self.n_tok = values.shape[0]
        slot_token, slot = (values > 0).nonzero(as_tuple=True)
        self.token, self.unit, self.value = slot_token, units[slot_token, slot], values[slot_token, slot]
        self.key = self.token * n_units + self.unit  # (ascending: row-major order)

    def dense(self) -> torch.Tensor:
        """``[n_tok, n_units]`` activations (built on demand: dense units only)."""
        out = torch.zeros(self.n_tok, self.n_units, dtype=self.value.dtype)
        out[self.token, self.unit] = self.value
        return out

    def windows(self, token: torch.Tensor, unit: torch.Tensor, before: int, after: int) -> torch.Tensor:
        """``[n, before + 1 + after]`` activations of ``unit`` around batch tokens ``token`` (NaN beyond the row)."""
        at, inside = _window_positions(token, self.n_pos, before, after)
        wanted = at * self.n_units + unit[:, None]
        found = torch.searchsorted(self.key, wanted).clamp_max(max(len(self.key) - 1, 0))
        if len(self.key) == 0:
            values = torch.zeros(wanted.shape, dtype=self.value.dtype)
        else:
            values = torch.where(self.key[found] == wanted, self.value[found], torch.zeros((), dtype=self.value.dtype))
        return torch.where(inside, values, torch.full_like(values, float("nan")))


@contextlib.contextmanager
def _one_thread_per_op() -> Iterator[None]:
    """Torch's intra-op threads set to 1 for the block (restored after)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def read_in_order(read: Callable[[int], B], starts: Sequence[int], workers: int) -> Iterator[tuple[int, B]]:
    """``(start, read(start))`` for each of ``starts`` in order; ``workers > 1`` threads read ahead at once.

    With several workers each runs its reads on one CPU thread (torch's intra-op
    threads are 1 meanwhile): threads that never wait for each other inside an
    operation, unlike an operation's own threads, which on a busy shared machine
    wait at every operation for the slowest. At most ``workers + 1`` batches are
    held at once; the caller still sees them one by one, in order.
    """
    if workers == 1:
        for start in starts:
            yield start, read(start)
        return

    def task(start: int) -> B:
        with torch.no_grad():  # (grad mode is per thread)
            return read(start)

    with _one_thread_per_op(), ThreadPoolExecutor(workers, thread_name_prefix="cw-read") as pool:
        pending: deque[tuple[int, Future[B]]] = deque()
        for start in starts:
            pending.append((start, pool.submit(task, start)))
            if len(pending) > workers:
                first, future = pending.popleft()
                yield first, future.result()
        while pending:
            first, future = pending.popleft()
            yield first, future.result()
