"""The queries', keys' and values' per-head weights of a layer laid out as one ``[d_model, n]`` matrix.

The canonical weights are per head, ``W_Q [L, H, d_model, d_head]``; a product
``x W_Q[l]`` over all heads needs them as ``[d_model, H · d_head]``, which is a
copy (``einsum`` makes it on every call). At the few dozen rows of a patching
pass that copy cost as much as the product itself (20% of a GPT-2-small sweep,
torch profiler), and the three projections were three products where one does.
:class:`FusedProjections` keeps each layer's ``[W_Q | W_K | W_V]`` concatenated,
built once and rebuilt whenever a stored tensor changes (a new tensor, a move, a
cast or an in-place edit: its ``_version``), so a layer projects in one ``addmm``.

The copy costs memory (about the three projections' size), so it is kept only
while all layers' together stay under :data:`FUSED_CACHE_BYTES`; past that, and
whenever the weights require gradients, the caller projects per head as before.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

#: Most bytes the fused projection weights of one model may hold (larger models project per head, as before).
FUSED_CACHE_BYTES = 256 * 2**20

Stamp = tuple[tuple[int, int, int], ...]


class FusedProjections:
    """Per layer, ``[W_Q | W_K | W_V]`` as one ``[d_model, n]`` matrix and its bias (cached; module docstring)."""

    def __init__(self) -> None:
        self._entries: dict[int, tuple[Stamp, torch.Tensor, torch.Tensor | None]] = {}

    def get(
        self, buffers: Mapping[str, torch.Tensor | None], layer: int
    ) -> tuple[torch.Tensor, torch.Tensor | None, tuple[int, int, int]] | None:
        """``(weight [d_model, n], bias [n] | None, (n_q, n_k, n_v))`` of ``layer``, or ``None`` to project per head."""
        sources = [buffers.get(name) for name in ("W_Q", "W_K", "W_V", "b_Q", "b_K", "b_V")]
        weights = [t for t in sources if t is not None]
        if len(weights) < 3 or sources[0] is None or sources[1] is None or sources[2] is None:
            return None
        if any(t.requires_grad for t in weights):  # gradients must reach the stored tensors: no detached copy
            return None
        stamp = tuple((id(t), t.data_ptr(), t._version) for t in weights)
        entry = self._entries.get(layer)
        if entry is None or entry[0] != stamp:
            per_layer = sum(int(t[0].numel()) for t in sources[:3] if t is not None) * sources[0].element_size()
            if per_layer * sources[0].shape[0] > FUSED_CACHE_BYTES:
                return None
            entry = (stamp, *_build(sources, layer))
            self._entries[layer] = entry
        _, weight, bias = entry
        q, k, v = (w[layer] for w in sources[:3] if w is not None)
        widths = (q.shape[0] * q.shape[2], k.shape[0] * k.shape[2], v.shape[0] * v.shape[2])
        return weight, bias, widths


def _build(sources: list[torch.Tensor | None], layer: int) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Layer ``layer``'s fused weight and bias (zeros for a projection without one; ``None`` when none has one)."""
    mats = [w[layer] for w in sources[:3] if w is not None]  # [heads, d_model, d_head] each
    weight = torch.cat([m.permute(1, 0, 2).reshape(m.shape[1], -1) for m in mats], dim=1).contiguous()
    if all(b is None for b in sources[3:]):
        return weight, None
    parts = [
        b[layer].reshape(-1) if b is not None else m.new_zeros(m.shape[0] * m.shape[2])
        for b, m in zip(sources[3:], mats, strict=True)
    ]
    return weight, torch.cat(parts)
