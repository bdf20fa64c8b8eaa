"""Cache of the ``[d_model, d_model]`` products of shared outer factors the engine reuses.

``W_U W_E`` and ``W_Eᵀ W_E`` cost ``O(d_vocab d_model²)`` each (about 30 GMAC for
GPT-2 small, 4 TFLOP at Llama-3-8B's shape) and turn every full-circuit
eigenvalue or norm problem into a ``d_head × d_head`` one. They are computed in
the compute precision (:mod:`._precision`) and kept while both operands live
and are unchanged (same tensor, storage, geometry and in-place version), so
every analysis of one model pays for each once.
"""

from __future__ import annotations

import weakref
from collections import OrderedDict

import torch

from circuitwidgets.circuits._precision import matmul
from circuitwidgets.model import CircuitModel

#: Products kept at once (a few per model: ``W_U W_E``, ``W_Eᵀ W_E``, ``W_U W_Uᵀ``).
MAX_ENTRIES = 8

_Key = tuple[object, ...]
_CACHE: OrderedDict[_Key, tuple[weakref.ref[torch.Tensor], weakref.ref[torch.Tensor], torch.Tensor]] = OrderedDict()


def _base(tensor: torch.Tensor) -> torch.Tensor:
    return tensor if tensor._base is None else tensor._base


def _key(tensor: torch.Tensor) -> _Key:
    return (id(_base(tensor)), tensor.data_ptr(), tuple(tensor.shape), tensor.stride(), tensor.dtype, tensor._version)


def cached_matmul(left: torch.Tensor, right: torch.Tensor) -> torch.Tensor:
    """``left @ right`` in the compute dtype, cached while both operands are alive and unchanged.

    Cost ``O(m k n)`` the first time, nothing after.
    """
    key = (*_key(left), *_key(right))
    hit = _CACHE.get(key)
    if hit is not None and hit[0]() is _base(left) and hit[1]() is _base(right):
        _CACHE.move_to_end(key)
        return hit[2]
    value = matmul(left, right)
    _CACHE[key] = (weakref.ref(_base(left)), weakref.ref(_base(right)), value)
    while len(_CACHE) > MAX_ENTRIES:
        _CACHE.popitem(last=False)
    return value


def unembed_embed(model: CircuitModel) -> torch.Tensor:
    """``W_U W_E`` ``[d_model, d_model]`` in the compute dtype; cost ``O(V d_model²)`` once per model."""
    return cached_matmul(model.W_U, model.W_E)


def embed_gram(model: CircuitModel) -> torch.Tensor:
    """``W_Eᵀ W_E`` ``[d_model, d_model]`` in the compute dtype; cost ``O(V d_model²)`` once per model."""
    return cached_matmul(model.W_E.T, model.W_E)
