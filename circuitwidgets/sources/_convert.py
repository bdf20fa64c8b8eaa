"""Shared steps of the loaders: copying weights, folding layer norm, checking the result.

Layer-norm folding (row vectors). A layer norm computes ``LN(x) = n(x) * w + b``
with ``n(x) = (x - mean(x)) / sqrt(var(x) + eps)``. A linear map that reads it,
``LN(x) @ W + c``, equals ``n(x) @ (w[:, None] * W) + (b @ W + c)``. So each
layer norm's weight scales the rows of the weights that read it and its bias
moves into their biases; what is left in the forward pass is ``n(x)``
(``cfg.normalization == "ln_pre"``), exactly. Folded:

- ``ln1`` (before attention) into ``W_Q, W_K, W_V`` and ``b_Q, b_K, b_V``;
- ``ln2`` (before the MLP) into ``W_in`` and ``b_in``;
- ``ln_final`` into ``W_U`` and ``b_U``.

Not folded, and not needed: nothing is centred. Our forward pass subtracts the
mean itself, so the writing weights keep their original (uncentred) values.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from circuitwidgets.errors import (
    ArgumentTypeError,
    NetworkRefusedError,
    NonFiniteError,
    ShapeError,
    UnsupportedArchitectureError,
)
from circuitwidgets.model import CircuitModel
from circuitwidgets.model.weights import count_non_finite

Norm = tuple[torch.Tensor | None, torch.Tensor | None]
"""A layer norm's ``(weight, bias)``; ``None`` entries mean 1 and 0 (parameter-free norm)."""


def refuse_names(value: object, arg: str, loader: str) -> None:
    """Raise :class:`NetworkRefusedError` when ``value`` is a hub name or a path."""
    if isinstance(value, (str, os.PathLike)):
        raise NetworkRefusedError(
            f"{arg}: expected a model object already in memory, got the name {str(value)!r}. "
            "circuitwidgets never downloads or reads checkpoints for you: load the model yourself "
            f"(from a local path, offline) and pass the object to circuitwidgets.{loader}(model)."
        )


def class_names(obj: object) -> set[str]:
    """Names of the classes in ``obj``'s method resolution order."""
    return {cls.__name__ for cls in type(obj).__mro__}


def work_dtype(dtype: torch.dtype) -> torch.dtype:
    """Dtype in which folding is computed: float64 when the target is, else float32."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def take(tensor: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """A detached copy of ``tensor`` in ``dtype`` (never a view of the source's parameters)."""
    return tensor.detach().to(dtype=dtype, copy=True)


@dataclass
class RawModel:
    """Weights read from a source before folding, in the canonical names and shapes.

    ``ln1``/``ln2`` hold one :data:`Norm` per layer, ``ln_final`` one; ``None``
    for a model without normalisation. ``attn_scales`` holds the divisor of
    attention scores per layer.
    """

    weights: dict[str, torch.Tensor]
    ln1: list[Norm] | None
    ln2: list[Norm] | None
    ln_final: Norm | None
    attn_scales: list[float] = field(default_factory=list)


def fold_layer_norms(raw: RawModel) -> dict[str, torch.Tensor]:
    """Fold every layer norm's weight and bias into the weights that read it (see module docstring)."""
    w = dict(raw.weights)
    if raw.ln1 is not None:
        for letter in ("Q", "K", "V"):
            W = w[f"W_{letter}"]  # [L, H, d, dh]
            b_old = w.get(f"b_{letter}")
            W_new, b_new = W.clone(), (b_old.clone() if b_old is not None else None)
            for layer, (scale, shift) in enumerate(raw.ln1):
                if shift is not None:
                    if b_new is None:
                        b_new = torch.zeros(W.shape[0], W.shape[1], W.shape[3], dtype=W.dtype, device=W.device)
                    b_new[layer] += torch.einsum("d,hde->he", shift, W[layer])
                if scale is not None:
                    W_new[layer] = scale[None, :, None] * W[layer]
            w[f"W_{letter}"] = W_new
            if b_new is not None:
                w[f"b_{letter}"] = b_new
    if raw.ln2 is not None and "W_in" in w:
        W = w["W_in"]  # [L, d, d_mlp]
        b_old = w.get("b_in")
        W_new, b_new = W.clone(), (b_old.clone() if b_old is not None else None)
        for layer, (scale, shift) in enumerate(raw.ln2):
            if shift is not None:
                if b_new is None:
                    b_new = torch.zeros(W.shape[0], W.shape[2], dtype=W.dtype, device=W.device)
                b_new[layer] += shift @ W[layer]
            if scale is not None:
                W_new[layer] = scale[:, None] * W[layer]
        w["W_in"] = W_new
        if b_new is not None:
            w["b_in"] = b_new
    if raw.ln_final is not None:
        scale, shift = raw.ln_final
        W = w["W_U"]  # [d, V]
        if shift is not None:
            b_U = w.get("b_U")
            w["b_U"] = (b_U if b_U is not None else torch.zeros(W.shape[1], dtype=W.dtype, device=W.device)) + shift @ W
        if scale is not None:
            w["W_U"] = scale[:, None] * W
    return w


def fold_attention_scales(weights: dict[str, torch.Tensor], scales: list[float]) -> float | None:
    """Make every layer's score divisor equal to layer 0's by rescaling ``W_Q``/``b_Q``.

    Returns the shared divisor (``None`` when there are no layers). Exact up to
    rounding: ``(q / s_l) · k = (q · s_0 / s_l) · k / s_0``.
    """
    if not scales:
        return None
    base = scales[0]
    for layer, s in enumerate(scales):
        if not math.isclose(s, base, rel_tol=1e-12):
            ratio = base / s
            weights["W_Q"][layer] *= ratio
            if "b_Q" in weights:
                weights["b_Q"][layer] *= ratio
    return base


def adjacent_pairs_to_rotate_half(weights: dict[str, torch.Tensor], rotary_dim: int) -> None:
    """Reorder ``W_Q, W_K`` (and biases) so GPT-J-style adjacent-pair rotary becomes rotate-half.

    Adjacent-pair rotary rotates dimensions ``(2i, 2i+1)`` by frequency ``i``;
    rotate-half (GPT-NeoX, our forward pass) rotates ``(i, i + r/2)``. Moving
    dimension ``2i`` to ``i`` and ``2i+1`` to ``i + r/2``, in queries and keys
    alike, leaves every score ``q · k`` unchanged.
    """
    order = torch.cat([torch.arange(0, rotary_dim, 2), torch.arange(1, rotary_dim, 2)])
    for name in ("W_Q", "W_K", "b_Q", "b_K"):
        if name in weights:
            t = weights[name]
            weights[name] = torch.cat([t[..., order.to(t.device)], t[..., rotary_dim:]], dim=-1)


def check_finite(weights: dict[str, torch.Tensor], source: str) -> None:
    """Raise a typed error naming the first source tensor that has NaN or Inf (before folding hides it)."""
    from circuitwidgets.errors import NonFiniteError

    for name, tensor in weights.items():
        bad = count_non_finite(tensor) if tensor.is_floating_point() else 0
        if bad:
            raise NonFiniteError(f"{source}: tensor {name!r} has {bad} NaN/Inf entries; expected finite weights")


def check_finite_parameters(model: torch.nn.Module, source: str) -> None:
    """Raise a typed error naming the first parameter of ``model`` (its own name) with NaN or Inf."""
    from circuitwidgets.errors import NonFiniteError

    for name, tensor in model.named_parameters():
        bad = count_non_finite(tensor) if tensor.is_floating_point() else 0
        if bad:
            name = name.replace("._original_component", "")  # TransformerBridge wrapping, not the model's own name
            raise NonFiniteError(f"{source}: parameter {name!r} has {bad} NaN/Inf entries; expected finite weights")


def check_folded(weights: dict[str, torch.Tensor], source: str) -> None:
    """Refuse converted weights that overflowed their dtype, naming the weight and its layers.

    The source's parameters are checked finite first (:func:`check_finite_parameters`),
    so a non-finite converted weight means folding (norm weights and scales
    multiplied into ``W_Q``, ``W_U``, ...) overflowed the target dtype.
    """
    for name, tensor in weights.items():
        bad = ~torch.isfinite(tensor)
        if not bool(bad.any()):
            continue
        where = ""
        if tensor.ndim >= 3:  # stacked per layer: [n_layers, ...]
            layers = [int(i) for i in torch.nonzero(bad.flatten(1).any(1)).flatten()]
            where = f" in layer{'s' if len(layers) > 1 else ''} {', '.join(map(str, layers[:8]))}"
        limit = torch.finfo(tensor.dtype).max
        raise NonFiniteError(
            f"{source}: expected {name} to fit {tensor.dtype} after folding the norms into it, got "
            f"{int(bad.sum())} entries that overflowed{where} (the source's weights are finite; {tensor.dtype} "
            f"holds at most {limit:.3g}). Load it in a wider dtype (dtype=torch.float32)"
        )


def check_shape(name: str, tensor: torch.Tensor, expected: tuple[int, ...]) -> None:
    """Raise :class:`ShapeError` naming ``name`` unless ``tensor`` has shape ``expected``."""
    if tuple(tensor.shape) != expected:
        raise ShapeError(f"{name}: expected shape {expected}, got {tuple(tensor.shape)}")


def require_ln_pre_compatible(norms: list[Norm | None], what: str) -> None:
    """All norms present or all absent: our forward normalises everywhere or nowhere."""
    present = [n is not None for n in norms]
    if any(present) and not all(present):
        raise UnsupportedArchitectureError(
            f"{what}: some layer norms are present and others are not; circuitwidgets represents a model "
            "whose every attention/MLP input and final output is layer-normed, or none is"
        )


# Tolerances of the conversion check, relative to the largest logit.
_VERIFY_RTOL = {torch.float16: 5e-2, torch.bfloat16: 5e-2}
_VERIFY_DEFAULT_RTOL = 1e-3


def verification_tokens(d_vocab: int, n_pos: int) -> torch.Tensor:
    """The ``[1, n_pos]`` random token ids :func:`verify_logits` compares on (seeded: always the same)."""
    gen = torch.Generator().manual_seed(1234)
    return torch.randint(0, d_vocab, (1, n_pos), generator=gen)


def verify_logits(
    ours: CircuitModel,
    reference: Callable[[torch.Tensor], torch.Tensor],
    source_dtype: torch.dtype,
    source_device: torch.device,
    what: str,
) -> float:
    """Compare our logits with the source's on a short random sequence; return the max abs error.

    Raises :class:`UnsupportedArchitectureError` when they disagree beyond the
    tolerance (``1e-3`` of the largest logit in float32, ``5e-2`` in half
    precision): a feature of the source that the canonical model does not
    represent would otherwise give silently wrong analyses.
    """
    cfg = ours.cfg
    tokens = verification_tokens(cfg.d_vocab, min(cfg.n_ctx, 8))
    with torch.no_grad():
        ref = reference(tokens.to(source_device)).detach().to("cpu", torch.float64)
        got = ours(tokens.to(ours.device)).detach().to("cpu", torch.float64)
    if ref.shape != got.shape:
        raise ShapeError(f"{what}: the source's logits have shape {tuple(ref.shape)}, ours {tuple(got.shape)}")
    if bool(torch.isfinite(ref).all()) and not bool(torch.isfinite(got).all()):
        raise NonFiniteError(
            f"{what}: expected finite logits from the converted model, got non-finite ones: its forward pass in "
            f"{ours.dtype} overflowed where the source's ({source_dtype}) did not. Load it in a wider dtype "
            "(dtype=torch.float32)"
        )
    err = float((ref - got).abs().max())
    rtol = max(_VERIFY_RTOL.get(source_dtype, _VERIFY_DEFAULT_RTOL), _VERIFY_RTOL.get(ours.dtype, _VERIFY_DEFAULT_RTOL))
    tol = rtol * max(1.0, float(ref.abs().max()))
    if not err <= tol:
        raise UnsupportedArchitectureError(
            f"{what}: the converted model's logits differ from the source's by {err:.3g} "
            f"(tolerance {tol:.3g}), so some feature of this model is not represented; "
            "pass verify=False to load it anyway (analyses may then be wrong)"
        )
    return err


def expect_type(value: object, names: tuple[str, ...], arg: str, hint: str) -> None:
    """Raise :class:`ArgumentTypeError` unless one of ``names`` is in ``value``'s class hierarchy."""
    if not class_names(value) & set(names):
        raise ArgumentTypeError(f"{arg}: expected {hint}, got {type(value).__name__}")
