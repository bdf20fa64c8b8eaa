"""The canonical tensors of a :class:`~circuitwidgets.CircuitModel`: names, shapes, validation.

Row-vector convention (DESIGN.md §3). ``H`` query heads, ``G`` key/value heads
(``G = H`` without grouped-query attention), ``r = rotary_dim``:

``W_E [d_vocab, d_model]``, ``W_pos [n_ctx, d_model]``, ``W_Q [L, H, d_model, d_head]``,
``W_K, W_V [L, G, d_model, d_head]``, ``W_O [L, H, d_head, d_model]``, ``W_U
[d_model, d_vocab]``; optional biases ``b_Q [L, H, d_head]``, ``b_K, b_V [L, G,
d_head]``, ``b_O [L, d_model]``, ``b_U [d_vocab]``; MLPs ``W_in [L, d_model,
d_mlp]``, ``W_gate`` (gated MLPs) likewise, ``W_out [L, d_mlp, d_model]`` and
biases ``b_in, b_gate [L, d_mlp]``, ``b_out [L, d_model]``; QK-norm multipliers
``q_norm [L, H, d_head]``, ``k_norm [L, G, d_head]``; output-norm multipliers
``post_attn_norm, post_mlp_norm [L, d_model]``; rotary inverse frequencies
``rotary_freq [L, r / 2]`` (float32 or float64 whatever the weights' dtype:
angles are computed in float32, as the source libraries do).
"""

from __future__ import annotations

import torch

from circuitwidgets.errors import ArgumentError, ArgumentTypeError, NonFiniteError, ShapeError
from circuitwidgets.model.config import ModelConfig

REQUIRED_WEIGHTS = ("W_E", "W_Q", "W_K", "W_V", "W_O", "W_U")
#: Tensors kept in their own dtype (float32 or float64) whatever the weights' dtype.
FREQUENCY_WEIGHTS = ("rotary_freq",)


#: Elements checked at a time by :func:`count_non_finite` (bounds its scratch memory).
_FINITE_BLOCK = 2**22


def count_non_finite(tensor: torch.Tensor) -> int:
    """NaN and infinite entries of ``tensor``, counted in blocks.

    ``torch.isfinite`` on a whole 128K–256K-vocabulary embedding would allocate
    a mask (and, for half precision, an upcast copy) as large as the tensor.
    """
    flat = tensor.detach().reshape(-1)
    bad = 0
    for start in range(0, flat.numel(), _FINITE_BLOCK):
        block = flat[start : start + _FINITE_BLOCK]
        bad += int(block.numel() - torch.isfinite(block).sum())
    return bad


def expected_shapes(cfg: ModelConfig) -> dict[str, tuple[int, ...]]:
    """Shape of every tensor a model with ``cfg`` may hold."""
    L, H, G, d, dh, V = cfg.n_layers, cfg.n_heads, cfg.kv_heads, cfg.d_model, cfg.d_head, cfg.d_vocab
    shapes: dict[str, tuple[int, ...]] = {
        "W_E": (V, d), "W_pos": (cfg.n_ctx, d),
        "W_Q": (L, H, d, dh), "W_K": (L, G, d, dh), "W_V": (L, G, d, dh), "W_O": (L, H, dh, d),
        "b_Q": (L, H, dh), "b_K": (L, G, dh), "b_V": (L, G, dh), "b_O": (L, d),
        "W_U": (d, V), "b_U": (V,),
        "q_norm": (L, H, dh), "k_norm": (L, G, dh),
        "post_attn_norm": (L, d),
        "rotary_freq": (L, (cfg.rotary_dim or dh) // 2),
    }
    if cfg.has_mlp:
        assert cfg.d_mlp is not None
        shapes |= {"W_in": (L, d, cfg.d_mlp), "b_in": (L, cfg.d_mlp), "W_out": (L, cfg.d_mlp, d), "b_out": (L, d),
                   "post_mlp_norm": (L, d)}
        if cfg.gated_mlp:
            shapes |= {"W_gate": (L, d, cfg.d_mlp), "b_gate": (L, cfg.d_mlp)}
    return shapes


def required_names(cfg: ModelConfig) -> tuple[str, ...]:
    """Tensors a model with ``cfg`` cannot do without."""
    names = list(REQUIRED_WEIGHTS)
    if cfg.positional_embedding_type in ("shortformer", "standard"):
        names.append("W_pos")
    if cfg.has_mlp:
        names += ["W_in", "W_out"] + (["W_gate"] if cfg.gated_mlp else [])
    if cfg.qk_norm is not None:
        names += ["q_norm", "k_norm"]
    if cfg.normalization == "rms_post" or cfg.post_norm:
        names += ["post_attn_norm"] + (["post_mlp_norm"] if cfg.has_mlp else [])
    return tuple(names)


def validate_weights(cfg: ModelConfig, weights: dict[str, torch.Tensor]) -> None:
    """Check names, shapes, dtypes and finiteness; raise a typed error naming the tensor."""
    shapes = expected_shapes(cfg)
    for name in required_names(cfg):
        if name not in weights:
            raise ShapeError(f"weights: missing tensor {name!r} (expected shape {shapes[name]}) for this architecture")
    reference = weights["W_E"]
    if not isinstance(reference, torch.Tensor) or not reference.is_floating_point():
        raise ArgumentTypeError(f"weights['W_E']: expected a floating-point torch.Tensor, got {type(reference).__name__}")
    for name, tensor in weights.items():
        if name not in shapes:
            raise ShapeError(f"weights: unknown tensor {name!r}; known names are {sorted(shapes)}")
        if not isinstance(tensor, torch.Tensor):
            raise ArgumentTypeError(f"weights[{name!r}]: expected a torch.Tensor, got {type(tensor).__name__}")
        if name in FREQUENCY_WEIGHTS:
            if tensor.dtype not in (torch.float32, torch.float64) or tensor.device != reference.device:
                raise ArgumentTypeError(
                    f"weights[{name!r}]: expected float32 or float64 on {reference.device}, got {tensor.dtype} on {tensor.device}"
                )
        elif tensor.dtype != reference.dtype or tensor.device != reference.device:
            raise ArgumentTypeError(
                f"weights[{name!r}]: expected dtype {reference.dtype} on {reference.device} (those of W_E), "
                f"got {tensor.dtype} on {tensor.device}"
            )
        if tuple(tensor.shape) != shapes[name]:
            raise ShapeError(f"weights[{name!r}]: expected shape {shapes[name]}, got {tuple(tensor.shape)}")
        if tensor.is_meta:
            raise ArgumentError(f"weights[{name!r}]: expected a tensor with data, got one on the meta device")
        bad = count_non_finite(tensor)
        if bad:
            raise NonFiniteError(f"weights[{name!r}]: expected finite values, got {bad} NaN/Inf entries")
