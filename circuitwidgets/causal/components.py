"""The residual stream at one position split into what each part of the model wrote (direct logit attribution's input).

The final residual stream is the embedding (and learned positions) plus every
layer's attention and MLP outputs (and Gemma 4's per-layer inputs). Where a
sublayer's output passes through its own norm (Gemma 2/3's sandwich norms), that
norm's per-token scale is frozen from the run, so each head's and each neuron's
share is linear: ``part / s · w``. Where the whole stream is multiplied by a
per-layer scalar (Gemma 4), a part written in layer ``l`` carries the product of
the scalars of layers ``l`` onward. The parts sum to the final stream exactly.
"""

from __future__ import annotations

import torch

from circuitwidgets.activations.writes import output_norm_factor, scalars_after, written_by_heads
from circuitwidgets.model import ActivationCache, CircuitModel


def component_labels(model: CircuitModel) -> list[str]:
    """Names of the components of ``by="component"``, in order (the unembedding's bias is apart, in ``rest``)."""
    names = ["embed"]
    if model.cfg.positional_embedding_type == "standard":
        names.append("pos_embed")
    for layer in range(model.cfg.n_layers):
        names.append(f"L{layer} attn")
        if model.cfg.has_mlp:
            names.append(f"L{layer} mlp")
        if model.cfg.d_per_layer:
            names.append(f"L{layer} per-layer input")
    return names


def components_at(model: CircuitModel, cache: ActivationCache, p: int, by: str) -> dict[str, torch.Tensor]:
    """The parts of the final stream at position ``p`` (float64): ``"values"`` split by ``by``, the rest by name.

    ``"values"``: ``[batch, C, d]`` (component), ``[batch, L, d]`` (layer),
    ``[batch, L, H, d]`` (head) or ``[batch, L, d_mlp, d]`` (neuron).
    """
    cfg = model.cfg
    L = cfg.n_layers
    first = scalars_after(model, 0)
    pieces: dict[str, torch.Tensor] = {"embed": cache["embed"][:, p].double() * first}
    if cfg.positional_embedding_type == "standard":
        pieces["pos_embed"] = cache["pos_embed"][:, p].double() * first
    heads: list[torch.Tensor] = []
    attn_bias: list[torch.Tensor] = []
    attn: list[torch.Tensor] = []
    mlp: list[torch.Tensor] = []
    mlp_bias: list[torch.Tensor] = []
    neurons: list[torch.Tensor] = []
    per_layer: list[torch.Tensor] = []
    b_O, b_out, W_out = model.weight("b_O"), model.weight("b_out"), model.weight("W_out")
    for layer in range(L):
        f = scalars_after(model, layer)
        result, bias = written_by_heads(model, cache["result", layer][:, p], layer)  # [batch, H, d], [batch, d]
        heads.append(result)
        attn_bias.append(bias)
        attn.append(result.sum(1) + bias)
        if cfg.has_mlp:
            out = cache["mlp_out", layer][:, p].double()
            mlp.append(out * f)
            if by == "neuron":
                assert W_out is not None
                post = cache["mlp_post", layer][:, p].double()  # [batch, d_mlp]
                each = post[:, :, None] * W_out[layer].double()[None]  # [batch, d_mlp, d]
                nb = b_out[layer].double().expand(post.shape[0], -1) if b_out is not None else torch.zeros_like(out)
                norm = output_norm_factor(model, each.sum(1) + nb, layer, "post_mlp_norm")
                if norm is not None:
                    each, nb = each * norm[:, None], nb * norm
                neurons.append(each * f)
                mlp_bias.append(nb * f)
        if cfg.d_per_layer:
            per_layer.append(cache["per_layer_out", layer][:, p].double() * f)
    named = dict(pieces)
    for layer in range(L):
        if by != "head":
            named[f"L{layer} attn"] = attn[layer]
        elif b_O is not None or model.weight("post_attn_norm") is not None:
            named[f"L{layer} attn bias"] = attn_bias[layer]
        if cfg.has_mlp:
            if by == "neuron":
                named[f"L{layer} mlp bias"] = mlp_bias[layer]
            else:
                named[f"L{layer} mlp"] = mlp[layer]
        if cfg.d_per_layer:
            named[f"L{layer} per-layer input"] = per_layer[layer]
    if by == "component":
        order = component_labels(model)
        return {"values": torch.stack([named[n] for n in order], dim=1)}
    if by == "layer":
        layers = []
        for layer in range(L):
            total = named.pop(f"L{layer} attn")
            if cfg.has_mlp:
                total = total + named.pop(f"L{layer} mlp")
            if cfg.d_per_layer:
                total = total + named.pop(f"L{layer} per-layer input")
            layers.append(total)
        return {"values": torch.stack(layers, dim=1), **named}
    if by == "head":
        return {"values": torch.stack(heads, dim=1), **named}
    return {"values": torch.stack(neurons, dim=1), **named}
