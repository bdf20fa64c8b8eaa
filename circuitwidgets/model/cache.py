"""``ActivationCache``: the activations of one forward pass, by TransformerLens's names."""

from __future__ import annotations

from collections.abc import Iterator

import torch


class ActivationCache:
    """Activations of one forward pass, read as ``cache["pattern", layer]``.

    Names (TransformerLens's): ``q, k, v, z [batch, pos, head, d_head]`` (``q``
    and ``k`` after rotary; ``k`` and ``v`` repeated per query head under
    grouped-query attention);
    ``attn_scores, pattern [batch, head, dest, src]``; ``result [batch, pos, head,
    d_model]`` (each head's output ``z W_O`` as computed); ``attn_out, mlp_out,
    resid_pre, resid_mid, resid_post [batch, pos, d_model]``; ``scale [batch, pos,
    1]`` (layer-norm divisor of the attention input, when normalised); Gemma 4's
    ``per_layer_input [batch, pos, d_per_layer]`` (the layer's per-layer input)
    and ``per_layer_out [batch, pos, d_model]`` (what it writes into the
    residual stream); and, without a layer, ``embed``, ``pos_embed``,
    ``resid_final``. A layer that shares an earlier layer's keys and values
    records that layer's ``k`` and ``v``.
    """

    def __init__(self, store: dict[str, torch.Tensor]) -> None:
        self._store = store

    @staticmethod
    def key(name: str, layer: int | None = None) -> str:
        """Storage key of an activation."""
        return name if layer is None else f"{name}.{layer}"

    def __getitem__(self, item: str | tuple[str, int]) -> torch.Tensor:
        key = self.key(*item) if isinstance(item, tuple) else item
        if key not in self._store:
            raise KeyError(f"cache: no activation {item!r}; available: {sorted(self._store)}")
        return self._store[key]

    def __contains__(self, item: object) -> bool:
        key = self.key(*item) if isinstance(item, tuple) else item
        return key in self._store

    def __iter__(self) -> Iterator[str]:
        return iter(self._store)

    def __len__(self) -> int:
        return len(self._store)

    def keys(self) -> list[str]:
        """Stored keys."""
        return list(self._store)


class Recorder:
    """Keeps the activations a forward pass was asked for (``keep``: names, ``None`` for all) in ``store``.

    Called as ``record(name, layer, value)``; :meth:`keeps` lets a sublayer skip work whose
    only purpose is an activation nobody asked for (the dense attention pattern of a long text).
    """

    def __init__(self, store: dict[str, torch.Tensor], keep: set[str] | None) -> None:
        self.store, self.keep = store, keep

    def keeps(self, name: str) -> bool:
        """Whether ``name`` is kept."""
        return self.keep is None or name in self.keep

    def __call__(self, name: str, layer: int | None, value: torch.Tensor) -> None:
        if self.keeps(name):
            self.store[ActivationCache.key(name, layer)] = value
