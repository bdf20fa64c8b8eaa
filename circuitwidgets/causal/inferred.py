"""What a plain Python metric reads, inferred before a sweep, so that a sweep unembeds only those logits.

A TransformerLens user writes ``metric(logits [batch, pos, d_vocab]) -> scalar``. A sweep that knows which positions
and token ids the function reads computes only those logits for every variant (the last layer at those positions,
the unembedding of those ids), as it does for a declared metric (:func:`~circuitwidgets.causal.logit_diff`,
:func:`~circuitwidgets.causal.reads`). :func:`infer_reads` finds them on the clean and corrupted runs' full logits:

1. the support of the metric's gradient with respect to the logits on each run (positions × ids, united);
2. a second probe on each run: the entries outside that support replaced (by random values, by very large and very
   small ones, by the other run's logits, by NaN) must leave the metric's value bitwise unchanged.

Where either cannot be trusted (the function raises, returns a Python number, has no gradient — argmax, a
comparison, ``torch.no_grad`` inside —, or its value moves when an unread logit does) the sweep reads every logit and
its metric's name says why. The sweep itself keeps a guard: each variant's metric is evaluated on full-shaped logits
whose entries outside the support are NaN, and a non-finite value (a read that reached outside, which a value-dependent
function may make for a patched run the probes never saw) raises :class:`ReadOutsideError`, on which the caller reruns the
sweep with every logit (:func:`every_logit`). So a narrowed sweep returns the un-narrowed sweep's numbers.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import torch

from circuitwidgets.causal.metrics import Metric, one_by_one, scalar
from circuitwidgets.errors import NonFiniteError
from circuitwidgets.model import CircuitModel
from circuitwidgets.model.cache import Recorder

#: Above this share of the vocabulary the inferred ids are dropped (every id read at the inferred positions):
#: narrowing the unembedding to most of its columns saves little and costs a gather of the unembedding.
MOST_COLUMNS = 0.5

Fn = Callable[[torch.Tensor], object]


class ReadOutsideError(Exception):
    """A narrowed metric read logits outside its inferred support on some variant (its value came out non-finite, or
    it raised on the NaN there): the caller reruns the sweep reading every logit."""


def infer_reads(model: CircuitModel, metric: Metric, clean: torch.Tensor, corrupted: torch.Tensor) -> Metric:
    """``metric`` narrowed to the positions and token ids it was found to read (:mod:`this module
    <circuitwidgets.causal.inferred>`), or unchanged but for its name, which says why every logit is read.

    Only plain functions (marked by :func:`~circuitwidgets.causal.metrics.as_metric` in ``extra["function"]``) are
    probed; declared metrics are returned as they are.
    """
    fn = metric.extra.get("function")
    if not callable(fn):
        return metric
    logits = [_full_logits(model, tokens) for tokens in (clean, corrupted)]
    found = probe(fn, logits[0], logits[1])
    if isinstance(found, str):
        return every_logit(metric, found)
    positions, ids = found
    n_pos, vocab = logits[0].shape[1:]
    columns = None if len(ids) > MOST_COLUMNS * vocab else ids
    if len(positions) == n_pos and columns is None:
        return every_logit(metric, "it reads every position and most token ids")
    return _narrowed(metric, fn, positions, columns, n_pos, vocab)


def every_logit(metric: Metric, why: str) -> Metric:
    """The function ``metric`` reading every logit (as written: no narrowing), its name saying ``why``."""
    fn = metric.extra["function"]
    assert callable(fn)  # (every_logit is called only on metrics infer_reads probes)
    base = metric.extra.get("base_name", metric.name)
    whole = replace(metric, name=f"{base} (every logit read: {why})", positions=None, columns=None)
    whole.batched = one_by_one(fn, str(metric.extra.get("fn_name", base)))
    whole.extra = {**metric.extra, "base_name": base, "inferred": None}
    return whole


def probe(fn: Fn, clean: torch.Tensor, corrupted: torch.Tensor) -> tuple[list[int], list[int]] | str:
    """The positions and token ids ``fn`` reads on the logits ``clean`` and ``corrupted`` ``[batch, pos, d_vocab]``
    (sorted indices), or why they cannot be trusted: the gradient's support on both, then each run's value
    unchanged, bitwise, with every entry outside that support replaced (:func:`_unchanged_outside`)."""
    masks = []
    for logits in (clean, corrupted):
        mask = _gradient_support(fn, logits)
        if isinstance(mask, str):
            return mask
        masks.append(mask)
    support = masks[0] | masks[1]
    positions = support.any(dim=2).any(dim=0).nonzero().flatten().tolist()
    columns = support.any(dim=1).any(dim=0).nonzero().flatten().tolist()
    if not positions:
        return "its gradient is zero at every logit"
    inside = torch.zeros(clean.shape[1:], dtype=torch.bool, device=clean.device)
    inside[torch.tensor(positions, device=clean.device)[:, None], torch.tensor(columns, device=clean.device)] = True
    for logits, other in ((clean, corrupted), (corrupted, clean)):
        why = _unchanged_outside(fn, logits, other, inside)
        if why:
            return why
    return positions, columns


def _gradient_support(fn: Fn, logits: torch.Tensor) -> torch.Tensor | str:
    """Where ``fn``'s gradient at ``logits`` is non-zero (``[batch, pos, d_vocab]`` bool), or why there is none."""
    x = logits.detach().clone().requires_grad_(True)
    try:
        with torch.enable_grad():
            value = fn(x.clone())  # (a copy: a function that writes into its logits may, not into a leaf)
    except Exception as err:  # (the sweep reading every logit raises it again, where the user expects it)
        return f"it raised {type(err).__name__} when probed"
    if not isinstance(value, torch.Tensor):
        return f"it returns a Python {type(value).__name__} (.item() or float()), so no gradient reaches the logits"
    if not value.dtype.is_floating_point:  # (complex or integer: the sweep's own check names the type)
        return f"it returns a {value.dtype} value, not a real float"
    if value.numel() != 1 or not value.requires_grad:
        return "no gradient reaches the logits (argmax, a comparison, .detach() or torch.no_grad inside)"
    if not bool(torch.isfinite(value.detach()).all()):
        return "its value on the clean or corrupted run is not finite"
    (grad,) = torch.autograd.grad(value.reshape(()), x, allow_unused=True)
    if grad is None:
        return "no gradient reaches the logits (argmax, a comparison, .detach() or torch.no_grad inside)"
    if not bool(torch.isfinite(grad).all()):
        return "its gradient is not finite"
    return grad != 0


def _unchanged_outside(fn: Fn, logits: torch.Tensor, other: torch.Tensor, inside: torch.Tensor) -> str:
    """Why ``fn``'s value moves when the entries of ``logits`` outside ``inside`` (``[pos, d_vocab]``) change, or ''.

    The replacements: random values around the logits' scale, values far above and far below every logit (a
    threshold or a max over unread ids crosses), the other run's logits, and NaN (what the sweep's guard fills).
    """
    gen = torch.Generator(device=logits.device).manual_seed(0)
    spread = float(logits.std()) + 1.0
    top = float(logits.abs().max()) + 1.0
    noise = logits.mean() + 3 * spread * torch.randn(
        logits.shape, generator=gen, dtype=logits.dtype, device=logits.device
    )
    fills = [
        ("random logits", noise),
        ("very large logits", torch.full_like(logits, 1e3 * top)),
        ("very small logits", torch.full_like(logits, -1e3 * top)),
        ("the other run's logits", other),
        ("NaN", torch.full_like(logits, float("nan"))),
    ]
    with torch.no_grad():
        expected = _value(fn, logits.clone())
        for what, fill in fills:
            changed = torch.where(inside, logits, fill)
            got = _value(fn, changed)
            if expected is None or got is None or not torch.equal(got, expected):
                return f"its value changes when logits outside its gradient's support are {what}"
    return ""


def _value(fn: Fn, logits: torch.Tensor) -> torch.Tensor | None:
    """``fn(logits)`` as a 0-d float64 tensor, or ``None`` when it raises or is not a finite scalar."""
    try:
        return scalar(fn(logits), "metric")
    except Exception:  # (a probe that errs is one that cannot be trusted)
        return None


def _narrowed(
    metric: Metric, fn: Fn, positions: list[int], columns: list[int] | None, n_pos: int, vocab: int
) -> Metric:
    """``metric`` reading ``positions`` × ``columns`` (every id when ``None``), evaluated on full-shaped logits with
    NaN elsewhere; a non-finite value or an error there raises :class:`ReadOutsideError`."""
    base = str(metric.extra.get("base_name", metric.name))
    ids = "every token id" if columns is None else f"{len(columns)} token id{'s' if len(columns) != 1 else ''}"
    note = f"inferred to read position{'s' if len(positions) != 1 else ''} {_spans(positions)} and {ids}"
    cols = None if columns is None else torch.tensor(columns)
    name = str(metric.extra.get("fn_name", base))

    vectorised = [True]  # (until the function is found not to run under torch.func.vmap)

    def batched(sub: torch.Tensor, batch: int) -> torch.Tensor:
        rows = torch.tensor(positions, device=sub.device)
        at: Index = (slice(None), rows) if cols is None else (slice(None), rows[:, None], cols.to(sub.device)[None, :])
        try:
            if vectorised[0]:
                try:
                    return _all_at_once(fn, sub, at, (batch, n_pos, vocab), name)
                except ReadOutsideError:
                    raise
                except Exception:  # (data-dependent control flow and the like: one call per variant instead)
                    vectorised[0] = False
            return _one_at_a_time(fn, sub, at, (batch, n_pos, vocab), name)
        except NonFiniteError:
            raise ReadOutsideError(name) from None

    extra = {**metric.extra, "base_name": base, "inferred": (positions, columns)}
    return replace(metric, name=f"{base} ({note})", batched=batched, positions=positions, columns=cols, extra=extra)


#: Bytes of full-shaped logits one vectorised call of a probed metric may hold (the variants in chunks under it).
CHUNK_BYTES = 64 * 2**20

Index = tuple[slice | torch.Tensor, ...]


def _all_at_once(fn: Fn, sub: torch.Tensor, at: Index, shape: tuple[int, int, int], name: str) -> torch.Tensor:
    """``fn`` on every variant of ``sub`` ``[n, batch, len(positions), len(columns)]`` by :func:`torch.func.vmap`, in
    chunks of :data:`CHUNK_BYTES` of full-shaped logits (NaN outside ``at``)."""
    per = max(1, CHUNK_BYTES // (shape[0] * shape[1] * shape[2] * sub.element_size()))
    every: Index = (slice(None), *at)
    values = []
    for lo in range(0, sub.shape[0], per):
        part = sub[lo : lo + per]
        full = torch.full((len(part), *shape), float("nan"), dtype=sub.dtype, device=sub.device)
        full[every] = part
        out = torch.func.vmap(fn)(full)
        if not isinstance(out, torch.Tensor) or out.shape != (len(part),) or out.dtype.is_complex:
            raise TypeError(f"{name}: not one real value per variant under vmap")
        if not bool(torch.isfinite(out).all()):
            raise ReadOutsideError(name)
        values.append(out.double())
    return torch.cat(values)


def _one_at_a_time(fn: Fn, sub: torch.Tensor, at: Index, shape: tuple[int, int, int], name: str) -> torch.Tensor:
    """``fn`` called on each variant of ``sub`` in turn (one NaN buffer, fresh only after ``fn`` wrote into it)."""
    full, version, values = None, -1, []
    for i in range(sub.shape[0]):
        if full is None or full._version != version:  # (a function that wrote into its logits gets a fresh buffer)
            full = torch.full(shape, float("nan"), dtype=sub.dtype, device=sub.device)
        full[at] = sub[i]
        version = full._version
        try:
            values.append(scalar(fn(full), name))
        except NonFiniteError:
            raise
        except Exception as err:  # (the NaN outside its support may have made it err: rerun with every logit)
            raise ReadOutsideError(name) from err
    return torch.stack(values)


def _spans(indices: list[int]) -> str:
    """``[0, 1, 2, 5]`` as ``0–2, 5``."""
    out: list[str] = []
    start = prev = indices[0]
    for i in [*indices[1:], None]:
        if i is not None and i == prev + 1:
            prev = i
            continue
        out.append(str(start) if start == prev else f"{start}–{prev}")
        if i is not None:
            start = prev = i
    return ", ".join(out)


def _full_logits(model: CircuitModel, tokens: torch.Tensor) -> torch.Tensor:
    """Every logit of a whole run of ``tokens`` (``[batch, pos, d_vocab]``)."""
    with torch.no_grad():
        return model.run_from(tokens, 0, None, Recorder({}, set()))
