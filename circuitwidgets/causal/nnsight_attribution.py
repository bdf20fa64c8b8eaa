"""Direct logit attribution through nnsight (``cw.from_nnsight(lm, remote=...)``): one trace, only projections back.

The same numbers as :func:`circuitwidgets.causal.logit_attribution` on the native
engine: the final norm's per-token scale is frozen from the run (and its centring
applied under LayerNorm), so the map from the residual stream to the answer's
logit is linear and each part's share is a dot product. The trace reads, at the
one position asked, each part of the final stream (the embedding, each layer's
attention and MLP outputs; per head the ``o_proj`` input, per neuron the down
projection's input), and projects them there onto the answer's direction: the
unembedding rows and the final norm's weight and bias are read from the model's
own parameters where the trace runs (on NDIF for ``remote=True``), pulled back
through ``W_O`` (or ``W_out``) and any output norm (Gemma 2, its scale frozen too).
Only ``[batch, parts]`` numbers come back, never a ``[pos, d_model]`` activation.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal, cast

import numpy as np
import torch

from circuitwidgets.causal.answers import Answers, answer_logit, attribution_dims, check_attribution, parse_answers
from circuitwidgets.causal.engine import normalise, same_shape
from circuitwidgets.causal.metrics import as_metric, scalar
from circuitwidgets.causal.nnsight_backend import _labels, _prompts, _reduce
from circuitwidgets.causal.nnsight_norms import norm_eps, norm_scale, norm_weight
from circuitwidgets.causal.nnsight_sites import check_cells, shaped, with_grad
from circuitwidgets.causal.result import Sweep
from circuitwidgets.causal.sites import SITE_AXES
from circuitwidgets.sources.nnsight_handle import NNsightModel


def _pull(weight: torch.Tensor, u: torch.Tensor, conv1d: bool) -> torch.Tensor:
    """``u [batch, d_out]`` pulled back through a projection's weight: ``v`` with ``proj(x) · u = x · v + bias · u``."""
    w = weight.double()
    return u @ (w.T if conv1d else w)


def _rest_names(h: NNsightModel, by: str, attn_bias: bool) -> list[str]:
    """Names of the parts ``values`` leaves out, in the native engine's order (before the unembedding's bias)."""
    names = ["embed"] + (["pos_embed"] if h.layout.pos_embed else [])
    if by in ("component", "layer"):
        return [] if by == "component" else names
    for layer in range(h.n_layers):
        if by == "neuron":
            names += [f"L{layer} attn", f"L{layer} mlp bias"]
        else:
            names += [f"L{layer} attn bias"] if attn_bias else []
            names.append(f"L{layer} mlp")
    return names


def component_labels(h: NNsightModel) -> list[str]:
    """The components of ``by="component"``, in order."""
    names = ["embed"] + (["pos_embed"] if h.layout.pos_embed else [])
    for layer in range(h.n_layers):
        names += [f"L{layer} attn", f"L{layer} mlp"]
    return names


def _read_parts(h: NNsightModel, p: int, by: str) -> dict[str, Any]:
    """Inside a trace, in the forward order nnsight serves them: each part of the stream at position ``p``."""
    from circuitwidgets.causal.nnsight_sites import read

    lay = h.layout
    got: dict[str, Any] = {}
    pos_embed = None
    if lay.pos_embed is not None:
        pos_embed = h.walk(lay.pos_embed).output[:, p]
        got["pos_embed"] = pos_embed
    stream = h.block(0).input[:, p]
    got["embed"] = stream - pos_embed if pos_embed is not None else stream
    for layer in range(h.n_layers):
        if by == "head":
            got[f"z{layer}"] = h.module(layer, f"{lay.attn}.{lay.o_proj}").input[:, p]
            if lay.attn_out_norm is not None:
                got[f"attn_x{layer}"] = h.module(layer, lay.attn).output[0][:, p]
        got[f"attn{layer}"] = read(h, layer, "attn_out")[:, p]
        if by == "neuron":
            got[f"post{layer}"] = h.module(layer, f"{lay.mlp}.{lay.down}").input[:, p]
            if lay.mlp_out_norm is not None:
                got[f"mlp_x{layer}"] = h.module(layer, lay.mlp).output[:, p]
        got[f"mlp{layer}"] = read(h, layer, "mlp_out")[:, p]
    got["final"] = h.final_norm().input[:, p]
    got["logits"] = h.lm.output.logits[:, p]
    return got


def _direction(h: NNsightModel, answers: Answers, batch: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``([batch, d_model] direction read from the normalised stream, [batch] bias)``, from the parameters."""
    if answers.direction is not None:
        d = answers.direction.double()[None].expand(batch, -1)
        return d, torch.zeros(batch, dtype=torch.float64, device=d.device)
    head = h.lm.lm_head
    W = cast(torch.Tensor, head.weight)
    assert answers.correct is not None
    c = answers.correct.to(W.device)
    rows = W[c].double()
    b = getattr(head, "bias", None)
    bias = b[c].double() if b is not None else torch.zeros(batch, dtype=torch.float64, device=W.device)
    if answers.wrong is not None:
        w = answers.wrong.to(W.device)
        rows = rows - W[w].double()
        if b is not None:
            bias = bias - b[w].double()
    weight, shift = norm_weight(h.final_norm(), h.layout.norm)
    if shift is not None:
        bias = bias + rows @ shift
    return rows * weight, bias


def _output_norm(h: NNsightModel, layer: int, path: str | None, x: Any, u: torch.Tensor, eps: float) -> torch.Tensor:
    """``u`` read through a sublayer's output norm (Gemma 2) whose input at the position is ``x``, its scale frozen."""
    if path is None:
        return u
    weight, _ = norm_weight(h.module(layer, path), h.layout.norm)
    return u * weight / norm_scale(x, "rms", eps)


def _project(h: NNsightModel, got: dict[str, Any], answers: Answers, by: str, eps: dict[str, float]) -> dict[str, Any]:
    """Inside the trace: every part's share of the logit ``[batch]`` (``values``: ``[batch, *by's shape]``)."""
    lay = h.layout
    final = got["final"].double()
    batch = final.shape[0]
    d, bias = _direction(h, answers, batch)
    u = (d - d.mean(-1, keepdim=True) if lay.norm == "layer" else d) / norm_scale(final, lay.norm, eps["final"])

    def share(x: Any) -> torch.Tensor:
        return cast(torch.Tensor, (x.double() * u).sum(-1))

    named: dict[str, torch.Tensor] = {"embed": share(got["embed"])}
    if lay.pos_embed is not None:
        named["pos_embed"] = share(got["pos_embed"].expand(batch, -1))
    heads, neurons, per_layer = [], [], []
    for layer in range(h.n_layers):
        attn, mlp = share(got[f"attn{layer}"]), share(got[f"mlp{layer}"])
        per_layer.append(attn + mlp)
        if by == "head":
            o_proj = h.module(layer, f"{lay.attn}.{lay.o_proj}")
            ua = _output_norm(h, layer, lay.attn_out_norm, got.get(f"attn_x{layer}"), u, eps["out"])
            z = got[f"z{layer}"].double().view(batch, h.n_heads, h.d_head)
            heads.append((z * _pull(o_proj.weight, ua, lay.conv1d).view(batch, h.n_heads, h.d_head)).sum(-1))
            if o_proj.bias is not None or lay.attn_out_norm is not None:
                named[f"L{layer} attn bias"] = (
                    (o_proj.bias.double() * ua).sum(-1) if o_proj.bias is not None else torch.zeros_like(attn)
                )
        else:
            named[f"L{layer} attn"] = attn
        if by == "neuron":
            down = h.module(layer, f"{lay.mlp}.{lay.down}")
            um = _output_norm(h, layer, lay.mlp_out_norm, got.get(f"mlp_x{layer}"), u, eps["out"])
            neurons.append(got[f"post{layer}"].double() * _pull(down.weight, um, lay.conv1d))
            named[f"L{layer} mlp bias"] = (
                (down.bias.double() * um).sum(-1) if down.bias is not None else torch.zeros_like(mlp)
            )
        else:
            named[f"L{layer} mlp"] = mlp
    if by == "component":
        values = torch.stack([named.pop(n) for n in component_labels(h)], dim=1)
    elif by == "layer":
        values = torch.stack(per_layer, dim=1)
        for layer in range(h.n_layers):
            named.pop(f"L{layer} attn"), named.pop(f"L{layer} mlp")
    else:
        values = torch.stack(heads if by == "head" else neurons, dim=1)
    logit = share(final) + bias
    model_logit = answer_logit(got["logits"].double(), answers).to(logit)
    return {"values": values, "rest": [*named.values(), bias, logit, model_logit]}


def _parsed_answers(h: NNsightModel, answers: object, batch: int) -> Answers:
    """``answers`` checked, strings encoded with the handle's tokenizer. A function of its own because a trace
    sends its frame's locals to the server: a tokenizer there would be pickled with it (and a local class fails)."""
    tokenizer = getattr(h.lm, "tokenizer", None)
    encode = (lambda text: list(tokenizer.encode(text, add_special_tokens=False))) if tokenizer is not None else None
    return parse_answers(answers, batch, h.d_vocab, h.d_model, encode)


def logit_attribution(
    h: NNsightModel, tokens: object, answers: object, by: str = "component", pos: int = -1,
    *, reduce: Literal["mean", "none"] = "mean",
) -> Sweep:  # fmt: skip
    """:func:`circuitwidgets.causal.logit_attribution` through nnsight: one trace; what comes back is ``values``
    (``[parts]``, or ``[batch, parts]`` with ``reduce="none"``) and ``[batch]`` per part left out, the logit and the
    model's logit, in float64."""
    import nnsight

    t = h.check_tokens(tokens)
    check_attribution(by, reduce, pos, t.shape[1])
    batch, n_pos = t.shape
    p = pos % n_pos
    parsed = _parsed_answers(h, answers, batch)
    lay = h.layout
    first = h.module(0, f"{lay.attn}.{lay.o_proj}")
    rest = _rest_names(h, by, first.bias is not None or lay.attn_out_norm is not None)
    out_norm = lay.attn_out_norm or lay.mlp_out_norm
    eps = {
        "final": norm_eps(h.final_norm()._module),
        "out": norm_eps(h.module(0, out_norm)._module) if out_norm else 0.0,
    }
    with h.remote_errors("logit_attribution"), h.trace(t):
        got = _read_parts(h, p, by)
        shares = _project(h, got, parsed, by, eps)
        values = shares["values"]
        saved_values = nnsight.save(values.mean(0) if reduce == "mean" else values)
        saved_rest = nnsight.save(torch.stack(shares["rest"]))
    others = saved_rest.detach().cpu().double()
    if reduce == "mean":
        others = others.mean(1)
    table = {name: others[i].numpy() for i, name in enumerate(rest)}
    table["unembed bias"] = others[len(rest)].numpy()
    dims, labels = attribution_dims(by, reduce, component_labels(h), (h.n_layers, h.n_heads, h.d_mlp), batch)
    convention = "final norm's scale frozen from the run" + (", centring applied" if lay.norm == "layer" else "")
    return Sweep(
        saved_values.detach().cpu().double().numpy(), dims, labels, "direct logit attribution",
        parsed.name, site=None, convention=convention, model=h.name,
        prompts={"tokens": [h.to_str_tokens(row) for row in t]},
        extra={
            "rest": table, "logit": others[len(rest) + 1].numpy(), "pos": pos,
            "softcap": getattr(h.lm._module.config, "final_logit_softcapping", None),
            "model_logits": others[len(rest) + 2].numpy(),
        },
    )  # fmt: skip


def attribution_patch(
    h: NNsightModel, clean: object, corrupted: object, metric: object, site: str, by: Sequence[str]
) -> Sweep:
    """:func:`circuitwidgets.causal.attribution_patch` through nnsight: one trace of the clean and corrupted prompts
    side by side on the batch axis, the metric of the corrupted half back-propagated to the site (and no further:
    no weight gradients), and ``(clean − corrupted) · gradient`` summed to the cells there; ``[cells]`` come back."""
    import nnsight

    a, b = same_shape(h.check_tokens(clean, "clean"), h.check_tokens(corrupted, "corrupted"))
    cells = check_cells(h, site, by, a.shape[1])
    m = as_metric(metric, h.d_vocab)
    batch = a.shape[0]
    axes = SITE_AXES[site]
    rest = [d for d in cells.by if d != "layer"]
    keep = [1 + axes.index(d) for d in rest]
    order = sorted(keep)
    # the metric of the corrupted half is back-propagated with inputs= the first layer's site, so that no weight's
    # .grad is filled (here or on a server); gradients are asked for last layer first, autograd's order. (No comment
    # inside the trace: nnsight's remote path re-reads the block's lines to find the backward's with block.)
    with h.remote_errors(f"attribution_patch {site}"), h.trace(torch.cat([a, b])):
        taken: list[Any] = [with_grad(h, layer, site) for layer in range(h.n_layers)]
        xs: list[Any] = [x for x, _ in taken]
        both: Any = _reduce(m, h.lm.output.logits, 2, batch)
        values = nnsight.save(both.detach())
        with both[1].backward(inputs=[xs[0]]):
            grads = {layer: xs[layer].grad for layer in reversed(range(h.n_layers))}
            per_layer = []
            for layer in range(h.n_layers):
                x = taken[layer][1].detach().double()
                product = (x[:batch] - x[batch:]) * shaped(h, site, grads[layer][batch:]).double()
                summed = product.sum(dim=[i for i in range(product.ndim) if i not in keep])
                per_layer.append(summed.permute([order.index(1 + axes.index(d)) for d in rest]) if rest else summed)
            estimate = nnsight.save(torch.stack(per_layer))
    clean_value = float(scalar(values[0], m.name))
    corrupted_value = float(scalar(values[1], m.name))
    out = np.moveaxis(estimate.detach().cpu().numpy(), 0, cells.by.index("layer"))
    # an estimated change of the metric: normalised, it is divided by clean − corrupted (not shifted), as natively
    _, c, k = normalise(out, m, clean_value, corrupted_value)
    if m.normalise:
        out = out / (c - k)
    return Sweep(
        out, cells.by, _labels(h, cells, a), "attribution patching", m.name, c, k, site,
        "gradient at the corrupted run, norms recomputed", h.name, _prompts(h, clean=a, corrupted=b),
    )  # fmt: skip


__all__: Sequence[str] = ["attribution_patch", "component_labels", "logit_attribution"]
