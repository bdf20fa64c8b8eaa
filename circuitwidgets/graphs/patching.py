"""Exact edge patching: runs of the clean prompts in which chosen edges carry the corrupted (or mean) write.

A receiver reads the sum of its senders' writes. Removing edge ``s → r`` from
a run adds ``corrupted_s − actual_s`` to ``r``'s input only, where
``actual_s`` is what ``s`` writes in this run (itself changed by edges removed
upstream) and ``corrupted_s`` its write on the corrupted prompts (or its mean
over them, ``ablation="mean"``). So a run keeps exactly the edges of a
circuit: every other edge carries the corrupted write, as hannamw/EAP-IG's
``evaluate_graph`` defines it. Many variants (one per edge, or one per circuit
size) run at once, stacked on the batch axis and chunked to a memory budget;
identical variants run once.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import overload

import numpy as np
import torch

from circuitwidgets.errors import ArgumentError
from circuitwidgets.graphs.components import Group
from circuitwidgets.graphs.eap import CONVENTION
from circuitwidgets.graphs.graph import Graph
from circuitwidgets.graphs.runs import (
    Setup,
    bytes_per_sequence,
    chunks,
    logits_of,
    metric_values,
    prompt_of,
    setup,
    writes,
)
from circuitwidgets.graphs.split import InputEdit, Senders, State, split_run
from circuitwidgets.model import CircuitModel

ABLATIONS = ("patch", "mean")


def reference_writes(s: Setup, start: int, stop: int, ablation: str) -> torch.Tensor:
    """What a removed edge carries, per prompt of the chunk: the corrupted writes, or their mean over every
    corrupted prompt at each position (broadcast over the chunk)."""
    if ablation == "patch":
        return writes(s, s.corrupted[start:stop])
    mean = writes(s, s.corrupted).mean(0, keepdim=True)
    return mean.expand(stop - start, *mean.shape[1:])


def masked_values(s: Setup, drop: np.ndarray, ablation: str = "patch") -> np.ndarray:
    """The metric (mean over prompts) of the clean run of each variant ``[V]``, where ``drop`` ``[V, senders,
    receivers]`` marks the edges that carry the reference write instead of the actual one.

    A variant is the clean run up to the first receiver group it changes, so it
    starts there from the clean run's recorded state (as the causal engine's
    sweeps start at the patched layer).
    """
    unique, inverse = np.unique(drop.reshape(len(drop), -1), axis=0, return_inverse=True)
    masks = unique.reshape(-1, *drop.shape[1:])
    groups = s.comps.groups()
    first = np.full(len(masks), len(groups) - 1)
    for index in reversed(range(len(groups))):
        g = groups[index]
        first[masks[:, : g.upstream, g.first : g.first + g.size].any(axis=(1, 2))] = index
    n, n_pos = s.clean.shape
    values = np.zeros(len(masks))
    per_prompt = bytes_per_sequence(s.model, n_pos, s.comps) // 3  # no backward pass: only one layer's work is alive
    for start, stop, m in chunks(s, per_prompt):
        ref = reference_writes(s, start, stop, ablation)
        share = (stop - start) / n
        states: list[State] = []
        with torch.no_grad():
            split_run(s.model, s.comps, s.clean[start:stop], states=states)
        step = max(1, s.budget // max(per_prompt * (stop - start), 1))
        for index in np.unique(first):
            rows = np.flatnonzero(first == index)
            for v0 in range(0, len(rows), step):
                chosen = rows[v0 : v0 + step]
                v = len(chosen)
                block = torch.as_tensor(masks[chosen], dtype=s.model.dtype, device=s.model.device)
                tokens = s.clean[start:stop].repeat(v, 1)
                with torch.no_grad():
                    logits = logits_of(s, m, tokens, edit_input=_patcher(block, ref), start=states[index].repeat(v))
                    values[chosen] += share * metric_values(m, logits, v, stop - start).double().cpu().numpy()
    return values[inverse.reshape(-1)]


def _patcher(block: torch.Tensor, ref: torch.Tensor) -> InputEdit:
    """The input edit adding ``Σ_s drop[v, s, r] (reference_s − actual_s)`` to each receiver ``r``.

    ``reference − actual`` is formed once per sender, as its write appears (not once per receiver group that
    reads it), into one buffer ``[variants, batch, pos, senders, d_model]``; each group's update is one batched
    matrix product per token, ``drop[v]ᵀ (r × u) · delta (u × d_model)``, added to the input in the same call.
    """
    v = block.shape[0]
    filled = 0
    delta = torch.empty(0)

    def edit(group: Group, x: torch.Tensor, senders: Senders) -> torch.Tensor:
        nonlocal filled, delta
        drop = block[:, : group.upstream, group.first : group.first + group.size]
        if not bool(drop.any()):
            return x  # nothing removed here: the input is exactly the run's
        u, r, d = group.upstream, group.size, x.shape[-1]
        if filled < u:
            new = senders(filled)[:, :, : u - filled]
            n = new.shape[0] // v
            if filled == 0:
                delta = torch.empty(v, n, new.shape[1], ref.shape[2], d, dtype=x.dtype, device=x.device)
            torch.sub(ref[None, :, :, filled:u], new.view(v, n, *new.shape[1:]), out=delta[:, :, :, filled:u])
            filled = u
        n, p = delta.shape[1], delta.shape[2]
        batch = v * n * p
        weights = drop.transpose(1, 2)[:, None].expand(v, n * p, r, u).reshape(batch, r, u)
        return torch.baddbmm(x.reshape(batch, r, d), weights, delta[:, :, :, :u].reshape(batch, u, d)).view(x.shape)

    return edit


@overload
def edge_patch(
    model: CircuitModel,
    clean: object,
    corrupted: object,
    metric: object,
    edges: tuple[str, str],
    *,
    ablation: str = ...,
    memory_budget: int | None = ...,
) -> float: ...


@overload
def edge_patch(
    model: CircuitModel,
    clean: object,
    corrupted: object,
    metric: object,
    edges: Sequence[tuple[str, str]] | None = ...,
    *,
    ablation: str = ...,
    memory_budget: int | None = ...,
) -> Graph: ...


def edge_patch(
    model: CircuitModel,
    clean: object,
    corrupted: object,
    metric: object,
    edges: tuple[str, str] | Sequence[tuple[str, str]] | None = None,
    *,
    ablation: str = "patch",
    memory_budget: int | None = None,
) -> float | Graph:
    """The exact effect of removing edges one at a time: ``metric(clean run with the edge carrying the corrupted
    write) − metric(clean run)`` — what :func:`edge_attribution` estimates.

    ``edges``: one ``(sender, receiver)`` pair of labels (returns a float), a list of
    pairs, or ``None`` for every edge (returns a :class:`Graph` of exact weights).
    """
    if ablation not in ABLATIONS:
        raise ArgumentError(f"ablation: expected one of {ABLATIONS}, got {ablation!r}")
    s = setup(model, clean, corrupted, metric, memory_budget)
    comps = s.comps
    exists = comps.edge_mask()
    single = isinstance(edges, tuple) and len(edges) == 2 and all(isinstance(e, str) for e in edges)
    wanted: Sequence[tuple[str, str]] | None = [edges] if single else edges  # type: ignore[list-item,assignment]
    pairs = edge_pairs(comps.sender_labels(), comps.receiver_labels(), exists, wanted, "edges")
    drop = np.zeros((len(pairs) + 1, *exists.shape), dtype=bool)  # variant 0: the clean run itself
    for i, (si, ri) in enumerate(pairs):
        drop[i + 1, si, ri] = True
    values = masked_values(s, drop, ablation)
    effects = values[1:] - values[0]
    if single:
        return float(effects[0])
    weights = np.full(exists.shape, np.nan)
    for (si, ri), e in zip(pairs, effects, strict=True):
        weights[si, ri] = e
    nodes, table = comps.tables(weights)
    keep = np.flatnonzero(~np.isnan(table.weight))
    prompt, tokens = prompt_of(model, s.clean)
    extra = {"model": model.name, "n_layers": model.cfg.n_layers, "n_heads": model.cfg.n_heads, "n_prompts": int(s.clean.shape[0]), "clean_value": float(values[0]),
             "ablation": ablation, "graph": "components"}  # fmt: skip
    return Graph(nodes, table.take(keep), {}, prompt, tokens, CONVENTION.replace("weight ≈", "weight ="), "exact",
                 s.whole.name, extra)  # fmt: skip


def edge_pairs(
    senders: list[str], receivers: list[str], exists: np.ndarray, edges: Sequence[tuple[str, str]] | None, arg: str
) -> list[tuple[int, int]]:
    """``(sender, receiver)`` indices of labelled edges (every edge for ``None``); a typed error names ``arg`` and
    the first edge the model does not have."""
    if edges is None:
        return [(int(a), int(b)) for a, b in zip(*np.nonzero(exists), strict=True)]
    s_index = {name: i for i, name in enumerate(senders)}
    r_index = {name: i for i, name in enumerate(receivers)}
    out = []
    for edge in edges:
        if not (isinstance(edge, tuple) and len(edge) == 2):
            raise ArgumentError(
                f"{arg}: expected (sender, receiver) label pairs such as ('L0H1', 'L1H2.k'), got {edge!r:.80}"
            )
        si, ri = s_index.get(edge[0]), r_index.get(edge[1])
        if si is None or ri is None or not exists[si, ri]:
            raise ArgumentError(
                f"{arg}: the model has no edge {edge[0]!r} → {edge[1]!r} (senders like {senders[:3]}, "
                f"receivers like {receivers[:3]}; a receiver reads only earlier senders)"
            )
        out.append((si, ri))
    return out
