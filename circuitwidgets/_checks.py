"""Argument checks shared by the engine (typed errors naming argument, expected, received)."""

from __future__ import annotations

import numbers
import os
import warnings
import weakref
from collections.abc import Iterable, Iterator, Sequence
from typing import TypeVar

import torch

from circuitwidgets.errors import ArgumentError, ArgumentTypeError, MemoryBudgetError, NonFiniteError
from circuitwidgets.model import CircuitModel

T = TypeVar("T")


class MLPPathsExcludedWarning(UserWarning):
    """A weight-space analysis was given a model with MLPs; paths through MLPs are left out."""


_WARNED: weakref.WeakKeyDictionary[CircuitModel, set[str]] = weakref.WeakKeyDictionary()
#: Per model, the signature of each weight last found finite (checked again only when it changes).
_VERIFIED: weakref.WeakKeyDictionary[CircuitModel, dict[str, tuple[object, ...]]] = weakref.WeakKeyDictionary()


def check_model(model: object, analysis: str | None = None) -> CircuitModel:
    """Return ``model`` as a checked :class:`CircuitModel` or raise a typed error.

    The engine's validation at its public edge: every public analysis calls this
    once, then works through private functions that do not check again (so an
    analysis computed inside another neither re-checks nor re-warns). Checks:

    - ``model`` is a :class:`CircuitModel` (:class:`ArgumentTypeError`);
    - every weight lives on the model's device: a model half moved to a GPU is
      refused naming the tensor (:class:`ArgumentTypeError`);
    - every weight is finite (:class:`NonFiniteError` naming the tensor), for
      example after a cast to float16 that overflowed. Each tensor is scanned
      once (in blocks) and again only when it changes (identity, storage or
      in-place version).

    With ``analysis`` (the public function's or widget's name), a model with
    MLPs warns once per model and analysis that paths through the MLPs are
    excluded; the warning points at the caller of the public function, so call
    this directly from it.
    """
    if not isinstance(model, CircuitModel):
        raise ArgumentTypeError(f"model: expected a circuitwidgets.CircuitModel, got {type(model).__name__}")
    _check_weights(model)
    if analysis is not None and model.cfg.has_mlp:
        warned = _WARNED.setdefault(model, set())
        if analysis not in warned:
            warned.add(analysis)
            warnings.warn(
                f"{analysis}: model {model.name!r} has MLPs; weight-space analyses use attention heads and the "
                "direct path only, so every path through an MLP (MLP → head, head → MLP, token → MLP → logits) "
                "is excluded",
                MLPPathsExcludedWarning,
                stacklevel=3,
            )
    return model


#: Elements scanned at a time by :func:`count_non_finite` (bounds its scratch memory).
_FINITE_BLOCK = 2**23


def count_non_finite(tensor: torch.Tensor) -> int:
    """NaN and infinite entries of ``tensor``, scanned in blocks without upcasting.

    Each block's largest magnitude is finite exactly when the block is (NaN
    propagates through the maximum), and that reduction is several times faster
    than ``isfinite`` (about 20× for bfloat16 on a CPU); entries are counted only
    in a block that has a bad one.
    """
    t = tensor.detach()
    if t.ndim == 2 and not t.is_contiguous() and t.t().is_contiguous():
        t = t.t()  # a transposed view (a loaded encoder): scanned in storage order, since reshape would copy it
    flat = t.reshape(-1)
    bad = 0
    for start in range(0, flat.numel(), _FINITE_BLOCK):
        block = flat[start : start + _FINITE_BLOCK]
        if not bool(torch.isfinite(block.abs().amax())):
            bad += int(block.numel() - torch.isfinite(block).sum())
    return bad


#: id(tensor) -> (a weak reference to it, its (storage, in-place version) when last found finite). Keyed by id, since
#: a tensor's == is elementwise; the weak reference tells a live tensor from a new one at a reused id.
_FOUND_FINITE: dict[int, tuple[weakref.ref[torch.Tensor], tuple[int, int]]] = {}


def non_finite_once(tensor: torch.Tensor, scan: torch.Tensor | None = None) -> int:
    """:func:`count_non_finite` of ``scan`` (default ``tensor``), or 0 at once if ``tensor`` was found finite before
    and has not changed since (same storage, same in-place version).

    A dictionary or transcoder checked on every call is so scanned once per change, not once per call.
    """
    entry = _FOUND_FINITE.get(id(tensor))
    if entry is not None and entry[0]() is tensor and entry[1] == (tensor.data_ptr(), tensor._version):
        return 0
    bad = count_non_finite(tensor if scan is None else scan)
    if not bad:
        if len(_FOUND_FINITE) > 4096:  # (dead entries: drop them now and then)
            for key in [k for k, (ref, _) in _FOUND_FINITE.items() if ref() is None]:
                del _FOUND_FINITE[key]
        _FOUND_FINITE[id(tensor)] = (weakref.ref(tensor), (tensor.data_ptr(), tensor._version))
    return bad


def _signature(tensor: torch.Tensor) -> tuple[object, ...]:
    return (id(tensor), tensor.data_ptr(), tensor._version, tensor.dtype, tuple(tensor.shape))


def _check_weights(model: CircuitModel) -> None:
    """Every weight on ``model.device`` and finite (scanned once per tensor version)."""
    device = model.device
    verified = _VERIFIED.setdefault(model, {})
    for name, tensor in model.weights().items():
        if tensor.device != device:
            raise ArgumentTypeError(
                f"model.{name}: expected a tensor on {device} like W_E, got one on {tensor.device} "
                "(move the whole model with model.to(device))"
            )
        signature = _signature(tensor)
        if verified.get(name) == signature:
            continue
        bad = count_non_finite(tensor)
        if bad:
            raise NonFiniteError(
                f"model.{name}: expected finite values, got {bad:,} NaN/Inf entries in {tensor.dtype} "
                "(a cast to a narrower dtype overflows beyond its range)"
            )
        verified[name] = signature


def check_int(name: str, value: object, low: int | None = None, high: int | None = None) -> int:
    """``value`` as an int in ``[low, high)`` (either bound optional).

    Python ints, numpy integers and 0-d integer tensors are accepted; bools
    (including ``numpy.bool_``) and floats are not, even when integral.
    """
    if (
        isinstance(value, torch.Tensor)
        and value.ndim == 0
        and not value.dtype.is_floating_point
        and value.dtype != torch.bool
    ):
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ArgumentTypeError(f"{name}: expected an int, got {type(value).__name__}")
    value = int(value)
    if (low is not None and value < low) or (high is not None and value >= high):
        lo = "-inf" if low is None else str(low)
        hi = "inf" if high is None else str(high)
        raise ArgumentError(f"{name}: expected an int in [{lo}, {hi}), got {value}")
    return value


def check_bool(name: str, value: object) -> bool:
    """``value`` if it is a bool."""
    if not isinstance(value, bool):
        raise ArgumentTypeError(f"{name}: expected a bool, got {type(value).__name__}")
    return value


def check_choice(name: str, value: object, choices: Sequence[str]) -> str:
    """``value`` if it is one of ``choices``."""
    if not isinstance(value, str) or value not in choices:
        raise ArgumentError(f"{name}: expected one of {tuple(choices)}, got {value!r}")
    return value


def check_head(model: CircuitModel, layer: object, head: object, prefix: str = "") -> tuple[int, int]:
    """``(layer, head)`` checked against the model's shape."""
    lay = check_int(f"{prefix}layer", layer, 0, model.cfg.n_layers)
    hd = check_int(f"{prefix}head", head, 0, model.cfg.n_heads)
    return lay, hd


def check_token(model: CircuitModel, name: str, token: object) -> int:
    """A token id from an int or a string that is exactly one token of the model's tokenizer."""
    if isinstance(token, str):
        ids = model.tokenizer.encode(token)
        if len(ids) != 1:
            raise ArgumentError(
                f"{name}: expected a string that is exactly one token, got {token!r} ({len(ids)} tokens)"
            )
        return int(ids[0])
    return check_int(name, token, 0, model.cfg.d_vocab)


def check_token_ids(model: CircuitModel, name: str, tokens: object) -> torch.Tensor:
    """A 1-D ``long`` tensor of token ids (on the model's device) from a sequence or tensor."""
    if isinstance(tokens, (str, bytes)):
        raise ArgumentTypeError(f"{name}: expected a sequence of token ids, got {type(tokens).__name__}")
    try:
        ids = torch.as_tensor(tokens, device=model.device)
    except (TypeError, ValueError, RuntimeError) as exc:
        raise ArgumentTypeError(f"{name}: expected a sequence of token ids, got {type(tokens).__name__}") from exc
    if ids.ndim != 1 or ids.dtype.is_floating_point or ids.dtype == torch.bool:
        raise ArgumentError(
            f"{name}: expected a 1-D sequence of integer token ids, got shape {tuple(ids.shape)} dtype {ids.dtype}"
        )
    if ids.numel() == 0:
        raise ArgumentError(f"{name}: expected at least one token id, got none")
    if int(ids.min()) < 0 or int(ids.max()) >= model.cfg.d_vocab:
        raise ArgumentError(
            f"{name}: expected ids in [0, {model.cfg.d_vocab}), got range [{int(ids.min())}, {int(ids.max())}]"
        )
    return ids.long()


def device_memory(device: torch.device) -> int:
    """Total memory of ``device`` in bytes (physical memory for the CPU)."""
    if device.type == "cuda":
        return int(torch.cuda.get_device_properties(device).total_memory)
    return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


def check_budget(name: str, value: object, device: torch.device | None = None) -> int:
    """A positive memory budget in bytes, refused when larger than ``device``'s memory (when given).

    A budget the device cannot hold would only move the failure into the
    middle of the computation (an allocation error or swapping).
    """
    budget = check_int(name, value, 1)
    if device is not None and device.type in ("cpu", "cuda"):
        total = device_memory(device)
        if budget > total:
            raise MemoryBudgetError(
                f"{name}: expected at most the {total:,} bytes of memory on {device}, got {budget:,}"
            )
    return budget


def progress(items: Iterable[T], total: int | None, desc: str, enabled: bool | None) -> Iterator[T]:
    """Wrap ``items`` in a plain-text ``tqdm`` bar on stderr (never a notebook widget, so none is saved with a
    notebook); ``enabled=None`` lets tqdm decide (off when stderr is not a terminal)."""
    from tqdm import tqdm

    disable = None if enabled is None else not enabled
    yield from tqdm(items, total=total, desc=desc, disable=disable, leave=False)
