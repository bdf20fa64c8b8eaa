"""What a head writes into the final residual stream, and how the unembedding reads it: the exact, linear read-out
of direct logit attribution.

A head's output ``result = z W_O`` reaches the final stream changed by what comes
after it: its layer's output norm (Gemma 2/3's sandwich norm; its per-token scale
frozen from the run, so the map stays linear) and the per-layer scalars of its
layer and every later one (Gemma 4). The unembedding then reads the stream
through the final norm: centred (LayerNorm) and divided by the run's per-token
scale. With both, each head's share sums with the other parts to the logit.
"""

from __future__ import annotations

import torch

from circuitwidgets.model import CircuitModel


def scalars_after(model: CircuitModel, layer: int) -> float:
    """``∏_{m ≥ layer} layer_scalar_m`` (1 without per-layer scalars); ``layer = 0`` is also the embedding's."""
    scalar = model.weight("layer_scalar")
    if scalar is None:
        return 1.0
    return float(scalar[layer:].double().prod())


def output_norm_factor(model: CircuitModel, written: torch.Tensor, layer: int, multiplier: str) -> torch.Tensor | None:
    """``w / s`` ``[..., d_model]`` of a sublayer's output norm, ``s`` the rms of ``written`` (what it normalised);
    ``None`` when the layer has no such norm."""
    weight = model.weight(multiplier)
    if weight is None:
        return None
    s = (written.double().pow(2).mean(-1, keepdim=True) + model.cfg.ln_eps).sqrt()
    return weight[layer].double() / s


def written_by_heads(model: CircuitModel, result: torch.Tensor, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(heads [..., H, d_model], bias [..., d_model])``: what each head of ``layer`` and its ``b_O`` add to the final
    stream (float64), from ``result [..., H, d_model]`` (``cache["result", layer]``)."""
    result = result.double()
    b_O = model.weight("b_O")
    bias = (
        b_O[layer].double().expand((*result.shape[:-2], result.shape[-1]))
        if b_O is not None
        else result.new_zeros((*result.shape[:-2], result.shape[-1]))
    )
    norm = output_norm_factor(model, result.sum(-2) + bias, layer, "post_attn_norm")
    if norm is not None:
        result, bias = result * norm.unsqueeze(-2), bias * norm
    f = scalars_after(model, layer)
    return result * f, bias * f


def final_read(model: CircuitModel, x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """``x [..., d_model]`` as the unembedding reads it: centred under LayerNorm and divided by the final norm's
    per-token ``scale [..., 1]`` (``cache["scale_final"]``), float64."""
    x = x.double()
    if model.cfg.normalization == "ln_pre":
        x = x - x.mean(-1, keepdim=True)
    return x / scale.double()
