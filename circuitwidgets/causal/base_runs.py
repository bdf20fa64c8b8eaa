"""The runs every sweep starts from: the corrupted (base) run each variant restarts from and the clean (source) run
its patches read, each keeping what the sweep needs and its metric value.

:func:`run_pair` runs both as one pass of twice the batch when the memory budget has room for it: one call of each
kernel per layer instead of two (at a small model's sizes a call costs about as much as its arithmetic), the same
numbers to rounding, since every sequence of a batch is computed independently.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from circuitwidgets.causal.metrics import Metric, scalar
from circuitwidgets.causal.staircase import BaseRun
from circuitwidgets.model import ActivationCache, CircuitModel
from circuitwidgets.model.cache import Recorder
from circuitwidgets.model.run import SCALE_NAMES


def run_base(
    model: CircuitModel, tokens: torch.Tensor, metric: Metric, names: Sequence[str], *, scales: bool = False
) -> BaseRun:
    """Run ``tokens`` keeping ``names`` (and the norm scales when ``scales``: a sweep that freezes norms replays
    them) and evaluate ``metric`` on the logits it reads.

    Only the metric's positions and ids are unembedded (all of them for a metric
    that does not declare what it reads), so the base run's logits count in the
    sweep's budget as what they are. Scales are kept only when asked for: keeping
    them makes every norm run as written-out steps instead of its fused kernel.
    """
    store: dict[str, torch.Tensor] = {}
    with torch.no_grad():
        sub = _run(model, tokens, metric, Recorder(store, _kept(names, scales)))
    value = scalar(metric.batched(sub[None], tokens.shape[0])[0], metric.name)
    return BaseRun(tokens, ActivationCache(store), float(value))


def run_pair(
    model: CircuitModel,
    clean: torch.Tensor,
    corrupted: torch.Tensor,
    metric: Metric,
    clean_names: Sequence[str],
    corrupted_names: Sequence[str],
    *,
    scales: bool = False,
    joint: bool = True,
) -> tuple[BaseRun, BaseRun]:
    """The source run of ``clean`` keeping ``clean_names`` and the base run of ``corrupted`` keeping
    ``corrupted_names`` (and the norm scales when ``scales``), as :func:`run_base` gives them.

    ``joint``: as one pass of both prompt sets stacked on the batch axis (the caller's memory plan must hold two
    variants' passes: :func:`~circuitwidgets.causal.engine.plan`); each run keeps only its own rows, an activation
    only one of them keeps copied out of the joint tensor so that the other half is freed.
    """
    if not joint:
        return run_base(model, clean, metric, clean_names), run_base(
            model, corrupted, metric, corrupted_names, scales=scales
        )
    batch = clean.shape[0]
    own = (_kept(clean_names, False), _kept(corrupted_names, scales))
    stores: tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]] = ({}, {})
    with torch.no_grad():
        sub = _run(model, torch.cat([clean, corrupted]), metric, _Halves(stores, own, batch))
    values = metric.batched(sub.view(2, batch, *sub.shape[1:]), batch)
    source = BaseRun(clean, ActivationCache(stores[0]), float(scalar(values[0], metric.name)))
    base = BaseRun(corrupted, ActivationCache(stores[1]), float(scalar(values[1], metric.name)))
    return source, base


def _kept(names: Sequence[str], scales: bool) -> set[str]:
    return {*names, *(SCALE_NAMES if scales else ())}


def _run(model: CircuitModel, tokens: torch.Tensor, metric: Metric, record: Recorder) -> torch.Tensor:
    """The logits ``metric`` reads of a whole pass over ``tokens``."""
    positions = metric.positions_at(tokens.shape[1])
    columns = metric.columns.to(model.device) if metric.columns is not None else None
    return model.run_from(tokens, 0, None, record, positions=positions, columns=columns)


class _Halves(Recorder):
    """A recorder of a pass over two prompt sets of ``batch`` rows each: ``stores[i]`` keeps ``keep[i]`` of set
    ``i``'s rows (a view when both keep the activation, else a copy: a view would hold the other half's memory)."""

    def __init__(
        self,
        stores: tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]],
        keep: tuple[set[str], set[str]],
        batch: int,
    ) -> None:
        super().__init__({}, keep[0] | keep[1])
        self.stores, self.own, self.batch = stores, keep, batch

    def __call__(self, name: str, layer: int | None, value: torch.Tensor) -> torch.Tensor:
        both = name in self.own[0] and name in self.own[1]
        key = ActivationCache.key(name, layer)
        for i, (store, own) in enumerate(zip(self.stores, self.own, strict=True)):
            if name in own:
                half = value[i * self.batch : (i + 1) * self.batch]
                store[key] = half if both else half.clone()
        return value
