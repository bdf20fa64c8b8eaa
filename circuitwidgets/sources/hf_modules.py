"""Reading Hugging Face modules, also when a TransformerLens bridge wraps them."""

from __future__ import annotations

from typing import Any

import torch

from circuitwidgets.sources._convert import take


def unwrap(module: Any) -> Any:
    """The Hugging Face module itself when a TransformerLens bridge component wraps it."""
    while getattr(module, "original_component", None) is not None:
        module = module.original_component
    return module


def at(obj: Any, path: str) -> Any:
    """``obj.a.b.c`` for ``path="a.b.c"``, unwrapping bridge components at every step."""
    obj = unwrap(obj)
    for part in path.split("."):
        obj = unwrap(getattr(obj, part))
    return obj


def linear_bias(module: Any, dtype: torch.dtype) -> torch.Tensor | None:
    """A linear layer's bias as a detached copy in ``dtype``, or ``None``."""
    bias = getattr(module, "bias", None)
    return take(bias, dtype) if isinstance(bias, torch.Tensor) else None


def bias_or_zeros(module: Any, size: int, dtype: torch.dtype, like: torch.Tensor) -> torch.Tensor:
    """A linear layer's bias, or zeros of ``size`` when it has none."""
    bias = linear_bias(module, dtype)
    return bias if bias is not None else torch.zeros(size, dtype=dtype, device=like.device)
