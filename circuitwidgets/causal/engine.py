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

from circuitwidgets.causal.budget import DENSE_SITES, Need, check_fits, sweep_need
from circuitwidgets.causal.metrics import Metric
from circuitwidgets.causal.passes import COLUMNS, Curve, choose, measure_curve, wall
from circuitwidgets.causal.sites import SITE_AXES, Cells
from circuitwidgets.causal.staircase import (
    RESUMABLE,
    BaseRun,
    Pass,
    Piece,
    evaluate_pass,
    frozen_scale_hooks,
)
from circuitwidgets.errors import ArgumentError, ArgumentTypeError, ShapeError
from circuitwidgets.model import CircuitModel
from circuitwidgets.model.cache import Hook, Recorder

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
    width = len(cells.rest)
    todo: dict[int, np.ndarray] = {}
    for layer in sorted(range(model.cfg.n_layers) if layers is None else layers):
        picked = chosen.get(layer, []) if chosen is not None else None
        rows = cells.rows(0, cells.per_layer) if picked is None else np.asarray(picked, dtype=np.int64)
        if len(rows):
            todo[layer] = rows.reshape(len(rows), width)
    if not todo:
        return out
    suffix = suffix_only(base, cells, metric)
    pos_col = cells.rest.index("pos") if suffix else None
    keys = {layer: _keys(rows, pos_col, suffix) for layer, rows in todo.items()}
    passes = _passes(model, base, cells, metric, todo, keys, suffix, most, freeze_norms)
    sources: dict[int, torch.Tensor] = {}
    read = metric.positions_at(base.tokens.shape[1])
    layer_axis = cells.by.index("layer")
    rest_axes = [cells.by.index(d) for d in cells.rest]
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
                index: list[np.ndarray | int] = [0] * len(cells.by)
                index[layer_axis] = piece.layer
                for j, axis in enumerate(rest_axes):
                    index[axis] = piece.rows[:, j]
                part = values[first : first + len(piece.rows)]
                out[tuple(index)] = part.reshape(np.shape(out[tuple(index)]))
                first += len(piece.rows)
            bar.update(p.size)
    return out


def _keys(rows: np.ndarray, pos_col: int | None, suffix: int) -> np.ndarray:
    """Each cell's first position a pass must compute: its position capped by ``suffix`` (0 for whole passes)."""
    if pos_col is None:
        return np.zeros(len(rows), dtype=np.int64)
    return np.asarray(np.minimum(rows[:, pos_col], suffix), dtype=np.int64)


def _passes(
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
    and layers of least modelled time (:func:`~circuitwidgets.causal.passes.choose`)."""
    batch, n_pos = base.tokens.shape
    layer_list = list(todo)
    columns, offsets = split_columns([keys[layer] for layer in layer_list], most)
    counts = np.array([[len(c) for c in per] for per in columns], dtype=np.int64)
    work = sum(len(rows) * (model.cfg.n_layers - layer) for layer, rows in todo.items()) * batch * n_pos
    curve = cost_curve(model, base, cells, metric, suffix, most, freeze_norms, work)
    restarts = [model.restart_layer(layer) for layer in layer_list]
    staircase = cells.site not in RESUMABLE
    row_len = [batch * (n_pos - o) for o in offsets]
    narrow = [last_share(model, metric, n_pos, n_pos - o, freeze_norms) for o in offsets]
    # (hooks narrow with the last layer, Recorder.narrow_hooks, except frozen norms' replayed scales)
    last_hooked = layer_list[-1] == model.cfg.n_layers - 1 and cells.site != "resid_pre" and freeze_norms
    chosen = choose(counts, row_len, restarts, model.cfg.n_layers, curve, most, staircase, narrow, last_hooked)
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
    cfg, last = model.cfg, model.cfg.n_layers - 1
    batch, n_pos = base.tokens.shape
    positions = metric.positions_at(n_pos)
    columns = metric.columns.to(model.device) if metric.columns is not None else None
    dense = cells.site in DENSE_SITES
    key = (
        str(model.device), str(model.W_E.dtype), cfg.n_layers, cfg.d_model, cfg.d_mlp, cfg.n_heads, cfg.d_vocab,
        batch, n_pos, None if positions is None else len(positions),
        None if columns is None else len(columns), freeze_norms, model.restart_layer(last), dense,
    )  # fmt: skip

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
