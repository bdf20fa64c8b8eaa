"""Max-activating examples for every unit of a layer at once, in one streaming pass over a corpus (Neuroscope's idea).

``max_activating(model, tokens, units)`` runs the model over ``tokens``
``[n_rows, n_ctx]`` a batch of rows at a time, stops each run at the activation
the units read, and keeps per unit (neuron, head output or dictionary feature:
:mod:`circuitwidgets.features.units`):

- the ``k`` tokens where it is largest (among those where it is positive), each with the unit's activations over a
  context window around it (``before`` tokens before, ``after`` after);
- a uniform random sample of ``samples`` of the tokens where it is positive
  (with their windows): sorted by activation they show its typical, not only
  its extreme, contexts (each labelled by its quantile among the positive ones);
- a histogram of its positive activations on log-spaced bins, how many tokens
  it is positive on, and how many tokens were read.

Memory is bounded by one batch's activations and ``n_units × (k + samples)``
windows, however long the corpus. Progress is printed as plain lines.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch

from circuitwidgets._checks import check_int
from circuitwidgets.errors import ArgumentError, ArgumentTypeError, ShapeError
from circuitwidgets.features._args import check_memory
from circuitwidgets.features._batch import DenseBatch, TopBatch, read_in_order
from circuitwidgets.features._tables import N_BINS, BestTable, histogram_edges, histogram_update
from circuitwidgets.features.sites import mlp_input
from circuitwidgets.features.units import Units
from circuitwidgets.model import CircuitModel
from circuitwidgets.model.cache import Hook

__all__ = ["Examples", "max_activating"]


@dataclass
class Examples:
    """What :func:`max_activating` found for each unit of one layer.

    Attributes
    ----------
    kind, layer, labels
        The units (``labels[i]`` names unit ``i``: ``L1N317``, ``L1H5``, ``L1.transcoder/12``).
    tokens
        The corpus ``[n_rows, n_ctx]`` (token ids); entry indices below are
        ``row * n_ctx + pos``.
    before, after
        The context window: ``before`` tokens before the entry, ``after`` after.
    top_value, top_index, top_context
        ``[n_units, k]`` largest positive activations, best first (NaN and -1
        where a unit was positive on fewer tokens), their token indices, and ``[n_units, k, before + 1 +
        after]`` the unit's activations over each window (float16, NaN beyond a row).
    sample_value, sample_index, sample_context
        The same for a uniform random sample of the tokens where the unit is
        positive, in order of activation, largest first.
    hist_counts, hist_edges
        ``[n_units, n_bins]`` counts of positive activations on log-spaced
        ``hist_edges`` ``[n_bins + 1]`` (the end bins also count values beyond them).
    n_active, n_tokens
        ``[n_units]`` tokens where each unit is positive; tokens read.
    seconds
        Wall time of the pass.
    """

    kind: str
    layer: int
    labels: list[str]
    tokens: torch.Tensor
    before: int
    after: int
    top_value: np.ndarray
    top_index: np.ndarray
    top_context: np.ndarray
    sample_value: np.ndarray
    sample_index: np.ndarray
    sample_context: np.ndarray
    hist_counts: np.ndarray
    hist_edges: np.ndarray
    n_active: np.ndarray
    n_tokens: int
    seconds: float = field(default=0.0)

    @property
    def n_units(self) -> int:
        """Units of the layer."""
        return len(self.labels)

    @property
    def density(self) -> np.ndarray:
        """``[n_units]`` fraction of tokens where each unit is positive."""
        return self.n_active / max(1, self.n_tokens)

    def window_tokens(self, index: np.ndarray) -> np.ndarray:
        """Token ids ``[..., before + 1 + after]`` of the windows around entries ``index`` (-1 beyond a row or for -1)."""
        n_ctx = self.tokens.shape[1]
        index = np.asarray(index, dtype=np.int64)
        row, pos = np.divmod(np.maximum(index, 0), n_ctx)
        offsets = np.arange(-self.before, self.after + 1)
        at = pos[..., None] + offsets
        inside = (at >= 0) & (at < n_ctx) & (index[..., None] >= 0)
        flat = self.tokens.reshape(-1).cpu().numpy()
        ids = flat[(row[..., None] * n_ctx + np.clip(at, 0, n_ctx - 1))]
        return np.where(inside, ids, -1).astype(np.int64)

    def quantiles(self, unit: int) -> np.ndarray:
        """Each sampled entry's quantile among ``unit``'s positive activations, from the histogram (0 to 1).

        The fraction of counts in the bins below the entry's, plus its bin's count
        times its position inside the bin (linear in the log of the activation).
        """
        counts = self.hist_counts[unit].astype(np.float64)
        total = counts.sum()
        values = self.sample_value[unit].astype(np.float64)
        if total == 0:
            return np.full(values.shape, np.nan)
        below = np.concatenate([[0.0], np.cumsum(counts)])
        log_edges = np.log10(self.hist_edges.astype(np.float64))
        with np.errstate(invalid="ignore", divide="ignore"):
            logs = np.log10(values)
        at = np.clip(np.searchsorted(log_edges, logs, side="right") - 1, 0, len(counts) - 1)
        inside = np.clip((logs - log_edges[at]) / (log_edges[at + 1] - log_edges[at]), 0.0, 1.0)
        out: np.ndarray = np.where(np.isnan(values), np.nan, (below[at] + counts[at] * inside) / total)
        return out


class _StopError(Exception):
    """Raised by the reading hook: the rest of the forward pass is not needed."""


def _site_value(model: CircuitModel, units: Units, tokens: torch.Tensor) -> torch.Tensor:
    """The activation ``units`` read (``[batch, pos, ...]``) on ``tokens``; the pass stops there."""
    seen: dict[str, torch.Tensor] = {}

    def keep(value: torch.Tensor) -> None:
        seen["resid_mid"] = value

    def grab(value: torch.Tensor) -> None:
        seen["value"] = mlp_input(model.cfg, seen["resid_mid"], value) if units.site == "mlp_in" else value
        raise _StopError

    hooks: dict[tuple[str, int | None], Hook] = {(units.site, units.layer): grab}
    if units.site == "mlp_in":  # (the MLP's normalised input: resid_mid, then its scale, in the same pass)
        hooks = {("resid_mid", units.layer): keep, ("scale_mlp", units.layer): grab}
    with contextlib.suppress(_StopError):
        model.run_with_cache(tokens, cache=False, hooks=hooks)
    return seen["value"]


def unit_activations(model: CircuitModel, units: Units, tokens: torch.Tensor) -> torch.Tensor:
    """``[batch, pos, n_units]`` activations of ``units`` on ``tokens``; the pass stops at the site read."""
    return units.read(_site_value(model, units, tokens))


def _read_batch(model: CircuitModel, units: Units, tokens: torch.Tensor) -> DenseBatch | TopBatch:
    """One batch's activations: each token's top-k entries where the units allow it, else dense (on the CPU)."""
    value = _site_value(model, units, tokens.to(model.device))
    if units.read_top is not None:
        top, which = units.read_top(value)
        top = top.cpu()
        return TopBatch(top if top.dtype == torch.float64 else top.float(), which.cpu(), units.n_units)
    acts = units.read(value).cpu()
    return DenseBatch(acts if acts.dtype == torch.float64 else acts.float())  # (float64 models keep their precision)


def _column_topk(x: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(values, rows)`` ``[k, n_units]`` of each column's ``k`` largest entries of ``x`` ``[rows, n_units]``.

    (Taken along contiguous rows of the transpose: about twice as fast on a CPU as ``topk`` along dim 0.)
    """
    best = x.T.contiguous().topk(min(k, x.shape[0]), dim=1)
    return best.values.T, best.indices.T


def _windows_of(
    batch: DenseBatch | TopBatch, token: torch.Tensor, unit: torch.Tensor, before: int, after: int
) -> Callable[[torch.Tensor], torch.Tensor]:
    """The contexts of the offered entries that a table keeps (``kept``: their positions), built only for those."""
    return lambda kept: batch.windows(token[kept], unit[kept], before, after)


def max_activating(
    model: CircuitModel,
    tokens: torch.Tensor,
    units: Units,
    *,
    k: int = 20,
    samples: int = 20,
    before: int = 12,
    after: int = 4,
    batch_size: int = 32,
    seed: int = 0,
    workers: int = 1,
    progress: bool | Callable[[str], None] = True,
    memory_budget: int | None = None,
) -> Examples:
    """Top-``k`` contexts, a random sample of active contexts and a histogram per unit, in one pass over ``tokens``.

    Parameters
    ----------
    model
        The model run over the corpus.
    tokens
        ``[n_rows, n_ctx]`` token ids (each row one run of the model).
    units
        A layer's units: :func:`~circuitwidgets.features.neurons`,
        :func:`~circuitwidgets.features.head_outputs`,
        :func:`~circuitwidgets.features.dictionary_features`.
    k, samples
        Top entries and random active entries kept per unit.
    before, after
        Context window around each entry.
    batch_size
        Rows per forward pass (memory: one batch's activations, ``batch_size × n_ctx × n_units``).
    seed
        Seed of the random sample.
    workers
        Threads that run the model (and encoder) on batches at once, each on one CPU
        thread (torch's intra-op threads are 1 during the pass, restored after); the
        tables take the batches in corpus order, so the result is the same for any
        ``workers``. On a CPU shared with other work, 2 workers on 2 cores beat one
        pass with 2 intra-op threads (those wait for each other at every operation).
    progress
        ``True`` prints a plain line every few seconds (text a notebook keeps), or a
        function called with each line; ``False`` is silent.
    memory_budget
        Bytes the result's tables may take (``None``: this machine's memory); more is refused before the pass.
    """
    t = _check(model, tokens, units)
    k = check_int("k", k, 1)
    samples = check_int("samples", samples, 0)
    before, after = check_int("before", before, 0), check_int("after", after, 0)
    batch_size = check_int("batch_size", batch_size, 1)
    workers = check_int("workers", workers, 1)
    seed = check_int("seed", seed)
    # the two tables (value, token and window per entry) and the histogram, refused up front when they cannot fit
    check_memory("max_activating (its tables of top and sampled contexts)",
                 units.n_units * (k + max(samples, 1)) * (before + after + 1 + 3) * 8 + units.n_units * N_BINS * 8,
                 memory_budget)  # fmt: skip
    report = _reporter(progress)
    width = before + 1 + after
    n_rows, n_ctx = t.shape
    n = units.n_units
    dtype = torch.float64 if model.dtype == torch.float64 else torch.float32
    top, sample = BestTable(n, k, width, dtype), BestTable(n, max(samples, 1), width, dtype)
    counts = torch.zeros(n, N_BINS, dtype=torch.long)
    active = torch.zeros(n, dtype=torch.long)
    generator = torch.Generator().manual_seed(seed)
    start = last = time.perf_counter()
    with torch.no_grad():

        def read(first: int) -> DenseBatch | TopBatch:
            return _read_batch(model, units, t[first : first + batch_size])

        for first, batch in read_in_order(read, range(0, n_rows, batch_size), workers):
            offset = first * n_ctx
            # the positive entries: histogram, counts, and (sparse units) the top k's candidates
            tok, u, value = batch.token, batch.unit, batch.value
            histogram_update(counts, u, value)
            active += torch.bincount(u, minlength=n)
            if u.numel() <= batch.n_tok * n // 8:  # sparse: only positive entries above the table's k-th can enter
                enter = value > top.threshold()[u]
                t_tok, t_u, t_value = tok[enter], u[enter], value[enter]
            else:  # dense: only the batch's own k best per unit can enter, and only above the table's k-th
                best, where = _column_topk(batch.dense(), k)
                floor = top.threshold().clamp_min(0)  # (only positive activations count)
                r, t_u = (best > floor[None]).nonzero(as_tuple=True)
                t_tok, t_value = where[r, t_u], best[r, t_u]
            top.merge(t_u, t_value, t_tok + offset, t_value, _windows_of(batch, t_tok, t_u, before, after))
            if samples:
                if u.numel() > 8 * samples * n:  # dense units: one key per token, only each unit's best keys can enter
                    flat = batch.dense()
                    keys = torch.rand(flat.shape, generator=generator, dtype=dtype).masked_fill_(flat <= 0, -1.0)
                    best, where = _column_topk(keys, samples)
                    r, u = (best > sample.threshold().clamp_min(0)[None]).nonzero(as_tuple=True)
                    tok, key = where[r, u], best[r, u]
                    value = flat[tok, u]
                else:  # sparse units: one key per positive entry
                    key = torch.rand(u.numel(), generator=generator, dtype=dtype)
                    enter = key > sample.threshold()[u]
                    tok, u, key, value = tok[enter], u[enter], key[enter], value[enter]
                sample.merge(u, key, tok + offset, value, _windows_of(batch, tok, u, before, after))
            now = time.perf_counter()
            if now - last > 5 or first + batch_size >= n_rows:
                last = now
                done = min(n_rows, first + batch_size) * n_ctx
                report(
                    f"max_activating {units.prefix}*: {done:,} / {n_rows * n_ctx:,} tokens "
                    f"({100 * done / (n_rows * n_ctx):.0f}%), {now - start:.1f} s, {done / (now - start):,.0f} tokens/s"
                )
    return _result(
        units, t, before, after, top, sample if samples else None, counts, active, time.perf_counter() - start
    )


def _result(
    units: Units,
    tokens: torch.Tensor,
    before: int,
    after: int,
    top: BestTable,
    sample: BestTable | None,
    counts: torch.Tensor,
    active: torch.Tensor,
    seconds: float,
) -> Examples:
    n, width = units.n_units, before + 1 + after
    top_value = np.where(top.index.numpy() >= 0, top.value.numpy(), np.nan)
    if sample is None:
        s_value, s_index, s_context = np.zeros((n, 0), np.float32), np.zeros((n, 0), np.int64), np.zeros((n, 0, width))
    else:  # in order of activation, largest first
        order = torch.argsort(torch.where(sample.index >= 0, sample.value, -torch.inf), dim=1, descending=True)
        index = sample.index.gather(1, order)
        s_value = np.where(index.numpy() >= 0, sample.value.gather(1, order).numpy(), np.nan)
        s_index = index.numpy()
        s_context = sample.context[torch.arange(n)[:, None], order].numpy()
    return Examples(
        units.kind, units.layer, [units.label(i) for i in range(n)], tokens, before, after,
        top_value, top.index.numpy(), top.context.numpy(), s_value, s_index, s_context.astype(np.float16),
        counts.numpy(), histogram_edges().numpy(), active.numpy(), int(tokens.numel()), seconds,
    )  # fmt: skip


def _check(model: CircuitModel, tokens: object, units: object) -> torch.Tensor:
    if not isinstance(model, CircuitModel):
        raise ArgumentTypeError(f"model: expected a CircuitModel, got {type(model).__name__}")
    if not isinstance(units, Units):
        raise ArgumentTypeError(
            "units: expected circuitwidgets.features.Units (features.neurons(model, layer), "
            f"features.head_outputs(model, layer) or features.dictionary_features(model, d)), got {type(units).__name__}"
        )
    if not isinstance(tokens, torch.Tensor) or tokens.dtype.is_floating_point or tokens.dtype == torch.bool:
        raise ArgumentTypeError(f"tokens: expected an integer tensor [n_rows, n_ctx], got {type(tokens).__name__}")
    if tokens.ndim != 2 or tokens.numel() == 0:
        raise ShapeError(f"tokens: expected a non-empty [n_rows, n_ctx] tensor, got shape {list(tokens.shape)}")
    if int(tokens.min()) < 0 or int(tokens.max()) >= model.cfg.d_vocab:
        raise ArgumentError(
            f"tokens: expected ids in [0, {model.cfg.d_vocab}), got range [{int(tokens.min())}, {int(tokens.max())}]"
        )
    return tokens.long().cpu()


def _reporter(progress: object) -> Callable[[str], None]:
    if progress is True:
        return lambda line: print(line, file=sys.stdout, flush=True)
    if progress is False or progress is None:
        return lambda line: None
    if callable(progress):
        return progress
    raise ArgumentTypeError(f"progress: expected a bool or a function of one line, got {type(progress).__name__}")
