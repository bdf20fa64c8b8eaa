"""Running a :class:`~circuitwidgets.CircuitModel`: the forward pass, its cache and its hooks.

A mixin of the model, apart so that the model's file holds its weights and
this one the pass over them: embed, each layer (:mod:`circuitwidgets.model.sublayers`),
the final norm and the unembedding. Every activation the cache can keep is a
hook point (:class:`~circuitwidgets.model.cache.Recorder`): a hook reads it, or
returns a tensor of the same shape that the pass uses instead. Hooks are
arguments of one call, never state on the model, so nothing is left hooked
after a call returns or raises.

The causal engine (:mod:`circuitwidgets.causal`) also starts a pass at a later
layer from a given residual stream (:meth:`Runner.run_from`), and asks for the
logits at a few positions and token ids only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

from circuitwidgets.errors import ArgumentError, ArgumentTypeError, MemoryBudgetError, ShapeError
from circuitwidgets.model.cache import ActivationCache, Hook, Recorder
from circuitwidgets.model.config import ModelConfig
from circuitwidgets.model.forward import affine, check_overrides, check_weights_present, forward_bytes, soft_cap
from circuitwidgets.model.hook_names import GLOBAL_NAMES, LAYER_NAMES, did_you_mean, fwd_hooks_message, tl_key
from circuitwidgets.model.sublayers import Sublayers

#: Default bytes one :meth:`CircuitModel.run_with_cache` may hold (logits, kept activations, one layer's work).
FORWARD_MEMORY_BUDGET = 8 * 2**30

Hooks = Mapping[tuple[str, "int | None"], Hook]


class Runner(Sublayers):
    """The forward pass of :class:`~circuitwidgets.CircuitModel` (mixed into it), over its sublayers."""

    cfg: ModelConfig
    name: str

    @property
    def W_E(self) -> torch.Tensor:  # noqa: N802  # pragma: no cover - defined by the model
        """Token embedding."""
        raise NotImplementedError

    @property
    def W_U(self) -> torch.Tensor:  # noqa: N802  # pragma: no cover
        """Unembedding."""
        raise NotImplementedError

    @property
    def W_pos(self) -> torch.Tensor | None:  # noqa: N802  # pragma: no cover
        """Positions."""
        raise NotImplementedError

    def _check_tokens(self, tokens: torch.Tensor | Sequence[int] | str) -> torch.Tensor:  # pragma: no cover
        """Checked ``[batch, pos]`` ids (defined by the model)."""
        raise NotImplementedError

    # ---------------------------------------------------------------- public
    def forward(self, tokens: torch.Tensor | Sequence[int] | str) -> torch.Tensor:
        """Logits ``[batch, pos, d_vocab]``."""
        logits, _ = self.run_with_cache(tokens, cache=False)
        return logits

    @torch.no_grad()
    def run_with_cache(
        self,
        tokens: torch.Tensor | Sequence[int] | str,
        *,
        patterns: Sequence[torch.Tensor | None] | None = None,
        head_results: Sequence[torch.Tensor | None] | None = None,
        names: Sequence[str] | None = None,
        cache: bool = True,
        memory_budget: int | None = None,
        hooks: Hooks | None = None,
    ) -> tuple[torch.Tensor, ActivationCache]:
        """Run the model and return ``(logits, cache)``.

        Parameters
        ----------
        tokens
            ``[batch, pos]`` ids (or ``[pos]``, or a text); one position works (its
            pattern is ``[[1]]``), none is a :class:`ShapeError`.
        patterns
            Per layer, a frozen attention pattern ``[batch, n_heads, dest, src]``
            used instead of the computed one (``None`` entries compute it).
        head_results
            Per layer, ``[batch, pos, n_heads, d_model]`` written to the residual
            stream instead of each head's computed output ``z W_O`` (``b_O`` is still
            added). The cache still records the computed ``result``: the paper's
            term-importance algorithm feeds one run's computed outputs into the next.
        names
            Activation names to keep (default all); see :class:`ActivationCache`.
        cache
            ``False`` keeps nothing (a plain forward pass).
        memory_budget
            Bytes the run may hold at once (default :data:`FORWARD_MEMORY_BUDGET`):
            the logits, the kept activations and one layer's working tensors.
            A larger estimate raises :class:`MemoryBudgetError` before anything
            is computed (pass fewer sequences, fewer ``names``, or a larger budget).
        hooks
            ``{(name, layer): fn}`` (``layer`` ``None`` for ``embed``, ``pos_embed``,
            ``resid_final``, ``scale_final``): ``fn(value)`` returns ``None`` to leave
            the activation as computed, or a tensor of its shape that the pass uses
            instead (and the cache keeps). See :meth:`run_with_hooks`.
        """
        check_weights_present(self.cfg, self.name)
        t = self._check_tokens(tokens)
        keep = self._check_names(names)
        checked = self._check_hooks(hooks)
        self._check_budget(t, keep if cache else set(), memory_budget, cache)
        store: dict[str, torch.Tensor] = {}
        record = Recorder(store, keep if cache else set(), checked)
        batch, n_pos = t.shape
        check_overrides("patterns", patterns, (batch, self.cfg.n_heads, n_pos, n_pos), self.cfg.n_layers)
        check_overrides(
            "head_results", head_results, (batch, n_pos, self.cfg.n_heads, self.cfg.d_model), self.cfg.n_layers
        )
        logits = self._run(t, record, patterns=patterns, head_results=head_results)
        return logits, ActivationCache(store)

    def run_with_hooks(
        self,
        tokens: torch.Tensor | Sequence[int] | str,
        hooks: Hooks | None = None,
        *,
        freeze_norms: ActivationCache | None = None,
        memory_budget: int | None = None,
        fwd_hooks: object = None,
    ) -> torch.Tensor:
        """Logits ``[batch, pos, d_vocab]`` of a run whose activations ``hooks`` read or replace.

        ``hooks`` maps ``(name, layer)`` to ``fn(value) -> value | None`` (names as in
        :class:`ActivationCache`: ``resid_pre``, ``attn_out``, ``z``, ``pattern``,
        ``mlp_post``, ``scale`` …). ``freeze_norms`` replays another run's norm
        scales (``scale``, ``scale_mlp``, ``scale_final`` of a cache of the same
        shape): every norm is then a fixed linear map, as in direct logit
        attribution. A hook of your own on a scale wins over the frozen one.
        No state is left on the model, whatever happens inside a hook.
        A key may also be TransformerLens's hook name (``"blocks.0.attn.hook_z"``);
        TransformerLens's ``fwd_hooks=[(name, fn)]`` list is refused with the equivalent call,
        since its functions take ``(value, hook)`` where ours take ``value``.
        """
        if fwd_hooks is not None or (hooks is not None and not isinstance(hooks, Mapping)):
            raise ArgumentTypeError(fwd_hooks_message(fwd_hooks if fwd_hooks is not None else hooks))
        if hooks is None:
            raise ArgumentTypeError("hooks: expected a dict {(name, layer): fn}, got None")
        merged: dict[tuple[str, int | None], Hook] = dict(freeze_norms_hooks(self.cfg, freeze_norms))
        merged.update(self._check_hooks(hooks) or {})
        logits, _ = self.run_with_cache(tokens, hooks=merged, cache=False, memory_budget=memory_budget)
        return logits

    def forward_bytes(self, batch: int, n_pos: int, names: set[str] | None = None) -> int:
        """Estimated peak bytes of :meth:`run_with_cache` on ``[batch, n_pos]`` tokens keeping ``names`` (all when ``None``).

        Counts the logits, the kept activations of every layer and one layer's
        working tensors, in the weights' dtype (``circuitwidgets.model.forward.forward_bytes``).
        """
        return forward_bytes(self.cfg, batch, n_pos, names, self.W_E.element_size())

    def restart_layer(self, layer: int) -> int:
        """The earliest layer a pass must start at to recompute ``layer`` and everything after it.

        ``layer`` itself, unless a later layer reuses an earlier layer's keys and
        values (Gemma 4's ``kv_sources``): then that earlier layer, and so on, since
        the layers the pass then runs through may reuse still earlier ones
        (sources ``(0, 1, 0, 1)``: layer 3 reads layer 1's, and layer 2, run on the
        way from layer 1, reads layer 0's).
        """
        sources = self.cfg.kv_sources
        if sources is None:
            return layer
        start = layer
        while (earliest := min(sources[j] for j in range(start, self.cfg.n_layers))) < start:
            start = earliest
        return start

    def run_from(
        self,
        tokens: torch.Tensor,
        start: int,
        resid: torch.Tensor | None,
        record: Recorder,
        *,
        positions: Sequence[int] | None = None,
        columns: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Logits of a pass that starts at layer ``start`` from the residual stream ``resid`` ``[batch, pos, d_model]``.

        ``tokens`` ``[batch, pos]`` (checked ids; used for positions and per-layer
        inputs; ``resid`` may hold a multiple of its rows, the same prompts repeated); ``start`` 0 with ``resid``
        ``None`` is a whole pass. Only the
        logits at ``positions`` (all when ``None``) and of token ids ``columns``
        (all when ``None``) are computed: ``[batch, len(positions), len(columns)]``.
        Gradients flow when the caller enables them. ``start`` must come from
        :meth:`restart_layer`.
        """
        check_weights_present(self.cfg, self.name)
        if start and resid is None:
            raise ArgumentError(f"resid: a pass starting at layer {start} needs the residual stream there, got None")
        return self._run(tokens, record, start=start, resid=resid, positions=positions, columns=columns)

    # --------------------------------------------------------------- private
    def _run(
        self,
        t: torch.Tensor,
        record: Recorder,
        *,
        patterns: Sequence[torch.Tensor | None] | None = None,
        head_results: Sequence[torch.Tensor | None] | None = None,
        start: int = 0,
        resid: torch.Tensor | None = None,
        positions: Sequence[int] | None = None,
        columns: torch.Tensor | None = None,
    ) -> torch.Tensor:
        cfg = self.cfg
        batch, n_pos = t.shape
        offset = record.offset  # a suffix-only pass computes positions offset … n_pos − 1 (Recorder)
        # A pass restarted above layer 0 needs the embedding only for per-layer inputs (Gemma 4): else no lookup.
        embed = self.W_E[t[:, offset:]] if resid is None or cfg.d_per_layer is not None else None
        per_layer = self._per_layer_inputs(t[:, offset:], embed) if embed is not None else None
        pos = self.W_pos[offset:n_pos][None] if self.W_pos is not None else None
        if resid is None:
            assert embed is not None  # (looked up above whenever the pass starts at the embedding)
            resid = record("embed", None, embed)
            if pos is not None:
                added = record("pos_embed", None, pos.expand(batch, -1, -1))
                if cfg.positional_embedding_type == "standard":
                    resid = resid + added
        shared: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}  # keys and values of layers that later layers reuse
        last = cfg.n_layers - 1
        read = None if positions is None else [p - offset for p in positions]
        asked = None
        if read and patterns is None and head_results is None and record.silent_at(last):
            asked = sorted(set(read))  # the last layer computes its queries and what follows at these rows only
        for layer in range(start, cfg.n_layers):
            frozen = patterns[layer] if patterns is not None else None
            replaced = head_results[layer] if head_results is not None else None
            queries = asked if layer == last else None
            if record.join is not None:
                resid = record.join(layer, resid)
            inputs = per_layer
            if inputs is not None and inputs.shape[0] != resid.shape[0]:  # sequences joined: the same tokens, repeated
                inputs = inputs.repeat(resid.shape[0] // inputs.shape[0], 1, 1, 1)
            resid = self._layer(layer, resid, pos, frozen, replaced, shared, inputs, record, queries)
        resid = record("resid_final", None, resid)
        if read is not None:
            row = {i: j for j, i in enumerate(asked or [])}
            at = read if asked is None else [row[i] for i in read]
            if at != list(range(resid.shape[1])):
                resid = resid[:, at]
        final = self._normalize(resid, record, "scale_final", None)
        W_U = self.W_U if columns is None else self.W_U[:, columns]
        b_U = self.weight("b_U")
        if b_U is not None and b_U.dtype == final.dtype:  # the bias added inside the product's kernel
            logits = affine(final, W_U, b_U if columns is None else b_U[columns])
        else:
            logits = final @ W_U if b_U is None else final @ W_U + (b_U if columns is None else b_U[columns])
        return soft_cap(logits, cfg.final_softcap)

    def _check_names(self, names: Sequence[str] | None) -> set[str] | None:
        if names is not None and (isinstance(names, str) or not all(isinstance(n, str) for n in names)):
            raise ArgumentTypeError(f"names: expected a list of activation names, got {names!r:.80}")
        return set(names) if names is not None else None

    def _check_hooks(self, hooks: Hooks | None) -> dict[tuple[str, int | None], Hook] | None:
        """``hooks`` checked: known names, layers in range (``None`` for the layerless names), callables."""
        if hooks is None:
            return None
        if isinstance(hooks, (list, tuple)):
            raise ArgumentTypeError(fwd_hooks_message(hooks))
        if not isinstance(hooks, Mapping):
            raise ArgumentTypeError(f"hooks: expected a dict {{(name, layer): fn}}, got {type(hooks).__name__}")
        out: dict[tuple[str, int | None], Hook] = {}
        for given, fn in hooks.items():
            key = tl_key(given)
            if not (isinstance(key, tuple) and len(key) == 2 and isinstance(key[0], str)):
                raise ArgumentTypeError(f"hooks: expected keys (name, layer), got {given!r:.80}{did_you_mean(given)}")
            name, layer = key
            if name in GLOBAL_NAMES:
                if layer is not None:
                    raise ArgumentError(f"hooks: {name!r} has no layer; expected the key ({name!r}, None), got {key!r}")
            elif name in LAYER_NAMES:
                if isinstance(layer, bool) or not isinstance(layer, int) or not 0 <= layer < self.cfg.n_layers:
                    raise ArgumentError(
                        f"hooks: expected a layer in [0, {self.cfg.n_layers}) for {name!r}, got {layer!r}"
                    )
            else:
                raise ArgumentError(
                    f"hooks: unknown activation {name!r}; expected one of {sorted(LAYER_NAMES | GLOBAL_NAMES)}"
                    f"{did_you_mean(name)}"
                )
            if not callable(fn):
                raise ArgumentTypeError(
                    f"hooks[{key!r}]: expected a callable fn(value) -> value | None, got {type(fn).__name__}"
                )
            out[(name, layer)] = fn
        return out

    def _check_budget(self, t: torch.Tensor, keep: set[str] | None, memory_budget: int | None, cache: bool) -> None:
        budget = FORWARD_MEMORY_BUDGET if memory_budget is None else memory_budget
        if isinstance(budget, bool) or not isinstance(budget, int) or budget < 1:
            raise ArgumentTypeError(f"memory_budget: expected a positive int (bytes) or None, got {memory_budget!r}")
        batch, n_pos = t.shape
        needed = self.forward_bytes(batch, n_pos, names=keep)
        if needed > budget:
            kept = (
                ("keeping " + (str(sorted(keep)) if keep is not None else "every activation"))
                if cache
                else "without a cache"
            )
            raise MemoryBudgetError(
                f"tokens: a forward pass on [batch={batch}, pos={n_pos}] {kept} "
                f"needs about {needed:,} bytes ({needed / 2**30:.2f} GiB), more than memory_budget={budget:,} bytes; "
                "pass fewer sequences, keep fewer activations with names=[...], or raise memory_budget"
            )


#: The norm scales a frozen-norm run replays.
SCALE_NAMES = ("scale", "scale_mlp", "scale_final")


def freeze_norms_hooks(cfg: ModelConfig, cache: ActivationCache | None) -> dict[tuple[str, int | None], Hook]:
    """Hooks that replace every norm's per-token scale by the one ``cache`` recorded (``{}`` for ``None``).

    The cache must hold ``scale``, ``scale_mlp`` (models with MLPs) and
    ``scale_final`` of a run on the same ``[batch, pos]`` (``run_with_cache``
    keeps them by default, or ask with ``names=[...]``).
    """
    if cache is None:
        return {}
    if not isinstance(cache, ActivationCache):
        raise ArgumentTypeError(f"freeze_norms: expected an ActivationCache (or None), got {type(cache).__name__}")
    hooks: dict[tuple[str, int | None], Hook] = {}
    wanted: list[tuple[str, int | None]] = [("scale_final", None)]
    for layer in range(cfg.n_layers):
        wanted.append(("scale", layer))
        if cfg.has_mlp:
            wanted.append(("scale_mlp", layer))
    for key in wanted:
        frozen = cache.get(key)
        if frozen is None:
            raise ArgumentError(
                f"freeze_norms: the cache has no {key!r}; run the model with run_with_cache(tokens) keeping "
                f"{list(SCALE_NAMES)} to freeze its norms"
            )

        def replay(
            value: torch.Tensor, frozen: torch.Tensor = frozen, key: tuple[str, int | None] = key
        ) -> torch.Tensor:
            if frozen.shape != value.shape:
                raise ShapeError(
                    f"freeze_norms: the cache's {key!r} has shape {tuple(frozen.shape)}, this run's {tuple(value.shape)}; "
                    "freeze the norms with a run on tokens of the same [batch, pos]"
                )
            return frozen.to(device=value.device, dtype=value.dtype)

        hooks[key] = replay
    return hooks
