"""An attention widget from arrays computed anywhere: ``from_arrays``, ``from_cache``, ``from_qk``, ``set_data``.

These are :class:`~circuitwidgets.widgets.AttentionPatterns`' constructors (and
its ``set_data``) for users who bring their own patterns; the class binds them
(``from_arrays = classmethod(from_arrays)``), so they are documented there.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar

from numpy.typing import ArrayLike

from circuitwidgets.activations.dense_patterns import DensePatterns
from circuitwidgets.activations.qk_patterns import QKPatterns
from circuitwidgets.errors import ArgumentError, ShapeError
from circuitwidgets.widgets.attention.batch import (
    ArrayBatch,
    cache_patterns,
    encode_sources,
    is_batch_of_tokens,
    sources_from_arrays,
)
from circuitwidgets.widgets.attention.codec import Heads, check_state_bytes, check_tokens, per_position, validate
from circuitwidgets.widgets.attention.live import LiveData
from circuitwidgets.widgets.attention.loss import check_loss
from circuitwidgets.widgets.attention.source import Source
from circuitwidgets.widgets.attention.tiles import LongText
from circuitwidgets.widgets.core.spec import NONE

#: The widget class these constructors build (:class:`~circuitwidgets.widgets.AttentionPatterns`, which binds
#: them as class methods); typed by its base so that this module stays below the widget's.
W = TypeVar("W", bound=LiveData)

__all__ = ["LONG_ARRAY_TOKENS", "from_arrays", "from_cache", "from_qk", "set_data"]

#: ``from_arrays`` of one prompt with more tokens than this builds the long-context view (overview first,
#: exact tiles on demand, as :func:`from_qk`) from the array instead of quantising every pattern into the
#: widget's state. At 4,096 tokens × 12 heads in JupyterLab the dense path took 4.2 s from the output
#: appearing to every head painted, the long path 1.4-1.8 s (benchmarks/bench_lab_paint.py).
LONG_ARRAY_TOKENS = 2048


def _first(values: Any) -> Any:
    return None if values is None else values[0]


def from_arrays(
    cls: type[W],
    /,
    tokens: Sequence[str] | Sequence[Sequence[str]],
    attention: Any,
    *,
    causal: bool | None = None,
    value_norms: ArrayLike | None = None,
    logit_effect: ArrayLike | None = None,
    per_token_loss: ArrayLike | None = None,
    stream: bool | None = None,
    long: bool | None = None,
    **kwargs: Any,
) -> W:
    """A widget for patterns computed anywhere (TransformerLens, Hugging Face, your own code).

    Parameters
    ----------
    tokens
        The ``n`` token strings; or, for a batch, one list of token strings per prompt.
    attention
        Weights in [0, 1], ``[n_heads, n, n]`` or ``[n_layers, n_heads, n, n]``
        (``[..., dest, src]``, rows summing to 1), numpy or torch. A batch: the
        same with the prompts first (``[n_prompts, ...]``) or one array per prompt.
        Prompts of unequal length are padded, not refused: a prompt of ``n_p``
        tokens may come padded on the right to the longest prompt and is read
        from its top-left ``n_p × n_p`` corner, whose rows must sum to 1.
    causal
        Send only the lower triangle: ``None`` detects it; ``True`` is checked.
    value_norms
        Optional ``‖v_j W_O‖``, ``[n_heads, n]`` or ``[n_layers, n_heads, n]`` (a batch: prompts
        first, padded likewise): enables value-weighted patterns.
    logit_effect
        Optional per-position logit effects, shaped like ``value_norms`` (NaN allowed).
    per_token_loss
        Optional loss predicting the next token at each position (nats, ≥ 0, NaN allowed, as
        ``circuitwidgets.causal.per_token_loss`` with a NaN appended), ``[n]``; a batch ``[n_prompts, n]``
        (padded likewise) or one array per prompt. The strip beside the pattern can show it (``strip="loss"``).
    stream
        See the class docs (a batch is encoded at once).
    long
        Show one prompt as a long context (as :meth:`from_qk`: an overview of every head
        first, exact tiles served from ``attention`` as the view zooms, pages exported with
        the overview and each row's top sources); ``None``: above :data:`LONG_ARRAY_TOKENS`
        tokens. The widget then keeps a reference to ``attention`` (``w.qk``, a
        :class:`~circuitwidgets.activations.dense_patterns.DensePatterns`) rather than a copy.
    **kwargs
        Initial traits, for example ``selected_head=3`` (``progress_bar=False`` hides the bar).

    Raises
    ------
    ArgumentTypeError, ShapeError, NonFiniteError, ArgumentError
        Naming the argument (and the prompt, ``attention[2]``), what was expected and what was received.
    """
    if is_batch_of_tokens(tokens) and len(tokens) == 1:  # (a batch of one is one prompt)
        tokens, attention, value_norms, logit_effect, per_token_loss = (
            tokens[0],
            *(_first(v) for v in (attention, value_norms, logit_effect, per_token_loss)),
        )
    if is_batch_of_tokens(tokens):
        sources = sources_from_arrays(tokens, attention, causal, value_norms, logit_effect, per_token_loss)
        return cls(stream=stream, _source=ArrayBatch(sources, causal), **kwargs)
    token_list = check_tokens(tokens)
    heads = Heads(attention, len(token_list))
    is_long = heads.n > LONG_ARRAY_TOKENS if long is None else bool(long)
    if not is_long:
        check_state_bytes(heads.n_layers, heads.n_heads, heads.n, value_weighted=value_norms is not None)
    norms = per_position(value_norms, "value_norms", heads, nan_ok=False)
    if norms is not None and (norms < 0).any():
        raise ArgumentError(f"value_norms: expected norms ≥ 0, got minimum {float(norms.min()):.4g}")
    effect = per_position(logit_effect, "logit_effect", heads, nan_ok=True)
    loss = check_loss(per_token_loss, "per_token_loss", heads.n)
    if is_long:
        is_causal = validate(heads, causal, row_stochastic=True)
        engine = DensePatterns(heads.layers, causal=is_causal, value_norms=norms)
        return cls(_qk=LongText(token_list, engine, effect, loss), **kwargs)
    source = Source(token_list, heads, causal, norms, effect, known_causal=False, loss=loss)
    return cls(stream=stream, _source=source, **kwargs)


def from_cache(
    cls: type[W],
    /,
    cache: Any,
    tokens: Sequence[str] | Sequence[Sequence[str]],
    *,
    n_layers: int | None = None,
    **kwargs: Any,
) -> W:
    """A widget for the patterns of an activation cache of one prompt or a batch (ours or TransformerLens's).

    Parameters
    ----------
    cache
        Anything with ``cache["pattern", layer]`` ``[batch, n_heads, pos, pos]``:
        ``model.run_with_cache(tokens)[1]`` here or in TransformerLens.
    tokens
        One list of token strings per prompt (``model.to_str_tokens(prompts)``), or one
        list for a batch of one. Shorter prompts of a right-padded batch show their own tokens.
    n_layers
        Layers to read (default: until ``("pattern", layer)`` is missing).
    **kwargs
        As :meth:`from_arrays` (``causal``, ``selected_prompt``, ...).

    Raises
    ------
    ArgumentTypeError, ArgumentError, ShapeError, NonFiniteError
        Naming ``cache``, ``tokens`` or the prompt.
    """
    layers = cache_patterns(cache, n_layers)
    batch = int(layers[0].shape[0])
    if not is_batch_of_tokens(tokens):
        tokens = [check_tokens(tokens)]
    if len(tokens) != batch:
        raise ShapeError(f"tokens: expected one token list per prompt of the cache ({batch}), got {len(tokens)}")
    return from_arrays(cls, tokens, [[layer[b] for layer in layers] for b in range(batch)], **kwargs)


def from_qk(
    cls: type[W],
    /,
    tokens: Sequence[str],
    q: Any,
    k: Any,
    *,
    causal: bool = True,
    scale: float | None = None,
    sliding_window: int | Sequence[int | None] | None = None,
    softcap: float | None = None,
    value_norms: Any = None,
    logit_effect: Any = None,
    per_token_loss: Any = None,
    **kwargs: Any,
) -> W:
    """A widget for long contexts: patterns computed exactly, on demand, from queries and keys.

    Parameters
    ----------
    tokens
        The ``N`` token strings.
    q
        Post-rotary queries ``[n_layers, n_heads, N, d_head]`` (numpy or torch).
    k
        Post-rotary keys ``[n_layers, n_kv_heads, N, d_head]``; ``n_heads`` a multiple of
        ``n_kv_heads`` (grouped-query attention).
    causal, scale, sliding_window, softcap
        As in :class:`~circuitwidgets.activations.qk_patterns.QKPatterns`: scores ``softcap(q · k / scale)``
        (``scale`` defaults to ``sqrt(d_head)``), masked causally and to the window.
    value_norms
        Optional ``‖v_j W_O‖`` per layer, head and position ``[n_layers, n_heads, N]`` (``≥ 0``):
        enables the value-weighted pattern, summarised with the raw one and tiled on demand.
    logit_effect
        Optional per-position logit effects ``[n_layers, n_heads, N]`` (NaN allowed): the
        token strip's "Logit effect" shading and the strip beside the pattern.
    per_token_loss
        Optional loss predicting the next token at each position ``[N]`` (nats, ≥ 0, NaN allowed):
        what the strip shows instead with ``strip="loss"``.
    **kwargs
        Initial traits, for example ``selected_head=3``.

    Notes
    -----
    The kernel holds ``q`` and ``k`` (float32) and each head's row log-sum-exp, never an
    ``N × N`` array. The view shows an overview (block max) of every head, then asks for
    finer tiles as it zooms, down to single weights. Exported pages carry the overview
    and each row's top-``k`` sources within :data:`EXPORT_BUDGET_BYTES`; finer zoom there
    needs a live kernel (the value-weighted pattern's export is its overview).
    ``AttentionPatterns(model, long_text)`` passes the model's value norms, logit effects and per-token loss.

    Raises
    ------
    ArgumentTypeError, ShapeError, NonFiniteError, ArgumentError, MemoryBudgetError
        Naming the argument.
    """
    token_list = check_tokens(tokens)
    engine = QKPatterns(
        q, k, causal=causal, scale=scale, sliding_window=sliding_window, softcap=softcap, value_norms=value_norms
    )
    if engine.n_tokens != len(token_list):
        raise ShapeError(f"q: expected {len(token_list)} positions (one per token), got {engine.n_tokens}")
    effect = per_position(logit_effect, "logit_effect", (engine.n_layers, engine.n_heads, engine.n_tokens), nan_ok=True)
    loss = check_loss(per_token_loss, "per_token_loss", engine.n_tokens)
    return cls(_qk=LongText(token_list, engine, effect, loss), **kwargs)


def set_data(
    self: LiveData,
    /,
    tokens: Sequence[str] | Sequence[Sequence[str]],
    attention: Any,
    *,
    causal: bool | None = None,
) -> None:
    """Replace tokens and patterns (raw only; a batch as in :meth:`from_arrays`); selections that no longer fit are reset."""
    if is_batch_of_tokens(tokens) and len(tokens) > 1:
        data = encode_sources(sources_from_arrays(tokens, attention, causal, None, None), causal, None)
    else:
        batch_of_one = is_batch_of_tokens(tokens)
        token_list = check_tokens(tokens[0] if batch_of_one else tokens)
        heads = Heads(attention[0] if batch_of_one else attention, len(token_list))
        data, _ = Source(token_list, heads, causal, None, None, known_causal=False).prepare(None, False, False)
    self._stream = None
    self._tiles = None
    lead = 1 if data["prompts"] else 0
    n_layers, n_heads = data["patterns"].shape[lead : lead + 2]
    with self.hold_trait_notifications():
        self.overview = self.top_sources = self.top_weights = None
        self.tile_block = self.tile_size = 0
        self.pattern_kind = "raw"
        self.strip = "logit_effect"
        self.windows = {}
        if self.selected_prompt >= max(1, len(data["prompts"])):
            self.selected_prompt = 0
        for name, value in data.items():
            setattr(self, name, value)
        if self.selected_layer >= n_layers:
            self.selected_layer = 0
        if self.selected_head >= n_heads:
            self.selected_head = 0
        if self.selected_dest >= self.n_tokens:
            self.selected_dest = NONE
        if self.selected_src >= self.n_tokens:
            self.selected_src = NONE
    self._follow_prompt()
