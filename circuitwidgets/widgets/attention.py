"""Attention patterns of every head: thumbnails, one large pattern, the tokens.

Build one from a model and a text (``AttentionPatterns(model, text)``: one
forward pass, every layer) or from patterns computed anywhere
(``AttentionPatterns.from_arrays(tokens, attention)``).

What the view shows
-------------------
- raw patterns ``A[dest, src]``;
- value-weighted patterns ``A_ij · ‖v_j W_O‖`` (the size of what head ``h``
  actually moves from ``j`` to ``i``). Sent normalised per row, ``A_ij n_j /
  Σ_k A_ik n_k``, so every row is again a distribution on the same 0–1 colour
  scale; the norms ``n_j = ‖v_j W_O‖`` travel too (``value_norms``) so the
  view can show the unnormalised product;
- the selected head's direct logit effect on the next token, ``(r_i W_O
  W_U)[t_{i+1}]`` with ``r_i = Σ_j A_ij v_j`` the head's mixed values
  (``z`` in the cache), signed, per destination position (NaN at the last
  position, which has no next token). The final layer norm's per-token scale
  and ``b_U`` are left out (DESIGN.md §3).

Transport, streaming and long contexts
--------------------------------------
Weights cross as uint8 (``round(255 · a)``, causal patterns as their lower
triangle; :mod:`~circuitwidgets.widgets._attention_codec`). With a kernel's
event loop, large patterns stream head by head, selected head first
(:mod:`~circuitwidgets.widgets._attention_source`). Long contexts
(:meth:`AttentionPatterns.from_qk`, or ``from_model`` over
:data:`LONG_TOKENS` tokens) hold queries and keys and answer the view's tile
requests (:mod:`~circuitwidgets.widgets._attention_tiles`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import anywidget
import numpy as np
import torch
import traitlets
from numpy.typing import ArrayLike, NDArray

from circuitwidgets.circuits.attention import logit_effects, value_norms, value_weighted
from circuitwidgets.circuits.tiles import QKPatterns
from circuitwidgets.errors import ArgumentError, ArgumentTypeError, ShapeError
from circuitwidgets.model import CircuitModel
from circuitwidgets.widgets._arrays import NDArrayTrait
from circuitwidgets.widgets._attention_codec import (
    MAX_STATE_BYTES,
    Heads,
    _upper_max,
    check_diagonals,
    check_patterns_trait,
    check_per_position_trait,
    check_state_bytes,
    check_tokens,
    decode_patterns,
    encode_all,
    encode_patterns,
    per_position,
    validate,
)
from circuitwidgets.widgets._attention_source import (
    STREAM_BYTES,
    Source,
    Stream,
    default_diagonals,
    from_model_source,
    qk_from_model,
    repeat_period,
    running_loop,
    token_ids,
)
from circuitwidgets.widgets._attention_tiles import EXPORT_BUDGET_BYTES, TileSource, on_custom
from circuitwidgets.widgets._base import CircuitWidget
from circuitwidgets.widgets._spec import NONE, head_selection, view_data, view_setting
from circuitwidgets.widgets._traits import Choice, SelectionIndex

__all__ = [
    "EXPORT_BUDGET_BYTES",
    "LONG_TOKENS",
    "MAX_STATE_BYTES",
    "STREAM_BYTES",
    "AttentionPatterns",
    "_upper_max",
    "check_state_bytes",
    "decode_patterns",
    "encode_patterns",
    "logit_effects",
    "repeat_period",
    "value_norms",
    "value_weighted",
]

_KINDS = ("raw", "value")

#: ``from_model`` computes patterns on demand from queries and keys above this many tokens.
LONG_TOKENS = 2048

# ---------------------------------------------------------------- the widget


def _value_patterns_present(view: Any, kind: str) -> str | None:
    """Why ``kind`` cannot be drawn (value-weighted patterns need their data), or ``None``."""
    if kind == "value" and view.value_patterns is None:
        return "'raw': value-weighted patterns need a model (or value_norms)"
    return None


_DATA_TRAITS = ("patterns", "value_patterns", "overview", "top_sources", "top_weights")


class AttentionPatterns(CircuitWidget):
    """Attention patterns of every head, with the selection shared with the kernel.

    Parameters
    ----------
    model
        A :class:`~circuitwidgets.CircuitModel`; omit it to build from traits
        (or use :meth:`from_arrays`).
    text_or_tokens
        A text (tokenised with the model's tokenizer, BOS prepended when the
        model has one) or token ids ``[pos]`` / ``[1, pos]``.
    stream
        Stream heads to the view (see the module docs): ``None`` when a kernel
        event loop runs and the patterns exceed :data:`STREAM_BYTES`.
    **kwargs
        Initial traits, for example ``selected_layer=1, selected_head=3``.

    Notes
    -----
    Click a thumbnail to select a head, a token to select a destination, a
    cell of the large pattern to select a destination and a source; read or
    set ``selected_*`` from a cell. Cost of the model path: one forward pass
    holding every layer's pattern in the model's dtype (``4 · n_layers ·
    n_heads · pos²`` bytes in float32), then O(n_layers · n_heads · pos²) to encode.
    """

    _view = traitlets.Unicode("attention").tag(sync=True)
    _prefix = "attention"
    _spellings: ClassVar[dict[str, str]] = {
        "attention": "for CircuitsVis-style arrays use AttentionPatterns.from_arrays(tokens, attention)",
        "tokens": "for token strings with your own attention use AttentionPatterns.from_arrays(tokens, attention); "
        "for a model use AttentionPatterns.from_model(model, text_or_tokens)",
    }

    tokens = view_data(traitlets.List(traitlets.Unicode()))
    """Token strings in order (shown as text, never as HTML)."""

    patterns = view_data(NDArrayTrait(dtype="uint8", ndim=(3, 4)))
    """Quantised weights ``round(255 · a)``: ``[n_layers, n_heads, n(n+1)/2]`` (causal,
    lower triangle row by row) or ``[n_layers, n_heads, n, n]``; ``[n_layers, n_heads, 0]``
    while heads are streaming. See the module docs."""

    causal = view_data(traitlets.Bool(True))
    """Whether ``patterns`` (and ``value_patterns``) hold only the lower triangle."""

    value_patterns = view_data(NDArrayTrait(dtype="uint8", ndim=(3, 4), allow_none=True))
    """Value-weighted patterns ``A_ij ‖v_j W_O‖``, normalised per row, quantised and laid out like
    ``patterns``; ``None`` when unknown (built from arrays without ``value_norms``)."""

    value_norms = view_data(NDArrayTrait(dtype="float32", ndim=3, allow_none=True))
    """``‖v_j W_O‖`` per layer, head and source position, float32 ``[n_layers, n_heads, n]``, or ``None``."""

    logit_effect = view_data(NDArrayTrait(dtype="float32", ndim=3, allow_none=True))
    """Each head's direct effect on the next token's logit, ``(r_i W_O W_U)[t_{i+1}]``, float32
    ``[n_layers, n_heads, n]`` (NaN at the last position), or ``None``."""

    pattern_kind = view_setting(Choice(_KINDS, default_value="raw", requires=_value_patterns_present))
    """Pattern drawn: ``"raw"`` or ``"value"`` (value-weighted; needs ``value_patterns``)."""

    show_diagonals = view_setting(traitlets.Bool(False))
    """Mark the offset diagonals of ``diagonals`` on the large pattern."""

    diagonals = view_data(traitlets.List(traitlets.Dict()))
    """Offset diagonals ``dest - src = offset`` to mark, ``[{"offset": int, "label": str}]``: by
    default previous-token (1), and induction (``p - 1``) when the tokens repeat with period ``p``."""

    tile_block = view_data(traitlets.Int(0))
    """Long contexts (:meth:`from_qk`): tokens per overview block along each side; 0 for dense ``patterns``."""

    tile_size = view_data(traitlets.Int(0))
    """Long contexts: blocks along a tile's side (tiles of level ``l`` have blocks of ``2^l`` tokens); 0 otherwise."""

    overview = view_data(NDArrayTrait(dtype="float16", ndim=5, allow_none=True))
    """Long contexts: each head's block max and mean, float16 ``[n_layers, n_heads, 2, G, G]`` with
    ``G = ceil(n / tile_block)`` (exact aggregates of the pattern); ``[n_layers, n_heads, 2, 0, 0]`` while
    heads are summarised; ``None`` for dense ``patterns``."""

    top_sources = view_data(NDArrayTrait(dtype="int32", ndim=4, allow_none=True))
    """Long contexts: each query row's strongest sources, int32 ``[n_layers, n_heads, n, k]`` (-1: none),
    ``k`` chosen to fit :data:`EXPORT_BUDGET_BYTES`; what an exported page shows at full resolution."""

    top_weights = view_data(NDArrayTrait(dtype="float16", ndim=4, allow_none=True))
    """Long contexts: the weights of ``top_sources``, float16 ``[n_layers, n_heads, n, k]``."""

    selected_layer = head_selection(SelectionIndex("n_layers"))
    """Layer of the head shown large, ``0..n_layers-1``."""

    selected_head = head_selection(SelectionIndex("n_heads"))
    """Head shown large, ``0..n_heads-1``."""

    selected_dest = view_setting(SelectionIndex("n_tokens", optional=True))
    """Selected destination (query) position, or -1 for none."""

    selected_src = view_setting(SelectionIndex("n_tokens", optional=True))
    """Selected source (key) position, or -1 for none."""

    def __init__(
        self,
        model: CircuitModel | None = None,
        text_or_tokens: str | Sequence[int] | torch.Tensor | None = None,
        *,
        stream: bool | None = None,
        long: bool | None = None,
        _source: Source | None = None,
        _qk: tuple[list[str], QKPatterns] | None = None,
        **kwargs: Any,
    ) -> None:
        self._stream: Stream | None = None
        self._tiles: TileSource | None = None
        self._opened = False
        if "tokens" in kwargs and not {"patterns", "attention"} & kwargs.keys() and _source is None and model is None:
            # CircuitsVis' spelling would otherwise build a widget with tokens and no patterns
            raise TypeError(f"AttentionPatterns() got tokens= without patterns: {self._spellings['tokens']}")
        if model is not None:
            ids = token_ids(model, text_or_tokens)
            if long or (long is None and int(ids.shape[0]) > LONG_TOKENS):
                _qk = qk_from_model(model, ids)
            else:
                _source = from_model_source(model, ids)
        elif text_or_tokens is not None:
            raise ArgumentTypeError("model: expected a CircuitModel when text_or_tokens is given, got None")
        loop = running_loop()
        if _source is not None:
            data, self._stream = _source.prepare(self, stream, loop is not None)
            kwargs = {**data, **kwargs}
        if _qk is not None:
            self._tiles = TileSource(_qk[1], lambda content, buffers: self.send(content, buffers))
            kwargs = {**self._tiles.initial_traits(_qk[0]), **kwargs}
        super().__init__(**kwargs)
        self._opened = True
        self.on_msg(self._on_custom)
        if self._tiles is not None:
            self._tiles.start(self, loop)
        pending = self._stream
        if pending is not None:
            pending.prioritise(self.selected_layer, self.selected_head)
            if loop is not None:
                pending.task = loop.create_task(pending.run())

    # ------------------------------------------------------------ constructors

    @classmethod
    def from_model(
        cls,
        model: CircuitModel,
        text_or_tokens: str | Sequence[int] | torch.Tensor,
        *,
        stream: bool | None = None,
        long: bool | None = None,
        **kwargs: Any,
    ) -> AttentionPatterns:
        """Same as ``AttentionPatterns(model, text_or_tokens)``.

        ``long``: compute patterns on demand from the queries and keys (as :meth:`from_qk`);
        ``None``: when there are more than :data:`LONG_TOKENS` tokens.
        """
        return cls(model, text_or_tokens, stream=stream, long=long, **kwargs)

    @classmethod
    def initial(cls, model: CircuitModel, text_or_tokens: str | Sequence[int] | torch.Tensor) -> dict[str, Any]:
        """Initial data traits for ``model`` on a text or token ids, encoded at once (no streaming)."""
        state, _ = from_model_source(model, token_ids(model, text_or_tokens)).prepare(
            None, stream=False, loop_running=False
        )
        return state

    @classmethod
    def from_arrays(
        cls,
        tokens: Sequence[str],
        attention: ArrayLike,
        *,
        causal: bool | None = None,
        value_norms: ArrayLike | None = None,
        logit_effect: ArrayLike | None = None,
        stream: bool | None = None,
        **kwargs: Any,
    ) -> AttentionPatterns:
        """A widget for patterns computed anywhere (TransformerLens, Hugging Face, your own code).

        Parameters
        ----------
        tokens
            The ``n`` token strings.
        attention
            Weights in [0, 1], ``[n_heads, n, n]`` or ``[n_layers, n_heads, n, n]``
            (``[..., dest, src]``, rows summing to 1), numpy or torch.
        causal
            Send only the lower triangle: ``None`` detects it; ``True`` is checked.
        value_norms
            Optional ``‖v_j W_O‖``, ``[n_heads, n]`` or ``[n_layers, n_heads, n]``: enables
            value-weighted patterns.
        logit_effect
            Optional per-position logit effects, shaped like ``value_norms`` (NaN allowed).
        stream
            See the class docs.
        **kwargs
            Initial traits, for example ``selected_head=3``.

        Raises
        ------
        ArgumentTypeError, ShapeError, NonFiniteError, ArgumentError
            Naming the argument, what was expected and what was received.
        """
        token_list = check_tokens(tokens)
        heads = Heads(attention, len(token_list))
        check_state_bytes(heads.n_layers, heads.n_heads, heads.n, value_weighted=value_norms is not None)
        norms = per_position(value_norms, "value_norms", heads, nan_ok=False)
        if norms is not None and (norms < 0).any():
            raise ArgumentError(f"value_norms: expected norms ≥ 0, got minimum {float(norms.min()):.4g}")
        effect = per_position(logit_effect, "logit_effect", heads, nan_ok=True)
        return cls(
            stream=stream, _source=Source(token_list, heads, causal, norms, effect, known_causal=False), **kwargs
        )

    @classmethod
    def from_qk(
        cls,
        tokens: Sequence[str],
        q: Any,
        k: Any,
        *,
        causal: bool = True,
        scale: float | None = None,
        sliding_window: int | Sequence[int | None] | None = None,
        softcap: float | None = None,
        **kwargs: Any,
    ) -> AttentionPatterns:
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
            As in :class:`~circuitwidgets.circuits.tiles.QKPatterns`: scores ``softcap(q · k / scale)``
            (``scale`` defaults to ``sqrt(d_head)``), masked causally and to the window.
        **kwargs
            Initial traits, for example ``selected_head=3``.

        Notes
        -----
        The kernel holds ``q`` and ``k`` (float32) and each head's row log-sum-exp, never an
        ``N × N`` array. The view shows an overview (block max) of every head, then asks for
        finer tiles as it zooms, down to single weights. Exported pages carry the overview
        and each row's top-``k`` sources within :data:`EXPORT_BUDGET_BYTES`; finer zoom there
        needs a live kernel. Value-weighted patterns and logit effects are not computed here.

        Raises
        ------
        ArgumentTypeError, ShapeError, NonFiniteError, ArgumentError, MemoryBudgetError
            Naming the argument.
        """
        token_list = check_tokens(tokens)
        engine = QKPatterns(q, k, causal=causal, scale=scale, sliding_window=sliding_window, softcap=softcap)
        if engine.n_tokens != len(token_list):
            raise ShapeError(f"q: expected {len(token_list)} positions (one per token), got {engine.n_tokens}")
        return cls(_qk=(token_list, engine), **kwargs)

    # ------------------------------------------------------------ streaming

    @property
    def streaming(self) -> bool:
        """Whether heads are still being encoded (or, for long contexts, summarised) and sent."""
        return self._stream is not None or (self._tiles is not None and not self._tiles.done)

    @property
    def qk(self) -> QKPatterns | None:
        """The engine of a long-context widget (:meth:`from_qk`), or ``None``."""
        return None if self._tiles is None else self._tiles.engine

    def finish(self) -> None:
        """Encode (or summarise) the heads still streaming now (blocking), so the traits hold everything."""
        if self._stream is not None:
            self._stream.finish()
        if self._tiles is not None:
            self._tiles.finish()

    def _on_custom(self, widget: Any, content: Any, buffers: Any) -> None:
        on_custom(self, self._stream, self._tiles, content)

    def get_state(self, key: str | Sequence[str] | None = None, drop_defaults: bool = False) -> dict[str, Any]:
        """The synced state; finishes a stream first when the data traits are asked for."""
        if self.streaming and self._opened:
            keys = {key} if isinstance(key, str) else (set(key) if key is not None else set(_DATA_TRAITS))
            if keys & set(_DATA_TRAITS):
                self.finish()
        state: dict[str, Any] = super().get_state(key=key, drop_defaults=drop_defaults)
        return state

    def _repr_mimebundle_(self, **kwargs: Any) -> tuple[dict[str, Any], dict[str, Any]] | None:
        """The widget's mime bundle; while streaming without the ``text/html`` fallback.

        Building the fallback reads the whole state, which would end the stream
        in the kernel; a streamed state is larger than the fallback's limit
        (:data:`circuitwidgets.export.FALLBACK_STATE_LIMIT`) in any case.
        """
        if not self.streaming:
            return super()._repr_mimebundle_(**kwargs)
        bundle: tuple[dict[str, Any], dict[str, Any]] | None = anywidget.AnyWidget._repr_mimebundle_(self, **kwargs)
        return bundle

    @traitlets.observe("selected_layer", "selected_head")
    def _on_selected_head(self, change: traitlets.Bunch) -> None:
        if self._stream is not None:
            self._stream.prioritise(self.selected_layer, self.selected_head)
        if getattr(self, "_tiles", None) is not None:
            self._tiles.prioritise(self.selected_layer, self.selected_head)  # type: ignore[union-attr]

    # ------------------------------------------------------------ validation

    @traitlets.default("patterns")
    def _default_patterns(self) -> NDArray[np.uint8]:
        return np.zeros((0, 0, 0), dtype=np.uint8)

    @traitlets.validate("patterns", "value_patterns")
    def _validate_patterns(self, proposal: traitlets.Bunch) -> NDArray[np.uint8] | None:
        waiting = getattr(self, "_stream", None) is not None or getattr(self, "_tiles", None) is not None
        return check_patterns_trait(self, proposal["trait"].name, proposal["value"], waiting=waiting)

    @traitlets.validate("value_norms", "logit_effect")
    def _validate_per_position(self, proposal: traitlets.Bunch) -> NDArray[np.float32] | None:
        return check_per_position_trait(self, proposal["trait"].name, proposal["value"])

    @traitlets.validate("diagonals")
    def _validate_diagonals(self, proposal: traitlets.Bunch) -> list[dict[str, Any]]:
        return check_diagonals(self, proposal["value"])

    # ------------------------------------------------------------ data

    def set_data(self, tokens: Sequence[str], attention: ArrayLike, *, causal: bool | None = None) -> None:
        """Replace tokens and patterns (raw only); selections that no longer fit are reset."""
        token_list = check_tokens(tokens)
        heads = Heads(attention, len(token_list))
        check_state_bytes(heads.n_layers, heads.n_heads, heads.n, value_weighted=False)
        is_causal = validate(heads, causal, row_stochastic=True)
        patterns = encode_all(heads, is_causal)
        n_layers, n_heads, n = heads.n_layers, heads.n_heads, len(token_list)
        self._stream = None
        self._tiles = None
        with self.hold_trait_notifications():
            self.overview = None  # type: ignore[assignment]
            self.top_sources = None  # type: ignore[assignment]
            self.top_weights = None  # type: ignore[assignment]
            self.tile_block = self.tile_size = 0
            self.pattern_kind = "raw"
            # (the traits allow None; NDArrayTrait's static type does not say so)
            self.value_patterns = None  # type: ignore[assignment]
            self.value_norms = None  # type: ignore[assignment]
            self.logit_effect = None  # type: ignore[assignment]
            self.tokens = token_list
            self.causal = is_causal
            self.patterns = patterns
            self.diagonals = default_diagonals(token_list)
            if self.selected_layer >= n_layers:
                self.selected_layer = 0
            if self.selected_head >= n_heads:
                self.selected_head = 0
            if self.selected_dest >= n:
                self.selected_dest = NONE
            if self.selected_src >= n:
                self.selected_src = NONE

    @property
    def n_layers(self) -> int:
        """Number of layers."""
        return int(self.patterns.shape[0])

    @property
    def n_heads(self) -> int:
        """Heads per layer."""
        return int(self.patterns.shape[1])

    @property
    def n_tokens(self) -> int:
        """Number of tokens."""
        return len(self.tokens)

    @property
    def attention(self) -> NDArray[np.float32]:
        """The weights as the view sees them, ``[n_layers, n_heads, dest, src]`` in [0, 1].

        A long-context widget (:meth:`from_qk`) holds no dense weights: use ``qk.dense(layer, head)``.
        """
        if self._tiles is not None:
            raise ArgumentError(
                "attention: a long-context widget holds no dense patterns; use .qk.weights(...) or .qk.dense(...)"
            )
        self.finish()
        return decode_patterns(self.patterns, self.n_tokens, self.causal)

    @property
    def value_attention(self) -> NDArray[np.float32] | None:
        """The value-weighted patterns as the view sees them (rows normalised), or ``None``."""
        self.finish()
        vp = self.value_patterns
        return None if vp is None else decode_patterns(vp, self.n_tokens, self.causal)
