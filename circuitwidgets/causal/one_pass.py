"""A patching sweep small enough for one pass: the clean run, the corrupted run and every variant in one batch.

At a small model's sizes one call of a kernel costs about as much as its arithmetic, so the base runs and the
staircase passes (:mod:`circuitwidgets.causal.staircase`), each a call of every kernel per layer, spend most of
their time on calls. When the memory plan holds every variant at once, the sweep may instead be one pass of
``(2 + n) · batch`` sequences: rows ``0 … batch − 1`` the clean prompts, then the corrupted ones, then the ``n``
variants, each layer's joining at its restart layer as a copy of the corrupted rows' residual stream there. The hook
at ``(site, layer)`` mixes the clean rows' value of that very call into its variants' rows, so nothing is cached; the
last layer computes its queries and what follows at the metric's positions for every row.

The same numbers as the staircase path (every sequence of a batch is computed independently; float64 ≤ 1e-12). Which
path is faster depends on the machine as much as on the shape (per-call costs against the positions a staircase pass
may skip and the layer a resumed pass skips), so it is chosen per sweep shape on the cost curve measured on this
machine (:func:`patch_values`), both kept on disk (:mod:`~circuitwidgets.causal.calibration`).
Not for frozen norms (their replayed scales come from the base run), ``top=`` (a few chosen cells), or per-layer
inputs (Gemma 4: they follow the prompts, which the rows do not repeat evenly).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

import numpy as np
import torch

from circuitwidgets.causal import calibration
from circuitwidgets.causal.base_runs import run_pair
from circuitwidgets.causal.engine import store, suffix_only, sweep
from circuitwidgets.causal.metrics import Metric, scalar
from circuitwidgets.causal.passes import Curve
from circuitwidgets.causal.planning import (
    cost_curve,
    curve_key,
    first_positions,
    last_share,
    layer_cells,
    staircase_plan,
    sweep_work,
)
from circuitwidgets.causal.sites import SITE_AXES, Cells
from circuitwidgets.causal.staircase import BaseRun
from circuitwidgets.errors import ArgumentError
from circuitwidgets.model import CircuitModel
from circuitwidgets.model.cache import Hook, Recorder

_T = TypeVar("_T")


#: How much faster the modelled one pass must be for the choice to take it. The model leaves out per-call
#: costs (which favour the one pass) and the attention a resumed ``z``/``attn_out`` pass skips at its layer (which
#: favours the staircase). Measured alternately against the model's ratio (one pass / staircase), on this 2-core
#: CPU: GPT-2 ``z`` by layer × head 0.92 (modelled 0.91), ``pattern`` 1.00 (0.92); the medium induction study,
#: declared metric, 1.28 (0.97).
MODELLED_MARGIN = 0.92

#: Per sweep shape (:func:`_choice_key`): whether the one pass is the faster path.
_CHOICES: dict[tuple[object, ...], bool] = {}

#: Pins the path of every eligible sweep (``True`` the one pass, ``False`` the staircase; ``None``: the faster, as
#: chosen): for A/B timings and for tests of either path.
PINNED: bool | None = None


def patch_values(
    model: CircuitModel,
    clean: torch.Tensor,
    corrupted: torch.Tensor,
    cells: Cells,
    metric: Metric,
    kept: Sequence[str],
    *,
    most: int,
    freeze_norms: bool,
    chosen: dict[int, list[tuple[int, ...]]] | None,
) -> tuple[np.ndarray, float, float]:
    """Activation patching's values ``cells.shape`` and the clean and corrupted runs' metric values: by base runs
    (the corrupted one keeping ``kept``) and the staircase sweep, or by one pass when :func:`eligible` and faster.

    Which is faster is chosen from the cost curve, never by timing both on the user's clock: the one pass when
    modelled faster by :data:`MODELLED_MARGIN` (:func:`one_pass_seconds`, :func:`staircase_seconds`). The choice is
    kept per sweep shape, in memory and on disk with the curve it came from
    (:mod:`~circuitwidgets.causal.calibration`), so a later process's first sweep of that shape runs its path at
    once, as a warm call does.
    """
    if not eligible(model, cells, most, freeze_norms, chosen):
        return _staircase(model, clean, corrupted, cells, metric, kept, most, freeze_norms, chosen)
    key = _choice_key(model, cells, metric, corrupted.shape, most)

    def one() -> tuple[np.ndarray, float, float]:
        return run(model, clean, corrupted, cells, metric)

    def stair(pair: tuple[BaseRun, BaseRun] | None = None) -> tuple[np.ndarray, float, float]:
        return _staircase(model, clean, corrupted, cells, metric, kept, most, False, None, pair)

    if PINNED is not None:
        return one() if PINNED else stair()
    if key not in _CHOICES:
        stored = calibration.load("choice", key)
        if isinstance(stored, bool):
            _CHOICES[key] = stored
    if key in _CHOICES:
        return one() if _CHOICES[key] else stair()
    pair = run_pair(model, clean, corrupted, metric, [cells.site], kept, joint=True)
    batch, n_pos = corrupted.shape
    todo, suffix = layer_cells(model, cells, None, None), suffix_only(pair[1], cells, metric)
    curve = cost_curve(model, pair[1], cells, metric, suffix, most, False, sweep_work(model, todo, batch, n_pos))
    modelled_one = one_pass_seconds(model, cells, metric, batch, n_pos, curve)
    modelled_stair = staircase_seconds(model, cells, metric, todo, suffix, batch, n_pos, most, curve)
    _CHOICES[key] = modelled_one < MODELLED_MARGIN * modelled_stair
    calibration.store("choice", key, _CHOICES[key])
    if _CHOICES[key]:
        del pair  # (the one pass makes its own clean and corrupted rows: the memory plan counts one set)
        return one()
    return stair(pair)


def _staircase(
    model: CircuitModel,
    clean: torch.Tensor,
    corrupted: torch.Tensor,
    cells: Cells,
    metric: Metric,
    kept: Sequence[str],
    most: int,
    freeze_norms: bool,
    chosen: dict[int, list[tuple[int, ...]]] | None,
    pair: tuple[BaseRun, BaseRun] | None = None,
) -> tuple[np.ndarray, float, float]:
    """The sweep by base runs (``pair`` when already run; as one pass of both prompt sets when the plan holds two
    variants) and staircase passes."""
    source, base = pair or run_pair(
        model, clean, corrupted, metric, [cells.site], kept, scales=freeze_norms, joint=most >= 2
    )
    values = sweep(
        model, base, lambda layer: source.cache[cells.site, layer], cells, metric,
        freeze_norms=freeze_norms, most=most, desc=f"patch {cells.site}", chosen=chosen,
    )  # fmt: skip
    return values, source.value, base.value


def _choice_key(
    model: CircuitModel, cells: Cells, metric: Metric, shape: Sequence[int], most: int
) -> tuple[object, ...]:
    """What the faster path depends on: the cost curve's key, the cells and the variants a pass may hold."""
    return (*curve_key(model, cells, metric, shape[0], shape[1], False), cells.site, cells.by, cells.shape, most)


def eligible(
    model: CircuitModel, cells: Cells, most: int, freeze_norms: bool, chosen: dict[int, list[tuple[int, ...]]] | None
) -> bool:
    """Whether the sweep may run as one pass: every cell and both prompt sets within the memory plan's ``most``
    variants (which counted the base runs' caches besides), no frozen norms, no ``top=`` choice, no per-layer
    inputs, restart layers in layer order."""
    restarts = [model.restart_layer(layer) for layer in range(model.cfg.n_layers)]
    return (
        cells.count + 2 <= most
        and not freeze_norms
        and chosen is None
        and model.cfg.d_per_layer is None
        and restarts == sorted(restarts)
    )


def one_pass_seconds(model: CircuitModel, cells: Cells, metric: Metric, batch: int, n_pos: int, curve: Curve) -> float:
    """The one pass's modelled seconds: at each layer the rows alive there (both prompt sets and the variants joined
    by then), the last layer narrowed to the metric's positions."""
    cfg = model.cfg
    alive, total = 2, curve.overhead
    joining = _joining(model, cells)
    for layer in range(cfg.n_layers):
        alive += joining.get(layer, 0)
        share = last_share(model, metric, n_pos, n_pos, False) if layer == cfg.n_layers - 1 else 1.0
        total += share * curve.layer(alive * batch * n_pos)
    return total


def staircase_seconds(
    model: CircuitModel,
    cells: Cells,
    metric: Metric,
    todo: dict[int, np.ndarray],
    suffix: int,
    batch: int,
    n_pos: int,
    most: int,
    curve: Curve,
) -> float:
    """The staircase path's modelled seconds for the cells ``todo`` (passes skipping positions before ``suffix``): the
    two base runs as one pass, every layer whole (they keep activations), and the plan
    :func:`~circuitwidgets.causal.planning.staircase_plan` chooses."""
    keys = first_positions(cells, todo, suffix)
    plan, _, _ = staircase_plan(model, batch, n_pos, cells, metric, todo, keys, most, False, curve)
    return curve.overhead + model.cfg.n_layers * curve.layer(2 * batch * n_pos) + plan.seconds


def run(
    model: CircuitModel, clean: torch.Tensor, corrupted: torch.Tensor, cells: Cells, metric: Metric
) -> tuple[np.ndarray, float, float]:
    """The sweep as one pass (:mod:`this module <circuitwidgets.causal.one_pass>`): its values ``cells.shape``, the
    clean and the corrupted runs' metric values."""
    batch, n_pos = corrupted.shape
    read = metric.positions_at(n_pos)
    per = cells.per_layer
    rows = cells.rows(0, per)
    mix = _mixer(model, cells, rows, batch, n_pos, read)
    hooks: dict[tuple[str, int | None], Hook] = {}
    for layer in range(model.cfg.n_layers):  # (the variants in layer order: each joins at its restart layer)
        hooks[(cells.site, layer)] = _rows_mixed(mix, (2 + layer * per) * batch, (2 + (layer + 1) * per) * batch, batch)
    joining = _joining(model, cells)

    def join(layer: int, resid: torch.Tensor) -> torch.Tensor:
        n = joining.get(layer, 0)
        return torch.cat([resid, resid[batch : 2 * batch].repeat(n, 1, 1)]) if n else resid

    record = Recorder({}, set(), hooks, join=join, narrow_hooks=True)
    columns = metric.columns.to(model.device) if metric.columns is not None else None
    with torch.no_grad():
        logits = model.run_from(torch.cat([clean, corrupted]), 0, None, record, positions=read, columns=columns)
        n = 2 + cells.count
        values = metric.batched(logits.view(n, batch, *logits.shape[1:]), batch)
    if values.shape != (n,):
        raise ArgumentError(f"metric: {metric.name} returned shape {tuple(values.shape)} for {n} runs, expected ({n},)")
    clean_value, corrupted_value = (float(scalar(values[i], metric.name)) for i in (0, 1))
    patched = values[2:]
    if not bool(torch.isfinite(patched).all()):
        raise ArgumentError(f"metric: {metric.name} returned a non-finite value for a patched run")
    out = np.full(cells.shape, np.nan)
    flat = patched.double().cpu().numpy()
    for i in range(model.cfg.n_layers):
        store(out, cells, i, rows, flat[i * per : (i + 1) * per])
    return out, clean_value, corrupted_value


def _joining(model: CircuitModel, cells: Cells) -> dict[int, int]:
    """Variants joining the pass at each restart layer (every layer's cells join at its restart layer)."""
    joining: dict[int, int] = {}
    for layer in range(model.cfg.n_layers):
        r = model.restart_layer(layer)
        joining[r] = joining.get(r, 0) + cells.per_layer
    return joining


def _mixer(
    model: CircuitModel, cells: Cells, rows: np.ndarray, batch: int, n_pos: int, read: Sequence[int] | None
) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """``mix(value, src)``: a layer's variants' site values ``[n · batch, ...]`` with each cell's slice from the clean
    rows' ``src`` ``[batch, ...]``. In the narrowed last layer a site after the keys and values arrives at the read
    positions only, its clean rows too; the cells' mask follows them."""
    sizes = {"pos": n_pos, "src": n_pos, "head": model.cfg.n_heads, "neuron": model.cfg.d_mlp or 0}
    axes = SITE_AXES[cells.site]
    shape = [sizes[a] if a in cells.rest and a is not None else 1 for a in axes]
    whole = cells.mask(rows, shape, model.device)
    axis = axes.index("pos")
    narrowed = whole
    if read is not None and "pos" in cells.rest:
        narrowed = whole.index_select(2 + axis, torch.tensor(sorted(set(read)), device=model.device))

    def mix(value: torch.Tensor, src: torch.Tensor) -> torch.Tensor:
        m = whole if value.shape[1 + axis] == n_pos else narrowed
        v = value.view(len(rows), batch, *value.shape[1:])
        return (v + m.to(value.dtype) * (src[None] - v)).view_as(value)

    return mix


def _rows_mixed(mix: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], lo: int, hi: int, batch: int) -> Hook:
    """``mix`` applied to rows ``lo … hi − 1`` (one layer's variants) with the clean rows (the first ``batch``) as
    source; the other rows pass unchanged."""

    def hook(value: torch.Tensor) -> torch.Tensor:
        return torch.cat([value[:lo], mix(value[lo:hi], value[:batch]), value[hi:]])

    return hook
