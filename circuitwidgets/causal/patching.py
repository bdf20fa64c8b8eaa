"""Activation patching, ablation and path patching: what a circuit does, tested by intervening on a run.

Definitions follow TransformerLens (``transformer_lens.patching``) so numbers
can be compared: run the corrupted prompts, replace one activation (a cell of
``by``) with the clean run's, and apply ``metric`` to the logits. An ablation
replaces it with zeros, a mean over a reference set, or a reference example's
value. Path patching (Wang et al., 2022) adds a sender head's clean-minus-corrupted
write to one input (q, k or v) of one later head only. All of them run many
cells per pass (:mod:`circuitwidgets.causal.engine`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np
import torch

from circuitwidgets._checks import check_bool
from circuitwidgets.causal import nnsight_attribution, nnsight_backend, nnsight_paths, nnsight_sites
from circuitwidgets.causal.attribution import attribution_patch
from circuitwidgets.causal.base_runs import run_base, run_pair
from circuitwidgets.causal.engine import (
    base_names,
    check_budget,
    check_pair,
    normalise,
    plan,
    sweep,
)
from circuitwidgets.causal.inferred import ReadOutsideError, every_logit, infer_reads
from circuitwidgets.causal.labels import convention, dim_labels, path_dims, prompts_of
from circuitwidgets.causal.metrics import Metric, as_metric
from circuitwidgets.causal.one_pass import patch_values
from circuitwidgets.causal.precision import full_precision
from circuitwidgets.causal.result import Sweep
from circuitwidgets.causal.sites import Cells, check_site, site_alias
from circuitwidgets.causal.staircase import BaseRun
from circuitwidgets.errors import ArgumentError, ArgumentTypeError, ShapeError
from circuitwidgets.model import CircuitModel
from circuitwidgets.model.cache import Hook, Recorder
from circuitwidgets.sources.nnsight_handle import NNsightModel


def patch(
    model: CircuitModel,
    clean: torch.Tensor | Sequence[int] | str,
    corrupted: torch.Tensor | Sequence[int] | str,
    metric: object,
    site: str = "resid_pre",
    by: Sequence[str] = ("layer", "pos"),
    *,
    freeze_norms: bool = False,
    memory_budget: int | None = None,
    top: int | None = None,
) -> Sweep:
    """Activation patching: ``metric`` of the corrupted run with each cell of ``site`` restored from the clean run.

    Parameters
    ----------
    clean, corrupted
        token ids ``[batch, pos]`` of the same shape (or texts).
    metric
        ``metric(logits [batch, pos, d_vocab]) -> scalar`` (TransformerLens's form),
        :func:`~circuitwidgets.causal.logit_diff`, or either wrapped in
        :func:`~circuitwidgets.causal.normalised` (0 = corrupted, 1 = clean).
    site
        ``resid_pre``, ``resid_mid``, ``resid_post``, ``attn_out``, ``mlp_out``, ``q``,
        ``k``, ``v``, ``z``, ``result``, ``pattern``, ``mlp_pre`` or ``mlp_post``.
    by
        ``"layer"`` and any of the site's ``pos``, ``head`` (per query head;
        under grouped-query attention a query head's copy of its group's ``k``/``v``),
        ``neuron``: the result's dims, in this order.
    freeze_norms
        replay the corrupted run's norm scales in every patched run.
    memory_budget
        bytes the whole call may hold (default 1 GiB): base runs, results and one
        pass of variants, counted before any work (:class:`MemoryBudgetError` when
        they cannot fit); within it the passes are those of least measured cost.
    top
        patch only the ``top`` cells whose attribution-patching estimate
        (:func:`~circuitwidgets.causal.attribution_patch`, one backward pass) is
        largest in magnitude; the other cells are NaN, and the estimate of every
        cell is in ``result.extra["estimate"]``. For sweeps too large to run
        whole, such as ``site="mlp_post", by=("layer", "neuron")``.

    Cost: for a layer ``l``, ``cells(l)`` variants of ``batch`` prompts through
    layers ``l … L−1`` and the metric's logits, in chunks that fit the budget.
    """
    site = site_alias(site)  # TransformerLens's layerless spelling ("hook_z") read as ours
    check_bool("freeze_norms", freeze_norms)
    if nnsight_backend.dispatch(model):  # cw.from_nnsight(lm): the same sweep as nnsight traces
        return _traced_patch(model, clean, corrupted, metric, site, by, freeze_norms, memory_budget, top)
    model, upcast = full_precision(model)
    a, b = check_pair(model, clean, corrupted)
    cells = check_site(model, site, by, a.shape[1])
    m = as_metric(metric, model.cfg.d_vocab)
    budget = check_budget(memory_budget)
    n_top = check_top(top, cells)
    m = infer_reads(model, m, a, b)  # a plain function: the logits it reads, as a declared metric says them

    def planned(m: Metric) -> tuple[list[str], int]:
        kept = base_names(cells, m)
        return kept, plan(model, cells, m, b, budget, [[site], kept], f"patch of {site!r}", n_top)

    kept, most = planned(m)
    estimate = attribution_patch(model, a, b, metric, site, cells.by) if n_top is not None else None
    chosen = top_cells(estimate.values, cells, n_top) if estimate is not None and n_top is not None else None
    try:
        values, source_value, base_value = patch_values(
            model, a, b, cells, m, kept, most=most, freeze_norms=freeze_norms, chosen=chosen
        )
    except ReadOutsideError:  # a patched run's metric read past what the probes found: every logit, as written
        m = every_logit(m, "a patched run read logits outside what its probes found")
        kept, most = planned(m)
        values, source_value, base_value = patch_values(
            model, a, b, cells, m, kept, most=most, freeze_norms=freeze_norms, chosen=chosen
        )
    values, clean_value, corrupted_value = normalise(values, m, source_value, base_value)
    technique, extra = "activation patching", {}
    if estimate is not None:
        technique = f"activation patching of the top {n_top} cells by |attribution patching estimate| (others n/a)"
        extra = {"top": n_top, "estimate": estimate.values}
    return Sweep(
        values, cells.by, dim_labels(model, cells, a), technique, m.name, clean_value, corrupted_value,
        site, convention(freeze_norms, model) + upcast, model.name, prompts_of(model, clean=a, corrupted=b),
        extra=extra,
    )  # fmt: skip


def _traced_patch(
    h: NNsightModel, clean: object, corrupted: object, metric: object, site: str, by: Sequence[str],
    freeze_norms: bool, memory_budget: int | None, top: int | None,
) -> Sweep:  # fmt: skip
    """:func:`patch` through nnsight; ``top``: the attribution-patching trace first, then only the chosen cells."""
    if top is None:
        return nnsight_backend.patch(
            h, clean, corrupted, metric, site, by, freeze_norms=freeze_norms, memory_budget=memory_budget
        )
    n_pos = h.check_tokens(clean, "clean").shape[1]
    n_top = check_top(top, nnsight_sites.check_cells(h, site, by, n_pos))
    assert n_top is not None
    estimate = nnsight_attribution.attribution_patch(h, clean, corrupted, metric, site, by)
    cells = Cells(site, estimate.dims, {d: len(estimate.labels[d]) for d in estimate.dims})
    result = nnsight_backend.patch(
        h, clean, corrupted, metric, site, by, freeze_norms=freeze_norms, memory_budget=memory_budget,
        chosen=top_cells(estimate.values, cells, n_top),
    )  # fmt: skip
    result.technique = f"activation patching of the top {n_top} cells by |attribution patching estimate| (others n/a)"
    result.extra = {"top": n_top, "estimate": estimate.values}
    return result


def check_top(top: object, cells: Cells) -> int | None:
    """``top`` checked: ``None`` or a count of cells in ``[1, number of cells]`` (errors name the argument)."""
    if top is None:
        return None
    total = int(np.prod(cells.shape))
    if isinstance(top, bool) or not isinstance(top, (int, np.integer)) or not 1 <= top <= total:
        raise ArgumentError(f"top: expected None or an int in [1, {total}] (the sweep's cells), got {top!r}")
    return int(top)


def top_cells(estimate: np.ndarray, cells: Cells, top: int) -> dict[int, list[tuple[int, ...]]]:
    """The ``top`` cells of largest ``|estimate|`` (dims ``cells.by``), grouped by layer as :meth:`Cells.at_layer` gives them."""
    magnitude = np.nan_to_num(np.abs(np.asarray(estimate, dtype=np.float64)), nan=-1.0)
    order = np.argsort(-magnitude, axis=None, kind="stable")[:top]
    layer_axis = cells.by.index("layer")
    chosen: dict[int, list[tuple[int, ...]]] = {}
    for flat in order:
        index = np.unravel_index(int(flat), cells.shape)
        cell = tuple(int(i) for j, i in enumerate(index) if j != layer_axis)
        chosen.setdefault(int(index[layer_axis]), []).append(cell)
    return chosen


def ablate(
    model: CircuitModel,
    tokens: torch.Tensor | Sequence[int] | str,
    metric: object,
    site: str = "z",
    by: Sequence[str] = ("layer", "head"),
    *,
    kind: Literal["zero", "mean", "resample"] = "zero",
    reference: torch.Tensor | Sequence[int] | str | None = None,
    freeze_norms: bool = False,
    memory_budget: int | None = None,
) -> Sweep:
    """``metric`` with each cell of ``site`` ablated: set to zero, to its mean, or to a reference example's value.

    ``kind="mean"``: the mean of the site over ``reference``'s prompts (default:
    ``tokens`` themselves) at each position, so ``reference`` has the prompts'
    length. ``kind="resample"``: ``reference`` ``[batch, pos]`` of the same shape
    as ``tokens``, prompt ``b`` takes reference ``b``'s value. The result's
    ``clean_value`` is the metric of the unablated run; values are not normalised
    unless the metric asks.
    """
    site = site_alias(site)  # TransformerLens's layerless spelling ("hook_z") read as ours
    check_bool("freeze_norms", freeze_norms)
    if nnsight_backend.dispatch(model):
        return nnsight_backend.ablate(
            model, tokens, metric, site, by, kind=kind, reference=reference,
            freeze_norms=freeze_norms, memory_budget=memory_budget,
        )  # fmt: skip
    model, upcast = full_precision(model)
    t = model._check_tokens(tokens)
    cells = check_site(model, site, by, t.shape[1])
    if kind not in ("zero", "mean", "resample"):
        raise ArgumentError(f"kind: expected 'zero', 'mean' or 'resample', got {kind!r}")
    m = as_metric(metric, model.cfg.d_vocab)
    budget = check_budget(memory_budget)
    ref: torch.Tensor | None = None
    if kind == "resample" and reference is None:
        raise ArgumentError("reference: kind='resample' needs reference prompts of the tokens' shape, got None")
    if reference is not None:
        ref = model._check_tokens(reference)
        if kind == "resample" and ref.shape != t.shape:
            raise ShapeError(
                f"reference: expected the tokens' shape {tuple(t.shape)} for kind='resample', got {tuple(ref.shape)}"
            )
        if kind == "mean" and ref.shape[1] != t.shape[1]:
            raise ShapeError(f"reference: expected prompts of {t.shape[1]} tokens for kind='mean', got {ref.shape[1]}")
    references = [[site]] if kind in ("mean", "resample") else []
    kept = base_names(cells, m)
    most = plan(model, cells, m, t, budget, [kept, *references], f"{kind} ablation of {site!r}")
    base = run_base(model, t, m, kept, scales=freeze_norms)
    reference_cache = None
    if kind in ("mean", "resample"):
        _, reference_cache = model.run_with_cache(ref if ref is not None else t, names=[site])

    def source(layer: int) -> torch.Tensor:
        value = base.cache[site, layer]
        if kind == "zero" or reference_cache is None:
            return torch.zeros_like(value)
        ref_value = reference_cache[site, layer]
        if kind == "mean":
            return ref_value.mean(dim=0, keepdim=True).expand_as(value)
        return ref_value

    values = sweep(model, base, source, cells, m, freeze_norms=freeze_norms, most=most, desc=f"ablate {site}")
    values, clean_value, _ = normalise(values, m, base.value, base.value) if m.normalise else (values, base.value, 0.0)
    return Sweep(
        values, cells.by, dim_labels(model, cells, t), f"{kind} ablation", m.name, clean_value, None, site,
        convention(freeze_norms, model) + upcast, model.name, prompts_of(model, tokens=t),
        extra={"kind": kind},
    )  # fmt: skip


class _CapturedError(Exception):
    """Stops a pass once the activation it was run for is captured."""


def _receiver_inputs(
    model: CircuitModel, base: BaseRun, layer: int, delta: torch.Tensor, via: str, freeze: bool
) -> torch.Tensor:
    """``via`` (q, k or v) of every head of ``layer`` computed from the base stream plus ``delta``: ``[batch, pos, H, d_head]``."""
    got: dict[str, torch.Tensor] = {}

    def capture(value: torch.Tensor) -> torch.Tensor | None:
        got["value"] = value
        raise _CapturedError

    hooks: dict[tuple[str, int | None], Hook] = {(via, layer): capture}
    if freeze:
        frozen = base.cache["scale", layer]
        hooks[("scale", layer)] = lambda value: frozen
    start = model.restart_layer(layer)
    resid = base.cache["resid_pre", start]
    if start == layer:
        resid = resid + delta
    else:  # a layer reusing earlier keys/values: add the sender's write where this layer reads the stream
        hooks[("resid_pre", layer)] = lambda value: value + delta
    try:
        model.run_from(base.tokens, start, resid if start > 0 else None, Recorder({}, set(), hooks), positions=[0])
    except _CapturedError:
        return got["value"]
    raise AssertionError("the receiver's input was never computed")  # pragma: no cover


def check_path(sender: object, via: object, n_layers: int, n_heads: int) -> None:
    """``sender`` (a ``(layer, head)`` pair of a layer before the last, or ``None``) and ``via`` checked."""
    if via not in ("q", "k", "v"):
        raise ArgumentError(f"via: expected 'q', 'k' or 'v', got {via!r}")
    if sender is None:
        return
    if (
        not isinstance(sender, tuple) or len(sender) != 2
        or not all(isinstance(x, int) and not isinstance(x, bool) for x in sender)
    ):  # fmt: skip
        raise ArgumentTypeError(f"sender: expected a (layer, head) pair of ints or None, got {sender!r}")
    if not (0 <= sender[0] < n_layers and 0 <= sender[1] < n_heads):
        raise ArgumentError(f"sender: expected layer in [0, {n_layers}) and head in [0, {n_heads}), got {sender!r}")
    if sender[0] == n_layers - 1:
        raise ArgumentError(f"sender: a head of the last layer ({sender!r}) has no later head to receive it")


def path_patch(
    model: CircuitModel,
    clean: torch.Tensor | Sequence[int] | str,
    corrupted: torch.Tensor | Sequence[int] | str,
    metric: object,
    sender: tuple[int, int] | None = None,
    via: Literal["q", "k", "v"] = "k",
    *,
    freeze_norms: bool = False,
    memory_budget: int | None = None,
) -> Sweep:
    """Path patching: ``metric`` when one sender head's clean-minus-corrupted write reaches one receiver's ``via`` only.

    On the corrupted run, receiver ``(l2, h2)``'s ``via`` input (its query, key or
    value) is computed from the residual stream plus the sender's write
    ``result_clean − result_corrupted``; nothing else sees the sender's change,
    and everything after the receiver is recomputed. Values ``[layer, head]`` of
    receivers for one ``sender=(layer, head)``, NaN where a receiver cannot read the
    sender (its layer or an earlier one); ``sender=None``: every sender at once,
    ``[sender_layer, sender_head, layer, head]``.
    """
    check_bool("freeze_norms", freeze_norms)
    if nnsight_backend.dispatch(model):  # cw.from_nnsight(lm): the same definition as nnsight traces
        check_path(sender, via, model.n_layers, model.n_heads)
        return nnsight_paths.path_patch(
            model, clean, corrupted, metric, sender, via, freeze_norms=freeze_norms, memory_budget=memory_budget
        )
    model, upcast = full_precision(model)
    a, b = check_pair(model, clean, corrupted)
    L, H = model.cfg.n_layers, model.cfg.n_heads
    check_path(sender, via, L, H)
    m = as_metric(metric, model.cfg.d_vocab)
    budget = check_budget(memory_budget)
    cells = check_site(model, via, ("layer", "head"), a.shape[1])
    names = [["result"], ["resid_pre", "result", via]]
    most = plan(model, cells, m, b, budget, names, "path patching", results=L * H * (1 if sender else L * H))
    source, base = run_pair(model, a, b, m, *names, scales=freeze_norms, joint=most >= 2)
    senders = [sender] if sender is not None else [(l1, h1) for l1 in range(L - 1) for h1 in range(H)]
    out = np.full((L, H, L, H), np.nan)
    for l1, h1 in senders:
        delta = source.cache["result", l1][:, :, h1] - base.cache["result", l1][:, :, h1]
        inputs = {l2: _receiver_inputs(model, base, l2, delta, via, freeze_norms) for l2 in range(l1 + 1, L)}
        out[l1, h1] = sweep(
            model, base, inputs.__getitem__, cells, m, freeze_norms=freeze_norms,
            most=most, desc=f"path patch L{l1}H{h1} → {via}", layers=list(inputs),
        )  # fmt: skip
    values = out[sender[0], sender[1]] if sender is not None else out
    values, clean_value, corrupted_value = normalise(values, m, source.value, base.value)
    dims, labels = path_dims(sender, L, H)
    return Sweep(
        values, dims, labels, "path patching", m.name, clean_value, corrupted_value, via,
        convention(freeze_norms, model) + f"; sender's write added to the receivers' {via} input only" + upcast,
        model.name, prompts_of(model, clean=a, corrupted=b),
        extra={"sender": sender, "via": via},
    )  # fmt: skip
