"""Exact edge patching: runs of the clean prompts in which chosen edges carry the corrupted (or mean) write.

A receiver reads the sum of its senders' writes. Removing edge ``s → r`` from
a run adds ``corrupted_s − actual_s`` to ``r``'s input only, where
``actual_s`` is what ``s`` writes in this run (itself changed by edges removed
upstream) and ``corrupted_s`` its write on the corrupted prompts (or its mean
over them, ``ablation="mean"``). So a run keeps exactly the edges of a
circuit: every other edge carries the corrupted write, as hannamw/EAP-IG's
``evaluate_graph`` defines it. Variants (one per edge, or one per circuit size)
run one after another on every prompt of a chunk (chunked to a memory budget),
each from the clean run's state where it first differs
(:mod:`~circuitwidgets.graphs.patchpass`); identical variants run once, and the
empty circuit is the corrupted run itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import overload

import numpy as np
import torch

from circuitwidgets.causal.metrics import Metric
from circuitwidgets.errors import ArgumentError
from circuitwidgets.graphs import gradpass, patchpass
from circuitwidgets.graphs.eap import CONVENTION
from circuitwidgets.graphs.gradpass import Written
from circuitwidgets.graphs.graph import Graph
from circuitwidgets.graphs.runs import Setup, bytes_per_sequence, chunks, prompt_of, setup
from circuitwidgets.model import CircuitModel

ABLATIONS = ("patch", "mean")

#: Token rows (prompts × positions) a run holds at most, memory allowing: a faithfulness curve on gelu-2l (1,000
#: pairs, 1 thread, CPU seconds on a loaded machine) measured 10.1 s in runs of ~1,500 rows, 12.0 s in runs of ~6,000.
ROWS_PER_RUN = 2048


def reference_writes(s: Setup, start: int, stop: int, ablation: str, m: Metric) -> tuple[list[Written], float]:
    """What a removed edge carries, per sender group (as :func:`gradpass.run` records them; the last layer's at the
    positions ``m`` reads): the corrupted run's on the chunk's prompts, or their mean over every corrupted prompt at
    each position (broadcast over the chunk); and the metric of that corrupted run (NaN for the mean)."""
    if ablation == "patch":
        run = gradpass.run(s, m, s.corrupted[start:stop], grad=False)
        return run.writes, float(run.values[0])
    whole = gradpass.run(s, s.whole, s.corrupted, grad=False).writes
    n = stop - start
    means = [
        Written(w.first, w.value.mean(0, keepdim=True).expand(n, *w.value.shape[1:]), w.rows, w.layer) for w in whole
    ]
    return means, float("nan")


def masked_values(s: Setup, drop: np.ndarray, ablation: str = "patch") -> np.ndarray:
    """The metric (mean over prompts) of the clean run of each variant ``[V]``, where ``drop`` ``[V, senders,
    receivers]`` marks the edges that carry the reference write instead of the actual one.

    A variant is the clean run up to the first receiver group it changes, so it
    starts there from the clean run's recorded state (as the causal engine's
    sweeps start at the patched layer); variants run one at a time, each on every
    prompt of a chunk (:mod:`~circuitwidgets.graphs.patchpass`).
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
    everything = s.comps.edge_mask()
    per_prompt = bytes_per_sequence(s.model, n_pos, s.comps) // 3  # no backward pass: only one layer's work is alive
    for start, stop, m in chunks(s, per_prompt, max(1, ROWS_PER_RUN // n_pos)):
        writes, corrupted_value = reference_writes(s, start, stop, ablation, m)
        share = (stop - start) / n
        states: list[patchpass.State] = []
        tokens = s.clean[start:stop]
        with torch.no_grad():
            ref = patchpass.reference(s, writes)
            clean = patchpass.run(s, m, tokens, np.zeros_like(masks[0]), ref, states=states)
            for v, mask in enumerate(masks):
                if not mask.any():
                    value = float(clean[0])
                elif ablation == "patch" and np.array_equal(mask, everything):  # every receiver reads the corrupted run
                    value = corrupted_value
                else:
                    value = float(patchpass.run(s, m, tokens, mask, ref, states[first[v]])[0])
                values[v] += share * value
    return values[inverse.reshape(-1)]


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
