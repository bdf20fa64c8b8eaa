"""Every receiver's gradient from one pass of the model's own computation: edge attribution's forward and backward.

The split pass (:mod:`~circuitwidgets.graphs.split`) gives each of a layer's ``3 · n_heads``
attention receivers its own copy of the stream, normalised and differentiated apart. Unedited,
those copies are equal, and the gradient with respect to each one follows from the model's own
pass by the chain rule: head ``h``'s query is ``q_h = N(x) W_Q[h] + b_Q[h]`` with ``x`` the stream
before the layer and ``N`` its norm, so

``∂metric/∂(input of h.q) = J_N(x)ᵀ W_Q[h] ∂metric/∂q_h``

with ``J_N(x)`` the norm's Jacobian at ``x`` (the same for every receiver of the layer), and
likewise for keys and values (a grouped key or value is projected by its group's weights but
differentiated per query head: each query head reads its own copy). An MLP and the logits read the
stream through their own norm: their gradient is that of an alias of the stream they alone read.
So one forward pass records each head's ``q, k, v`` before their QK-norm and rotation and one
backward pass gives their gradients; ``W ∂metric/∂q`` maps each back to ``d_model`` and
:func:`norm_vjp` through the norm. The last layer computes its queries, and what follows them, at
the positions the metric reads only (as :meth:`CircuitModel.run_from` does): its writes and its
query and MLP receivers exist there only, which is where their gradients are not zero.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from circuitwidgets.causal.metrics import Metric
from circuitwidgets.graphs.components import Group
from circuitwidgets.graphs.runs import Setup, metric_values
from circuitwidgets.model import CircuitModel
from circuitwidgets.model.cache import Recorder
from circuitwidgets.model.forward import affine, chunked_attention, rms_norm, soft_cap
from circuitwidgets.model.rotary import rotate

#: ``edit(first, out, rows)``: senders ``first …``'s output replaced (the heads' ``z`` ``[batch, pos or len(rows),
#: n_heads, d_head]``, whose write is ``z W_O`` per head, so that mixing ``z`` mixes the writes; the input's and an
#: MLP's write ``[batch, pos or len(rows), 1, d_model]``).
WriteEdit = Callable[[int, torch.Tensor, "list[int] | None"], torch.Tensor]


@dataclass
class Written:
    """One sender group's output: senders ``first …``, at ``rows`` (``None``: every position); ``value`` is the
    heads' ``z`` ``[batch, pos, n_heads, d_head]`` for a layer's heads (``layer`` ≥ 0), else the write
    ``[batch, pos, 1, d_model]`` (``layer`` −1)."""

    first: int
    value: torch.Tensor
    rows: list[int] | None
    layer: int = -1


@dataclass
class Block:
    """The gradient of each variant's metric with respect to receivers ``first … first + size − 1`` of ``group``,
    at ``rows`` (``None``: every position): ``grad`` ``[size, variants, batch, pos, d_model]``. For a head's q, k or v,
    ``stream`` ``[variants, batch, pos, d_model]`` is what the layer normalised and ``grad`` the gradient after the
    norm (``J_N(stream)ᵀ grad`` is the receiver's: :func:`norm_jvp` applies ``J_N``, which is symmetric, to the
    senders' writes instead, fewer than the receivers); else ``stream`` is ``None`` and ``grad`` the receiver's."""

    group: Group
    first: int
    size: int
    rows: list[int] | None
    grad: torch.Tensor
    stream: torch.Tensor | None


@dataclass
class Pass:
    """What :func:`run` returns: each variant's metric ``[variants]``, the outputs (detached) and the gradients."""

    values: torch.Tensor
    writes: list[Written]
    blocks: list[Block]


@dataclass
class _Place:
    group: Group
    first: int
    rows: list[int] | None
    stream: torch.Tensor | None


def run(
    s: Setup, m: Metric, tokens: torch.Tensor, variants: int = 1, edit: WriteEdit | None = None, grad: bool = True
) -> Pass:
    """The pass on ``tokens`` (``variants`` stacked variant-major on the batch axis, each of ``len(tokens) //
    variants`` prompts), its outputs replaced by ``edit``; with ``grad`` every receiver's gradient."""
    model, comps, cfg = s.model, s.comps, s.model.cfg
    rec, targets, places = Recorder({}, set()), list[torch.Tensor](), list[_Place]()
    n_pos = tokens.shape[1]
    read = m.positions_at(n_pos)
    asked = sorted(set(read)) if read is not None else None
    pos = model.W_pos[:n_pos][None] if model.W_pos is not None else None
    embed = model.W_E[tokens]
    if pos is not None and cfg.positional_embedding_type == "standard":
        embed = embed + pos
    first = embed[:, :, None] if edit is None else edit(0, embed[:, :, None], None)
    writes = [Written(0, first.detach(), None)]
    resid = first[:, :, 0].detach().requires_grad_(grad)  # the root the gradients flow from (never asked for)
    resid_rows: list[int] | None = None
    b_O, W_O = model.weight("b_O"), model._buffers["W_O"]
    with torch.set_grad_enabled(grad):
        for group in comps.groups():
            layer = group.layer
            if group.kind == "attn":
                rows = asked if layer == cfg.n_layers - 1 else None
                stream = resid.detach()
                z, qkv = _heads(model, layer, resid, pos, rec, rows)
                targets += qkv
                places += [_Place(group, group.first, rows, stream if rows is None else stream[:, rows])]
                places += [_Place(group, group.first + i * cfg.n_heads, None, stream) for i in (1, 2)]
                heads = comps.head_sender(layer, 0)
                if edit is not None:
                    z = edit(heads, z, rows)
                writes.append(Written(heads, z.detach(), rows, layer))
                before = resid if rows is None else resid[:, rows]
                bias = None if b_O is None else b_O[layer]
                resid = before + affine(z.flatten(-2), W_O[layer].flatten(0, 1), bias)  # type: ignore[index]
                resid_rows = rows
            elif group.kind == "mlp":
                source = before if comps.parallel else resid
                x = source.view_as(source)
                targets.append(x)  # an alias the MLP alone reads: its gradient is the MLP's input's
                places.append(_Place(group, group.first, resid_rows, None))
                out = model._mlp(layer, x, rec)[:, :, None]
                if edit is not None:
                    out = edit(comps.mlp_sender(layer), out, resid_rows)
                writes.append(Written(comps.mlp_sender(layer), out.detach(), resid_rows))
                resid = resid + out[:, :, 0]
            else:
                x = resid.view_as(resid)
                targets.append(x)
                places.append(_Place(group, group.first, resid_rows, None))
                logits = _logits(model, x, read, resid_rows, m.columns, rec)
        n = tokens.shape[0] // variants
        values = metric_values(m, logits, variants, n)
        if not grad:
            return Pass(values.detach(), writes, [])
        grads = torch.autograd.grad(values.sum(), targets, allow_unused=True)
    blocks = []
    for place, target, g in zip(places, targets, grads, strict=True):
        blocks.append(_block(model, place, torch.zeros_like(target) if g is None else g, variants))
    return Pass(values.detach(), writes, blocks)


def _heads(
    model: CircuitModel, layer: int, resid: torch.Tensor, pos: torch.Tensor | None, rec: Recorder,
    rows: list[int] | None,
) -> tuple[torch.Tensor, list[torch.Tensor]]:  # fmt: skip
    """The heads' ``z`` ``[batch, pos or len(rows), n_heads, d_head]`` (queries at ``rows`` only) and each head's
    ``q, k, v`` before QK-norm and rotation (keys and values per query head): the gradients' targets."""
    cfg = model.cfg
    normed = model._normalize(resid, rec, "scale", layer)
    qk_in = normed + pos if cfg.positional_embedding_type == "shortformer" and pos is not None else normed
    q = model._project(qk_in if rows is None else qk_in[:, rows], layer, "Q")
    k, v = model._project(qk_in, layer, "K"), model._project(normed, layer, "V")
    if cfg.group_size > 1:  # one copy per query head: each query head's key and value inputs are its own receivers
        k, v = k.repeat_interleave(cfg.group_size, dim=2), v.repeat_interleave(cfg.group_size, dim=2)
    qn = model._qk_norm(q, layer, "q_norm")
    kn = _k_norm(model, layer, k)
    freq = model.rotary_freq(layer)
    if freq is not None:
        where = torch.arange(resid.shape[1], device=resid.device)
        qn = rotate(qn, freq, where if rows is None else where[rows], pos_dim=1)
        kn = rotate(kn, freq, where, pos_dim=1)
    return chunked_attention(qn, kn, v, cfg.scale, cfg.attn_softcap, cfg.window(layer), 0, rows), [q, k, v]


def _k_norm(model: CircuitModel, layer: int, k: torch.Tensor) -> torch.Tensor:
    """QK-norm of keys per query head (the group's weights repeated: the same values as the model's)."""
    weight = model.weight("k_norm")
    if weight is None:
        return k
    w = weight[layer]
    if w.shape[0] != k.shape[2]:
        w = w.repeat_interleave(model.cfg.group_size, dim=0)
    return rms_norm(k, model.cfg.ln_eps, w, model.cfg.head_width(layer))


def _logits(
    model: CircuitModel, resid: torch.Tensor, read: list[int] | None, rows: list[int] | None,
    columns: torch.Tensor | None, rec: Recorder,
) -> torch.Tensor:  # fmt: skip
    """The logits the metric reads (positions ``read``, token ids ``columns``) from the final stream at ``rows``."""
    if read is not None:
        where = {p: i for i, p in enumerate(rows)} if rows is not None else None
        at = read if where is None else [where[p] for p in read]
        if at != list(range(resid.shape[1])):
            resid = resid[:, at]
    final = model._normalize(resid, rec, "scale_final", None)
    if columns is not None:
        columns = columns.to(model.device)
    logits = final @ (model.W_U if columns is None else model.W_U[:, columns])
    b_U = model.weight("b_U")
    if b_U is not None:
        logits = logits + (b_U if columns is None else b_U[columns])
    return soft_cap(logits, model.cfg.final_softcap)


def _block(model: CircuitModel, place: _Place, g: torch.Tensor, variants: int) -> Block:
    """A block from its target's gradient: a head's q, k or v (``[batch, pos, heads, d_head]``) mapped back through
    its projection (``W ∂metric/∂q``, per query head through its group's weights), receiver-major; an MLP's or the
    logits' (``[batch, pos, d_model]``) as it is."""
    group = place.group
    b, p = g.shape[:2]
    n = b // variants
    if place.stream is None:
        return Block(group, place.first, 1, place.rows, g.view(1, variants, n, p, -1), None)
    W = model._buffers["W_" + "QKV"[(place.first - group.first) // model.cfg.n_heads]][group.layer]  # type: ignore[index]
    h, e = g.shape[2:]
    heads = g.permute(2, 0, 1, 3).reshape(W.shape[0], -1, e)  # [kv group, (query head in group, batch, pos), d_head]
    back = torch.bmm(heads, W.transpose(1, 2)).view(h, variants, n, p, -1)
    return Block(group, place.first, h, place.rows, back, place.stream.view(variants, n, p, -1))


def sender_major(model: CircuitModel, w: Written) -> torch.Tensor:
    """A sender group's writes ``[senders, batch, pos, d_model]`` (a layer's heads: ``z_h W_O[h]``, each head apart)."""
    if w.layer < 0:
        return w.value.permute(2, 0, 1, 3)
    z = w.value
    h = z.shape[2]
    per_head = torch.bmm(z.permute(2, 0, 1, 3).reshape(h, -1, z.shape[-1]), model._buffers["W_O"][w.layer])  # type: ignore[index]
    return per_head.view(h, *z.shape[:2], -1)


def norm_jvp(model: CircuitModel, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """``J_N(x) t`` for the model's input norm ``N`` (folded: centring and division by the per-token scale) at
    ``x`` ``[..., d_model]`` and tangents ``t`` ``[k, ..., d_model]`` (``J_N`` is symmetric, so this is also ``J_Nᵀ t``:
    ``(t − ȳ·(t·y)/d) / s`` with ``y = N(x)``, ``s`` the scale, after centring ``t`` for a LayerNorm)."""
    cfg = model.cfg
    if cfg.normalization == "none":
        return t.expand(t.shape[0], *x.shape)
    if cfg.normalization == "ln_pre":
        x = x - x.mean(-1, keepdim=True)
        t = t - t.mean(-1, keepdim=True)
    scale = (x.pow(2).mean(-1, keepdim=True) + cfg.ln_eps).sqrt()
    y = x / scale
    return (t - y * (t * y).mean(-1, keepdim=True)) / scale
