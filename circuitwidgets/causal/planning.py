"""Which passes a sweep runs: its cells in columns by first position, the cost curve measured on this device, and the
runs of columns and layers of least modelled time (:mod:`circuitwidgets.causal.passes` models them).

:func:`plan_passes` plans the passes of :func:`~circuitwidgets.causal.engine.sweep`; :func:`staircase_plan` gives the
same plan's modelled seconds before any run, so that a sweep small enough for one pass
(:mod:`circuitwidgets.causal.one_pass`) can be weighed against it.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from circuitwidgets.causal.budget import DENSE_SITES
from circuitwidgets.causal.metrics import Metric
from circuitwidgets.causal.passes import COLUMNS, Curve, Plan, choose, measure_curve, wall
from circuitwidgets.causal.sites import Cells
from circuitwidgets.causal.staircase import RESUMABLE, BaseRun, Pass, Piece, frozen_scale_hooks
from circuitwidgets.model import CircuitModel
from circuitwidgets.model.cache import Hook, Recorder


def layer_cells(
    model: CircuitModel, cells: Cells, layers: Sequence[int] | None, chosen: dict[int, list[tuple[int, ...]]] | None
) -> dict[int, np.ndarray]:
    """The cells a sweep runs, by layer (ascending): indices ``[n, len(rest)]`` into each layer's cells (all of
    ``layers``, default every layer; only ``chosen``'s when given). Layers without cells are left out."""
    width = len(cells.rest)
    todo: dict[int, np.ndarray] = {}
    for layer in sorted(range(model.cfg.n_layers) if layers is None else layers):
        picked = chosen.get(layer, []) if chosen is not None else None
        rows = cells.rows(0, cells.per_layer) if picked is None else np.asarray(picked, dtype=np.int64)
        if len(rows):
            todo[layer] = rows.reshape(len(rows), width)
    return todo


def first_positions(cells: Cells, todo: dict[int, np.ndarray], suffix: int) -> dict[int, np.ndarray]:
    """Each cell's first position a pass must compute, by layer: its position capped by ``suffix`` (0 for whole
    passes: cells that do not split positions, or ``suffix`` 0)."""
    pos_col = cells.rest.index("pos") if suffix else None
    if pos_col is None:
        return {layer: np.zeros(len(rows), dtype=np.int64) for layer, rows in todo.items()}
    return {layer: np.asarray(np.minimum(rows[:, pos_col], suffix), dtype=np.int64) for layer, rows in todo.items()}


def sweep_work(model: CircuitModel, todo: dict[int, np.ndarray], batch: int, n_pos: int) -> int:
    """The sweep's rows × layers if every variant ran whole from its layer (bounds the cost curve's measurement)."""
    return sum(len(rows) * (model.cfg.n_layers - layer) for layer, rows in todo.items()) * batch * n_pos


def plan_passes(
    model: CircuitModel,
    base: BaseRun,
    cells: Cells,
    metric: Metric,
    todo: dict[int, np.ndarray],
    keys: dict[int, np.ndarray],
    suffix: int,
    most: int,
    freeze_norms: bool,
) -> list[Pass]:
    """The sweep's passes: its cells in columns (by first position, then a few cells each) and the runs of columns
    and layers of least modelled time (:func:`~circuitwidgets.causal.passes.choose`), on the curve measured from
    ``base``."""
    batch, n_pos = base.tokens.shape
    curve = cost_curve(model, base, cells, metric, suffix, most, freeze_norms, sweep_work(model, todo, batch, n_pos))
    chosen, columns, offsets = staircase_plan(model, batch, n_pos, cells, metric, todo, keys, most, freeze_norms, curve)
    layer_list = list(todo)
    passes = []
    for q0, q1, runs in chosen.passes:
        for a, b in runs:
            pieces = []
            for i in range(a, b):
                picked = np.concatenate([columns[i][q] for q in range(q0, q1)])
                if len(picked):
                    pieces.append(Piece(layer_list[i], todo[layer_list[i]][picked]))
            if pieces:
                passes.append(Pass(tuple(pieces), offsets[q0]))
    return passes


def staircase_plan(
    model: CircuitModel,
    batch: int,
    n_pos: int,
    cells: Cells,
    metric: Metric,
    todo: dict[int, np.ndarray],
    keys: dict[int, np.ndarray],
    most: int,
    freeze_norms: bool,
    curve: Curve,
) -> tuple[Plan, list[list[np.ndarray]], list[int]]:
    """The chosen runs of columns and layers (with their modelled seconds), each layer's columns (indices into its
    cells) and each column's first position, for the cells ``todo`` with first positions ``keys``."""
    layer_list = list(todo)
    columns, offsets = split_columns([keys[layer] for layer in layer_list], most)
    counts = np.array([[len(c) for c in per] for per in columns], dtype=np.int64)
    restarts = [model.restart_layer(layer) for layer in layer_list]
    staircase = cells.site not in RESUMABLE
    row_len = [batch * (n_pos - o) for o in offsets]
    narrow = [last_share(model, metric, n_pos, n_pos - o, freeze_norms) for o in offsets]
    # (hooks narrow with the last layer, Recorder.narrow_hooks, except frozen norms' replayed scales)
    last_hooked = layer_list[-1] == model.cfg.n_layers - 1 and cells.site != "resid_pre" and freeze_norms
    chosen = choose(counts, row_len, restarts, model.cfg.n_layers, curve, most, staircase, narrow, last_hooked)
    return chosen, columns, offsets


def curve_key(
    model: CircuitModel, cells: Cells, metric: Metric, batch: int, n_pos: int, freeze_norms: bool
) -> tuple[object, ...]:
    """What the cost curve depends on: the device, dtype, model and prompt shapes, the logits the metric reads,
    frozen norms and whether the site makes attention dense."""
    cfg = model.cfg
    positions = metric.positions_at(n_pos)
    columns = metric.columns
    return (
        str(model.device), str(model.W_E.dtype), cfg.n_layers, cfg.d_model, cfg.d_mlp, cfg.n_heads, cfg.d_vocab,
        batch, n_pos, None if positions is None else len(positions),
        None if columns is None else len(columns), freeze_norms, model.restart_layer(cfg.n_layers - 1),
        cells.site in DENSE_SITES,
    )  # fmt: skip


def cost_curve(
    model: CircuitModel,
    base: BaseRun,
    cells: Cells,
    metric: Metric,
    suffix: int,
    most: int,
    freeze_norms: bool,
    work: int,
) -> Curve:
    """One layer's measured time by rows on this device and shape (cached): passes of ``n`` unpatched variants through
    the last layers, every row computed (a hooked pattern: dense attention in each), the metric evaluated (:func:`~circuitwidgets.causal.passes.measure_curve`)."""
    cfg = model.cfg
    batch, n_pos = base.tokens.shape
    positions = metric.positions_at(n_pos)
    columns = metric.columns.to(model.device) if metric.columns is not None else None
    dense = cells.site in DENSE_SITES
    key = curve_key(model, cells, metric, batch, n_pos, freeze_norms)

    def time_pass(n: int, length: int, layers: int) -> float:
        offset, start = n_pos - length, model.restart_layer(cfg.n_layers - layers)
        hooks: dict[tuple[str, int | None], Hook] = (
            frozen_scale_hooks(model, base, start, positions, offset) if freeze_norms else {}
        )
        hooks[("resid_final", None)] = _unchanged  # every row of the last layer computed, as a patched one would be
        for layer in range(start, cfg.n_layers) if dense else ():  # a hooked pattern: dense attention at its layer
            hooks[(cells.site, layer)] = _unchanged

        def prefix(at: int) -> tuple[torch.Tensor, torch.Tensor]:
            return base.cache["k", at][:, :offset], base.cache["v", at][:, :offset]

        record = Recorder({}, set(), hooks, prefix if offset else None, offset)
        resid = base.cache["resid_pre", start][:, offset:].repeat(n, 1, 1)

        def run() -> None:
            logits = model.run_from(base.tokens, start, resid, record, positions=positions, columns=columns)
            metric.batched(logits.view(n, batch, *logits.shape[1:]), batch)
            if model.device.type == "cuda":  # (kernels run asynchronously: time them to their end)
                torch.cuda.synchronize(model.device)

        return wall(run)

    total = cells.per_layer * cfg.n_layers
    with torch.no_grad():
        return measure_curve(
            key, time_pass, batch, n_pos, n_pos - suffix, min(most, total) * batch * n_pos, work, cfg.n_layers > 1
        )


def last_share(model: CircuitModel, metric: Metric, n_pos: int, length: int, freeze_norms: bool) -> float:
    """The share of a whole last layer that a pass over the last ``length`` of ``n_pos`` positions computes when nothing hooks inside it:
    keys and values at every row, the rest at the metric's positions only (1 when a pass cannot narrow: a metric
    that reads every position, or frozen norms, whose replayed scales hook every layer)."""
    positions = metric.positions_at(n_pos)
    if positions is None or freeze_norms:
        return 1.0
    cfg = model.cfg
    kv = 2 * (cfg.n_kv_heads or cfg.n_heads) * cfg.d_head
    mlp = (3 if cfg.gated_mlp else 2) * (cfg.d_mlp or 0) if cfg.has_mlp else 0
    whole = 2 * cfg.n_heads * cfg.d_head + kv + mlp
    return (kv + (whole - kv) * min(1.0, len(set(positions)) / length)) / whole


def split_columns(keys: list[np.ndarray], most: int) -> tuple[list[list[np.ndarray]], list[int]]:
    """Each layer's cells (indices into its rows) in the same columns: cells of one first position together (of
    neighbouring positions when there are more than :data:`~circuitwidgets.causal.passes.COLUMNS`), then split into a
    few cells each (at most ``most``), so that passes can take any run of columns; and each column's first position
    (its least key: a pass from that column on computes from there)."""
    distinct = np.unique(np.concatenate(keys))
    bins = np.array_split(distinct, min(len(distinct), COLUMNS))
    edges = [int(b[0]) for b in bins]
    which = [np.searchsorted(edges, k, side="right") - 1 for k in keys]
    peak = [max(int((w == b).sum()) for w in which) for b in range(len(bins))]
    grain = min(most, max(1, -(-sum(peak) // COLUMNS)))
    out: list[list[np.ndarray]] = [[] for _ in keys]
    offsets: list[int] = []
    for b in range(len(bins)):
        parts = -(-peak[b] // grain)
        offsets += [edges[b]] * parts
        for i, w in enumerate(which):
            members = np.flatnonzero(w == b)
            members = members[np.argsort(keys[i][members], kind="stable")]
            out[i].extend(np.array_split(members, parts))
    return out, offsets


def _unchanged(value: torch.Tensor) -> None:
    return None
