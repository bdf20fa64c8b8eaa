"""Writing canonical tensors from a Hugging Face decoder: per-layer stacks, embedding, unembedding, score scales.

Each is built so that a conversion never holds two copies of a large model:
stacks are preallocated and filled one layer at a time, the unembedding is
folded in blocks of vocabulary rows, and the embedding is scaled in place
when the loader owns the source.
"""

from __future__ import annotations

import math

import torch

from circuitwidgets.errors import UnsupportedArchitectureError


class Stack:
    """Per-layer tensors written into preallocated ``[n_layers, ...]`` tensors of the target dtype.

    Stacking lists would hold every layer twice; this holds each once.
    """

    def __init__(self, n_layers: int, dtype: torch.dtype, device: torch.device) -> None:
        self.n_layers, self.dtype, self.device = n_layers, dtype, device
        self.out: dict[str, torch.Tensor] = {}
        self.missing: dict[str, list[int]] = {}

    def put(self, name: str, layer: int, value: torch.Tensor | None) -> None:
        """Write ``value`` as layer ``layer`` of ``name`` (``None``: the layer has no such tensor)."""
        if value is None:
            self.missing.setdefault(name, []).append(layer)
            return
        dtype = torch.float32 if name == "rotary_freq" else self.dtype
        if name not in self.out:
            self.out[name] = torch.zeros((self.n_layers, *value.shape), dtype=dtype, device=self.device)
        self.out[name][layer] = value.to(device=self.device, dtype=dtype)

    def result(self, arch: str) -> dict[str, torch.Tensor]:
        """The stacked tensors; a tensor present in some layers only is refused (rotary frequencies excepted)."""
        for name, layers in self.missing.items():
            if name in self.out and name != "rotary_freq":
                raise UnsupportedArchitectureError(
                    f"model: {arch} with {name} in some layers only (not {layers}) is not supported"
                )
        return self.out


#: Bytes of float32 scratch per block when folding the final norm into the unembedding.
BLOCK_BYTES = 2**26


def unembedding(
    head: torch.Tensor, final: torch.Tensor, work: torch.dtype, target: torch.dtype, device: torch.device
) -> torch.Tensor:
    """``W_U = diag(final) headᵀ`` ``[d_model, d_vocab]``, built in blocks of vocabulary rows.

    A 128K–256K vocabulary in float32 would be gigabytes; blocks keep the
    scratch at :data:`BLOCK_BYTES`.
    """
    V, d = head.shape
    out = torch.empty(d, V, dtype=target, device=device)
    block = max(1, BLOCK_BYTES // (d * 4))
    for start in range(0, V, block):
        rows = head[start : start + block].to(work)
        out[:, start : start + block] = (final[:, None] * rows.T).to(device=device, dtype=target)
    return out


def embedding(
    W_E: torch.Tensor, scale: float | None, target: torch.dtype, device: torch.device, in_place: bool
) -> torch.Tensor:
    """``W_E`` (times Gemma's ``√d_model``, rounded to the weights' dtype as the source does) in ``target``.

    With ``in_place`` (the directory loader, which owns the source model) the
    source's own tensor is used when dtype and device allow, so the largest
    matrix of a 128K–256K-vocabulary model is never held twice.
    """
    reuse = in_place and W_E.dtype == target and W_E.device == device
    out = W_E if reuse else W_E.to(device=device, dtype=target, copy=True)
    if scale is not None:
        out.mul_(torch.tensor(scale, dtype=W_E.dtype).to(target))
    return out


def equalise_scales(weights: dict[str, torch.Tensor], divisors: list[float]) -> float:
    """Give every layer layer 0's score divisor by rescaling its queries; return that divisor.

    ``(q / s_l) · k = (q · s_0 / s_l) · k / s_0``. With QK-norm the queries are
    scaled after their norm, so the factor goes into ``q_norm`` instead of ``W_Q``.
    """
    base = divisors[0] if divisors else 1.0
    for layer, s in enumerate(divisors):
        if math.isclose(s, base, rel_tol=1e-12):
            continue
        ratio = base / s
        for name in ("q_norm",) if "q_norm" in weights else ("W_Q", "b_Q"):
            if name in weights:
                weights[name][layer] *= ratio
    return base
