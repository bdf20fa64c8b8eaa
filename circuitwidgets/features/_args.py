"""Argument checks shared by the public functions of ``features/`` (typed errors naming the argument passed).

- :func:`check_dictionary`: a :class:`Dictionary` whose weights are still finite: a NaN written into one after it
  was built (an in-place edit, a diverged fine-tune) is refused by name before a run spends time on it; each tensor
  is scanned once per version, so repeated calls on the same dictionary pay nothing;
- :func:`check_number`: a finite real in a range (bools refused);
- :func:`check_memory`: a size refused up front against ``memory_budget`` (``None``: this machine's memory), so an
  allocation that cannot succeed is named before it is tried.
"""

from __future__ import annotations

import math
import numbers

import torch

from circuitwidgets._checks import check_budget, device_memory, non_finite_once
from circuitwidgets.errors import ArgumentError, ArgumentTypeError, MemoryBudgetError, NonFiniteError
from circuitwidgets.features.dictionary import Dictionary


def check_dictionary(name: str, value: object) -> Dictionary:
    """``value`` if it is a :class:`Dictionary` whose tensors are all finite."""
    if not isinstance(value, Dictionary):
        raise ArgumentTypeError(f"{name}: expected a circuitwidgets.features.Dictionary, got {type(value).__name__}")
    for tensor_name, tensor in value.tensors().items():
        bad = non_finite_once(getattr(value, tensor_name), tensor)
        if bad:
            raise NonFiniteError(
                f"{name}.{tensor_name}: expected finite values, got {bad:,} NaN or infinite entries "
                f"(dictionary {value.name})"
            )
    return value


def check_number(name: str, value: object, low: float | None = None, high: float | None = None, *,
                 low_open: bool = False) -> float:  # fmt: skip
    """``value`` as a finite float in ``[low, high]`` (``(low, high]`` with ``low_open``)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ArgumentTypeError(f"{name}: expected a number, got {type(value).__name__}")
    number = float(value)
    if not math.isfinite(number):
        raise NonFiniteError(f"{name}: expected a finite number, got {number}")
    too_low = low is not None and (number <= low if low_open else number < low)
    if too_low or (high is not None and number > high):
        lo = "-inf" if low is None else f"{low:g}"
        hi = "inf" if high is None else f"{high:g}"
        raise ArgumentError(f"{name}: expected a number in {'(' if low_open else '['}{lo}, {hi}], got {number:g}")
    return number


def check_memory(what: str, need: int, memory_budget: object, device: torch.device | None = None) -> None:
    """Refuse ``need`` bytes over ``memory_budget`` (``None``: the memory of ``device``, the CPU by default)."""
    where = device if device is not None else torch.device("cpu")
    limit = device_memory(where) if memory_budget is None else check_budget("memory_budget", memory_budget)
    if need > limit:
        name = "memory_budget" if memory_budget is not None else f"the memory of {where}"
        raise MemoryBudgetError(f"{what}: needs about {need:,} bytes, more than {name} ({limit:,} bytes)")


def check_float_dtype(name: str, value: object) -> torch.dtype:
    """``value`` if it is a floating-point ``torch.dtype`` (what a dictionary's weights are held or written in)."""
    if not isinstance(value, torch.dtype):
        raise ArgumentTypeError(f"{name}: expected a torch.dtype such as torch.float32, got {value!r:.40}")
    if not value.is_floating_point:
        raise ArgumentError(f"{name}: expected a floating-point dtype, got {value}")
    return value
