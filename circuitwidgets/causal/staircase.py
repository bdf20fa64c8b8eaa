"""One pass of a sweep: the variants of one or more layers stacked on the batch axis, each joining at its layer.

A pass starts at the earliest restart layer of its pieces (:meth:`~circuitwidgets.CircuitModel.restart_layer`)
from the base run's residual stream there; at each later piece's restart layer its variants join the batch (the
base run's stream at that layer, repeated), so every layer's matrix products see all the variants alive there (a
"staircase"). Each piece's hook mixes only its own rows of the batch, at its own layer: a variant that joined at
layer ``r`` is the base run up to its patch, exactly as if it had started alone at ``r``. Everything per batch in a
pass follows the batch: frozen norm scales and prefix keys and values repeat by whole variants, per-layer inputs
repeat with the prompts, and layers reusing earlier keys and values never read a source from before the latest
join (the restart layer's definition). A site the engine resumes (:data:`RESUMABLE`) runs one piece per pass.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from circuitwidgets.causal.metrics import Metric
from circuitwidgets.errors import ArgumentError
from circuitwidgets.model import ActivationCache, CircuitModel
from circuitwidgets.model.cache import Hook, Recorder

#: Sites after which a pass may resume a layer from the base run (the patched layer's queries, keys, values and pattern
#: are the base run's: only what follows the site is recomputed). Their passes hold one layer each.
RESUMABLE = frozenset({"z", "attn_out"})


@dataclass
class BaseRun:
    """The run every variant starts from: its tokens, cache (residual streams, site values, norm scales) and metric value."""

    tokens: torch.Tensor
    cache: ActivationCache
    value: float


def frozen_scale_hooks(
    model: CircuitModel, base: BaseRun, start: int, positions: Sequence[int] | None, offset: int = 0
) -> dict[tuple[str, int | None], Hook]:
    """Hooks replaying the base run's norm scales for variants stacked on the batch axis (layers from ``start`` on;
    the final norm's at the logits' ``positions``); they repeat by whole variants, as many as the batch holds."""
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
        if key[0] != "scale_final" or positions is None:  # (the base run's final scales are the metric's already)
            frozen = frozen[:, offset:]

        def replay(value: torch.Tensor, frozen: torch.Tensor = frozen) -> torch.Tensor:
            return frozen.repeat(value.shape[0] // frozen.shape[0], *([1] * (frozen.ndim - 1)))

        hooks[key] = replay
    return hooks


def resumed(
    model: CircuitModel, base: BaseRun, layer: int, site: str, n: int, offset: int
) -> tuple[int, str, torch.Tensor] | None:
    """Where ``n`` variants patching ``site`` at ``layer`` may resume (:attr:`Recorder.resume`): the base run's value
    of the site, repeated; ``None`` where the layer must run whole (a site before z, or keys and values shared with
    other layers, which the pass must recompute for them)."""
    sources = model.cfg.kv_sources
    if site not in RESUMABLE or (site, layer) not in base.cache or model.restart_layer(layer) != layer:
        return None
    if sources is not None and layer in sources[layer + 1 :]:
        return None
    value = base.cache[site, layer][:, offset:]
    return layer, site, value.repeat(n, *([1] * (value.ndim - 1)))


@dataclass(frozen=True)
class Piece:
    """The variants of one layer in a pass: ``rows`` are their cells (indices in the sweep's ``rest`` order)."""

    layer: int
    rows: np.ndarray


@dataclass(frozen=True)
class Pass:
    """A pass: its pieces (ordered by restart layer, then layer) and the first position it computes."""

    pieces: tuple[Piece, ...]
    offset: int

    @property
    def size(self) -> int:
        """Variants in the pass (all alive at its last layer)."""
        return sum(len(p.rows) for p in self.pieces)


def evaluate_pass(
    model: CircuitModel,
    base: BaseRun,
    metric: Metric,
    site: str,
    pieces: Sequence[tuple[int, Callable[[torch.Tensor], torch.Tensor], int]],
    freeze_norms: bool,
    offset: int = 0,
) -> torch.Tensor:
    """The metric of every variant of a pass, in piece order: ``[Σ n]``.

    ``pieces``: ``(layer, mix, n)`` per piece, ordered by restart layer then layer; ``mix`` replaces the site's value
    of the piece's ``n`` variants (``[n · batch, ...]``). ``offset``: every variant agrees with the base run before
    that position, so the pass computes positions ``offset …`` only, reading the earlier keys and values from the
    base run's cache.
    """
    tokens, cache = base.tokens, base.cache
    batch, n_pos = tokens.shape
    starts = [model.restart_layer(layer) for layer, _, _ in pieces]
    if starts != sorted(starts):
        raise ArgumentError(f"pieces: expected pieces ordered by restart layer, got restart layers {starts}")
    start, total = starts[0], sum(n for _, _, n in pieces)
    positions = metric.positions_at(n_pos)
    hooks: dict[tuple[str, int | None], Hook] = (
        frozen_scale_hooks(model, base, start, positions, offset) if freeze_norms else {}
    )
    joining: dict[int, int] = {}
    first = 0
    for (layer, mix, n), restart in zip(pieces, starts, strict=True):
        hooks[(site, layer)] = _rows_of(mix, first * batch, (first + n) * batch)
        joining[restart] = joining.get(restart, 0) + n
        first += n

    def stream(layer: int, n: int) -> torch.Tensor:
        return cache["resid_pre", layer][:, offset:].repeat(n, 1, 1)

    def join(layer: int, resid: torch.Tensor) -> torch.Tensor:
        n = joining.get(layer, 0) if layer != start else 0
        return torch.cat([resid, stream(layer, n)]) if n else resid

    def prefix(at: int) -> tuple[torch.Tensor, torch.Tensor]:
        return cache["k", at][:, :offset], cache["v", at][:, :offset]

    resume = resumed(model, base, pieces[0][0], site, total, offset) if len(pieces) == 1 else None
    record = Recorder(
        {}, set(), hooks, prefix if offset else None, offset, resume, join if len(joining) > 1 else None,
        narrow_hooks=not freeze_norms,  # (the mixers take narrowed rows; replayed scales do not)
    )  # fmt: skip
    columns = metric.columns.to(model.device) if metric.columns is not None else None
    logits = model.run_from(tokens, start, stream(start, joining[start]), record, positions=positions, columns=columns)
    values = metric.batched(logits.view(total, batch, *logits.shape[1:]), batch)
    if values.shape != (total,):
        raise ArgumentError(
            f"metric: {metric.name} returned shape {tuple(values.shape)} for {total} variants, expected ({total},)"
        )
    if not bool(torch.isfinite(values).all()):
        raise ArgumentError(f"metric: {metric.name} returned a non-finite value for a patched run")
    return values


def _rows_of(mix: Callable[[torch.Tensor], torch.Tensor], lo: int, hi: int) -> Hook:
    """``mix`` applied to rows ``lo … hi − 1`` of the batch only (a piece's variants; the others pass unchanged)."""

    def hook(value: torch.Tensor) -> torch.Tensor:
        if lo == 0 and hi == value.shape[0]:
            return mix(value)
        return torch.cat([value[:lo], mix(value[lo:hi]), value[hi:]])

    return hook
