"""Attention patterns of every head: thumbnails, one large pattern, the tokens; one text or a batch of prompts.

Build one from a model and a text (``AttentionPatterns(model, text)``: one
forward pass, every layer), several prompts (``AttentionPatterns(model,
[text_1, text_2])``: a prompt selector, ``selected_prompt``), a text longer than
the model's context in overlapping windows (``window=``), or from patterns
computed anywhere (:meth:`AttentionPatterns.from_arrays`, :meth:`~AttentionPatterns.from_cache`).

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
  position, which has no next token), read through the final norm as
  :func:`~circuitwidgets.activations.value_paths.logit_effects` says;
- or, chosen instead (``strip="loss"``), the model's loss predicting the next
  token at each position (``per_token_loss``, nats; per position, not per head),
  from the logits of the same forward pass
  (:mod:`~circuitwidgets.widgets.attention.loss`).

Where the rest lives (modules of this package)
----------------------------------------------
``codec`` (uint8 transport), ``from_model`` (tokens, the context check,
forward passes), ``batch`` (prompts padded on the right, each shown at its own
length), ``window`` (which window each row comes from), ``arrays`` (the array
constructors), ``loss`` (the per-token loss), ``source`` and ``live`` (streaming
head by head), ``tiles`` (long contexts on demand from queries and keys: :meth:`AttentionPatterns.from_qk`,
or ``from_model`` over :data:`LONG_TOKENS` tokens; tiles: ``tile_requests``), ``traits``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np
import torch
import traitlets
from numpy.typing import NDArray

from circuitwidgets.activations.value_paths import logit_effects, value_norms, value_weighted
from circuitwidgets.errors import ArgumentError, ArgumentTypeError
from circuitwidgets.model import CircuitModel
from circuitwidgets.widgets.attention import arrays as _arrays_api
from circuitwidgets.widgets.attention.batch import prompt_slice
from circuitwidgets.widgets.attention.codec import (
    MAX_STATE_BYTES,
    _upper_max,
    check_state_bytes,
    decode_patterns,
    encode_patterns,
)
from circuitwidgets.widgets.attention.from_model import LONG_TOKENS, from_model_source, model_data, token_ids
from circuitwidgets.widgets.attention.live import LiveData
from circuitwidgets.widgets.attention.loss import STRIPS, check_loss_trait, strip_problem
from circuitwidgets.widgets.attention.source import STREAM_BYTES, build_bar, repeat_period, running_loop
from circuitwidgets.widgets.attention.tiles import EXPORT_BUDGET_BYTES, LongText, TileSource
from circuitwidgets.widgets.attention.traits import (
    check_diagonals,
    check_patterns_trait,
    check_per_position_trait,
    kind_problem,
)
from circuitwidgets.widgets.core.arrays import NDArrayTrait
from circuitwidgets.widgets.core.spec import NONE, head_selection, view_data, view_setting
from circuitwidgets.widgets.core.traits import Choice, Integer, SelectionIndex

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

TextOrTokens = str | Sequence[int] | Sequence[str] | Sequence[Sequence[int]] | torch.Tensor


class AttentionPatterns(LiveData):
    """Attention patterns of every head, with the selection shared with the kernel.

    Parameters
    ----------
    model
        A :class:`~circuitwidgets.CircuitModel`; omit it to build from traits
        (or use :meth:`from_arrays`).
    text_or_tokens
        A text (tokenised with the model's tokenizer, BOS prepended when the
        model has one) or token ids ``[pos]`` / ``[1, pos]``; or a batch of
        prompts: a list of texts, a list of token-id lists, or ids ``[batch, pos]``.
        Prompts of unequal length are **padded, not refused**: each runs through
        the model at its own length and is shown at its own length (the view's
        prompt selector and ``selected_prompt`` choose it). A text longer than the
        model's context (``n_ctx``, learned positions) is refused before any work
        (:class:`~circuitwidgets.widgets.core.context.ContextLengthError` naming
        ``text_or_tokens``, saying how to proceed) unless ``window`` is given.
    window, stride
        Show a text longer than the context in overlapping windows of ``window``
        tokens (at most ``n_ctx``; BOS included) whose starts advance by ``stride``
        (default half a window): each query row comes from the earliest window
        containing it, the one that gives it the most left context
        (:mod:`~circuitwidgets.widgets.attention.window`). A text that fits one
        window is shown whole, as without ``window``.
    stream
        Stream heads to the view (see :mod:`~circuitwidgets.widgets.attention.source`):
        ``None`` when a kernel event loop runs and the patterns exceed :data:`STREAM_BYTES`.
        Batches and windows are encoded at once.
    long
        Compute patterns on demand from the queries and keys (as :meth:`from_qk`);
        ``None``: when there are more than :data:`LONG_TOKENS` tokens.
    progress_bar
        A plain-text ``tqdm`` bar on stderr (never a saved widget) for builds that take over
        a second; ``None`` lets tqdm decide, ``False`` hides it.
    **kwargs
        Initial traits, for example ``selected_layer=1, selected_head=3, selected_prompt=2``.

    Notes
    -----
    Click a thumbnail to select a head, a token to select a destination, a
    cell of the large pattern to select a destination and a source; read or
    set ``selected_*`` from a cell. Cost of the model path: one forward pass per
    prompt holding every layer's pattern in the model's dtype (``4 · n_layers ·
    n_heads · pos²`` bytes in float32), then O(n_layers · n_heads · pos²) to encode.
    """

    _view = traitlets.Unicode("attention").tag(sync=True)
    _prefix = "attention"
    _spellings: ClassVar[dict[str, str]] = {
        "attention": "for CircuitsVis-style arrays use AttentionPatterns.from_arrays(tokens, attention)",
        "tokens": "for token strings with your own attention use AttentionPatterns.from_arrays(tokens, attention); "
        "for a model use AttentionPatterns.from_model(model, text_or_tokens)",
    }

    prompts = view_data(traitlets.List(traitlets.List(traitlets.Unicode())))
    """A batch's token strings, one list per prompt (shown as text, never as HTML); ``[]`` for one text.
    With a batch every data array below has the prompts first and is padded on the right to the
    longest prompt (:mod:`~circuitwidgets.widgets.attention.batch`)."""

    tokens = view_data(traitlets.List(traitlets.Unicode()))
    """Token strings in order (shown as text, never as HTML); with a batch, the selected prompt's."""

    patterns = view_data(NDArrayTrait(dtype="uint8", ndim=(3, 4, 5)))
    """Quantised weights ``round(255 · a)``: ``[n_layers, n_heads, n(n+1)/2]`` (causal,
    lower triangle row by row) or ``[n_layers, n_heads, n, n]``; ``[n_layers, n_heads, 0]``
    while heads are streaming; a batch: ``[n_prompts, ...]``. See the module docs."""

    causal = view_data(traitlets.Bool(True))
    """Whether ``patterns`` (and ``value_patterns``) hold only the lower triangle."""

    value_patterns = view_data(NDArrayTrait(dtype="uint8", ndim=(3, 4, 5), allow_none=True))
    """Value-weighted patterns ``A_ij ‖v_j W_O‖``, normalised per row, quantised and laid out like
    ``patterns``; ``None`` when unknown (built from arrays without ``value_norms``)."""

    value_norms = view_data(NDArrayTrait(dtype="float32", ndim=(3, 4), allow_none=True))
    """``‖v_j W_O‖`` per layer, head and source position, float32 ``[n_layers, n_heads, n]``, or ``None``."""

    logit_effect = view_data(NDArrayTrait(dtype="float32", ndim=(3, 4), allow_none=True))
    """Each head's direct effect on the next token's logit, ``(r_i W_O W_U)[t_{i+1}]``, float32
    ``[n_layers, n_heads, n]`` (NaN at the last position), or ``None``."""

    per_token_loss = view_data(NDArrayTrait(dtype="float32", ndim=(1, 2), allow_none=True))
    """The model's loss predicting the next token at each position, ``−log p(t_{i+1} | t_{≤i})`` in nats, float32
    ``[n]`` (NaN at the last position; a batch: ``[n_prompts, n]``, padded with NaN), or ``None``. Per position:
    the same for every head."""

    strip = view_setting(Choice(STRIPS, default_value="logit_effect", requires=strip_problem))
    """What the strip beside the pattern, and the tokens when they show it, shade: ``"logit_effect"`` (the
    selected head's) or ``"loss"`` (``per_token_loss``, needed)."""

    windows = view_data(traitlets.Dict())
    """A text analysed in windows: ``{"size": W, "stride": S, "starts": [a_k, ...]}`` (each window's
    first text position after its BOS); ``{}`` otherwise."""

    pattern_kind = view_setting(Choice(_KINDS, default_value="raw", requires=kind_problem))
    """Pattern drawn: ``"raw"`` or ``"value"`` (value-weighted; needs ``value_patterns``)."""

    show_diagonals = view_setting(traitlets.Bool(False))
    """Mark the offset diagonals of ``diagonals`` on the large pattern."""

    diagonals = view_data(traitlets.List(traitlets.Dict()))
    """Offset diagonals ``dest - src = offset`` to mark, ``[{"offset": int, "label": str}]``: by
    default previous-token (1), and induction (``p - 1``) when the tokens repeat with period ``p``."""

    tile_block = view_data(Integer(0))
    """Long contexts (:meth:`from_qk`): tokens per overview block along each side; 0 for dense ``patterns``."""

    tile_size = view_data(Integer(0))
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

    selected_prompt = view_setting(SelectionIndex("n_prompts"))
    """Prompt shown, ``0..n_prompts-1`` (0 for one text); choosing a shorter prompt clears
    ``selected_dest`` / ``selected_src`` beyond its end."""

    selected_dest = view_setting(SelectionIndex("n_tokens", optional=True))
    """Selected destination (query) position in the shown prompt, or -1 for none."""

    selected_src = view_setting(SelectionIndex("n_tokens", optional=True))
    """Selected source (key) position in the shown prompt, or -1 for none."""

    def __init__(
        self,
        model: CircuitModel | None = None,
        text_or_tokens: TextOrTokens | None = None,
        *,
        window: int | None = None,
        stride: int | None = None,
        stream: bool | None = None,
        long: bool | None = None,
        progress_bar: bool | None = None,
        _source: Any = None,
        _qk: LongText | None = None,
        **kwargs: Any,
    ) -> None:
        self._stream = None
        self._tiles = None
        self._opened = False
        if "tokens" in kwargs and not {"patterns", "attention"} & kwargs.keys() and _source is None and model is None:
            # CircuitsVis' spelling would otherwise build a widget with tokens and no patterns
            raise TypeError(f"AttentionPatterns() got tokens= without patterns: {self._spellings['tokens']}")
        if model is not None:
            built = model_data(
                model, text_or_tokens, window=window, stride=stride, long=long, progress_bar=progress_bar
            )
            if isinstance(built, LongText):
                _qk = built
            else:
                _source = built
        elif text_or_tokens is not None or window is not None:
            given = "text_or_tokens" if text_or_tokens is not None else "window"
            raise ArgumentTypeError(f"model: expected a CircuitModel when {given} is given, got None")
        loop = running_loop()
        if _source is not None:
            # (a stream returns at once, before the bar's delay: the bar shows only slow encoding here)
            total = getattr(_source, "encoded_heads", 0)  # (0: encoded already, with its own bar)
            bar = build_bar(total, "AttentionPatterns", progress_bar if total else False)
            try:
                data, self._stream = _source.prepare(self, stream, loop is not None, done=bar.update)
            finally:
                bar.close()
            kwargs = {**data, **kwargs}
        if _qk is not None:
            self._tiles = TileSource(_qk.engine, lambda c, b: self.send(c, b), exported_bytes=_qk.per_position_bytes)
            kwargs = {**self._tiles.initial_traits(_qk), **kwargs}
        super().__init__(**kwargs)
        self._follow_prompt()
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
    def from_model(cls, model: CircuitModel, text_or_tokens: TextOrTokens, **kwargs: Any) -> AttentionPatterns:
        """Same as ``AttentionPatterns(model, text_or_tokens, ...)`` (one text, a batch, ``window=``, ``long=``)."""
        return cls(model, text_or_tokens, **kwargs)

    @classmethod
    def initial(cls, model: CircuitModel, text_or_tokens: str | Sequence[int] | torch.Tensor) -> dict[str, Any]:
        """Initial data traits for ``model`` on one text or token ids, encoded at once (no streaming)."""
        state, _ = from_model_source(model, token_ids(model, text_or_tokens)).prepare(
            None, stream=False, loop_running=False
        )
        return state

    from_arrays: classmethod[AttentionPatterns, ..., AttentionPatterns] = classmethod(_arrays_api.from_arrays)
    from_cache: classmethod[AttentionPatterns, ..., AttentionPatterns] = classmethod(_arrays_api.from_cache)
    from_qk: classmethod[AttentionPatterns, ..., AttentionPatterns] = classmethod(_arrays_api.from_qk)
    # (defined with the kernel's side of the data; bound here so the API reference lists them)
    streaming = LiveData.streaming
    qk = LiveData.qk
    finish = LiveData.finish

    # ------------------------------------------------------------ validation

    @traitlets.default("patterns")
    def _default_patterns(self) -> NDArray[np.uint8]:
        return np.zeros((0, 0, 0), dtype=np.uint8)

    @traitlets.validate("patterns", "value_patterns")
    def _validate_patterns(self, proposal: traitlets.Bunch) -> NDArray[np.uint8] | None:
        waiting = getattr(self, "_stream", None) is not None or getattr(self, "_tiles", None) is not None
        return check_patterns_trait(self, proposal["trait"].name, proposal["value"], waiting=waiting)

    @traitlets.validate("value_norms", "logit_effect", "per_token_loss")
    def _validate_per_position(self, proposal: traitlets.Bunch) -> NDArray[np.float32] | None:
        if proposal["trait"].name == "per_token_loss":
            return check_loss_trait(self, proposal["value"])
        return check_per_position_trait(self, proposal["trait"].name, proposal["value"])

    @traitlets.validate("diagonals")
    def _validate_diagonals(self, proposal: traitlets.Bunch) -> list[dict[str, Any]]:
        return check_diagonals(self, proposal["value"])

    @traitlets.observe("selected_prompt")
    def _on_selected_prompt(self, change: traitlets.Bunch) -> None:
        self._follow_prompt()

    def _follow_prompt(self) -> None:
        """``tokens`` become the shown prompt's; position selections beyond its end are cleared."""
        if not self.prompts:
            return
        tokens = self.prompts[self.selected_prompt]
        with self.hold_sync():
            if self.tokens != tokens:
                self.tokens = tokens
            if self.selected_dest >= len(tokens):
                self.selected_dest = NONE
            if self.selected_src >= len(tokens):
                self.selected_src = NONE

    # ------------------------------------------------------------ data

    set_data = _arrays_api.set_data

    @property
    def n_prompts(self) -> int:
        """Number of prompts (1 for one text)."""
        return len(getattr(self, "prompts", None) or []) or 1

    @property
    def prompt_lengths(self) -> list[int]:
        """Tokens of each prompt (one entry for one text)."""
        prompts = getattr(self, "prompts", None) or []
        return [len(t) for t in prompts] if prompts else [len(self.tokens)]

    @property
    def n_layers(self) -> int:
        """Number of layers."""
        return int(self.patterns.shape[1 if getattr(self, "prompts", None) else 0])

    @property
    def n_heads(self) -> int:
        """Heads per layer."""
        return int(self.patterns.shape[2 if getattr(self, "prompts", None) else 1])

    @property
    def n_tokens(self) -> int:
        """Number of tokens of the shown prompt."""
        prompts = getattr(self, "prompts", None) or []
        if prompts:
            return len(prompts[min(max(0, int(self.selected_prompt)), len(prompts) - 1)])
        return len(self.tokens)

    def _shown(self, array: NDArray[np.uint8]) -> NDArray[np.float32]:
        """The shown prompt's weights of ``patterns`` or ``value_patterns``, ``[n_layers, n_heads, dest, src]``."""
        n = self.n_tokens
        if self.prompts:
            array = prompt_slice(array, self.selected_prompt, n, "causal" if self.causal else "full")
        return decode_patterns(array, n, self.causal)

    @property
    def attention(self) -> NDArray[np.float32]:
        """The weights as the view sees them, ``[n_layers, n_heads, dest, src]`` in [0, 1] (a batch: the shown prompt's).

        A long-context widget (:meth:`from_qk`) holds no dense weights: use ``qk.dense(layer, head)``.
        """
        if self._tiles is not None:
            raise ArgumentError(
                "attention: a long-context widget holds no dense patterns; use .qk.weights(...) or .qk.dense(...)"
            )
        self.finish()
        return self._shown(self.patterns)

    @property
    def value_attention(self) -> NDArray[np.float32] | None:
        """The value-weighted patterns as the view sees them (rows normalised; a batch: the shown prompt's), or ``None``.

        A long-context widget holds none: use ``qk.dense(layer, head, "value")``.
        """
        if self._tiles is not None:
            raise ArgumentError(
                "value_attention: a long-context widget holds no dense patterns; use .qk.dense(layer, head, 'value')"
            )
        self.finish()
        return None if self.value_patterns is None else self._shown(self.value_patterns)
