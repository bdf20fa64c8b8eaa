"""What a unit writes onto the logits: its output direction through the final norm and the unembedding.

A neuron writes its row of ``W_out``, a dictionary feature its row of
``W_dec``, into the residual stream (scaled by its activation). Its direct
effect on the logits at a position is that write through the final norm
(centred for LayerNorm, divided by the position's frozen scale) and ``W_U``:
the same linear map :func:`circuitwidgets.causal.logit_attribution` applies to
each component, so a unit's effects summed with the rest of the stream give
the model's logit (the tests check a neuron's against ``logit_attribution``'s
``by="neuron"``).

- :func:`logit_effects`: per unit direction, its effect on every token's logit
  per unit of activation, for the final norm's scale ``scale`` (1 by default:
  a positive scale rescales every token alike, so the promoted and suppressed
  tokens and their order do not depend on it);
- :func:`direct_logit_effects`: exact per-token effects on a run, with each
  position's scale frozen from that run.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from circuitwidgets._checks import check_int, count_non_finite
from circuitwidgets.errors import ArgumentError, ArgumentTypeError, NonFiniteError, ShapeError
from circuitwidgets.features._args import check_number
from circuitwidgets.features.dictionary import Dictionary
from circuitwidgets.model import CircuitModel

__all__ = ["direct_logit_effects", "logit_effects", "output_directions", "top_tokens"]

#: Sites whose value is added to the residual stream (or is the stream), so a decoder row there is a write to it.
RESIDUAL_SITES = ("resid_pre", "resid_mid", "resid_post", "attn_out", "mlp_out")


def output_directions(model: CircuitModel, units: Dictionary | int) -> torch.Tensor:
    """``[n_units, d_model]``: each unit's write into the residual stream per unit of activation.

    ``units``: a :class:`Dictionary` writing a residual site (its ``W_dec``), or
    a layer index (that layer's neurons: ``W_out[layer]``).
    """
    if isinstance(units, Dictionary):
        units.check_model(model)
        if units.out_site not in RESIDUAL_SITES:
            raise ArgumentError(
                f"units: expected a dictionary writing one of {RESIDUAL_SITES} (a residual-stream write), "
                f"got {units.name} writing {units.out_site!r}"
            )
        return units.W_dec.detach().to(model.dtype)
    layer = check_int("units (a layer)", units, 0, model.cfg.n_layers)
    W_out = model.weight("W_out")
    if W_out is None:
        raise ArgumentError(f"units: layer {layer}'s neurons need a model with MLPs; {model.name!r} has none")
    return W_out[layer]


def through_final_norm(model: CircuitModel, x: torch.Tensor, scale: torch.Tensor | float = 1.0) -> torch.Tensor:
    """``x`` ``[..., d_model]`` through the final norm with its per-token ``scale`` frozen (as direct logit attribution)."""
    centred = x - x.mean(-1, keepdim=True) if model.cfg.normalization == "ln_pre" else x
    return centred / (scale if isinstance(scale, float) else scale.to(x.dtype)[..., None])


def logit_effects(model: CircuitModel, directions: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
    """``[n_units, d_vocab]``: each direction's effect on each logit, per unit of activation, at final-norm scale ``scale``."""
    if not isinstance(directions, torch.Tensor) or directions.ndim != 2 or directions.shape[1] != model.cfg.d_model:
        raise ShapeError(
            f"directions: expected a [n_units, {model.cfg.d_model}] tensor, got "
            f"{list(directions.shape) if isinstance(directions, torch.Tensor) else type(directions).__name__}"
        )
    if model.cfg.final_softcap is not None:
        raise ArgumentError(
            f"model: a final soft-cap ({model.cfg.final_softcap}) is not linear; logit effects are read before it"
        )
    _finite("directions", directions)
    scale = check_number("scale", scale, 0.0, low_open=True)
    return through_final_norm(model, directions.to(model.dtype), float(scale)) @ model.W_U


def _finite(name: str, tensor: torch.Tensor) -> None:
    if not tensor.dtype.is_floating_point:
        raise ArgumentTypeError(f"{name}: expected a floating-point tensor, got {tensor.dtype}")
    bad = count_non_finite(tensor)
    if bad:
        raise NonFiniteError(f"{name}: expected finite values, got {bad:,} NaN or infinite entries")


def top_tokens(effects: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(promoted ids, their effects, suppressed ids, their effects)``, each ``[n_units, k]``, strongest first."""
    if not isinstance(effects, torch.Tensor) or effects.ndim < 1:
        raise ArgumentTypeError(f"effects: expected a [n_units, d_vocab] tensor, got {type(effects).__name__}")
    _finite("effects", effects)
    k = check_int("k", k, 1, effects.shape[-1] + 1)
    up = effects.topk(k, dim=-1)
    down = (-effects).topk(k, dim=-1)
    return up.indices, up.values, down.indices, -down.values


def direct_logit_effects(
    model: CircuitModel,
    tokens: torch.Tensor | Sequence[int] | str,
    activations: torch.Tensor,
    directions: torch.Tensor,
    answers: torch.Tensor | Sequence[int],
) -> torch.Tensor:
    """Exact direct effect of each unit on the answer's logit at each position: ``[batch, pos, n_units]``.

    ``activations`` ``[batch, pos, n_units]`` (the units' activations on this run),
    ``directions`` ``[n_units, d_model]`` (:func:`output_directions`), ``answers``
    one token id per position ``[batch, pos]`` (or per prompt ``[batch]``, or one
    id). The final norm's scale is frozen from the run; the effects are in the
    model's dtype.
    """
    t = model._check_tokens(tokens)
    batch, n_pos = t.shape
    if not isinstance(activations, torch.Tensor) or tuple(activations.shape[:2]) != (batch, n_pos):
        raise ShapeError(f"activations: expected [{batch}, {n_pos}, n_units], got {_shape(activations)}")
    if not isinstance(directions, torch.Tensor) or directions.shape != (activations.shape[2], model.cfg.d_model):
        raise ShapeError(
            f"directions: expected [{activations.shape[2]}, {model.cfg.d_model}], got {_shape(directions)}"
        )
    ids = torch.as_tensor(answers, dtype=torch.long, device=model.device)
    if ids.dtype.is_floating_point or int(ids.min()) < 0 or int(ids.max()) >= model.cfg.d_vocab:
        raise ArgumentError(f"answers: expected token ids in [0, {model.cfg.d_vocab})")
    ids = ids.reshape(-1, 1) if ids.ndim == 1 and ids.numel() == batch else ids
    ids = ids.expand(batch, n_pos)
    _, cache = model.run_with_cache(t, names=["scale_final"])
    scale = cache["scale_final"][..., 0]  # [batch, pos]
    # the direction's logit per unit: (centred d / scale) · W_U[:, answer], one answer per position
    read = through_final_norm(model, directions.to(model.dtype))  # [n_units, d_model]
    per_answer = read @ model.W_U[:, ids.reshape(-1)]  # [n_units, batch * pos]
    per_answer = per_answer.T.reshape(batch, n_pos, -1) / scale[..., None]
    return activations.to(model.dtype) * per_answer


def _shape(x: object) -> str:
    return str(list(x.shape)) if isinstance(x, torch.Tensor) else type(x).__name__


def check_dictionary(name: str, value: object) -> Dictionary:
    """``value`` if it is a :class:`Dictionary`."""
    if not isinstance(value, Dictionary):
        raise ArgumentTypeError(f"{name}: expected a circuitwidgets.features.Dictionary, got {type(value).__name__}")
    return value
