"""The causal toolkit run as nnsight traces (``cw.from_nnsight(lm, remote=...)``), locally or on NDIF.

Same semantics as :mod:`circuitwidgets.causal.engine`: a sweep's variants are the
base run with one cell of the site replaced (``base + mask · (source − base)``)
and the metric evaluated per variant; clean and corrupted values from their own
runs. Here one trace holds everything: an invoke for the source run (clean
prompts, or the ablation's reference) that keeps the site's value at each
swept layer, one for the base run, and one for every variant of every layer
(variant-major on the batch axis, each layer mixing only its own variants).
Inside the trace the metric reduces each variant's logits to one number, so
only ``[cells]`` metric values come back: never logits, caches or patterns.
Chunks that exceed the memory budget are separate traces.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeGuard, cast

import numpy as np
import torch

from circuitwidgets.causal.engine import check_budget, normalise, same_shape
from circuitwidgets.causal.metrics import Metric, as_metric, scalar
from circuitwidgets.causal.nnsight_norms import PHASE, Scales, frozen_scales, normed, replay
from circuitwidgets.causal.nnsight_sites import SITES, check_cells, read, write
from circuitwidgets.causal.result import Sweep
from circuitwidgets.causal.sites import SITE_AXES, Cells
from circuitwidgets.errors import ArgumentError, ArgumentTypeError, NotCoveredError, ShapeError
from circuitwidgets.model import CircuitModel
from circuitwidgets.sources.nnsight_handle import NNsightModel

CONVENTION = "norms recomputed on each patched run (nnsight)"
FROZEN = "norm scales frozen from the base run (nnsight)"


def not_covered(technique: str) -> NotCoveredError:
    """The error for a technique the nnsight path does not run."""
    return NotCoveredError(
        f"model: {technique} does not run through nnsight (cw.from_nnsight); covered: patch, ablate, path_patch, "
        "attribution_patch, logit_attribution, logit_lens, per_token_loss (see docs/nnsight.md); convert a model that fits here with "
        "cw.from_hf for the native engine"
    )


def _reduce(metric: Metric, logits: torch.Tensor, n: int, batch: int) -> torch.Tensor:
    """``metric`` of ``n`` variants' logits ``[n · batch, pos, vocab]``: ``[n]`` (the positions and ids it reads)."""
    positions = metric.positions_at(logits.shape[1])
    sub = logits if positions is None else logits[:, positions]
    if metric.columns is not None:
        sub = sub[..., metric.columns.to(sub.device)]
    return metric.batched(sub.reshape(n, batch, *sub.shape[1:]), batch)


def _bytes_per_variant(h: NNsightModel, batch: int, n_pos: int) -> int:
    d_mlp = int(getattr(h.lm._module.config, "intermediate_size", None) or 4 * h.d_model)
    return 4 * batch * n_pos * (12 * h.d_model + 3 * d_mlp + 2 * h.n_heads * n_pos + h.d_vocab)


@dataclass
class _Plan:
    site: str
    cells: Cells
    metric: Metric
    source: torch.Tensor | None  # tokens of the run whose site values replace the base's
    kind: str  # "patch", "zero", "mean", "resample"
    chosen: dict[int, list[tuple[int, ...]]] | None = None  # only these cells of each layer (the rest stay NaN)
    freeze: bool = False  # replay the base run's norm scales in every variant


def _patch_layer(
    h: NNsightModel, plan: _Plan, layer: int, span: tuple[int, int, list[tuple[int, ...]]], sources: dict[int, torch.Tensor],
    value_shape: list[int], n: int, scales: Scales | None,
) -> None:  # fmt: skip
    """Inside the variants' invoke: rows ``[start, stop)`` of ``layer``'s site mixed with ``source`` on their cells,
    ``base + mask · (source − base)`` (``sources``: the source run's values by layer, looked up once the run is at
    the site, after the source's invoke has put them there; ``scales``: the frozen norm scales, when frozen)."""
    value = read(h, layer, plan.site)
    v = value.reshape(n, -1, *value.shape[1:])
    start, stop, of_layer = span
    src = sources.get(layer, torch.zeros_like(v[0]))
    mask = plan.cells.mask(of_layer, value_shape, v.device).to(v.dtype)
    part = v[start:stop] + mask * (src[None] - v[start:stop])
    mixed = torch.cat([v[:start], part, v[stop:]]).reshape(value.shape)
    frozen_norm = None if scales is None else (lambda x: normed(h, "mlp", layer, x, scales["mlp", layer]))
    write(h, layer, plan.site, mixed, value, frozen_norm)


def _run_sweep(h: NNsightModel, base: torch.Tensor, plan: _Plan, budget: int) -> tuple[np.ndarray, float, float | None]:
    """Metric values ``cells.shape``, the base run's and the source run's metric values."""
    import nnsight

    cells, metric, site = plan.cells, plan.metric, plan.site
    batch, n_pos = base.shape
    per_layer = cells.at_layer()
    variants = [
        (layer, cell)
        for layer in range(h.n_layers)
        for cell in (per_layer if plan.chosen is None else plan.chosen.get(layer, []))
    ]
    step = max(1, budget // _bytes_per_variant(h, batch, n_pos))
    axes = SITE_AXES[site]
    shape = {"pos": n_pos, "head": h.n_heads, "neuron": h.d_mlp}
    value_shape = [shape.get(a or "", 1) for a in axes]  # the mask's extent: 1 on axes a cell never splits
    out = np.full(cells.shape, np.nan)
    base_value, source_value = float("nan"), None
    rest = [d for d in cells.by if d != "layer"]
    for c0 in range(0, len(variants), step):
        chunk = variants[c0 : c0 + step]
        n = len(chunk)
        layers = sorted({layer for layer, _ in chunk})
        # each layer's variants are contiguous rows [start, stop); its masks are built in the trace from the cell
        # indices, so the request carries O(cells) ints, not [cells, pos, head] masks
        rows = {layer: [i for i, (l, _) in enumerate(chunk) if l == layer] for layer in layers}
        spans = {layer: (r[0], r[-1] + 1, [chunk[i][1] for i in r]) for layer, r in rows.items()}
        with h.remote_errors(f"{plan.kind} {site}"), h.trace() as tracer:
            sources: dict[int, torch.Tensor] = {}
            if plan.source is not None:
                with tracer.invoke(plan.source):
                    for layer in layers:
                        value = read(h, layer, site)
                        sources[layer] = value.mean(0, keepdim=True) if plan.kind == "mean" else value
                    src_metric = nnsight.save(_reduce(metric, h.lm.output.logits, 1, plan.source.shape[0]))
            frozen: Scales = {}
            with tracer.invoke(base):
                if plan.freeze:
                    frozen_scales(h, layers[0], frozen)
                base_metric = nnsight.save(_reduce(metric, h.lm.output.logits, 1, batch))
            with tracer.invoke(base.repeat(n, 1)):  # repeated where the trace runs: one copy crosses the network
                for layer in range(layers[0], h.n_layers) if plan.freeze else layers:
                    for phase in (0, 1, 2):
                        if layer in spans and PHASE[site] == phase:
                            scales = frozen if plan.freeze else None
                            _patch_layer(h, plan, layer, spans[layer], sources, value_shape, n, scales)
                        if plan.freeze and phase == 0:
                            replay(h, "attn", layer, frozen)
                        if plan.freeze and phase == 1 and not (site == "resid_mid" and layer in spans):
                            replay(h, "mlp", layer, frozen)
                if plan.freeze:
                    replay(h, "final", None, frozen)
                values = nnsight.save(_reduce(metric, h.lm.output.logits, n, batch))
        values = values.detach()
        if values.shape != (n,):
            raise ArgumentError(
                f"metric: {metric.name} returned shape {tuple(values.shape)} for {n} variants, expected ({n},)"
            )
        if not bool(torch.isfinite(values).all()):
            raise ArgumentError(f"metric: {metric.name} returned a non-finite value for a patched run")
        base_value = float(scalar(base_metric[0].detach(), metric.name))
        if plan.source is not None:
            source_value = float(scalar(src_metric[0].detach(), metric.name))
        for (layer, cell), v in zip(chunk, values.tolist(), strict=True):
            index = [0] * len(cells.by)
            index[cells.by.index("layer")] = layer
            for j, d in enumerate(rest):
                index[cells.by.index(d)] = cell[j]
            out[tuple(index)] = v
    return out, base_value, source_value


def _labels(h: NNsightModel, cells: Cells, tokens: torch.Tensor) -> dict[str, list[str]]:
    strs = h.to_str_tokens(tokens[0])
    table = {
        "layer": [f"L{i}" for i in range(h.n_layers)],
        "head": [f"H{i}" for i in range(h.n_heads)],
        "neuron": [f"N{i}" for i in range(h.d_mlp)],
        "pos": [f"{i} {s!r}" for i, s in enumerate(strs)],
    }
    return {d: table[d] for d in cells.by}


def _prompts(h: NNsightModel, **tokens: torch.Tensor) -> dict[str, list[list[str]]]:
    return {role: [h.to_str_tokens(row) for row in t] for role, t in tokens.items()}


def patch(
    h: NNsightModel, clean: object, corrupted: object, metric: object, site: str, by: Sequence[str],
    *, freeze_norms: bool, memory_budget: int | None, chosen: dict[int, list[tuple[int, ...]]] | None = None,
) -> Sweep:  # fmt: skip
    """:func:`circuitwidgets.causal.patch` through nnsight (``chosen``: only these cells of each layer)."""
    a, b = same_shape(h.check_tokens(clean, "clean"), h.check_tokens(corrupted, "corrupted"))
    cells = check_cells(h, site, by, a.shape[1])
    m = as_metric(metric, h.d_vocab)
    values, base_value, clean_value = _run_sweep(
        h, b, _Plan(site, cells, m, a, "patch", chosen, freeze_norms), check_budget(memory_budget)
    )
    assert clean_value is not None
    values, c, k = normalise(values, m, clean_value, base_value)
    return Sweep(
        values, cells.by, _labels(h, cells, a), "activation patching", m.name, c, k, site,
        FROZEN if freeze_norms else CONVENTION, h.name,
        _prompts(h, clean=a, corrupted=b),
    )  # fmt: skip


def ablate(
    h: NNsightModel, tokens: object, metric: object, site: str, by: Sequence[str], *, kind: str,
    reference: object, freeze_norms: bool, memory_budget: int | None,
) -> Sweep:  # fmt: skip
    """:func:`circuitwidgets.causal.ablate` through nnsight."""
    t = h.check_tokens(tokens)
    cells = check_cells(h, site, by, t.shape[1])
    if kind not in ("zero", "mean", "resample"):
        raise ArgumentError(f"kind: expected 'zero', 'mean' or 'resample', got {kind!r}")
    m = as_metric(metric, h.d_vocab)
    if kind == "resample" and reference is None:
        raise ArgumentError("reference: kind='resample' needs reference prompts of the tokens' shape, got None")
    ref = h.check_tokens(reference, "reference") if reference is not None else None
    if ref is not None and kind == "resample" and ref.shape != t.shape:
        raise ShapeError(
            f"reference: expected the tokens' shape {tuple(t.shape)} for kind='resample', got {tuple(ref.shape)}"
        )
    if ref is not None and kind == "mean" and ref.shape[1] != t.shape[1]:
        raise ShapeError(f"reference: expected prompts of {t.shape[1]} tokens for kind='mean', got {ref.shape[1]}")
    source = None if kind == "zero" else (ref if ref is not None else t)
    plan = _Plan(site, cells, m, source, kind, freeze=freeze_norms)
    values, base_value, _ = _run_sweep(h, t, plan, check_budget(memory_budget))
    values, clean_value, _ = normalise(values, m, base_value, base_value) if m.normalise else (values, base_value, 0.0)
    return Sweep(
        values, cells.by, _labels(h, cells, t), f"{kind} ablation", m.name, clean_value, None, site,
        FROZEN if freeze_norms else CONVENTION,
        h.name, _prompts(h, tokens=t), extra={"kind": kind},
    )  # fmt: skip


def per_token_loss(h: NNsightModel, tokens: object) -> np.ndarray:
    """:func:`circuitwidgets.causal.per_token_loss` through nnsight: only ``[batch, pos − 1]`` losses come back."""
    import nnsight

    t = h.check_tokens(tokens)
    if t.shape[1] < 2:
        raise ShapeError(f"tokens: per-token loss needs at least 2 positions, got {t.shape[1]}")
    with h.remote_errors("per_token_loss"), h.trace(t):
        lp = h.lm.output.logits.float().log_softmax(-1)[:, :-1]
        loss = nnsight.save(-lp.gather(-1, t[:, 1:, None].to(lp.device))[..., 0])
    return cast(np.ndarray, loss.detach().double().cpu().numpy())


def dispatch(model: object) -> TypeGuard[NNsightModel]:
    """Whether ``model`` is an nnsight handle (the public functions then run through this module); anything that is
    neither one nor a :class:`CircuitModel` is refused here, at every causal function's edge, naming the argument."""
    if isinstance(model, NNsightModel):
        return True
    if not isinstance(model, CircuitModel):
        hint = (
            " (circuitwidgets never downloads: load it first, e.g. cw.from_hf(AutoModelForCausalLM.from_pretrained(...)))"
            if isinstance(model, str)
            else ""
        )
        raise ArgumentTypeError(
            f"model: expected a circuitwidgets.CircuitModel or cw.from_nnsight(lm), got {type(model).__name__}{hint}"
        )
    return False


__all__ = ["SITES", "ablate", "dispatch", "not_covered", "patch", "per_token_loss"]
