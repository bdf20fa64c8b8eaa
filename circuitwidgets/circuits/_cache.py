"""Per-model cache of the ``[d_model, d_model]`` vocabulary products the engine reuses.

``W_U W_E`` and ``W_Eᵀ W_E`` cost ``O(d_vocab d_model²)`` each (about 30 GMAC for
GPT-2 small) and turn every full-circuit eigenvalue problem into a
``d_head × d_head`` one. They are cached per model and recomputed when the
weights change (tensor identity or in-place version counter).
"""

from __future__ import annotations

import weakref

import torch

from circuitwidgets.model import CircuitModel

_CACHE: weakref.WeakKeyDictionary[CircuitModel, dict[str, tuple[tuple[int, ...], torch.Tensor]]] = (
    weakref.WeakKeyDictionary()
)


def _signature(*tensors: torch.Tensor) -> tuple[int, ...]:
    return tuple(x for t in tensors for x in (id(t), t.data_ptr(), t._version))


def unembed_embed(model: CircuitModel) -> torch.Tensor:
    """``W_U W_E`` ``[d_model, d_model]`` in the weights' dtype; cost ``O(V d_model²)`` once per model."""
    return _cached(model, "UE", model.W_U, model.W_E)


def embed_gram(model: CircuitModel) -> torch.Tensor:
    """``W_Eᵀ W_E`` ``[d_model, d_model]`` in the weights' dtype; cost ``O(V d_model²)`` once per model."""
    return _cached(model, "EE", model.W_E.T, model.W_E)


def _cached(model: CircuitModel, key: str, left: torch.Tensor, right: torch.Tensor) -> torch.Tensor:
    store = _CACHE.setdefault(model, {})
    signature = _signature(model.W_E, model.W_U)
    hit = store.get(key)
    if hit is not None and hit[0] == signature:
        return hit[1]
    value = left @ right
    store[key] = (signature, value)
    return value
