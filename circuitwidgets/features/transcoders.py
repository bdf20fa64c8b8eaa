"""The transcoders attribution graphs and feature interventions run on: what they need of them, and their checks.

Any object with the attributes of :class:`TranscoderLike` works (the
``Dictionary`` of :mod:`circuitwidgets.features`, or one's own): it reads the
MLP's input at its ``layer`` (``in_site``: ``"mlp_in"``, the normalised input
``W_in`` reads, or ``"resid_mid"``, the residual stream before the MLP's norm)
and predicts the MLP's output (``out_site`` ``"mlp_out"``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol, runtime_checkable

import torch

from circuitwidgets.errors import ArgumentError, ArgumentTypeError, ShapeError, UnsupportedArchitectureError
from circuitwidgets.model import CircuitModel, ModelConfig

#: Where a transcoder may read: the MLP's normalised input, or the residual stream before the MLP's norm.
INPUT_SITES = ("mlp_in", "resid_mid")


@runtime_checkable
class TranscoderLike(Protocol):
    """What an attribution graph reads of a transcoder (row vectors: ``x W_enc``, ``f W_dec``)."""

    layer: int
    in_site: str
    out_site: str
    W_enc: torch.Tensor  # [d_in, d_sae]
    b_enc: torch.Tensor  # [d_sae]
    W_dec: torch.Tensor  # [d_sae, d_out]
    b_dec: torch.Tensor  # [d_out]
    W_skip: torch.Tensor | None  # [d_in, d_out]

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        """Feature activations ``[..., d_sae]`` (zero where inactive)."""
        ...


_MEMBERS = ("layer", "in_site", "out_site", "W_enc", "b_enc", "W_dec", "b_dec", "W_skip", "encode")


def transcoder_input(cfg: ModelConfig, site: str, resid_mid: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """What a transcoder reading ``site`` sees, from ``resid_mid`` and the MLP norm's per-token ``scale``.

    ``mlp_in`` is the forward pass's own normalisation (LayerNorm: centred, then
    divided by the scale; RMS: divided by it; no norm: unchanged), so with the
    scale frozen it is a linear map of the residual stream.
    """
    if site == "resid_mid" or cfg.normalization in ("none", "rms_post"):
        return resid_mid
    if cfg.normalization == "ln_pre":
        return (resid_mid - resid_mid.mean(-1, keepdim=True)) / scale
    work = resid_mid if resid_mid.dtype == torch.float64 else resid_mid.float()
    return (work / scale.to(work.dtype)).to(resid_mid.dtype)


def check_architecture(model: CircuitModel) -> None:
    """Refuse, by name, the architectures whose local replacement model this engine does not build exactly.

    Sublayer-output norms (Gemma 2/3's sandwich, OLMo 2/3) are built: the attention output norm's scale is frozen
    as the input norms' are, and the MLP's output norm belongs to what a transcoder replaces (it predicts the
    normalised output, circuit-tracer's ``hook_mlp_out``). Attention soft-caps, sliding windows, grouped-query
    attention and rotary live in the frozen patterns; the final soft-cap follows the targets' definition (the
    centred logit before it, circuit-tracer's).
    """
    cfg = model.cfg
    if not isinstance(model, CircuitModel):
        raise ArgumentTypeError(f"model: expected a CircuitModel, got {type(model).__name__}")
    reasons = {
        "has no MLPs (nothing for transcoders to replace)": not cfg.has_mlp,
        "runs attention and MLP in parallel": cfg.parallel_attn_mlp,
        "normalises values (v_norm)": cfg.v_norm,
        "has per-layer inputs": cfg.d_per_layer is not None,
        "scales the residual stream per layer": model.weight("layer_scalar") is not None,
    }
    for reason, present in reasons.items():
        if present:
            raise UnsupportedArchitectureError(
                f"model: attribution graphs need a sequential pre-norm model; {model.name!r} {reason}"
            )


def check_transcoders(model: CircuitModel, transcoders: object) -> list[TranscoderLike]:
    """One transcoder per layer, in layer order, checked against ``model`` (typed errors name ``transcoders``).

    ``transcoders``: a list, or a mapping whose values are transcoders (keys are ignored; each one's
    ``layer`` says where it goes).
    """
    if isinstance(transcoders, Mapping):
        items = list(transcoders.values())
    elif isinstance(transcoders, Sequence) and not isinstance(transcoders, (str, bytes)):
        items = list(transcoders)
    else:
        raise ArgumentTypeError(
            f"transcoders: expected a list or dict of transcoders (one per layer), got {type(transcoders).__name__}"
        )
    cfg = model.cfg
    by_layer: dict[int, TranscoderLike] = {}
    for i, tc in enumerate(items):
        # hasattr, not isinstance(tc, TranscoderLike): from Python 3.12 a protocol check reads attributes
        # statically and misses an nn.Module's parameters (found through its __getattr__)
        if not all(hasattr(tc, name) for name in _MEMBERS) or not callable(getattr(tc, "encode", None)):
            raise ArgumentTypeError(
                f"transcoders[{i}]: expected a transcoder (layer, in_site, out_site, W_enc, b_enc, W_dec, b_dec, "
                f"W_skip, encode), got {type(tc).__name__}"
            )
        layer = tc.layer
        if isinstance(layer, bool) or not isinstance(layer, int) or not 0 <= layer < cfg.n_layers:
            raise ArgumentError(f"transcoders[{i}].layer: expected an int in [0, {cfg.n_layers}), got {layer!r}")
        if layer in by_layer:
            raise ArgumentError(f"transcoders: two transcoders for layer {layer}; expected one per layer")
        _check_one(f"transcoders[{i}]", tc, cfg)
        by_layer[layer] = tc
    missing = [layer for layer in range(cfg.n_layers) if layer not in by_layer]
    if missing:
        raise ArgumentError(
            f"transcoders: expected one transcoder for each of the model's {cfg.n_layers} layers, none for layers {missing}"
        )
    return [by_layer[layer] for layer in range(cfg.n_layers)]


def _check_one(where: str, tc: TranscoderLike, cfg: ModelConfig) -> None:
    if tc.in_site not in INPUT_SITES:
        raise ArgumentError(f"{where}.in_site: expected one of {INPUT_SITES}, got {tc.in_site!r}")
    if tc.out_site != "mlp_out":
        raise ArgumentError(f"{where}.out_site: expected 'mlp_out' (a transcoder of the MLP), got {tc.out_site!r}")
    d = cfg.d_model
    d_sae = tc.W_enc.shape[-1] if tc.W_enc.ndim == 2 else -1
    shapes = {"W_enc": (d, d_sae), "b_enc": (d_sae,), "W_dec": (d_sae, d), "b_dec": (d,)}
    if tc.W_skip is not None:
        shapes["W_skip"] = (d, d)
    for name, shape in shapes.items():
        value = getattr(tc, name)
        if not isinstance(value, torch.Tensor) or not value.is_floating_point():
            raise ArgumentTypeError(f"{where}.{name}: expected a floating-point tensor, got {type(value).__name__}")
        if tuple(value.shape) != shape:
            raise ShapeError(f"{where}.{name}: expected shape {shape} for d_model={d}, got {tuple(value.shape)}")
