"""The pieces of the canonical forward pass: norms, activations, masks, soft-caps.

Each is a small function of tensors so that the pass in
:meth:`circuitwidgets.CircuitModel.run_with_cache` reads as the architecture:
normalise, project, QK-norm, rotate, score, soft-cap, mask, mix, project out,
output-norm. Norm weights are never applied here: they are folded into the
weights around each norm (DESIGN.md §3a), so what is left is the per-token
scalar.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from circuitwidgets.errors import UnsupportedArchitectureError


def layer_norm_scale(x: torch.Tensor, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """``((x − mean) / s, s)`` with ``s = sqrt(var(x) + eps)`` over the last axis."""
    centred = x - x.mean(-1, keepdim=True)
    scale = (centred.pow(2).mean(-1, keepdim=True) + eps).sqrt()
    return centred / scale, scale


def rms_scale(x: torch.Tensor, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """``(x / s, s)`` with ``s = sqrt(mean(x²) + eps)`` over the last axis, computed in float32 at least.

    Hugging Face's RMS norms compute in float32 and cast back; so do we.
    """
    work = x if x.dtype == torch.float64 else x.float()
    scale = (work.pow(2).mean(-1, keepdim=True) + eps).sqrt()
    return (work / scale).to(x.dtype), scale.to(x.dtype)


def soft_cap(x: torch.Tensor, cap: float | None) -> torch.Tensor:
    """``cap · tanh(x / cap)`` (Gemma 2's soft-capping), or ``x`` when ``cap`` is ``None``."""
    return x if cap is None else cap * torch.tanh(x / cap)


def attention_mask(n_pos: int, window: int | None, device: torch.device) -> torch.Tensor:
    """``[dest, src]`` True where a query may attend: causal, and within ``window`` when given.

    A window ``w`` lets position ``i`` see keys ``i − w + 1 … i`` (Hugging Face's
    ``kv_idx > q_idx − sliding_window``).
    """
    dest = torch.arange(n_pos, device=device)[:, None]
    src = torch.arange(n_pos, device=device)[None, :]
    allowed = src <= dest
    if window is not None:
        allowed &= src > dest - window
    return allowed


def _gelu_new(x: torch.Tensor) -> torch.Tensor:
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


def activation(name: str, x: torch.Tensor) -> torch.Tensor:
    """The MLP nonlinearity ``name`` (see :data:`circuitwidgets.model.ACTIVATIONS`)."""
    if name in ("gelu_new", "gelu_fast"):
        return _gelu_new(x)
    if name == "gelu_tanh":
        return nn.functional.gelu(x, approximate="tanh")
    if name == "gelu":
        return nn.functional.gelu(x)
    if name == "relu":
        return torch.relu(x)
    if name == "silu":
        return nn.functional.silu(x)
    raise UnsupportedArchitectureError(f"cfg.act_fn: unsupported activation {name!r}")
