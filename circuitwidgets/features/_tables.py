"""Per-unit tables a streaming pass updates batch by batch: the k best entries by a score, and a histogram.

:class:`BestTable` keeps, for each of ``n_units`` columns, the ``k`` entries
with the largest scores seen so far, each with a payload (the token's index in
the corpus, the unit's activation there, and the activations of its context
window). The same table serves the top activations (score = activation) and a
uniform random sample of the active positions (score = a uniform random key
drawn once per active entry: the ``k`` largest keys are a uniform sample
without replacement, the reservoir trick).

Memory is ``n_units × k`` entries whatever the corpus length.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

#: Histogram of positive activations: log-spaced bins from 10**LOG_LOW to 10**LOG_HIGH, BINS_PER_DECADE per decade.
LOG_LOW, LOG_HIGH, BINS_PER_DECADE = -3, 3, 12
N_BINS = (LOG_HIGH - LOG_LOW) * BINS_PER_DECADE


def histogram_edges() -> torch.Tensor:
    """The ``N_BINS + 1`` bin edges (float64); the first and last bins also count values beyond them."""
    return torch.logspace(LOG_LOW, LOG_HIGH, N_BINS + 1, dtype=torch.float64)


class BestTable:
    """For each unit, the ``k`` largest-score entries seen, best first (``-inf`` score where fewer were seen)."""

    def __init__(self, n_units: int, k: int, width: int, dtype: torch.dtype = torch.float32) -> None:
        self.k = k
        self.score = torch.full((n_units, k), -math.inf, dtype=dtype)
        self.index = torch.full((n_units, k), -1, dtype=torch.long)  # the token's index in the corpus (flat)
        self.value = torch.zeros(n_units, k, dtype=dtype)  # the unit's activation there
        self.context = torch.zeros(n_units, k, width, dtype=torch.float16)  # its activations over the window

    def threshold(self) -> torch.Tensor:
        """``[n_units]``: the score an entry must beat to enter (the k-th best so far)."""
        return self.score[:, -1]

    def merge(
        self,
        unit: torch.Tensor,
        score: torch.Tensor,
        index: torch.Tensor,
        value: torch.Tensor,
        context: torch.Tensor | Callable[[torch.Tensor], torch.Tensor],
    ) -> None:
        """Offer entries ``(unit, score, index, value, context [n, width])``; each unit keeps its ``k`` best.

        ``context`` may instead be a function from the positions (in the offered
        arrays) of the entries kept to their contexts: only those are built.
        Among equal scores the entry earlier in the corpus ranks first.
        """
        if unit.numel() == 0:
            return
        k = self.k
        # only the units offered an entry change: merge their rows, in place (later batches offer few)
        touched = torch.unique(unit)  # (sorted)
        m = len(touched)
        old_score, old_index = self.score[touched].flatten(), self.index[touched].flatten()
        units = torch.cat([torch.arange(m).repeat_interleave(k), torch.searchsorted(touched, unit)])
        scores = torch.cat([old_score, score.to(self.score.dtype)])
        # order: unit, then score descending, then the corpus index
        order = torch.argsort(torch.cat([old_index, index]), stable=True)
        for key in (-scores, units):  # (stable sorts from the least significant key to the most)
            order = order[torch.sort(key[order], stable=True).indices]
        sorted_units = units[order]
        rank = torch.arange(order.numel()) - torch.searchsorted(sorted_units, sorted_units, side="left")
        # each touched unit had k entries (-inf scores where fewer were seen), so its k best fill its row again
        source = order[rank < k].view(m, k)
        from_old = source < m * k
        old, fresh = source[from_old], source[~from_old] - m * k
        new_score = torch.empty(m, k, dtype=self.score.dtype)
        new_index = torch.empty(m, k, dtype=torch.long)
        new_value = torch.empty(m, k, dtype=self.value.dtype)
        new_context = torch.empty(m, k, self.context.shape[2], dtype=torch.float16)
        new_score[from_old], new_score[~from_old] = old_score[old], score[fresh].to(new_score.dtype)
        new_index[from_old], new_index[~from_old] = old_index[old], index[fresh]
        new_value[from_old] = self.value[touched].flatten()[old]
        new_value[~from_old] = value[fresh].to(new_value.dtype)
        new_context[from_old] = self.context[touched].flatten(0, 1)[old]
        new_context[~from_old] = (context(fresh) if callable(context) else context[fresh]).to(torch.float16)
        self.score[touched], self.index[touched], self.value[touched] = new_score, new_index, new_value
        self.context[touched] = new_context


def histogram_update(counts: torch.Tensor, unit: torch.Tensor, value: torch.Tensor) -> None:
    """Add positive activations ``value`` of units ``unit`` to ``counts`` ``[n_units, N_BINS]`` (in place)."""
    if unit.numel() == 0:
        return
    position = (torch.log10(value.double()) - LOG_LOW) * BINS_PER_DECADE
    bins = position.floor().clamp(0, N_BINS - 1).long()
    flat = unit * N_BINS + bins
    counts += torch.bincount(flat, minlength=counts.numel()).view_as(counts)
