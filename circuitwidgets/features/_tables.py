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
        context: torch.Tensor,
    ) -> None:
        """Offer entries ``(unit, score, index, value, context [n, width])``; each unit keeps its ``k`` best.

        Among equal scores the entry earlier in the corpus ranks first.
        """
        if unit.numel() == 0:
            return
        n_units, k = self.score.shape
        old_unit = torch.arange(n_units).repeat_interleave(k)
        units = torch.cat([old_unit, unit])
        scores = torch.cat([self.score.flatten(), score.to(self.score.dtype)])
        # order: unit, then score descending, then the corpus index
        order = torch.argsort(torch.cat([self.index.flatten(), index]), stable=True)
        for key in (-scores, units):  # (stable sorts from the least significant key to the most)
            order = order[torch.sort(key[order], stable=True).indices]
        sorted_units = units[order]
        first = torch.searchsorted(sorted_units, sorted_units, side="left")
        rank = torch.arange(order.numel()) - first
        keep = rank < k
        slot_unit, slot_rank, source = sorted_units[keep], rank[keep], order[keep]
        from_old = source < n_units * k
        new_score = self.score.clone()
        new_index = self.index.clone()
        new_value = self.value.clone()
        new_context = self.context.clone()
        old = source[from_old]
        at = (slot_unit[from_old], slot_rank[from_old])
        new_score[at] = self.score.flatten()[old]
        new_index[at] = self.index.flatten()[old]
        new_value[at] = self.value.flatten()[old]
        new_context[at] = self.context.flatten(0, 1)[old]
        fresh = source[~from_old] - n_units * k
        at = (slot_unit[~from_old], slot_rank[~from_old])
        new_score[at] = score[fresh].to(new_score.dtype)
        new_index[at] = index[fresh]
        new_value[at] = value[fresh].to(new_value.dtype)
        new_context[at] = context[fresh].to(torch.float16)
        self.score, self.index, self.value, self.context = new_score, new_index, new_value, new_context


def histogram_update(counts: torch.Tensor, unit: torch.Tensor, value: torch.Tensor) -> None:
    """Add positive activations ``value`` of units ``unit`` to ``counts`` ``[n_units, N_BINS]`` (in place)."""
    if unit.numel() == 0:
        return
    position = (torch.log10(value.double()) - LOG_LOW) * BINS_PER_DECADE
    bins = position.floor().clamp(0, N_BINS - 1).long()
    flat = unit * N_BINS + bins
    counts += torch.bincount(flat, minlength=counts.numel()).view_as(counts)
