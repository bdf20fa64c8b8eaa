"""The sweep engine: many patched variants of one run, stacked on the batch axis, each restarted at its layer.

A variant patched at layer ``l`` starts from the base run's residual stream
before ``l`` (cached), so the layers before ``l`` are never recomputed; ``n``
variants of a ``batch``-prompt run are one pass of ``n · batch`` sequences
(variant-major), and a pass may carry the variants of several layers, each joining
at its own (:mod:`circuitwidgets.causal.staircase`). The passes are chosen by their
measured cost within a memory budget (:mod:`circuitwidgets.causal.passes`); only the
logits the metric reads are computed (:class:`~circuitwidgets.causal.metrics.Metric`).
At the patched site a hook mixes the base value with the source value on each
variant's cell: ``base + mask · (source − base)``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import torch
from tqdm import tqdm

from circuitwidgets.causal.budget import Need, check_fits, sweep_need
from circuitwidgets.causal.metrics import Metric
from circuitwidgets.causal.planning import first_positions, layer_cells, plan_passes
from circuitwidgets.causal.sites import SITE_AXES, Cells
from circuitwidgets.causal.staircase import (
    BaseRun,
    evaluate_pass,
)
from circuitwidgets.errors import ArgumentError, ArgumentTypeError, ShapeError
from circuitwidgets.model import CircuitModel

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
    ``most``: variants per pass the memory budget allows (:func:`plan`); the passes
    are those of least measured cost within it (:mod:`circuitwidgets.causal.passes`):
    each a run of cells across the layers (:mod:`circuitwidgets.causal.staircase`).
    ``chosen``: only these cells of each layer (as :meth:`Cells.at_layer` gives them)
    are run; the others stay NaN. Cells are index arithmetic, never one object each.
    When cells split positions (:func:`suffix_only`), each pass recomputes only the
    positions from its earliest patched one on.
    """
    out = np.full(cells.shape, np.nan)
    todo = layer_cells(model, cells, layers, chosen)
    if not todo:
        return out
    suffix = suffix_only(base, cells, metric)
    keys = first_positions(cells, todo, suffix)
    passes = plan_passes(model, base, cells, metric, todo, keys, suffix, most, freeze_norms)
    sources: dict[int, torch.Tensor] = {}
    read = metric.positions_at(base.tokens.shape[1])
    with (
        torch.no_grad(),
        tqdm(total=sum(map(len, todo.values())), desc=desc, delay=1.0, leave=False, disable=None) as bar,
    ):
        for p in passes:
            mixes = []
            for piece in p.pieces:
                if piece.layer not in sources:
                    sources[piece.layer] = source(piece.layer)
                mix = mixer(cells, piece.rows, sources[piece.layer], base, p.offset, read)
                mixes.append((piece.layer, mix, len(piece.rows)))
            values = evaluate_pass(model, base, metric, cells.site, mixes, freeze_norms, p.offset).cpu().numpy()
            first = 0
            for piece in p.pieces:
                store(out, cells, piece.layer, piece.rows, values[first : first + len(piece.rows)])
                first += len(piece.rows)
            bar.update(p.size)
    return out


def store(out: np.ndarray, cells: Cells, layer: int, rows: np.ndarray, values: np.ndarray) -> None:
    """Write ``values`` (one per cell, in ``rows``' order: indices into ``layer``'s cells) into the result ``out``."""
    index: list[np.ndarray | int] = [0] * len(cells.by)
    index[cells.by.index("layer")] = layer
    for j, dim in enumerate(cells.rest):
        index[cells.by.index(dim)] = rows[:, j]
    out[tuple(index)] = values.reshape(np.shape(out[tuple(index)]))


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
    cells: Cells,
    rows: np.ndarray,
    src: torch.Tensor,
    base: BaseRun,
    offset: int = 0,
    read: Sequence[int] | None = None,
) -> Callable[[torch.Tensor], torch.Tensor]:
    """The hook of one pass: each variant's site value with its cell's slice taken from ``src`` (positions from
    ``offset`` on, in a suffix-only pass).

    ``read``: the metric's positions. A pass narrows its last layer to them (:attr:`Recorder.narrow_hooks`), so
    there a site after the keys and values arrives with those rows only, and the hook mixes the same rows of
    ``src``: a patch elsewhere in the last layer's queries or what follows them changes no logit it reads.
    """
    n, batch = len(rows), base.tokens.shape[0]
    mask = cells.mask(rows, tuple(src.shape[1:]), src.device).to(src.dtype)
    axis = SITE_AXES[cells.site].index("pos")
    if offset:
        src = src.narrow(1 + axis, offset, src.shape[1 + axis] - offset)
        mask = mask.narrow(2 + axis, offset, mask.shape[2 + axis] - offset)
    whole = src.shape[1 + axis]
    at_read: tuple[torch.Tensor, torch.Tensor] | None = None  # (src, mask) at the read rows, made when first needed

    def mix(value: torch.Tensor) -> torch.Tensor:
        nonlocal at_read
        if value.shape[1 + axis] == whole:
            s, m = src, mask
        else:
            if at_read is None:
                if read is None:
                    raise ShapeError(f"{cells.site}: a pass narrowed {whole} positions' values, and none are read")
                idx = torch.tensor(sorted({p - offset for p in read}), device=src.device)
                at_read = (
                    src.index_select(1 + axis, idx),
                    mask if mask.shape[2 + axis] == 1 else mask.index_select(2 + axis, idx),
                )
            s, m = at_read
        v = value.view(n, batch, *value.shape[1:])
        return (v + m * (s[None] - v)).view_as(value)

    return mix


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
