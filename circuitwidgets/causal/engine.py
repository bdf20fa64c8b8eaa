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

from circuitwidgets.causal.budget import DENSE_SITES, Need, balanced, check_fits, clock, fastest, sweep_need
from circuitwidgets.causal.metrics import Metric, scalar
from circuitwidgets.causal.sites import SITE_AXES, Cells
from circuitwidgets.errors import ArgumentError, ArgumentTypeError, ShapeError
from circuitwidgets.model import ActivationCache, CircuitModel
from circuitwidgets.model.cache import Hook, Recorder
from circuitwidgets.model.run import SCALE_NAMES

#: Default bytes a sweep may hold at once: its base runs, results and one pass of variants (the weights are extra).
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
    """Run ``tokens`` keeping ``names`` (and the norm scales) and evaluate ``metric`` on the logits it reads.

    Only the metric's positions and ids are unembedded (all of them for a metric
    that does not declare what it reads), so the base run's logits count in the
    sweep's budget as what they are.
    """
    store: dict[str, torch.Tensor] = {}
    positions = metric.positions_at(tokens.shape[1])
    columns = metric.columns.to(model.device) if metric.columns is not None else None
    with torch.no_grad():
        record = Recorder(store, {*names, *SCALE_NAMES})
        sub = model.run_from(tokens, 0, None, record, positions=positions, columns=columns)
    value = scalar(metric.batched(sub[None], tokens.shape[0])[0], metric.name)
    return BaseRun(tokens, ActivationCache(store), float(value))


def plan(
    model: CircuitModel,
    cells: Cells,
    metric: Metric,
    tokens: torch.Tensor,
    budget: int,
    base_names: Sequence[Sequence[str]],
    what: str,
    top: int | None = None,
    results: int | None = None,
) -> int:
    """The most variants per pass that ``budget`` allows for the whole call, checked before any work.

    Counts the base runs keeping ``base_names`` (one list per run), the result
    arrays and one pass; raises :class:`~circuitwidgets.errors.MemoryBudgetError`
    when the cells' results or one variant cannot fit (:mod:`circuitwidgets.causal.budget`).
    ``results``: values the result holds when not one per cell (path patching from every sender).
    """
    batch, n_pos = tokens.shape
    positions = metric.positions_at(n_pos)
    n_read = None if positions is None else len(positions)
    n_columns = None if metric.columns is None else len(metric.columns)
    arrays = 1 if top is None else 2
    count = cells.count if results is None else results
    need = sweep_need(model, cells.site, batch, n_pos, base_names, n_read, n_columns, count, arrays)
    if top is not None:  # attribution patching's forward keeps what its backward pass reads
        need = Need(need.fixed + model.forward_bytes(batch, n_pos), need.per_variant, need.cells, arrays)
    return check_fits(need, budget, what, cells.by, top)


def frozen_scale_hooks(
    model: CircuitModel, base: BaseRun, start: int, positions: Sequence[int] | None, offset: int = 0
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
        if key[0] != "scale_final" or positions is None:  # (the base run's final scales are the metric's already)
            frozen = frozen[:, offset:]

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
    offset: int = 0,
) -> torch.Tensor:
    """The metric of ``n`` variants whose ``site`` at ``layer`` is ``mix(base value repeated n times)``: ``[n]``.

    ``offset``: the variants agree with the base run before that position, so the pass computes positions
    ``offset …`` only, attending to the base run's keys and values (kept in its cache) before it.
    """
    start = model.restart_layer(layer)
    batch, n_pos = base.tokens.shape
    tokens = base.tokens.repeat(n, 1)
    resid = base.cache["resid_pre", start][:, offset:].repeat(n, 1, 1) if start > 0 else None
    positions = metric.positions_at(n_pos)
    hooks: dict[tuple[str, int | None], Hook] = (
        frozen_scale_hooks(model, base, start, positions, offset) if freeze_norms else {}
    )
    hooks[(site, layer)] = mix

    def prefix(at: int) -> tuple[torch.Tensor, torch.Tensor]:
        return base.cache["k", at][:, :offset], base.cache["v", at][:, :offset]

    record = Recorder(
        {}, set(), hooks, prefix if offset else None, offset, resumed(model, base, layer, site, n, offset)
    )
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


#: Sites after which a pass may resume a layer from the base run (the patched layer's queries, keys, values and pattern
#: are the base run's: only what follows the site is recomputed).
RESUMABLE = frozenset({"z", "attn_out"})


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


def sweep(
    model: CircuitModel,
    base: BaseRun,
    source: Callable[[int], torch.Tensor],
    cells: Cells,
    metric: Metric,
    *,
    freeze_norms: bool,
    most: int,
    desc: str,
    layers: Sequence[int] | None = None,
    chosen: dict[int, list[tuple[int, ...]]] | None = None,
) -> np.ndarray:
    """Metric values ``cells.shape`` of the base run with each cell of ``cells.site`` replaced by ``source(layer)``.

    ``source(layer)`` is the replacement value ``[batch, ...]`` of the site at that
    layer (a clean run's, zeros, a mean …); a cell patches only its slice.
    ``most``: variants per pass the memory budget allows (:func:`plan`); the pass
    size used is the fastest measured up to it (:func:`~circuitwidgets.causal.budget.fastest`).
    ``chosen``: only these cells of each layer (as :meth:`Cells.at_layer` gives them)
    are run; the others stay NaN. Cells are index arithmetic, never one object each.
    When cells split positions (:func:`suffix_only`), each pass recomputes only the
    positions from its earliest patched one on.
    """
    out = np.full(cells.shape, np.nan)
    todo = list(range(model.cfg.n_layers)) if layers is None else list(layers)
    counts = {layer: cells.per_layer if chosen is None else len(chosen.get(layer, [])) for layer in todo}
    work = sum(count * (model.cfg.n_layers - layer) for layer, count in counts.items())
    step = pass_size(model, base, cells, metric, freeze_norms, min(most, max(counts.values(), default=1)), work)
    layer_axis = cells.by.index("layer")
    rest_axes = [cells.by.index(d) for d in cells.rest]
    suffix = suffix_only(base, cells, metric)
    pos_col = cells.rest.index("pos") if suffix else None
    if suffix:  # a pass spans at most a quarter of the positions, so most passes skip a prefix (62% of whole work)
        step = min(step, max(1, -(-max(counts.values(), default=1) // SUFFIX_GROUPS)))
    with torch.no_grad(), tqdm(total=sum(counts.values()), desc=desc, delay=1.0, leave=False, disable=None) as bar:
        for layer in todo:
            if not counts[layer]:
                continue
            src = source(layer)
            picked = None if chosen is None else np.asarray(chosen[layer], dtype=np.int64).reshape(-1, len(rest_axes))
            if (
                picked is not None and pos_col is not None
            ):  # earliest positions first, so a pass's suffix is long only when it must be
                picked = picked[np.argsort(picked[:, pos_col], kind="stable")]
            for c0, c1 in balanced(counts[layer], step):
                rows = cells.rows(c0, c1, first="pos" if suffix else None) if picked is None else picked[c0:c1]
                offset = min(int(rows[:, pos_col].min()), suffix) if pos_col is not None else 0
                mix = mixer(cells, rows, src, base, offset)
                values = evaluate_variants(model, base, metric, layer, cells.site, mix, c1 - c0, freeze_norms, offset)
                index: list[np.ndarray | int] = [0] * len(cells.by)
                index[layer_axis] = layer
                for j, axis in enumerate(rest_axes):
                    index[axis] = rows[:, j]
                out[tuple(index)] = values.cpu().numpy().reshape(np.shape(out[tuple(index)]))
                bar.update(c1 - c0)
    return out


#: Passes per layer a suffix-only sweep splits its positions into at least (work ≈ (1 + 1/k)/2 of whole passes).
SUFFIX_GROUPS = 4


def base_names(cells: Cells, metric: Metric) -> list[str]:
    """What the base run keeps: the residual streams every variant restarts from and the site's values, and the
    keys and values when passes may skip the positions before their cells (:func:`suffix_only`)."""
    names = ["resid_pre", cells.site]
    if "pos" in cells.rest and metric.positions is not None:
        names += ["k", "v"]
    return names


def suffix_only(base: BaseRun, cells: Cells, metric: Metric) -> int:
    """How far a pass may skip positions: the metric's earliest read position when the cells split positions, the
    metric declares what it reads and the base run kept its keys and values (else 0: whole passes).

    A patch at position ``p`` changes nothing before ``p`` (causal attention), so a pass whose cells all sit at or
    after ``p`` needs only positions ``p …``, reading the earlier keys and values from the base run; exact for every
    family (rotary offsets, windows, shared keys and values, per-layer inputs are all per position or per key).
    """
    positions = metric.positions_at(base.tokens.shape[1])
    if "pos" not in cells.rest or positions is None or ("k", 0) not in base.cache or ("v", 0) not in base.cache:
        return 0
    return min(positions)


def mixer(
    cells: Cells, rows: np.ndarray, src: torch.Tensor, base: BaseRun, offset: int = 0
) -> Callable[[torch.Tensor], torch.Tensor]:
    """The hook of one pass: each variant's site value with its cell's slice taken from ``src`` (positions from
    ``offset`` on, in a suffix-only pass)."""
    n, batch = len(rows), base.tokens.shape[0]
    mask = cells.mask(rows, tuple(src.shape[1:]), src.device).to(src.dtype)
    if offset:
        axis = SITE_AXES[cells.site].index("pos")
        src = src.narrow(1 + axis, offset, src.shape[1 + axis] - offset)
        mask = mask.narrow(2 + axis, offset, mask.shape[2 + axis] - offset)

    def mix(value: torch.Tensor) -> torch.Tensor:
        v = value.view(n, batch, *value.shape[1:])
        return (v + mask * (src[None] - v)).view_as(value)

    return mix


def pass_size(
    model: CircuitModel, base: BaseRun, cells: Cells, metric: Metric, freeze_norms: bool, most: int, work: int
) -> int:
    """Variants per pass: the fastest measured on this device and shape, up to ``most`` (cached); ``work``: the
    sweep's variant-layers, which bound the measurement's share of the time."""
    last = model.cfg.n_layers - 1
    batch, n_pos = base.tokens.shape
    positions = metric.positions_at(n_pos)
    key = (
        batch, n_pos, cells.site in DENSE_SITES, None if positions is None else len(positions),
        None if metric.columns is None else len(metric.columns), freeze_norms, model.restart_layer(last),
    )  # fmt: skip

    def time_pass(n: int) -> float:
        return clock(lambda: evaluate_variants(model, base, metric, last, cells.site, _unchanged, n, freeze_norms))

    with torch.no_grad():
        return fastest(model, key, most, time_pass, work)


def _unchanged(value: torch.Tensor) -> torch.Tensor:
    return value


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
