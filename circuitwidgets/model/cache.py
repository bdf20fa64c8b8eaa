"""``ActivationCache``: the activations of one forward pass, by TransformerLens's names."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

import torch

from circuitwidgets.errors import ShapeError


class ActivationCache:
    """Activations of one forward pass, read as ``cache["pattern", layer]``.

    Names (TransformerLens's): ``q, k, v, z [batch, pos, head, d_head]`` (``q``
    and ``k`` after rotary; ``k`` and ``v`` repeated per query head under
    grouped-query attention);
    ``attn_scores, pattern [batch, head, dest, src]``; ``result [batch, pos, head,
    d_model]`` (each head's output ``z W_O`` as computed); ``attn_out, mlp_out,
    resid_pre, resid_mid, resid_post [batch, pos, d_model]``; ``scale [batch, pos,
    1]`` (the norm's per-token divisor of the attention input: ``sqrt(var + eps)`` for
    LayerNorm, ``rms`` for RMSNorm, 1 without a norm), ``scale_mlp`` (of the MLP
    input), ``scale_attn_post`` and ``scale_mlp_post`` (the rms of each sublayer's
    output, for a model that normalises it: Gemma 2/3, OLMo 2/3; hook points, which
    ``freeze_norms`` leaves recomputed as the causal convention does) and, without a
    layer, ``scale_final`` (of the unembedding's input);
    ``mlp_pre, mlp_post [batch, pos, d_mlp]`` (each neuron's input and
    activation; gated MLPs: the gate's input, and the product fed to ``W_out``); Gemma 4's
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

    def get(self, item: str | tuple[str, int | None]) -> torch.Tensor | None:
        """The activation ``item`` (``name`` or ``(name, layer)``), or ``None`` when it was not kept."""
        key = self.key(*item) if isinstance(item, tuple) else item
        return self._store.get(key)

    def __iter__(self) -> Iterator[str]:
        return iter(self._store)

    def __len__(self) -> int:
        return len(self._store)

    def keys(self) -> list[str]:
        """Stored keys."""
        return list(self._store)


#: A hook: reads an activation and returns ``None`` (keep it) or a tensor of the same shape to use instead.
Hook = Callable[[torch.Tensor], "torch.Tensor | None"]


class Recorder:
    """Keeps the activations a forward pass was asked for, and applies its hooks.

    Called as ``value = record(name, layer, value)`` at every hook point: a hook
    registered for ``(name, layer)`` may return a replacement (of the same
    shape), which the pass then uses and the cache keeps; ``keep`` names the
    activations stored in ``store`` (``None``: all). :meth:`keeps` lets a
    sublayer skip work whose only purpose is an activation nobody asked for or
    hooked (the dense attention pattern of a long text).
    """

    def __init__(
        self,
        store: dict[str, torch.Tensor],
        keep: set[str] | None,
        hooks: Mapping[tuple[str, int | None], Hook] | None = None,
        prefix: Callable[[int], tuple[torch.Tensor, torch.Tensor]] | None = None,
        offset: int = 0,
        resume: tuple[int, str, torch.Tensor] | None = None,
        join: Callable[[int, torch.Tensor], torch.Tensor] | None = None,
        narrow_hooks: bool = False,
    ) -> None:
        self.store, self.keep = store, keep
        self.hooks = dict(hooks or {})
        self._hooked = {name for name, _ in self.hooks}
        # A suffix-only pass (the causal engine's): this pass computes positions ``offset …`` only, and layer ``l``'s
        # keys and values of the earlier positions are ``prefix(l)`` (``[batch, offset, heads, d_head]``, from a run
        # that agrees with this one before ``offset``: causal attention leaves those positions unchanged).
        self.prefix, self.offset = prefix, offset
        # ``(layer, name, value)``: at ``layer`` the attention sublayer's ``name`` (``z`` or ``attn_out``) is ``value``,
        # known from a run that agrees with this one up to there, so the pass skips computing it (the causal engine's
        # patches of ``z`` and ``attn_out``: the queries, keys, values and pattern of the patched layer are the base
        # run's). A hook on ``name`` still applies.
        self.resume = resume
        # ``join(layer, resid)``: the residual stream entering ``layer``, with more sequences appended on the batch
        # axis (the causal engine's staircase passes: variants patched at a later layer join the pass there, from
        # the base run's stream). Whatever is per sequence and given for the first batch (per-layer inputs) repeats.
        self.join = join
        # The hooks take the last layer's rows as a pass narrowed to the logits' positions gives them (the causal
        # engine's mixers): every activation after its keys and values at those positions only. Such a pass narrows
        # even when its last layer is hooked.
        self.narrow_hooks = narrow_hooks

    def keeps(self, name: str) -> bool:
        """Whether ``name`` is kept or hooked (at some layer)."""
        return self.keep is None or name in self.keep or name in self._hooked

    def quiet(self, name: str, layer: int | None) -> bool:
        """Whether nothing keeps or hooks ``(name, layer)``: the pass may then compute past it in a fused kernel."""
        return not (self.keep is None or name in self.keep or (name, layer) in self.hooks)

    def silent_at(self, layer: int) -> bool:
        """Whether this pass keeps nothing and hooks nothing at ``layer`` (but its input, ``resid_pre``, which the
        layer reads whole before narrowing, and any hook when :attr:`narrow_hooks`) nor at ``resid_final``: the layer
        may then compute its queries and everything after them only at the positions the logits are read at."""
        return (
            self.keep is not None
            and not self.keep
            and all((l != layer or n == "resid_pre" or self.narrow_hooks) and n != "resid_final" for n, l in self.hooks)
        )

    def __call__(self, name: str, layer: int | None, value: torch.Tensor) -> torch.Tensor:
        hook = self.hooks.get((name, layer))
        if hook is not None:
            out = hook(value)
            if out is not None:
                if not isinstance(out, torch.Tensor) or out.shape != value.shape:
                    got = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
                    raise ShapeError(
                        f"hooks[{(name, layer)!r}]: expected None or a tensor of shape {tuple(value.shape)}, got {got}"
                    )
                value = out.to(value.dtype)
        if self.keep is None or name in self.keep:
            self.store[ActivationCache.key(name, layer)] = value
        return value
