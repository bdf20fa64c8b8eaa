"""The sweep engine: many patched variants of one run, stacked on the batch axis, each restarted at its layer.

A sweep over cells of one layer ``l`` starts every variant from the base run's
residual stream before ``l`` (cached), so the layers before ``l`` are never
recomputed; ``n`` variants of a ``batch``-prompt run are one pass of
``n · batch`` sequences (variant-major), chunked to a memory budget; only the
logits the metric reads are computed (:class:`~circuitwidgets.causal.metrics.Metric`).
At the patched site a hook mixes the base value with the source value on each
variant's cell: ``base + mask · (source − base)``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from tqdm import tqdm

from circuitwidgets.causal.metrics import Metric, scalar
from circuitwidgets.causal.sites import Cells
from circuitwidgets.errors import ArgumentError, ArgumentTypeError, ShapeError
from circuitwidgets.model import ActivationCache, CircuitModel
from circuitwidgets.model.cache import Hook, Recorder
from circuitwidgets.model.run import SCALE_NAMES

#: Default bytes the patched variants of one chunk may hold at once (the model's weights are extra).
SWEEP_MEMORY_BUDGET = 2**30


def check_pair(model: CircuitModel, clean: object, corrupted: object) -> tuple[torch.Tensor, torch.Tensor]:
    """Both prompts' token ids ``[batch, pos]``, checked to match in shape (errors name the argument)."""
    return same_shape(model._check_tokens(clean), model._check_tokens(corrupted))  # type: ignore[arg-type]


def same_shape(clean: torch.Tensor, corrupted: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Checked token ids of both prompts, refused (naming ``corrupted``) unless their shapes match."""
    if clean.shape != corrupted.shape:
        raise ShapeError(
            f"corrupted: expected token ids of the clean prompts' shape {tuple(clean.shape)}, got {tuple(corrupted.shape)}"
        )
    return clean, corrupted


def check_budget(memory_budget: object) -> int:
    """The sweep's memory budget in bytes (default :data:`SWEEP_MEMORY_BUDGET`)."""
    if memory_budget is None:
        return SWEEP_MEMORY_BUDGET
    if isinstance(memory_budget, bool) or not isinstance(memory_budget, int) or memory_budget < 1:
        raise ArgumentTypeError(f"memory_budget: expected a positive int (bytes) or None, got {memory_budget!r}")
    return memory_budget


@dataclass
class BaseRun:
    """The run every variant starts from: its tokens, cache (residual streams, site values, norm scales) and metric value."""

    tokens: torch.Tensor
    cache: ActivationCache
    value: float


def run_base(model: CircuitModel, tokens: torch.Tensor, metric: Metric, names: Sequence[str]) -> BaseRun:
    """Run ``tokens`` keeping ``names`` (and the norm scales) and evaluate ``metric`` on the whole logits."""
    logits, cache = model.run_with_cache(tokens, names=[*names, *SCALE_NAMES])
    positions = metric.positions_at(tokens.shape[1])
    sub = logits if positions is None else logits[:, positions]
    if metric.columns is not None:
        sub = sub[..., metric.columns.to(sub.device)]
    value = scalar(metric.batched(sub[None], tokens.shape[0])[0], metric.name)
    return BaseRun(tokens, cache, float(value))


def chunk_size(model: CircuitModel, batch: int, n_pos: int, memory_budget: int) -> int:
    """Variants per pass: how many ``batch``-prompt copies fit in ``memory_budget`` (at least 1)."""
    per_variant = model.forward_bytes(batch, n_pos, names=set())
    return max(1, memory_budget // max(per_variant, 1))


def frozen_scale_hooks(
    model: CircuitModel, base: BaseRun, start: int, positions: Sequence[int] | None
) -> dict[tuple[str, int | None], Hook]:
    """Hooks replaying the base run's norm scales for variants stacked on the batch axis (layers from ``start`` on;
    the final norm's at the logits' ``positions``)."""
    hooks: dict[tuple[str, int | None], Hook] = {}
    keys: list[tuple[str, int | None]] = [("scale_final", None)]
    for layer in range(start, model.cfg.n_layers):
        keys.append(("scale", layer))
        if model.cfg.has_mlp:
            keys.append(("scale_mlp", layer))
    for key in keys:
        frozen = base.cache.get(key)
        if frozen is None:
            continue
        if key[0] == "scale_final" and positions is not None:
            frozen = frozen[:, list(positions)]

        def replay(value: torch.Tensor, frozen: torch.Tensor = frozen) -> torch.Tensor:
            return frozen.repeat(value.shape[0] // frozen.shape[0], *([1] * (frozen.ndim - 1)))

        hooks[key] = replay
    return hooks


def evaluate_variants(
    model: CircuitModel,
    base: BaseRun,
    metric: Metric,
    layer: int,
    site: str,
    mix: Callable[[torch.Tensor], torch.Tensor],
    n: int,
    freeze_norms: bool,
) -> torch.Tensor:
    """The metric of ``n`` variants whose ``site`` at ``layer`` is ``mix(base value repeated n times)``: ``[n]``."""
    start = model.restart_layer(layer)
    batch, n_pos = base.tokens.shape
    tokens = base.tokens.repeat(n, 1)
    resid = base.cache["resid_pre", start].repeat(n, 1, 1) if start > 0 else None
    positions = metric.positions_at(n_pos)
    hooks: dict[tuple[str, int | None], Hook] = (
        frozen_scale_hooks(model, base, start, positions) if freeze_norms else {}
    )
    hooks[(site, layer)] = mix
    record = Recorder({}, set(), hooks)
    columns = metric.columns.to(model.device) if metric.columns is not None else None
    logits = model.run_from(tokens, start, resid, record, positions=positions, columns=columns)
    values = metric.batched(logits.view(n, batch, *logits.shape[1:]), batch)
    if values.shape != (n,):
        raise ArgumentError(
            f"metric: {metric.name} returned shape {tuple(values.shape)} for {n} variants, expected ({n},)"
        )
    if not bool(torch.isfinite(values).all()):
        raise ArgumentError(f"metric: {metric.name} returned a non-finite value for a patched run")
    return values


def sweep(
    model: CircuitModel,
    base: BaseRun,
    source: Callable[[int], torch.Tensor],
    cells: Cells,
    metric: Metric,
    *,
    freeze_norms: bool,
    memory_budget: int,
    desc: str,
    layers: Sequence[int] | None = None,
    chosen: dict[int, list[tuple[int, ...]]] | None = None,
) -> np.ndarray:
    """Metric values ``cells.shape`` of the base run with each cell of ``cells.site`` replaced by ``source(layer)``.

    ``source(layer)`` is the replacement value ``[batch, ...]`` of the site at that
    layer (a clean run's, zeros, a mean …); a cell patches only its slice.
    ``chosen``: only these cells of each layer (as :meth:`Cells.at_layer` gives them)
    are run; the others stay NaN.
    """
    out = np.full(cells.shape, np.nan)
    batch, n_pos = base.tokens.shape
    todo = list(range(model.cfg.n_layers)) if layers is None else list(layers)
    run = {layer: cells.at_layer() if chosen is None else chosen.get(layer, []) for layer in todo}
    step = chunk_size(model, batch, n_pos, memory_budget)
    rest = [d for d in cells.by if d != "layer"]
    with (
        torch.no_grad(),
        tqdm(total=sum(map(len, run.values())), desc=desc, delay=1.0, leave=False, disable=None) as bar,
    ):
        for layer in todo:
            per_layer = run[layer]
            if not per_layer:
                continue
            src = source(layer)
            for c0 in range(0, len(per_layer), step):
                chunk = per_layer[c0 : c0 + step]
                n = len(chunk)
                mask = cells.mask(chunk, tuple(src.shape[1:]), src.device).to(src.dtype)

                def mix(
                    value: torch.Tensor, mask: torch.Tensor = mask, src: torch.Tensor = src, n: int = n
                ) -> torch.Tensor:
                    v = value.view(n, batch, *value.shape[1:])
                    return (v + mask * (src[None] - v)).view_as(value)

                values = evaluate_variants(model, base, metric, layer, cells.site, mix, n, freeze_norms)
                for cell, v in zip(chunk, values.tolist(), strict=True):
                    index = [0] * len(cells.by)
                    index[cells.by.index("layer")] = layer
                    for j, d in enumerate(rest):
                        index[cells.by.index(d)] = cell[j]
                    out[tuple(index)] = v
                bar.update(n)
    return out


def normalise(values: np.ndarray, metric: Metric, clean: float, corrupted: float) -> tuple[np.ndarray, float, float]:
    """``values`` rescaled to ``(v − corrupted) / (clean − corrupted)`` when the metric asks for it."""
    if not metric.normalise:
        return values, clean, corrupted
    c = metric.clean if metric.clean is not None else clean
    k = metric.corrupted if metric.corrupted is not None else corrupted
    if abs(c - k) < 1e-12:
        raise ArgumentError(
            f"metric: normalising needs different clean and corrupted values, got {c:.6g} for both; "
            "choose a corruption that changes the metric"
        )
    return (values - k) / (c - k), c, k
