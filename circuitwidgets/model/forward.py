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
from collections.abc import Sequence

import torch
from torch import nn

from circuitwidgets.errors import (
    ArgumentTypeError,
    NonFiniteError,
    ShapeError,
    UnsupportedArchitectureError,
    WeightsAbsentError,
)
from circuitwidgets.model.config import ModelConfig


def check_weights_present(cfg: ModelConfig, name: str) -> None:
    """Refuse a forward pass of a model loaded without its MLP weights (``cfg.mlp_weights_absent``)."""
    if cfg.mlp_weights_absent:
        raise WeightsAbsentError(
            f"model: {name!r} was loaded without its MLP weights (from_hf(path, mlp=False)), so it has no forward pass "
            "(attention patterns, term importance and anything run on tokens need it); weight-space analyses work. "
            "To run it, load the model whole: circuitwidgets.from_hf(path)"
        )


def layer_norm_scale(x: torch.Tensor, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """``((x − mean) / s, s)`` with ``s = sqrt(var(x) + eps)`` over the last axis."""
    centred = x - x.mean(-1, keepdim=True)
    scale = (centred.pow(2).mean(-1, keepdim=True) + eps).sqrt()
    return centred / scale, scale


def rms_norm(x: torch.Tensor, eps: float, weight: torch.Tensor, width: int | None = None) -> torch.Tensor:
    """``x / s · weight`` (``s`` as in :func:`rms_scale`), the multiplication done before casting back.

    A norm kept in the forward pass (QK-norm, output norms): Gemma's and OLMo's
    multiply by their weight in float32 and round once, and so do we.
    """
    work = x if x.dtype == torch.float64 else x.float()
    return (rms_scale(work, eps, width)[0] * weight.to(work.dtype)).to(x.dtype)


def rms_scale(x: torch.Tensor, eps: float, width: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``(x / s, s)`` with ``s = sqrt(Σx² / width + eps)`` over the last axis, computed in float32 at least.

    ``width`` defaults to the axis's length (the mean square); a head padded
    with zero columns (``cfg.head_dims``) passes its own width, so its norm is
    the unpadded head's. Hugging Face's RMS norms compute in float32 and cast
    back; so do we.
    """
    work = x if x.dtype == torch.float64 else x.float()
    squares = work.pow(2)
    mean = (
        squares.mean(-1, keepdim=True)
        if width is None or width == x.shape[-1]
        else squares.sum(-1, keepdim=True) / width
    )
    scale = (mean + eps).sqrt()
    return (work / scale).to(x.dtype), scale.to(x.dtype)


def soft_cap(x: torch.Tensor, cap: float | None) -> torch.Tensor:
    """``cap · tanh(x / cap)`` (Gemma 2's soft-capping), or ``x`` when ``cap`` is ``None``."""
    return x if cap is None else cap * torch.tanh(x / cap)


def attention_mask(n_pos: int, window: int | None, device: torch.device, offset: int = 0) -> torch.Tensor:
    """``[dest, src]`` True where a query may attend: causal, and within ``window`` when given.

    A window ``w`` lets position ``i`` see keys ``i − w + 1 … i`` (Hugging Face's
    ``kv_idx > q_idx − sliding_window``). ``offset``: the queries are positions
    ``offset … offset + n_pos − 1`` of ``offset + n_pos`` keys (a suffix-only pass).
    """
    dest = torch.arange(offset, offset + n_pos, device=device)[:, None]
    src = torch.arange(offset + n_pos, device=device)[None, :]
    allowed = src <= dest
    if window is not None:
        allowed &= src > dest - window
    return allowed


#: Scores held at once by :func:`chunked_attention` (float32 bytes of one chunk of query rows).
ATTENTION_CHUNK_BYTES = 64 * 2**20


def chunked_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    scale: float,
    softcap: float | None,
    window: int | None,
    offset: int = 0,
    dest: Sequence[int] | None = None,
) -> torch.Tensor:
    """``z = softmax(mask(softcap(q kᵀ / scale))) v`` for ``q, k, v [batch, pos, heads, d_head]``, rows in chunks.

    The same weights as the dense pass (causal, ``window`` as in :func:`attention_mask`), but
    only a chunk of query rows' scores exists at once, and a chunk skips the columns its
    mask hides: ``O(chunk · pos)`` memory instead of ``O(pos²)``, so that long texts can be
    run when no pattern is kept. Cost: ``O(batch · heads · pos² · d_head)`` time (about half).
    ``offset``: ``q`` holds positions ``offset …`` only, ``k`` and ``v`` every position from 0.
    ``dest``: the positions ``q``'s rows hold, ascending (default ``offset …``), when a pass asks for a few only.
    """
    b, p, h, _ = q.shape
    at = list(range(offset, offset + p)) if dest is None else list(dest)
    rows = max(1, ATTENTION_CHUNK_BYTES // (4 * b * h * k.shape[1]))
    z = torch.empty(b, p, h, v.shape[-1], dtype=v.dtype, device=v.device)
    for r0 in range(0, p, rows):
        r1 = min(p, r0 + rows)
        first, last = at[r0], at[r1 - 1]
        c0 = 0 if window is None else max(0, first - window + 1)
        keys = k[:, c0 : last + 1]
        causal = window is None and c0 == 0 and at[r0:r1] == list(range(last + 1))  # every key up to each row
        dest_at = torch.tensor(at[r0:r1], device=q.device)[:, None]
        src = torch.arange(c0, last + 1, device=q.device)[None, :]
        allowed = src <= dest_at
        if window is not None:
            allowed &= src > dest_at - window
        if softcap is None:  # torch's fused kernel: the same softmax, about twice as fast at a pass's shapes
            z[:, r0:r1] = sdpa(q[:, r0:r1], keys, v[:, c0 : last + 1], scale, None if causal else allowed)
            continue
        scores = soft_cap(torch.einsum("bqhe,bkhe->bhqk", q[:, r0:r1], keys) / scale, softcap)
        weights = scores.masked_fill_(~allowed, float("-inf")).softmax(dim=-1)
        z[:, r0:r1] = torch.einsum("bhqk,bkhe->bqhe", weights, v[:, c0 : last + 1])
    return z


def sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float, allowed: torch.Tensor | None) -> torch.Tensor:
    """``softmax(q kᵀ / scale) v`` for ``[batch, pos, heads, d_head]`` tensors by ``scaled_dot_product_attention``;
    ``allowed`` ``[dest, src]`` the keys each query sees, ``None`` for the causal mask (as many queries as keys)."""
    out = nn.functional.scaled_dot_product_attention(
        q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
        attn_mask=allowed, is_causal=allowed is None, scale=1.0 / scale,
    )  # fmt: skip
    return out.transpose(1, 2)


def affine(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """``x @ weight + bias`` over the last axis of ``x``, the bias added inside the product's kernel (``addmm``)."""
    flat = x.reshape(-1, x.shape[-1])
    out = flat @ weight if bias is None else torch.addmm(bias, flat, weight)
    return out.view(*x.shape[:-1], weight.shape[-1])


def _gelu_new(x: torch.Tensor) -> torch.Tensor:
    """GPT-2's ``gelu_new`` written out (the definition :func:`activation` computes in one kernel)."""
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


#: ``2 √(2/π)`` and ``2 √(2/π) · 0.044715``: tanh GELU's inner polynomial, doubled (:func:`gelu_tanh`).
_GELU_LINEAR = 2.0 * math.sqrt(2.0 / math.pi)
_GELU_CUBIC = _GELU_LINEAR * 0.044715


#: Most elements :func:`gelu_tanh` computes in its sigmoid form: its four passes over memory lose to torch's one
#: fused kernel once the tensor outgrows the caches (this CPU, medians of 15: 400 × 1,024 0.57 ms against 0.84,
#: 1,600 × 1,024 2.25 against 3.67, 3,200 × 1,024 8.28 against 6.78, 12,800 × 1,024 65.5 against 61.2).
GELU_SIGMOID_MOST = 2**21


def gelu_tanh(x: torch.Tensor) -> torch.Tensor:
    """GPT-2's ``gelu_new``, ``½ x (1 + tanh u)`` with ``u = √(2/π)(x + 0.044715 x³)``, computed as ``x σ(2u)``.

    The same function (``½(1 + tanh u) = σ(2u)``), equal to :func:`_gelu_new` to rounding (float64: 2e-15); on a
    CPU torch's tanh kernel is the slow part of its fused tanh GELU, and the sigmoid form is about half its time at
    a sweep's sizes (one product and three in-place passes over ``[rows, d_mlp]``). Larger tensors
    (:data:`GELU_SIGMOID_MOST`), other devices (measured on the CPU only; a GPU's tanh is cheap), other dtypes, and
    tensors autograd tracks (in-place steps would break its graph) take torch's fused kernel.
    """
    fused = x.device.type != "cpu" or x.dtype not in (torch.float32, torch.float64) or x.numel() > GELU_SIGMOID_MOST
    if fused or (x.requires_grad and torch.is_grad_enabled()):
        return nn.functional.gelu(x, approximate="tanh")
    u = torch.addcmul(x.new_tensor(_GELU_LINEAR), x, x, value=_GELU_CUBIC).mul_(x)  # 2u
    return u.sigmoid_().mul_(x)


def solu(x: torch.Tensor) -> torch.Tensor:
    """SoLU without its LayerNorm: ``x · softmax(x)`` over the last dimension (the neurons)."""
    return x * x.softmax(dim=-1)


def activation(name: str, x: torch.Tensor) -> torch.Tensor:
    """The MLP nonlinearity ``name`` (see :data:`circuitwidgets.model.ACTIVATIONS`).

    ``gelu_new`` (and ``gelu_fast``) is the tanh GELU (:func:`gelu_tanh`), equal to the written-out
    :func:`_gelu_new` to rounding, where the written-out form makes seven passes over ``[batch, pos, d_mlp]``.
    """
    if name in ("gelu_new", "gelu_fast", "gelu_tanh"):
        return gelu_tanh(x)
    if name == "gelu":
        return nn.functional.gelu(x)
    if name == "relu":
        return torch.relu(x)
    if name == "silu":
        return nn.functional.silu(x)
    raise UnsupportedArchitectureError(f"cfg.act_fn: unsupported activation {name!r}")


def forward_bytes(cfg: ModelConfig, batch: int, n_pos: int, names: set[str] | None, element_size: int) -> int:
    """Estimated peak bytes of a forward pass on ``[batch, n_pos]`` tokens keeping ``names`` (all when ``None``).

    Counts the logits, the kept activations of every layer and one layer's
    working tensors (scores, pattern, q/k/v/z, head results, MLP hidden), the
    per-layer inputs and the keys and values kept for layers that share them,
    in ``element_size`` bytes. A lower bound on the true peak, within a small factor. When
    neither ``attn_scores`` nor ``pattern`` is kept, attention runs in chunks of query rows
    (:func:`chunked_attention`) and its working scores are one chunk's.
    """
    b, p, H, dh, d = batch, n_pos, cfg.n_heads, cfg.d_head, cfg.d_model
    dense = names is None or "attn_scores" in names or "pattern" in names
    square = b * H * p * p if dense else min(b * H * p * p, ATTENTION_CHUNK_BYTES // 4 + b * H * p)
    P = cfg.d_per_layer or 0
    per_layer = {
        "q": b * p * H * dh,
        "k": b * p * H * dh,
        "v": b * p * H * dh,
        "z": b * p * H * dh,
        "attn_scores": square,
        "pattern": square,
        "result": b * p * H * d,
        "scale": b * p,
        "scale_mlp": b * p if cfg.has_mlp else 0,
        "scale_attn_post": b * p if cfg.post_norm or cfg.normalization == "rms_post" else 0,
        "scale_mlp_post": b * p if cfg.has_mlp and (cfg.post_norm or cfg.normalization == "rms_post") else 0,
        "mlp_pre": b * p * (cfg.d_mlp or 0),
        "mlp_post": b * p * (cfg.d_mlp or 0),
        "mlp_mid": b * p * (cfg.d_mlp or 0) if cfg.act_fn == "solu_ln" else 0,
        "attn_out": b * p * d,
        "resid_pre": b * p * d,
        "resid_post": b * p * d,
        "resid_mid": b * p * d if cfg.has_mlp else 0,
        "mlp_out": b * p * d if cfg.has_mlp else 0,
        "per_layer_input": b * p * P,
        "per_layer_out": b * p * d if P else 0,
    }
    once = {"embed": b * p * d, "pos_embed": b * p * d, "resid_final": b * p * d, "scale_final": b * p}
    kept = sum(v * cfg.n_layers for k, v in per_layer.items() if names is None or k in names)
    kept += sum(v for k, v in once.items() if names is None or k in names)
    working = sum(per_layer.values()) + b * p * (cfg.d_mlp or 0) * (2 if cfg.gated_mlp else 1) + 2 * b * p * d
    shared = len({source for layer, source in enumerate(cfg.kv_sources or ()) if source != layer})
    working += b * p * cfg.n_layers * P + 2 * shared * b * p * cfg.kv_heads * dh
    logits = b * p * cfg.d_vocab
    return int((kept + working + logits) * element_size)


def check_overrides(
    arg: str, values: Sequence[torch.Tensor | None] | None, shape: tuple[int, ...], n_layers: int
) -> None:
    """Check per-layer overrides of a forward pass (frozen patterns, head results): one finite tensor of ``shape`` or ``None`` per layer."""
    if values is None:
        return
    if isinstance(values, torch.Tensor) or not isinstance(values, Sequence):
        raise ArgumentTypeError(
            f"{arg}: expected a list with one tensor (or None) per layer, got {type(values).__name__}"
        )
    if len(values) != n_layers:
        raise ShapeError(f"{arg}: expected one entry per layer ({n_layers}), got {len(values)}")
    for layer, value in enumerate(values):
        if value is None:
            continue
        if not isinstance(value, torch.Tensor) or not value.is_floating_point():
            raise ArgumentTypeError(
                f"{arg}[{layer}]: expected a floating-point torch.Tensor or None, got {type(value).__name__}"
            )
        if tuple(value.shape) != shape:
            raise ShapeError(f"{arg}[{layer}]: expected shape {shape}, got {tuple(value.shape)}")
        if not bool(torch.isfinite(value).all()):
            raise NonFiniteError(f"{arg}[{layer}]: expected finite values, got NaN or infinite entries")
