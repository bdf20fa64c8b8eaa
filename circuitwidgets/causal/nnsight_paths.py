"""Path patching through nnsight (``cw.from_nnsight(lm, remote=...)``): one trace per chunk, only metric values back.

The same definition and numbers as :func:`circuitwidgets.causal.path_patch` on the
native engine: on the corrupted run, receiver ``(l2, h2)``'s ``via`` input (query,
key or value, as the attention function takes it: after rotary) is computed from
the residual stream plus the sender's write ``Δ = (z_clean − z_corrupted)[h1] ·
W_O[h1]`` at every position; only that head sees it, and everything after is
recomputed. One trace holds four invokes:

- the clean prompts: each sender layer's ``o_proj`` input (``z``) and the clean metric;
- the corrupted prompts: the same ``z``, each receiving layer's input (``resid_pre``),
  the corrupted metric, and each sender's ``Δ`` built there from the model's own
  ``o_proj`` weight (on NDIF for ``remote=True``);
- one copy of the corrupted prompts per sender, whose every receiving layer's input
  is overwritten by the corrupted run's plus that sender's ``Δ``: the model's own
  norm, projections and rotary then compute every receiver's ``via`` input at once
  (overwriting each layer's input keeps the layers from compounding);
- every variant (sender, receiver layer, receiver head) on the batch axis, each
  writing its head's slice of ``via`` from its sender's copy at its layer.

Only ``[variants]`` metric values come back. Under grouped-query attention a key or
value head serves several query heads, so one receiver's own ``k``/``v`` has no value
in the model: ``via="k"``/``"v"`` is refused by name there (``via="q"`` runs).
"""

from __future__ import annotations

from typing import Any, cast

import numpy as np
import torch

from circuitwidgets.causal.engine import check_budget, normalise, same_shape
from circuitwidgets.causal.labels import path_dims
from circuitwidgets.causal.metrics import Metric, as_metric, scalar
from circuitwidgets.causal.nnsight_backend import CONVENTION, _bytes_per_variant, _prompts, _reduce
from circuitwidgets.causal.nnsight_sites import read, write
from circuitwidgets.causal.result import Sweep
from circuitwidgets.errors import ArgumentError, NotCoveredError
from circuitwidgets.sources.nnsight_handle import NNsightModel

#: One variant: (index of its sender in the chunk's senders, receiver layer, receiver head).
_Variant = tuple[int, int, int]


def _head_write(h: NNsightModel, layer: int, head: int, dz: torch.Tensor) -> torch.Tensor:
    """Inside a trace: ``dz [batch, pos, d_head]`` through head ``head``'s slice of ``layer``'s ``o_proj`` weight."""
    weight = cast(torch.Tensor, h.module(layer, f"{h.layout.attn}.{h.layout.o_proj}").weight)
    rows = slice(head * h.d_head, (head + 1) * h.d_head)
    # Conv1D (GPT-2) stores [d_in, d_out]; Linear stores [d_out, d_in]
    return dz @ (weight[rows] if h.layout.conv1d else weight[:, rows].T)


def _check_via(h: NNsightModel, via: str, freeze_norms: bool) -> None:
    if freeze_norms:
        raise NotCoveredError(
            "freeze_norms: path patching through nnsight recomputes the norms; use freeze_norms=False"
        )
    if via in ("k", "v") and h.n_kv_heads != h.n_heads:
        raise NotCoveredError(
            f"via: {via!r} under grouped-query attention ({h.n_heads} query heads share {h.n_kv_heads} {via} heads): "
            f"one receiver's own {via} has no value in the model run through nnsight; path patch via='q', or run "
            "the model natively (cw.from_hf)"
        )


def _run_chunk(
    h: NNsightModel, a: torch.Tensor, b: torch.Tensor, m: Metric, senders: list[tuple[int, int]],
    variants: list[_Variant], via: str,
) -> tuple[list[float], float, float]:  # fmt: skip
    """Metric values of ``variants`` (sorted by receiver layer), the clean and the corrupted metric values."""
    import nnsight

    batch = b.shape[0]
    n, s = len(variants), len(senders)
    sender_layers = sorted({l1 for l1, _ in senders})
    receivers = sorted({l2 for _, l2, _ in variants})
    first = min(sender_layers) + 1
    spans = {
        l2: (rows[0], rows[-1] + 1, [variants[i][0] for i in rows], [variants[i][2] for i in rows])
        for l2 in receivers
        for rows in [[i for i, v in enumerate(variants) if v[1] == l2]]
    }
    with h.remote_errors(f"path_patch via {via}"), h.trace() as tracer:
        clean_z: dict[int, Any] = {}
        with tracer.invoke(a):
            for l1 in sender_layers:
                clean_z[l1] = h.module(l1, f"{h.layout.attn}.{h.layout.o_proj}").input
            clean_metric = nnsight.save(_reduce(m, h.lm.output.logits, 1, batch))
        resid: dict[int, Any] = {}
        deltas: list[Any] = [None] * s
        with tracer.invoke(b):
            for layer in range(first - 1, h.n_layers):
                if layer >= first:
                    resid[layer] = h.block(layer).input
                if layer in sender_layers:
                    z = h.module(layer, f"{h.layout.attn}.{h.layout.o_proj}").input
                    dz = (clean_z[layer] - z).view(*z.shape[:-1], h.n_heads, h.d_head)
                    for i, (l1, h1) in enumerate(senders):
                        if l1 == layer:
                            deltas[i] = _head_write(h, l1, h1, dz[:, :, h1])
            base_metric = nnsight.save(_reduce(m, h.lm.output.logits, 1, batch))
        received: dict[int, Any] = {}
        with tracer.invoke(b.repeat(s, 1)):
            for layer in range(first, h.n_layers):
                stream = h.block(layer).input
                added = [deltas[i] if senders[i][0] < layer else torch.zeros_like(stream[:batch]) for i in range(s)]
                h.block(layer).input = resid[layer].repeat(s, 1, 1) + torch.cat(added)
                if layer in spans:
                    value = read(h, layer, via)
                    received[layer] = value.reshape(s, batch, *value.shape[1:])
        with tracer.invoke(b.repeat(n, 1)):
            for layer in receivers:
                value = read(h, layer, via)
                v = value.reshape(n, batch, *value.shape[1:])
                start, stop, of_sender, heads = spans[layer]
                src = received[layer][torch.tensor(of_sender, device=v.device)]
                mask = torch.nn.functional.one_hot(torch.tensor(heads, device=v.device), h.n_heads).to(v.dtype)
                part = v[start:stop] + mask[:, None, None, :, None] * (src - v[start:stop])
                write(h, layer, via, torch.cat([v[:start], part, v[stop:]]).reshape(value.shape))
            values = nnsight.save(_reduce(m, h.lm.output.logits, n, batch))
    got = values.detach()
    if got.shape != (n,):
        raise ArgumentError(f"metric: {m.name} returned shape {tuple(got.shape)} for {n} variants, expected ({n},)")
    if not bool(torch.isfinite(got).all()):
        raise ArgumentError(f"metric: {m.name} returned a non-finite value for a path-patched run")
    return got.tolist(), float(scalar(clean_metric[0].detach(), m.name)), float(scalar(base_metric[0].detach(), m.name))


def path_patch(
    h: NNsightModel, clean: object, corrupted: object, metric: object, sender: tuple[int, int] | None, via: str,
    *, freeze_norms: bool, memory_budget: int | None,
) -> Sweep:  # fmt: skip
    """:func:`circuitwidgets.causal.path_patch` through nnsight (``sender`` and ``via`` already checked): values
    ``[layer, head]`` of receivers for one sender, or ``[sender_layer, sender_head, layer, head]`` for ``None``."""
    a, b = same_shape(h.check_tokens(clean, "clean"), h.check_tokens(corrupted, "corrupted"))
    _check_via(h, via, freeze_norms)
    m = as_metric(metric, h.d_vocab)
    budget = check_budget(memory_budget)
    L, H = h.n_layers, h.n_heads
    senders = [sender] if sender is not None else [(l1, h1) for l1 in range(L - 1) for h1 in range(H)]
    # every (sender, receiver) pair a sender can reach, sender-major so that a chunk holds few senders
    pairs = [(s, l2, h2) for s in senders for l2 in range(s[0] + 1, L) for h2 in range(H)]
    step = max(1, budget // _bytes_per_variant(h, *a.shape) - 1)
    out = np.full((L, H, L, H), np.nan)
    clean_value = base_value = float("nan")
    for c0 in range(0, len(pairs), step):
        chunk = pairs[c0 : c0 + step]
        in_chunk = sorted({s for s, _, _ in chunk})
        variants = sorted((in_chunk.index(s), l2, h2) for s, l2, h2 in chunk)
        variants.sort(key=lambda v: v[1])  # each receiver layer's rows contiguous
        values, clean_value, base_value = _run_chunk(h, a, b, m, in_chunk, variants, via)
        for (i, l2, h2), value in zip(variants, values, strict=True):
            out[in_chunk[i][0], in_chunk[i][1], l2, h2] = value
    result = out[sender[0], sender[1]] if sender is not None else out
    result, c, k = normalise(result, m, clean_value, base_value)
    dims, labels = path_dims(sender, L, H)
    return Sweep(
        result, dims, labels, "path patching", m.name, c, k, via,
        CONVENTION + f"; sender's write added to the receivers' {via} input only", h.name,
        _prompts(h, clean=a, corrupted=b), extra={"sender": sender, "via": via},
    )  # fmt: skip


__all__ = ["path_patch"]
