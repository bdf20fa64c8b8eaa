"""One run of the clean prompts in which chosen edges carry a reference write: faithfulness's and edge patching's pass.

Receiver ``r`` reads ``stream + Σ_{s dropped} (reference_s − actual_s)`` (the stream is the sum of
the run's actual writes). In the split pass (:mod:`~circuitwidgets.graphs.split`, the slow
definition the tests hold this to) every receiver normalises and projects its own copy. Here a
layer's ``3 · n_heads`` attention receivers are grouped by the set of senders they drop: receivers
with the same set read the same input, so each distinct input is normalised once and projected by
the weights of all its receivers in one product (the receivers that drop nothing read the stream
itself). A circuit's receivers mostly drop all their senders or none, so a layer has a few distinct
inputs, not ``3 · n_heads``. Writes are sender-major ``[senders, batch, pos, d_model]``; the last
layer computes its queries, and what follows them, at the positions the metric reads only (as
:meth:`CircuitModel.run_from` does).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from circuitwidgets.causal.metrics import Metric
from circuitwidgets.graphs.gradpass import Written, _k_norm, _logits, sender_major
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
    ref: list[Written],
    start: State | None = None,
    states: list[State] | None = None,
) -> torch.Tensor:
    """The metric ``[1]`` of the run on ``tokens`` whose edges marked in ``drop`` ``[senders, receivers]`` carry
    ``ref`` (per sender group, as :func:`gradpass.run` records them: a layer's heads as ``z``) instead of the
    actual write.

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
    deltas = _Deltas(model, acts, ref)
    for index, group in enumerate(comps.groups()):
        if index < start.group:
            continue
        if states is not None:
            states.append(State(index, resid, before, rows_now, list(acts)))
        cols = drop[: group.upstream, group.first : group.first + group.size]
        if group.kind == "attn":
            rows = asked if group.layer == cfg.n_layers - 1 else None
            z = _heads(model, group.layer, resid, pos, rows, cols, deltas, rec)
            acts.append(Written(comps.head_sender(group.layer, 0), z, rows, group.layer))
            before = resid if rows is None else resid[:, rows]
            bias = None if b_O is None else b_O[group.layer]
            resid = before + affine(z.flatten(-2), W_O[group.layer].flatten(0, 1), bias)  # type: ignore[index]
            rows_now = rows
        elif group.kind == "mlp":
            source = before if comps.parallel else resid
            out = model._mlp(group.layer, _patched(source, cols[:, 0], deltas, rows_now), rec)
            acts.append(Written(comps.mlp_sender(group.layer), out[:, :, None], rows_now))
            resid = resid + out
        else:
            logits = _logits(model, _patched(resid, cols[:, 0], deltas, rows_now), read, rows_now, m.columns, rec)
    return metric_values(m, logits, 1, tokens.shape[0])


class _Deltas:
    """``reference_s − actual_s`` per sender group, sender-major ``[senders, batch, pos, d_model]``, formed once per
    run when first asked for (at every position, or at the rows the last layer holds; a layer's heads as
    ``(Δz)_h W_O[h]``), and their sums over the senders a receiver drops."""

    def __init__(self, model: CircuitModel, acts: list[Written], ref: list[Written]) -> None:
        self.model, self.acts, self.ref = model, acts, ref
        self.cache: dict[tuple[int, bool], torch.Tensor] = {}

    def group(self, g: int, rows: list[int] | None) -> torch.Tensor:
        key = (g, rows is None)
        if key not in self.cache:
            act, ref = self.acts[g], self.ref[g]
            d = sender_major(self.model, Written(act.first, ref.value - act.value, act.rows, act.layer))
            if rows is not None and act.rows is None:
                d = d[:, :, rows]
            self.cache[key] = d
        return self.cache[key]

    def sums(self, patterns: np.ndarray, rows: list[int] | None) -> torch.Tensor | None:
        """``[len(patterns), batch, pos or len(rows), d_model]``: for each row of ``patterns`` ``[J, upstream]`` (bool),
        the sum of the dropped senders' deltas (one matrix product per sender group); ``None`` when none is dropped."""
        out, first = None, 0
        for g, act in enumerate(self.acts):
            k = act.value.shape[2]
            chosen = patterns[:, first : first + k]
            first += k
            if chosen.any():
                d = self.group(g, rows)
                weights = torch.as_tensor(chosen, dtype=d.dtype, device=d.device)
                part = (weights @ d.reshape(k, -1)).view(len(patterns), *d.shape[1:])
                out = part if out is None else out + part
            if first >= patterns.shape[1]:
                break
        return out


def _patched(x: torch.Tensor, dropped: np.ndarray, deltas: _Deltas, rows: list[int] | None) -> torch.Tensor:
    d = deltas.sums(dropped[None], rows)
    return x if d is None else x + d[0]


def _heads(
    model: CircuitModel, layer: int, resid: torch.Tensor, pos: torch.Tensor | None, rows: list[int] | None,
    cols: np.ndarray, deltas: _Deltas, rec: Recorder,
) -> torch.Tensor:  # fmt: skip
    """The heads' ``z`` ``[batch, pos or len(rows), n_heads, d_head]`` when receiver ``r`` of the layer drops the
    senders marked in ``cols[:, r]``: one normalised input per distinct column, projected for all its receivers."""
    cfg = model.cfg
    H = cfg.n_heads
    patterns, inverse = np.unique(cols.T, axis=0, return_inverse=True)
    inverse = inverse.reshape(-1)
    out: list[torch.Tensor | None] = [None, None, None]
    sums = deltas.sums(patterns, None)
    for j, pattern in enumerate(patterns):
        x = resid if sums is None or not pattern.any() else resid + sums[j]
        normed = model._normalize(x, rec, "scale", layer)
        qk_in = normed + pos if cfg.positional_embedding_type == "shortformer" and pos is not None else normed
        for i, letter in enumerate("QKV"):
            heads = np.flatnonzero(inverse[i * H : (i + 1) * H] == j)
            if len(heads) == 0:
                continue
            x = normed if letter == "V" else qk_in
            part = _project(model, layer, letter, x if letter != "Q" or rows is None else x[:, rows], heads)
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
