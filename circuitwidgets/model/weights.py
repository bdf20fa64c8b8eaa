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
angles are computed in float32, as the source libraries do); ``layer_scalar
[L]``, the factor the whole residual stream is multiplied by after each layer
(Gemma 4). Per-layer input embeddings (``P = d_per_layer``, Gemma 4):
``W_E_per_layer [d_vocab, L, P]`` (token part, its scales folded in),
``W_per_layer_proj [d_model, L, P]`` and its RMS-norm multiplier
``per_layer_proj_norm [P]`` (the part read from the embedding), and per layer
``W_per_layer_gate [L, d_model, P]``, ``W_per_layer_out [L, P, d_model]`` and the
output-norm multiplier ``post_per_layer_norm [L, d_model]``.
"""

from __future__ import annotations

import torch

from circuitwidgets.errors import ArgumentError, ArgumentTypeError, NonFiniteError, ShapeError
from circuitwidgets.model.config import ModelConfig

REQUIRED_WEIGHTS = ("W_E", "W_Q", "W_K", "W_V", "W_O", "W_U")
#: Tensors kept in their own dtype (float32 or float64) whatever the weights' dtype.
FREQUENCY_WEIGHTS = ("rotary_freq",)


#: The MLPs' own tensors: absent from a model loaded without them (``cfg.mlp_weights_absent``).
_MLP_WEIGHTS = frozenset({"W_in", "b_in", "W_gate", "b_gate", "W_out", "b_out", "ln_mlp_w", "ln_mlp_b"})

#: Elements checked at a time by :func:`count_non_finite` (bounds its scratch memory).
_FINITE_BLOCK = 2**22


def count_non_finite(tensor: torch.Tensor) -> int:
    """NaN and infinite entries of ``tensor``, counted in blocks.

    ``torch.isfinite`` on a whole 128K–256K-vocabulary embedding would allocate
    a mask (and, for half precision, an upcast copy) as large as the tensor.
    A block is counted only when its minimum or maximum is not finite (NaN
    propagates through both, ±inf shows in one): ``aminmax`` is a reduction
    without a mask, about 20 times faster than ``isfinite`` on bfloat16.
    """
    flat = tensor.detach().reshape(-1)
    bad = 0
    for start in range(0, flat.numel(), _FINITE_BLOCK):
        block = flat[start : start + _FINITE_BLOCK]
        if block.is_floating_point() and bool(torch.isfinite(torch.stack(torch.aminmax(block))).all()):
            continue
        bad += int(block.numel() - torch.isfinite(block).sum())
    return bad


def expected_shapes(cfg: ModelConfig) -> dict[str, tuple[int, ...]]:
    """Shape of every tensor a model with ``cfg`` may hold."""
    L, H, G, d, dh, V = cfg.n_layers, cfg.n_heads, cfg.kv_heads, cfg.d_model, cfg.d_head, cfg.d_vocab
    shapes: dict[str, tuple[int, ...]] = {
        "W_E": (V, d),
        "W_pos": (cfg.n_ctx, d),
        "W_Q": (L, H, d, dh),
        "W_K": (L, G, d, dh),
        "W_V": (L, G, d, dh),
        "W_O": (L, H, dh, d),
        "b_Q": (L, H, dh),
        "b_K": (L, G, dh),
        "b_V": (L, G, dh),
        "b_O": (L, d),
        "W_U": (d, V),
        "b_U": (V,),
        "q_norm": (L, H, dh),
        "k_norm": (L, G, dh),
        "post_attn_norm": (L, d),
        "rotary_freq": (L, (cfg.rotary_dim or dh) // 2),
        "layer_scalar": (L,),
    }
    if cfg.d_per_layer is not None:
        P = cfg.d_per_layer
        shapes |= {
            "W_E_per_layer": (V, L, P),
            "W_per_layer_proj": (d, L, P),
            "per_layer_proj_norm": (P,),
            "W_per_layer_gate": (L, d, P),
            "W_per_layer_out": (L, P, d),
            "post_per_layer_norm": (L, d),
        }
    if cfg.has_mlp:
        assert cfg.d_mlp is not None
        shapes |= {
            "W_in": (L, d, cfg.d_mlp),
            "b_in": (L, cfg.d_mlp),
            "W_out": (L, cfg.d_mlp, d),
            "b_out": (L, d),
            "post_mlp_norm": (L, d),
        }
        if cfg.gated_mlp:
            shapes |= {"W_gate": (L, d, cfg.d_mlp), "b_gate": (L, cfg.d_mlp)}
        if cfg.act_fn == "solu_ln":  # SoLU's LayerNorm over the neurons: gain and bias, kept unfolded
            shapes |= {"ln_mlp_w": (L, cfg.d_mlp), "ln_mlp_b": (L, cfg.d_mlp)}
    return shapes


def required_names(cfg: ModelConfig) -> tuple[str, ...]:
    """Tensors a model with ``cfg`` cannot do without."""
    names = list(REQUIRED_WEIGHTS)
    if cfg.positional_embedding_type in ("shortformer", "standard"):
        names.append("W_pos")
    if cfg.has_mlp and not cfg.mlp_weights_absent:
        names += ["W_in", "W_out"] + (["W_gate"] if cfg.gated_mlp else [])
        names += ["ln_mlp_w", "ln_mlp_b"] if cfg.act_fn == "solu_ln" else []
    if cfg.qk_norm is not None:
        names += ["q_norm", "k_norm"]
    if cfg.normalization == "rms_post" or cfg.post_norm:
        names += ["post_attn_norm"] + (["post_mlp_norm"] if cfg.has_mlp else [])
    if cfg.d_per_layer is not None:
        names += [
            "W_E_per_layer",
            "W_per_layer_proj",
            "per_layer_proj_norm",
            "W_per_layer_gate",
            "W_per_layer_out",
            "post_per_layer_norm",
        ]
    return tuple(names)


def validate_weights(cfg: ModelConfig, weights: dict[str, torch.Tensor]) -> None:
    """Check names, shapes, dtypes and finiteness; raise a typed error naming the tensor."""
    shapes = expected_shapes(cfg)
    for name in required_names(cfg):
        if name not in weights:
            raise ShapeError(f"weights: missing tensor {name!r} (expected shape {shapes[name]}) for this architecture")
    if cfg.mlp_weights_absent:
        held = sorted(set(weights) & _MLP_WEIGHTS)
        if held:
            raise ShapeError(f"weights: cfg.mlp_weights_absent says the MLP weights were not loaded, got {held}")
    reference = weights["W_E"]
    if not isinstance(reference, torch.Tensor) or not reference.is_floating_point():
        raise ArgumentTypeError(
            f"weights['W_E']: expected a floating-point torch.Tensor, got {type(reference).__name__}"
        )
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
    check_per_layer_layout(cfg, weights)


def head_columns(width: int, d_head: int) -> torch.Tensor:
    """Columns ``[width]`` a head of ``width`` occupies among ``d_head``: its rotate-half halves at ``0`` and ``d_head / 2``."""
    half = torch.arange(width // 2)
    return torch.cat([half, half + d_head // 2])


#: Per-head tensors and the axis that runs over a head's dimensions.
_HEAD_AXES = {"W_Q": -1, "W_K": -1, "W_V": -1, "W_O": -2, "b_Q": -1, "b_K": -1, "b_V": -1, "q_norm": -1, "k_norm": -1}
#: Tensors a layer that reuses another's keys and values holds as copies of that layer's.
_SHARED_KV = ("W_K", "W_V", "b_K", "b_V", "k_norm")


def check_per_layer_layout(cfg: ModelConfig, weights: dict[str, torch.Tensor]) -> None:
    """Narrow heads zero outside their columns, and layers sharing keys and values hold their source's.

    Weight-space analyses read ``W_K[l]``, ``W_V[l]`` of every layer and all
    ``d_head`` columns, so both layouts must hold for them to be exact.
    """
    for layer, width in enumerate(cfg.head_dims or ()):
        if width == cfg.d_head:
            continue
        outside = torch.ones(cfg.d_head, dtype=torch.bool)
        outside[head_columns(width, cfg.d_head)] = False
        for name, axis in _HEAD_AXES.items():
            if name in weights and bool(
                weights[name][layer].movedim(axis, -1)[..., outside.to(weights[name].device)].any()
            ):
                raise ArgumentError(
                    f"weights[{name!r}][{layer}]: a head of width {width} (cfg.head_dims) must be zero outside columns "
                    f"[0, {width // 2}) and [{cfg.d_head // 2}, {cfg.d_head // 2 + width // 2}), got non-zero entries there"
                )
        freq = weights.get("rotary_freq")
        if freq is not None and bool(freq[layer, width // 2 :].any()):
            raise ArgumentError(
                f"weights['rotary_freq'][{layer}]: a head of width {width} has no rotary pairs beyond {width // 2}"
            )
    for layer, source in enumerate(cfg.kv_sources or ()):
        for name in _SHARED_KV:
            if source != layer and name in weights and not torch.equal(weights[name][layer], weights[name][source]):
                raise ArgumentError(
                    f"weights[{name!r}][{layer}]: layer {layer} attends with layer {source}'s keys and values "
                    f"(cfg.kv_sources), so it must hold a copy of layer {source}'s {name}"
                )
