"""Argument checks of the graph engine that the computations themselves do not make (issue 58).

Kept in one module so that the computations (``attribution.py``, ``eap.py``, ``runs.py``) each gain one call:

- token arguments are checked under the name the user passed (``clean``, ``corrupted``), never ``tokens``;
- an attribution graph needs a prompt of at least two positions (the first is not a node) and finite
  transcoders: a NaN written into one after it was built would otherwise surface minutes later as "the graph has
  a cycle"; each tensor is scanned once per version (identity, storage, in-place counter), so a graph built again
  on the same transcoders does not pay for it twice;
- a computation whose smallest pass needs more than ``memory_budget`` (or this machine's memory, when no budget
  is given) is refused before it starts, naming the budget and the need.
"""

from __future__ import annotations

import torch

from circuitwidgets._checks import check_bool, check_int, device_memory, non_finite_once
from circuitwidgets.errors import CircuitWidgetsError, MemoryBudgetError, NonFiniteError, ShapeError
from circuitwidgets.model import CircuitModel

_TENSORS = ("W_enc", "b_enc", "W_dec", "b_dec", "W_skip", "threshold")


def named_tokens(model: CircuitModel, name: str, value: object) -> torch.Tensor:
    """``model._check_tokens(value)``, its error re-raised under ``name`` (the argument the user passed)."""
    try:
        return model._check_tokens(value)  # type: ignore[arg-type]
    except CircuitWidgetsError as exc:
        message = str(exc)
        if message.startswith("tokens:") or message.startswith("text:"):
            message = f"{name}:{message.split(':', 1)[1]}"
        else:
            message = f"{name}: {message}"
        raise type(exc)(message) from None


def check_finite_transcoders(transcoders: list[object]) -> None:
    """Refuse a transcoder holding NaN or infinity, naming it and the tensor (each tensor scanned once a version)."""
    for i, tc in enumerate(transcoders):
        for name in _TENSORS:
            tensor = getattr(tc, name, None)
            if not isinstance(tensor, torch.Tensor):
                continue
            bad = non_finite_once(tensor)
            if bad:
                raise NonFiniteError(
                    f"transcoders[{i}].{name}: expected finite values, got {bad:,} NaN or infinite entries"
                )


def check_attribution_inputs(
    model: CircuitModel,
    transcoders: list[object],
    tokens: object,
    *,
    max_logits: object,
    max_feature_nodes: object,
    progress: object,
) -> None:
    """What :func:`~circuitwidgets.graphs.attribution_matrix` needs beyond its own checks: a prompt of at least two
    positions, ``max_logits`` at most the vocabulary, ``max_feature_nodes`` at least 1, a bool ``progress``, and
    finite transcoders."""
    t = named_tokens(model, "tokens", tokens)
    if t.shape[-1] < 2:
        raise ShapeError(
            f"tokens: expected a prompt of at least 2 positions (the first position is not a node of the graph), "
            f"got {t.shape[-1]}"
        )
    check_int("max_logits", max_logits, 1, model.cfg.d_vocab + 1)
    if max_feature_nodes is not None:
        check_int("max_feature_nodes", max_feature_nodes, 1)
    check_bool("progress", progress)
    check_finite_transcoders(transcoders)


def check_pass_budget(what: str, need: int, memory_budget: int | None, device: torch.device) -> None:
    """Refuse a computation whose smallest pass needs ``need`` bytes over ``memory_budget`` (given) or, without one,
    over the memory of ``device``: such a pass would fail in the allocator after seconds, or swap."""
    limit = memory_budget if memory_budget is not None else device_memory(device)
    if need > limit:
        name = "memory_budget" if memory_budget is not None else f"the memory of {device}"
        raise MemoryBudgetError(
            f"memory_budget: {what} needs about {need:,} bytes in its smallest pass, more than {name} ({limit:,} bytes)"
        )
