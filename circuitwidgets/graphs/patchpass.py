"""One run of the clean prompts in which chosen edges carry a reference write: faithfulness's and edge patching's pass.

Receiver ``r`` reads ``stream + Σ_{s dropped} (reference_s − actual_s)`` (the stream is the sum of
the run's actual writes). In the split pass (:mod:`~circuitwidgets.graphs.split`, the slow
definition the tests hold this to) every receiver normalises and projects its own copy. Here a
layer's ``3 · n_heads`` attention receivers are grouped by the set of senders they drop: receivers
with the same set read the same input, so each distinct input is normalised once and projected by
the weights of all its receivers in one product (one product over the layer's fused weights when
all of them read one input). A circuit's receivers mostly drop all their senders or keep a few, so
the sum runs over whichever set is smaller: ``stream + Σ_{dropped}`` or ``stream_ref − Σ_{kept}``,
where ``stream_ref`` is the reference run's own stream there (every edge into the receiver
carrying the reference write); a receiver dropping everything reads ``stream_ref`` as it is. A
layer's heads' deltas are summed as ``Δz W_O`` over the chosen heads in one product. The last
layer computes its queries, and what follows them, at the positions the metric reads only (as
:meth:`CircuitModel.run_from` does).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from circuitwidgets.causal.metrics import Metric
from circuitwidgets.graphs.gradpass import Written, _k_norm, _logits
from circuitwidgets.graphs.runs import Setup, metric_values
from circuitwidgets.model import CircuitModel
from circuitwidgets.model.cache import Recorder
from circuitwidgets.model.forward import affine, chunked_attention
from circuitwidgets.model.rotary import rotate


@dataclass
class State:
    """A run just before receiver group ``group``: the stream (and the stream before this layer's attention, which
    a parallel MLP reads), the positions it holds (``None``: all) and every sender group's output so far."""

    group: int
    resid: torch.Tensor
    before: torch.Tensor
    rows: list[int] | None
    acts: list[Written]


def run(
    s: Setup,
    m: Metric,
    tokens: torch.Tensor,
    drop: np.ndarray,
    ref: Reference,
    start: State | None = None,
    states: list[State] | None = None,
) -> torch.Tensor:
    """The metric ``[1]`` of the run on ``tokens`` whose edges marked in ``drop`` ``[senders, receivers]`` carry
    ``ref`` (:func:`reference`: per sender group, as :func:`gradpass.run` records them, a layer's heads as ``z``)
    instead of the actual write.

    ``start``: begin at that state of a run that agrees with this one before it; ``states``: filled with the
    state before each receiver group (what later runs start from)."""
    model, comps, cfg = s.model, s.comps, s.model.cfg
    rec = Recorder({}, set())
    n_pos = tokens.shape[1]
    read = m.positions_at(n_pos)
    asked = sorted(set(read)) if read is not None else None
    pos = model.W_pos[:n_pos][None] if model.W_pos is not None else None
    if start is None:
        embed = model.W_E[tokens]
        if pos is not None and cfg.positional_embedding_type == "standard":
            embed = embed + pos
        start = State(0, embed, embed, None, [Written(0, embed[:, :, None], None)])
    resid, before, rows_now, acts = start.resid, start.before, start.rows, list(start.acts)
    b_O, W_O = model.weight("b_O"), model._buffers["W_O"]
    deltas = _Deltas(model, acts, ref.writes)
    for index, group in enumerate(comps.groups()):
        if index < start.group:
            continue
        if states is not None:
            states.append(State(index, resid, before, rows_now, list(acts)))
        cols = drop[: group.upstream, group.first : group.first + group.size]
        if group.kind == "attn":
            rows = asked if group.layer == cfg.n_layers - 1 else None
            z = _heads(model, group.layer, resid, ref.streams[index], pos, rows, cols, deltas, rec)
            acts.append(Written(comps.head_sender(group.layer, 0), z, rows, group.layer))
            before = resid if rows is None else resid[:, rows]
            bias = None if b_O is None else b_O[group.layer]
            resid = before + affine(z.flatten(-2), W_O[group.layer].flatten(0, 1), bias)  # type: ignore[index]
            rows_now = rows
        elif group.kind == "mlp":
            source = before if comps.parallel else resid
            out = model._mlp(group.layer, _input(source, ref.streams[index], cols[:, 0], deltas, rows_now), rec)
            acts.append(Written(comps.mlp_sender(group.layer), out[:, :, None], rows_now))
            resid = resid + out
        else:
            x = _input(resid, ref.streams[index], cols[:, 0], deltas, rows_now)
            logits = _logits(model, x, read, rows_now, m.columns, rec)
    return metric_values(m, logits, 1, tokens.shape[0])


@dataclass
class Reference:
    """What a removed edge carries: per sender group the reference write (as :func:`gradpass.run` records them), and
    per receiver group the stream it reads when every edge into it carries the reference write (the reference run's
    own stream there, summed in the order a run sums it).

    A receiver that drops most of its senders reads ``stream_ref − Σ_{kept} (reference_s − actual_s)``, the same
    input as ``stream + Σ_{dropped} (reference_s − actual_s)`` with fewer terms; one that drops all of them reads
    ``stream_ref`` itself."""

    writes: list[Written]
    streams: list[torch.Tensor]


def reference(s: Setup, writes: list[Written]) -> Reference:
    """The reference writes with each receiver group's reference stream (:class:`Reference`)."""
    model, comps = s.model, s.comps
    b_O, W_O = model.weight("b_O"), model._buffers["W_O"]
    resid = before = writes[0].value[:, :, 0]
    streams: list[torch.Tensor] = []
    later = iter(writes[1:])
    for group in comps.groups():
        if group.kind == "attn":
            streams.append(resid)
            heads = next(later)
            before = resid if heads.rows is None else resid[:, heads.rows]
            bias = None if b_O is None else b_O[group.layer]
            resid = before + affine(heads.value.flatten(-2), W_O[group.layer].flatten(0, 1), bias)  # type: ignore[index]
        elif group.kind == "mlp":
            streams.append(before if comps.parallel else resid)
            resid = resid + next(later).value[:, :, 0]
        else:
            streams.append(resid)
    return Reference(writes, streams)


class _Deltas:
    """Sums of ``reference_s − actual_s`` over chosen senders ``[batch, pos or len(rows), d_model]``: a layer's heads
    as ``Δz[:, :, chosen] W_O[chosen]`` (one product over the chosen heads, no per-head write), an input's or an
    MLP's as the difference of its writes. A whole sender group's delta is kept for the run (receivers often drop or
    keep a layer's heads together)."""

    def __init__(self, model: CircuitModel, acts: list[Written], ref: list[Written]) -> None:
        self.model, self.acts, self.ref = model, acts, ref
        self.cache: dict[tuple[int, bool], torch.Tensor] = {}

    def total(self, chosen: np.ndarray, rows: list[int] | None) -> torch.Tensor | None:
        """``Σ_{s chosen} (reference_s − actual_s)`` for ``chosen`` ``[upstream]`` (bool); ``None`` when none is."""
        out, first = None, 0
        for g, act in enumerate(self.acts):
            if first >= len(chosen):
                break
            k = act.value.shape[2]
            picked = np.flatnonzero(chosen[first : first + k])
            first += k
            if len(picked):
                part = self._group(g, picked, rows)
                out = part if out is None else out + part
        return out

    def _group(self, g: int, picked: np.ndarray, rows: list[int] | None) -> torch.Tensor:
        act, ref = self.acts[g], self.ref[g]
        whole = len(picked) == act.value.shape[2]
        key = (g, rows is None)
        if whole and key in self.cache:
            return self.cache[key]
        a, r = act.value, ref.value
        if rows is not None and act.rows is None:
            a, r = a[:, rows], r[:, rows]
        if act.layer < 0:
            d = (r - a)[:, :, 0]
        else:
            W = self.model._buffers["W_O"][act.layer]  # type: ignore[index]
            if not whole:
                index = torch.as_tensor(picked, device=a.device)
                a, r, W = a[:, :, index], r[:, :, index], W[index]
            d = affine((r - a).flatten(-2), W.flatten(0, 1), None)
        if whole:
            self.cache[key] = d
        return d


def _input(
    x: torch.Tensor, stream_ref: torch.Tensor, dropped: np.ndarray, deltas: _Deltas, rows: list[int] | None
) -> torch.Tensor:
    """What a receiver reads that drops the senders marked in ``dropped`` ``[upstream]``: ``x`` (its stream) plus the
    dropped senders' deltas, or the reference stream minus the kept ones', whichever sums fewer senders."""
    n_drop = int(dropped.sum())
    if n_drop == 0:
        return x
    if 2 * n_drop <= len(dropped):
        d = deltas.total(dropped, rows)
        return x if d is None else x + d
    kept = deltas.total(~dropped, rows)
    return stream_ref if kept is None else stream_ref - kept


def _heads(
    model: CircuitModel, layer: int, resid: torch.Tensor, stream_ref: torch.Tensor, pos: torch.Tensor | None,
    rows: list[int] | None, cols: np.ndarray, deltas: _Deltas, rec: Recorder,
) -> torch.Tensor:  # fmt: skip
    """The heads' ``z`` ``[batch, pos or len(rows), n_heads, d_head]`` when receiver ``r`` of the layer drops the
    senders marked in ``cols[:, r]``: one normalised input per distinct column, projected for all its receivers
    (in one product over the layer's fused weights when they all read it)."""
    cfg = model.cfg
    H = cfg.n_heads
    patterns, inverse = np.unique(cols.T, axis=0, return_inverse=True)
    inverse = inverse.reshape(-1)
    out: list[torch.Tensor | None] = [None, None, None]
    for j, pattern in enumerate(patterns):
        normed = model._normalize(_input(resid, stream_ref, pattern, deltas, None), rec, "scale", layer)
        qk_in = normed + pos if cfg.positional_embedding_type == "shortformer" and pos is not None else normed
        if len(patterns) == 1 and qk_in is normed and cfg.kv_source(layer) == layer:
            fused = model._fused_projections(normed, layer, rows)
            if fused is not None:
                fq, fk, fv = fused
                if cfg.group_size > 1:  # per query head, as the receivers are
                    fk, fv = fk.repeat_interleave(cfg.group_size, dim=2), fv.repeat_interleave(cfg.group_size, dim=2)
                out = [fq, fk, fv]
                break
        wanted = [np.flatnonzero(inverse[i * H : (i + 1) * H] == j) for i in range(3)]
        parts = _projected(model, layer, normed, qk_in, rows, wanted)
        for i, (heads, part) in enumerate(zip(wanted, parts, strict=True)):
            if part is None:
                continue
            if len(heads) == H:
                out[i] = part
                continue
            if out[i] is None:
                out[i] = part.new_empty(*part.shape[:2], H, part.shape[-1])
            out[i][:, :, torch.as_tensor(heads)] = part  # type: ignore[index]
    q, k, v = out
    assert q is not None and k is not None and v is not None
    q, k = model._qk_norm(q, layer, "q_norm"), _k_norm(model, layer, k)
    freq = model.rotary_freq(layer)
    if freq is not None:
        where = torch.arange(resid.shape[1], device=resid.device)
        q = rotate(q, freq, where if rows is None else where[rows], pos_dim=1)
        k = rotate(k, freq, where, pos_dim=1)
    return chunked_attention(q, k, v, cfg.scale, cfg.attn_softcap, cfg.window(layer), 0, rows)


def _projected(
    model: CircuitModel, layer: int, normed: torch.Tensor, qk_in: torch.Tensor, rows: list[int] | None,
    wanted: list[np.ndarray],
) -> list[torch.Tensor | None]:  # fmt: skip
    """Query, key and value heads ``wanted[i]`` (per query head) ``[batch, pos, len, d_head]`` of one input (queries at
    ``rows``): one product per distinct input over those heads' columns of the layer's fused weight where the model
    keeps one (a key and value head per query head), else one per letter."""
    fused = model._fused_weight(layer) if model.cfg.group_size == 1 else None
    inputs = [qk_in if rows is None else qk_in[:, rows], qk_in, normed]
    if fused is None:
        return [
            None if len(heads) == 0 else _project(model, layer, letter, x, heads)
            for letter, heads, x in zip("QKV", wanted, inputs, strict=True)
        ]
    weight, bias, widths = fused
    d_head = widths[0] // model.cfg.n_heads
    starts = np.cumsum([0, *widths[:2]])
    columns = [
        start + (heads[:, None] * d_head + np.arange(d_head)).reshape(-1)
        for start, heads in zip(starts, wanted, strict=True)
    ]
    out: list[torch.Tensor | None] = [None, None, None]
    jobs: list[list[int]] = []  # letters projected together: those reading one tensor
    for i in range(3):
        if len(wanted[i]):
            same = next((job for job in jobs if inputs[job[0]] is inputs[i]), None)
            if same is None:
                jobs.append([i])
            else:
                same.append(i)
    for letters in jobs:
        index = torch.as_tensor(np.concatenate([columns[i] for i in letters]), device=weight.device)
        product = affine(inputs[letters[0]], weight[:, index], None if bias is None else bias[index])
        for i, part in zip(letters, torch.split(product, [len(columns[i]) for i in letters], dim=-1), strict=True):
            out[i] = part.view(*part.shape[:-1], len(wanted[i]), d_head)
    return out


def _project(model: CircuitModel, layer: int, letter: str, x: torch.Tensor, heads: np.ndarray) -> torch.Tensor:
    """``x W_{letter} + b_{letter}`` for query heads ``heads`` ``[batch, pos, len(heads), d_head]`` (a key or value
    head through its group's weights)."""
    W = model._buffers[f"W_{letter}"][layer]  # type: ignore[index]
    bias = model.weight(f"b_{letter}")
    b = bias[layer] if bias is not None else None
    if len(heads) < model.cfg.n_heads or W.shape[0] < model.cfg.n_heads:
        index = torch.as_tensor(heads if W.shape[0] == model.cfg.n_heads else heads // model.cfg.group_size)
        W, b = W[index], (b[index] if b is not None else None)
    out = torch.einsum("bpd,hde->bphe", x, W)
    return out + b if b is not None else out
