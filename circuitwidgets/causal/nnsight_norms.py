"""Frozen norm scales through nnsight: ``patch``/``ablate(..., freeze_norms=True)`` on ``cw.from_nnsight(lm)``.

The native engine's ``freeze_norms`` replays the base run's per-token scale of every
norm before a sublayer (``scale``, ``scale_mlp``) and of the final norm
(``scale_final``) in each patched run, so that the stream-to-output map is the base
run's. Here the base run's invoke reads each norm's input and keeps its scale (the
standard deviation under LayerNorm, the root mean square under RMSNorm); each
variant's norm then outputs its own input, centred under LayerNorm, divided by that
frozen scale and multiplied by the norm's weight (Gemma: ``1 + weight``), plus its bias,
all read where the trace runs. Sublayers' output norms (Gemma 2's) are recomputed, as
natively. Only scales computed inside the trace are used: nothing crosses the network.
"""

from __future__ import annotations

from typing import Any, cast

import torch

from circuitwidgets.sources.nnsight_handle import NNsightModel


def norm_eps(module: Any) -> float:
    """A norm's epsilon, read from its (local, possibly meta) module."""
    for name in ("eps", "variance_epsilon"):
        value = getattr(module, name, None)
        if isinstance(value, float):
            return value
    raise AssertionError(f"{type(module).__name__} has no eps")  # pragma: no cover - every covered norm has one


def norm_weight(norm: Any, kind: str) -> tuple[torch.Tensor, torch.Tensor | None]:
    """A norm's effective multiplier and bias (float64), read from its parameters where the trace runs."""
    weight = cast(torch.Tensor, norm.weight).double()
    if kind == "rms_offset":  # Gemma stores w of (1 + w)
        weight = weight + 1.0
    bias = getattr(norm, "bias", None) if kind == "layer" else None
    return weight, (cast(torch.Tensor, bias).double() if bias is not None else None)


def norm_scale(x: torch.Tensor, kind: str, eps: float) -> torch.Tensor:
    """A norm's per-token scale ``[..., 1]`` of its input ``x`` (float64): the std (LayerNorm) or the rms."""
    x = x.double()
    if kind == "layer":
        x = x - x.mean(-1, keepdim=True)
    return (x.pow(2).mean(-1, keepdim=True) + eps).sqrt()


#: The phase of a block a site is patched in: 0 before the attention's norm, 1 between the norms, 2 after the MLP's.
PHASE = {
    "resid_pre": 0,
    **dict.fromkeys(("q", "k", "v", "z", "result", "pattern", "attn_out"), 1),
    **dict.fromkeys(("resid_mid", "mlp_pre", "mlp_post", "mlp_out", "resid_post"), 2),
}


def norm(h: NNsightModel, which: str, layer: int | None) -> Any:
    """The envoy of the norm before block ``layer``'s attention (``"attn"``) or MLP (``"mlp"``), or the final one."""
    if which == "final":
        return h.final_norm()
    return h.module(layer or 0, h.layout.attn_norm if which == "attn" else h.layout.mlp_norm)


def eps(h: NNsightModel) -> float:
    """The norms' epsilon, read from the local (possibly meta) final norm."""
    return norm_eps(h.final_norm()._module)


Scales = dict[tuple[str, int | None], torch.Tensor]


def frozen_scales(h: NNsightModel, first: int, scales: Scales) -> None:
    """Inside the base run's invoke: each norm's per-token scale ``[batch, pos, 1]`` (float64) from block ``first``
    on, and the final norm's, into ``scales`` as the run reaches each (the variants' invoke reads them there)."""
    e = eps(h)
    for layer in range(first, h.n_layers):
        for which in ("attn", "mlp"):
            scales[which, layer] = norm_scale(norm(h, which, layer).input, h.layout.norm, e)
    scales["final", None] = norm_scale(h.final_norm().input, h.layout.norm, e)


def normed(h: NNsightModel, which: str, layer: int | None, x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """``x`` through the norm with its per-token ``scale`` frozen (``scale`` repeated over the variants)."""
    envoy = norm(h, which, layer)
    weight, bias = norm_weight(envoy, h.layout.norm)
    work = x.double()
    if h.layout.norm == "layer":
        work = work - work.mean(-1, keepdim=True)
    out = work / scale.repeat(x.shape[0] // scale.shape[0], 1, 1) * weight
    return (out + bias if bias is not None else out).to(x.dtype)


def replay(h: NNsightModel, which: str, layer: int | None, scales: Scales) -> None:
    """Inside a variants' invoke: the norm's output recomputed from its input with its frozen scale (looked up once
    the run is there, so after the base run's invoke has put it in ``scales``)."""
    envoy = norm(h, which, layer)
    x = envoy.input
    envoy.output = normed(h, which, layer, x, scales[which, layer])


__all__ = [
    "PHASE",
    "Scales",
    "eps",
    "frozen_scales",
    "norm",
    "norm_eps",
    "norm_scale",
    "norm_weight",
    "normed",
    "replay",
]
