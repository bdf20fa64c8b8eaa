"""The forward pass with every receiver's input apart: the definition of edge attribution's and edge patching's passes.

Edge attribution (:mod:`~circuitwidgets.graphs.gradpass`) and edge patching
(:mod:`~circuitwidgets.graphs.patchpass`) run faster passes that share what
receivers have in common; the tests hold both to this one, where every
receiver literally reads its own copy of the stream (a zero leaf on a copy
has that receiver's gradient; an edit of a copy patches that receiver only).

The same computation as :meth:`CircuitModel.forward` (its own norms,
projections, rotary, attention and MLP code), except that each head's query,
key and value inputs are separate tensors ``[batch, pos, 3 · n_heads,
d_model]`` (equal unless edited), each MLP and the logits read their own copy,
and each sender's write is a tensor the caller may record or replace. Two
callbacks make every technique of this package one pass:

- ``edit_input(group, x, senders)`` returns the group's inputs (add a zero leaf
  to read their gradient; add corrupted-minus-actual writes of chosen senders
  to patch chosen edges); ``senders()`` stacks the writes so far
  ``[batch, pos, upstream, d_model]`` (``senders(since)``: from sender ``since`` on).
- ``edit_output(first, out)`` returns the writes ``[batch, pos, k, d_model]`` of
  senders ``first … first + k − 1`` (record them, or replace them by an
  interpolation).

Grouped-query attention: a query head's key and value inputs are its own
receivers; they are projected by their group's ``W_K``/``W_V`` through a view
``[.., kv_heads, group_size, d_model]``, so no ungrouped weight is formed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import torch
from torch.nn import functional

from circuitwidgets.graphs.components import Components, Group
from circuitwidgets.model import CircuitModel
from circuitwidgets.model.cache import Recorder
from circuitwidgets.model.forward import chunked_attention, rms_norm, soft_cap
from circuitwidgets.model.rotary import rotate


class Senders(Protocol):
    """The writes so far, stacked ``[batch, pos, senders, d_model]``: every sender's, or those from sender
    ``since`` on (``since`` the first sender of a write, e.g. a group's ``upstream``)."""

    def __call__(self, since: int = 0) -> torch.Tensor: ...


InputEdit = Callable[[Group, torch.Tensor, Senders], torch.Tensor]
OutputEdit = Callable[[int, torch.Tensor], torch.Tensor]


@dataclass
class State:
    """The pass just before receiver group ``group``: the residual stream, the stream before this layer's
    attention (a parallel MLP reads it) and every write so far (``[batch, pos, k, d_model]`` each)."""

    group: int
    resid: torch.Tensor
    before_attn: torch.Tensor
    writes: list[torch.Tensor]

    def repeat(self, n: int) -> State:
        """The same state for ``n`` variants stacked variant-major on the batch axis."""
        return State(self.group, self.resid.repeat(n, 1, 1), self.before_attn.repeat(n, 1, 1),
                     [w.repeat(n, 1, 1, 1) for w in self.writes])  # fmt: skip


def split_run(
    model: CircuitModel,
    comps: Components,
    tokens: torch.Tensor,
    *,
    edit_input: InputEdit | None = None,
    edit_output: OutputEdit | None = None,
    positions: Sequence[int] | None = None,
    columns: torch.Tensor | None = None,
    start: State | None = None,
    states: list[State] | None = None,
) -> torch.Tensor:
    """Logits ``[batch, len(positions), len(columns)]`` (all when ``None``) of the split pass on ``tokens``.

    ``start``: begin at that state (a variant that differs from a recorded run only from
    that receiver group on); ``states``: filled with the state before each receiver group.
    """
    cfg = model.cfg
    rec = Recorder({}, set())
    n_pos = tokens.shape[1]
    pos = model.W_pos[:n_pos][None] if model.W_pos is not None else None
    if start is None:
        embed = model.W_E[tokens]
        if pos is not None and cfg.positional_embedding_type == "standard":
            embed = embed + pos
        first = embed[:, :, None]
        writes = [edit_output(0, first) if edit_output is not None else first]
        resid = writes[0][:, :, 0]
        before_attn = resid
    else:
        resid, before_attn, writes = start.resid, start.before_attn, list(start.writes)

    def senders(since: int = 0) -> torch.Tensor:
        chosen, at = [], 0
        for w in writes:
            if at >= since:
                chosen.append(w)
            at += w.shape[2]
        return torch.cat(chosen, dim=2) if len(chosen) > 1 else chosen[0]

    def inputs(group: Group, base: torch.Tensor) -> torch.Tensor:
        x = base[:, :, None].expand(-1, -1, group.size, -1)
        return edit_input(group, x, senders) if edit_input is not None else x

    b_O = model.weight("b_O")
    for index, group in enumerate(comps.groups()):
        if start is not None and index < start.group:
            continue
        if states is not None:
            states.append(State(index, resid, before_attn, list(writes)))
        if group.kind == "attn":
            before_attn = resid
            result = _heads(model, group.layer, inputs(group, resid), pos, rec)
            if edit_output is not None:
                result = edit_output(comps.head_sender(group.layer, 0), result)
            writes.append(result)
            resid = resid + result.sum(2) + (b_O[group.layer] if b_O is not None else 0.0)
        elif group.kind == "mlp":
            x = inputs(group, before_attn if comps.parallel else resid)
            out = model._mlp(group.layer, x[:, :, 0], rec)[:, :, None]
            if edit_output is not None:
                out = edit_output(comps.mlp_sender(group.layer), out)
            writes.append(out)
            resid = resid + out[:, :, 0]
        else:
            resid = inputs(group, resid)[:, :, 0]
    if positions is not None:
        resid = resid[:, list(positions)]
    final = model._normalize(resid, rec, "scale_final", None)
    W_U = model.W_U if columns is None else model.W_U[:, columns]
    logits = final @ W_U
    b_U = model.weight("b_U")
    if b_U is not None:
        logits = logits + (b_U if columns is None else b_U[columns])
    return soft_cap(logits, cfg.final_softcap)


def _heads(model: CircuitModel, layer: int, x: torch.Tensor, pos: torch.Tensor | None, rec: Recorder) -> torch.Tensor:
    """Each head's write ``z W_O`` ``[batch, pos, n_heads, d_model]`` from its own q, k, v inputs ``x``."""
    cfg = model.cfg
    H = cfg.n_heads
    normed = _attention_norm(model, x, rec, layer)
    xq, xk, xv = normed[:, :, :H], normed[:, :, H : 2 * H], normed[:, :, 2 * H :]
    if cfg.positional_embedding_type == "shortformer" and pos is not None:
        xq, xk = xq + pos[:, :, None], xk + pos[:, :, None]
    buffers = model._buffers
    q = torch.einsum("bphd,hde->bphe", xq, buffers["W_Q"][layer])  # type: ignore[index]
    b_Q = model.weight("b_Q")
    q = model._qk_norm(q + b_Q[layer] if b_Q is not None else q, layer, "q_norm")
    k = _grouped(model, layer, xk, "K", "k_norm")
    v = _grouped(model, layer, xv, "V", None)
    freq = model.rotary_freq(layer)
    if freq is not None:
        where = torch.arange(x.shape[1], device=x.device)
        q, k = rotate(q, freq, where, pos_dim=1), rotate(k, freq, where, pos_dim=1)
    z = chunked_attention(q, k, v, cfg.scale, cfg.attn_softcap, cfg.window(layer))
    return torch.einsum("bqhe,hed->bqhd", z, buffers["W_O"][layer])  # type: ignore[index]


def _attention_norm(model: CircuitModel, x: torch.Tensor, rec: Recorder, layer: int) -> torch.Tensor:
    """The norm before attention of each receiver's input: LayerNorm as one fused kernel (the input is 3 · n_heads
    copies of the stream, so the five elementwise passes of the model's own norm cost more here than the heads)."""
    if model.cfg.normalization == "ln_pre":
        return functional.layer_norm(x, (x.shape[-1],), eps=model.cfg.ln_eps)
    return model._normalize(x, rec, "scale", layer)


def _grouped(model: CircuitModel, layer: int, x: torch.Tensor, letter: str, norm: str | None) -> torch.Tensor:
    """Keys or values per query head ``[batch, pos, n_heads, d_head]`` from per-query-head inputs, through each
    group's weights (a view by group, not a copy of the weights per query head)."""
    cfg = model.cfg
    b, p, _, d = x.shape
    grouped = x.reshape(b, p, cfg.kv_heads, cfg.group_size, d)
    out = torch.einsum("bpgjd,gde->bpgje", grouped, model._buffers[f"W_{letter}"][layer])  # type: ignore[index]
    bias = model.weight(f"b_{letter}")
    if bias is not None:
        out = out + bias[layer][:, None]
    weight = model.weight(norm) if norm is not None else None
    if weight is not None:
        out = rms_norm(out, cfg.ln_eps, weight[layer][:, None], cfg.head_width(layer))
    return out.reshape(b, p, cfg.n_heads, -1)
