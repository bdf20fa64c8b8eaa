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

Transport
---------
Weights cross to the view as one binary buffer of uint8 per array, ``q =
round(255 · a)``: error at most 0.5/255 per weight (below what a colour scale
of 256 steps can show), a quarter of float32's size and half of float16's.
When a pattern is causal (nothing above the diagonal survives
quantisation, or ``causal=True``) only the lower triangle is sent, row after
row: head ``[layer, head]`` holds, for ``dest = 0..n-1``, the ``dest + 1``
weights to ``src = 0..dest``, so ``patterns`` has shape ``[n_layers, n_heads,
n(n+1)/2]``; a pattern that is not causal is sent whole, ``[n_layers,
n_heads, n, n]``. ``value_patterns`` has the same layout. ``value_norms`` and
``logit_effect`` are float32 ``[n_layers, n_heads, n]``.
``js/src/lib/patterns.ts`` reads them.

Streaming
---------
With a running event loop (a Jupyter kernel) and more than
:data:`STREAM_BYTES` of patterns, the constructor validates everything but
returns before encoding: ``patterns`` holds the placeholder ``[n_layers,
n_heads, 0]``, and a task on the kernel's loop encodes one head per step
(selected head first; a head selected meanwhile jumps the queue), yielding to
the kernel between steps. Each encoded head goes to the view as a custom
message ``{"type": "heads", "heads": [[l, h]], "value": bool}`` with its
buffers (the view asks for the heads already done with ``{"type":
"want_heads"}`` when it renders). When the last head is done the complete
arrays are assigned to ``patterns`` / ``value_patterns``, so saved widget
state and exported HTML hold everything; reading the data from Python
(``attention``, ``get_state``, ``save_html``) finishes the stream first.
The price is one extra transfer of the data (streamed heads, then the trait).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import anywidget
import numpy as np
import torch
import traitlets
from numpy.typing import ArrayLike, NDArray

from circuitwidgets.circuits.attention import logit_effects, value_norms, value_weighted
from circuitwidgets.errors import ArgumentError, ArgumentTypeError, MemoryBudgetError, NonFiniteError, ShapeError
from circuitwidgets.model import CircuitModel
from circuitwidgets.widgets._arrays import NDArrayTrait
from circuitwidgets.widgets._base import CircuitWidget
from circuitwidgets.widgets._spec import NONE, head_selection, trait_error, view_data, view_setting
from circuitwidgets.widgets._traits import Choice, SelectionIndex

__all__ = [
    "MAX_STATE_BYTES",
    "STREAM_BYTES",
    "AttentionPatterns",
    "check_state_bytes",
    "decode_patterns",
    "encode_patterns",
    "logit_effects",
    "repeat_period",
    "value_norms",
    "value_weighted",
]

#: How far outside [0, 1] a weight may stray (float rounding) before it is taken for a mistake.
#: Below 0.5/255, so ``255 a + 0.5`` stays in [0, 256) and needs no clipping.
_RANGE_TOLERANCE = 1e-3

#: Patterns larger than this (bytes, encoded) stream head by head when an event loop runs.
STREAM_BYTES = 16 * 2**20

#: Widget state (encoded patterns) larger than this is refused before anything is converted:
#: 2 GiB holds 12 layers × 12 heads of 4,096 tokens (3,800 with value-weighted patterns too).
MAX_STATE_BYTES = 2**31

#: A weight above the diagonal at least this large survives quantisation.
_SURVIVES = 0.5 / 255

_KINDS = ("raw", "value")
_MAX_LABEL = 40
_MAX_OFFSET = 2**20


# ---------------------------------------------------------------- reading heads


class _Heads:
    """Weights ``[n_layers, n_heads, n, n]`` read one head at a time as float32 numpy.

    Accepts a numpy array, a torch tensor (any device, with grad), anything
    ``np.asarray`` reads, or a list of per-layer ``[n_heads, n, n]`` tensors.
    Nothing is copied as a whole: at most one head is converted at a time.
    """

    def __init__(self, attention: Any, n_tokens: int, name: str = "attention") -> None:
        self.name = name
        self.layers: list[Any]
        if isinstance(attention, (list, tuple)) and attention and all(isinstance(a, torch.Tensor) for a in attention):
            self.layers = [a.detach() for a in attention]
            shape: tuple[int, ...] = (len(self.layers), *tuple(self.layers[0].shape))
            if any(tuple(a.shape) != shape[1:] for a in self.layers):
                raise ShapeError(f"{name}: expected equal [n_heads, dest, src] shapes per layer, got {[tuple(a.shape) for a in self.layers]}")
        else:
            if isinstance(attention, torch.Tensor):
                data: Any = attention.detach()
                if data.is_complex() or data.dtype == torch.bool:
                    raise ArgumentTypeError(f"{name}: expected real weights, got a tensor of dtype {data.dtype}")
            else:
                try:
                    data = np.asarray(attention)
                except (TypeError, ValueError) as exc:
                    raise ArgumentTypeError(f"{name}: expected an array of weights, got {type(attention).__name__} ({exc})") from None
                if data.dtype.kind not in "fiu":
                    raise ArgumentTypeError(f"{name}: expected real numbers, got an array of dtype {data.dtype}")
            shape = tuple(int(d) for d in data.shape)
            if len(shape) == 3:
                data = data[None]
                shape = (1, *shape)
            if len(shape) != 4:
                raise ShapeError(
                    f"{name}: expected [n_heads, dest, src] or [n_layers, n_heads, dest, src], got shape {tuple(np.shape(attention))}"
                )
            self.layers = [data[l] for l in range(shape[0])]
        if shape[2] != n_tokens or shape[3] != n_tokens:
            raise ShapeError(
                f"{name}: expected [n_heads, dest, src] or [n_layers, n_heads, dest, src] with dest == src == "
                f"{n_tokens} (the number of tokens), got shape {shape[-4 if len(shape) >= 4 else 0:]}"
            )
        if shape[0] == 0 or shape[1] == 0:
            raise ShapeError(f"{name}: expected at least one layer and one head, got shape {shape}")
        self.n_layers, self.n_heads, self.n = shape[0], shape[1], n_tokens
        self.float16 = str(getattr(self.layers[0], "dtype", "")).rsplit(".", 1)[-1] in ("float16", "bfloat16")

    def head(self, layer: int, head: int) -> NDArray[np.float32]:
        """Weights of one head, ``[dest, src]`` float32."""
        a = self.layers[layer][head]
        if isinstance(a, torch.Tensor):
            return a.to("cpu", torch.float32).numpy()
        return np.asarray(a, dtype=np.float32)


def _where(heads: _Heads, layer: int, head: int) -> str:
    return f"layer {layer}, head {head}" if heads.n_layers > 1 else f"head {head}"


def _check_head(
    heads: _Heads,
    layer: int,
    head: int,
    a: NDArray[np.float32],
    *,
    row_stochastic: bool,
    causal: bool | None,
    check_upper: bool,
) -> bool:
    """Check one head; return whether something above its diagonal survives quantisation.

    ``check_upper=False`` skips that check (patterns known to be causal). Raises :class:`NonFiniteError` or
    :class:`ArgumentError` naming the argument, the head and the values.
    Cost: three or four passes over ``n²`` floats.
    """
    name = heads.name
    sums = a.sum(-1)  # float32 pairwise summation: error ~1e-6, far below the tolerance
    if not np.isfinite(sums).all():
        raise NonFiniteError(f"{name}: expected finite weights, got NaN or infinite values in {_where(heads, layer, head)}")
    low = float(a.min())
    # with rows summing to 1, the minimum bounds the maximum; otherwise check it too
    high = 1.0 if row_stochastic and low >= 0 else float(a.max())
    if low < -_RANGE_TOLERANCE or high > 1 + _RANGE_TOLERANCE:
        raise ArgumentError(
            f"{name}: expected weights in [0, 1] (probabilities after the softmax, not scores), "
            f"got values in [{low:.4g}, {high:.4g}] in {_where(heads, layer, head)}"
        )
    if row_stochastic:
        tolerance = 1e-2 if heads.float16 else 1e-3
        off = np.abs(sums - 1.0)
        worst = int(off.argmax())
        if off[worst] > tolerance:
            raise ArgumentError(
                f"{name}: expected weights in [0, 1] with each destination's weights over sources summing to 1 "
                f"(rows of [dest, src]), got a row summing to {sums[worst]:.4g} ({_where(heads, layer, head)}, destination {worst})"
            )
    if not check_upper:
        return False
    survives = _upper_max(a) >= _SURVIVES
    if causal is True and survives:
        rows, cols = np.nonzero(np.triu(a, 1) >= _SURVIVES)
        raise ArgumentError(
            f"{name}: causal=True but {_where(heads, layer, head)} attends above the diagonal (to later tokens): "
            f"destination {int(rows[0])} → source {int(cols[0])} has weight {float(a[rows[0], cols[0]]):.4g}"
        )
    return survives


def _upper_max(a: NDArray[np.float32], block: int = 128) -> float:
    """Largest weight strictly above the diagonal of ``[n, n]``, read as rectangles of views (no mask, no copy)."""
    n, top = a.shape[0], 0.0
    for r in range(0, n, block):
        e = min(n, r + block)
        if e < n:
            top = max(top, float(a[r:e, e:].max()))
        top = max(top, float(np.triu(a[r:e, r:e], 1).max(initial=0.0)))
    return top


def _quantise(values: NDArray[np.float32]) -> NDArray[np.uint8]:
    """``round(255 v)`` for ``v`` in [-tol, 1 + tol] (checked), as ``floor(255 v + 0.5)``; error ≤ 0.5/255."""
    x = np.multiply(values, np.float32(255.0), dtype=np.float32)
    x += np.float32(0.5)
    np.clip(x, 0.0, 255.0, out=x)
    q: NDArray[np.uint8] = x.astype(np.uint8)
    return q


def _pack(a: NDArray[np.float32], causal: bool, tril: NDArray[np.bool_] | None) -> NDArray[np.uint8]:
    """One head ``[n, n]`` → uint8, the lower triangle row by row when causal (flat), else ``[n, n]``."""
    if causal:
        assert tril is not None
        return _quantise(a[tril])
    return _quantise(a)


def _head_size(n: int, causal: bool) -> tuple[int, ...]:
    return (n * (n + 1) // 2,) if causal else (n, n)


# ---------------------------------------------------------------- public encoding


def encode_patterns(attention: ArrayLike, n_tokens: int, causal: bool | None = None) -> tuple[NDArray[np.uint8], bool]:
    """Quantise and pack attention patterns for the view.

    Parameters
    ----------
    attention
        Weights in [0, 1], ``[n_heads, dest, src]`` or ``[n_layers, n_heads, dest, src]``
        with ``dest == src == n_tokens`` (numpy array or torch tensor). Rows need
        not sum to 1 here (the widget's constructors check that).
    n_tokens
        Number of tokens.
    causal
        Send only the lower triangle. ``None``: when nothing above the diagonal
        survives quantisation (then packing loses nothing).

    Returns
    -------
    patterns, causal
        uint8 ``[n_layers, n_heads, n(n+1)/2]`` when causal, else ``[n_layers, n_heads, n, n]``.

    Raises
    ------
    ShapeError, NonFiniteError, ArgumentError
        (all ``ValueError``) on a wrong shape, non-finite weights, weights
        outside [0, 1], or ``causal=True`` with weight above the diagonal.

    Cost: O(n_layers · n_heads · n²) time; memory one head of float32 beyond the result.
    """
    heads = _Heads(attention, n_tokens)
    is_causal = _validate(heads, causal, row_stochastic=False)
    return _encode_all(heads, is_causal), is_causal


def decode_patterns(patterns: NDArray[np.uint8], n_tokens: int, causal: bool) -> NDArray[np.float32]:
    """Inverse of :func:`encode_patterns`: weights ``[n_layers, n_heads, n, n]`` in [0, 1]."""
    if not causal:
        return patterns.astype(np.float32) / 255.0
    n_layers, n_heads = patterns.shape[:2]
    out = np.zeros((n_layers, n_heads, n_tokens, n_tokens), dtype=np.float32)
    out[..., np.tri(n_tokens, dtype=bool)] = patterns.astype(np.float32) / 255.0
    return out


def _validate(heads: _Heads, causal: bool | None, *, row_stochastic: bool, known_causal: bool = False) -> bool:
    """Check every head; return whether the patterns are (to be sent) causal.

    ``known_causal``: the patterns come from a causal forward pass, so the
    check above the diagonal is skipped.
    """
    survives = False
    for layer in range(heads.n_layers):
        for head in range(heads.n_heads):
            a = heads.head(layer, head)
            survives |= _check_head(heads, layer, head, a, row_stochastic=row_stochastic, causal=causal, check_upper=not known_causal)
    if known_causal:
        return True
    return (not survives) if causal is None else causal


def _encode_all(heads: _Heads, causal: bool, weight: Callable[[int, int, NDArray[np.float32]], NDArray[np.float32]] | None = None) -> NDArray[np.uint8]:
    out = np.empty((heads.n_layers, heads.n_heads, *_head_size(heads.n, causal)), dtype=np.uint8)
    tril = np.tri(heads.n, dtype=bool) if causal else None
    for layer in range(heads.n_layers):
        for head in range(heads.n_heads):
            a = heads.head(layer, head)
            out[layer, head] = _pack(weight(layer, head, a) if weight else a, causal, tril)
    return out


# ---------------------------------------------------------------- model quantities


def repeat_period(tokens: Sequence[Any], min_length: int = 4) -> int | None:
    """Period ``p`` of a repeated sequence (``tokens[i] == tokens[i - p]`` for at least half of ``i ≥ p``), else None.

    The paper's induction test input ``[BOS] r_1..r_n r_1..r_n`` has period ``n``;
    there an induction head attends along the diagonal ``dest - src = p - 1``.
    Cost: O(n²) comparisons.
    """
    n = len(tokens)
    codes = np.unique(np.asarray([str(t) for t in tokens], dtype=object), return_inverse=True)[1] if n else np.zeros(0, int)
    best: tuple[int, int] | None = None
    for p in range(2, n - min_length + 1):
        matches = int((codes[p:] == codes[:-p]).sum())
        if matches >= max(min_length, (n - p) // 2) and (best is None or matches > best[1]):
            best = (p, matches)
    return None if best is None else best[0]


def _default_diagonals(tokens: Sequence[str]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{"offset": 1, "label": "previous token"}]
    period = repeat_period(tokens)
    if period is not None and period - 1 != 1:
        out.append({"offset": period - 1, "label": f"induction (repeat every {period})"})
    return out


# ---------------------------------------------------------------- streaming


class _Stream:
    """Encodes heads one step at a time for a widget (see the module docs, *Streaming*)."""

    def __init__(
        self,
        widget: AttentionPatterns,
        heads: _Heads,
        causal: bool,
        norms: NDArray[np.float32] | None,
    ) -> None:
        self.widget = widget
        self.heads = heads
        self.causal = causal
        self.norms = norms
        shape = (heads.n_layers, heads.n_heads, *_head_size(heads.n, causal))
        self.patterns = np.empty(shape, dtype=np.uint8)
        self.value_patterns = np.empty(shape, dtype=np.uint8) if norms is not None else None
        self.tril = np.tri(heads.n, dtype=bool) if causal else None
        self.ready = np.zeros((heads.n_layers, heads.n_heads), dtype=bool)
        self.queue: list[tuple[int, int]] = [(l, h) for l in range(heads.n_layers) for h in range(heads.n_heads)]
        self.view_wants = False
        self.task: asyncio.Task[None] | None = None

    def prioritise(self, layer: int, head: int) -> None:
        """Encode ``[layer, head]`` next."""
        if (layer, head) in self.queue:
            self.queue.remove((layer, head))
            self.queue.insert(0, (layer, head))

    def _encode(self, layer: int, head: int) -> None:
        a = self.heads.head(layer, head)
        self.patterns[layer, head] = _pack(a, self.causal, self.tril)
        if self.value_patterns is not None and self.norms is not None:
            self.value_patterns[layer, head] = _pack(value_weighted(a, self.norms[layer, head]), self.causal, self.tril)
        self.ready[layer, head] = True

    def _message(self, heads: list[tuple[int, int]]) -> None:
        buffers: list[memoryview] = []
        for layer, head in heads:
            buffers.append(memoryview(self.patterns[layer, head]).cast("B"))
            if self.value_patterns is not None:
                buffers.append(memoryview(self.value_patterns[layer, head]).cast("B"))
        content = {"type": "heads", "heads": [[l, h] for l, h in heads], "value": self.value_patterns is not None}
        self.widget.send(content, buffers)

    def send_ready(self) -> None:
        """Send every head encoded so far (the view asked), in messages of up to 16 MB."""
        self.view_wants = True
        per_head = self.patterns[0, 0].nbytes * (2 if self.value_patterns is not None else 1)
        batch = max(1, STREAM_BYTES // max(1, per_head))
        ready = [(int(l), int(h)) for l, h in zip(*np.nonzero(self.ready), strict=True)]
        for i in range(0, len(ready), batch):
            self._message(ready[i : i + batch])

    def step(self) -> bool:
        """Encode (and send) the next head; commit when none is left. Returns whether heads remain."""
        if self.queue:
            layer, head = self.queue.pop(0)
            self._encode(layer, head)
            if self.view_wants:
                self._message([(layer, head)])
        if not self.queue:
            self.widget._commit_stream(self)
            return False
        return True

    def finish(self) -> None:
        """Encode every remaining head now (blocking) and commit."""
        self.view_wants = False  # the complete traits follow; no need to send heads one by one
        while self.step():
            pass

    async def run(self) -> None:
        """Encode head after head, yielding to the event loop in between."""
        while self.queue and self.widget._stream is self:
            if self.widget.comm is None:  # closed: stop; reading the data finishes on demand
                return
            if not self.step():
                return
            await asyncio.sleep(0)


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


class _Source:
    """Validated data for a new widget: tokens, heads and the optional per-position arrays."""

    def __init__(
        self,
        tokens: list[str],
        heads: _Heads,
        causal: bool | None,
        norms: NDArray[np.float32] | None,
        effect: NDArray[np.float32] | None,
        *,
        known_causal: bool,
    ) -> None:
        self.tokens, self.heads, self.norms, self.effect = tokens, heads, norms, effect
        check_state_bytes(heads.n_layers, heads.n_heads, heads.n, value_weighted=norms is not None)
        self.causal = _validate(heads, causal, row_stochastic=True, known_causal=known_causal)

    def prepare(self, widget: AttentionPatterns | None, stream: bool | None, loop_running: bool) -> tuple[dict[str, Any], _Stream | None]:
        """Initial traits, and the stream that will fill ``patterns`` (or ``None``: encoded here)."""
        heads, causal, norms = self.heads, self.causal, self.norms
        per_head = int(np.prod(_head_size(heads.n, causal)))
        total = heads.n_layers * heads.n_heads * per_head * (2 if norms is not None else 1)
        if stream is None:
            stream = loop_running and total > STREAM_BYTES
        data: dict[str, Any] = {
            "tokens": self.tokens,
            "causal": causal,
            "value_norms": norms,
            "logit_effect": self.effect,
            "diagonals": _default_diagonals(self.tokens),
        }
        if stream and widget is not None:
            placeholder = np.zeros((heads.n_layers, heads.n_heads, 0), dtype=np.uint8)
            data["patterns"] = placeholder
            data["value_patterns"] = placeholder if norms is not None else None
            return data, _Stream(widget, heads, causal, norms)
        data["patterns"] = _encode_all(heads, causal)
        if norms is not None:
            data["value_patterns"] = _encode_all(heads, causal, lambda l, h, a: value_weighted(a, norms[l, h]))
        return data, None


# ---------------------------------------------------------------- the widget


def _value_patterns_present(view: Any, kind: str) -> str | None:
    """Why ``kind`` cannot be drawn (value-weighted patterns need their data), or ``None``."""
    if kind == "value" and view.value_patterns is None:
        return "'raw': value-weighted patterns need a model (or value_norms)"
    return None


_DATA_TRAITS = ("patterns", "value_patterns")


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
        _source: _Source | None = None,
        **kwargs: Any,
    ) -> None:
        self._stream: _Stream | None = None
        self._opened = False
        if "tokens" in kwargs and not {"patterns", "attention"} & kwargs.keys() and _source is None and model is None:
            # CircuitsVis' spelling would otherwise build a widget with tokens and no patterns
            raise TypeError(f"AttentionPatterns() got tokens= without patterns: {self._spellings['tokens']}")
        if model is not None:
            _source = _from_model(model, text_or_tokens)
        elif text_or_tokens is not None:
            raise ArgumentTypeError("model: expected a CircuitModel when text_or_tokens is given, got None")
        loop = _running_loop()
        if _source is not None:
            data, self._stream = _source.prepare(self, stream, loop is not None)
            kwargs = {**data, **kwargs}
        super().__init__(**kwargs)
        self._opened = True
        self.on_msg(self._on_custom)
        pending = self._stream
        if pending is not None:
            pending.prioritise(self.selected_layer, self.selected_head)
            if loop is not None:
                pending.task = loop.create_task(pending.run())

    # ------------------------------------------------------------ constructors

    @classmethod
    def from_model(
        cls, model: CircuitModel, text_or_tokens: str | Sequence[int] | torch.Tensor, *, stream: bool | None = None, **kwargs: Any
    ) -> AttentionPatterns:
        """Same as ``AttentionPatterns(model, text_or_tokens)``."""
        return cls(model, text_or_tokens, stream=stream, **kwargs)

    @classmethod
    def initial(cls, model: CircuitModel, text_or_tokens: str | Sequence[int] | torch.Tensor) -> dict[str, Any]:
        """Initial data traits for ``model`` on a text or token ids, encoded at once (no streaming)."""
        state, _ = _from_model(model, text_or_tokens).prepare(None, stream=False, loop_running=False)
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
        token_list = _check_tokens(tokens)
        heads = _Heads(attention, len(token_list))
        check_state_bytes(heads.n_layers, heads.n_heads, heads.n, value_weighted=value_norms is not None)
        norms = _per_position(value_norms, "value_norms", heads, nan_ok=False)
        if norms is not None and (norms < 0).any():
            raise ArgumentError(f"value_norms: expected norms ≥ 0, got minimum {float(norms.min()):.4g}")
        effect = _per_position(logit_effect, "logit_effect", heads, nan_ok=True)
        return cls(stream=stream, _source=_Source(token_list, heads, causal, norms, effect, known_causal=False), **kwargs)

    # ------------------------------------------------------------ streaming

    @property
    def streaming(self) -> bool:
        """Whether heads are still being encoded and sent (see the module docs)."""
        return self._stream is not None

    def finish(self) -> None:
        """Encode the heads still streaming now (blocking), so the traits hold everything."""
        if self._stream is not None:
            self._stream.finish()

    def _commit_stream(self, stream: _Stream) -> None:
        if self._stream is not stream:
            return
        self._stream = None
        with self.hold_sync():
            self.patterns = stream.patterns
            if stream.value_patterns is not None:
                self.value_patterns = stream.value_patterns

    def _on_custom(self, widget: Any, content: Any, buffers: Any) -> None:
        if isinstance(content, dict) and content.get("type") == "want_heads" and self._stream is not None:
            self._stream.send_ready()

    def get_state(self, key: str | Sequence[str] | None = None, drop_defaults: bool = False) -> dict[str, Any]:
        """The synced state; finishes a stream first when the data traits are asked for."""
        if self._stream is not None and self._opened:
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
        if self._stream is None:
            return super()._repr_mimebundle_(**kwargs)
        bundle: tuple[dict[str, Any], dict[str, Any]] | None = anywidget.AnyWidget._repr_mimebundle_(self, **kwargs)
        return bundle

    @traitlets.observe("selected_layer", "selected_head")
    def _on_selected_head(self, change: traitlets.Bunch) -> None:
        if self._stream is not None:
            self._stream.prioritise(self.selected_layer, self.selected_head)

    # ------------------------------------------------------------ validation

    @traitlets.default("patterns")
    def _default_patterns(self) -> NDArray[np.uint8]:
        return np.zeros((0, 0, 0), dtype=np.uint8)

    def _expected_layout(self) -> tuple[int, ...]:
        return _head_size(len(self.tokens), self.causal)

    @traitlets.validate("patterns", "value_patterns")
    def _validate_patterns(self, proposal: traitlets.Bunch) -> NDArray[np.uint8] | None:
        p: NDArray[np.uint8] | None = proposal["value"]
        name = proposal["trait"].name
        if p is None:
            return None
        expected = self._expected_layout()
        pending = getattr(self, "_stream", None) is not None and p.ndim == 3 and p.shape[2] == 0
        if not pending and (p.ndim != 2 + len(expected) or p.shape[2:] != expected):
            n = len(self.tokens)
            raise trait_error(
                self,
                name,
                f"shape [n_layers, n_heads, {', '.join(map(str, expected))}] for {n} tokens "
                f"({'causal' if self.causal else 'full'})",
                str(list(p.shape)),
            )
        if name == "value_patterns" and p.shape[:2] != self.patterns.shape[:2]:
            raise trait_error(self, name, f"{list(self.patterns.shape[:2])} heads like 'patterns'", str(list(p.shape[:2])))
        return p

    @traitlets.validate("value_norms", "logit_effect")
    def _validate_per_position(self, proposal: traitlets.Bunch) -> NDArray[np.float32] | None:
        v: NDArray[np.float32] | None = proposal["value"]
        if v is None:
            return None
        expected = (*self.patterns.shape[:2], len(self.tokens))
        if v.shape != expected:
            raise trait_error(
                self, proposal["trait"].name, f"shape {list(expected)} [n_layers, n_heads, n_tokens]", str(list(v.shape))
            )
        return v

    @traitlets.validate("diagonals")
    def _validate_diagonals(self, proposal: traitlets.Bunch) -> list[dict[str, Any]]:
        out = []
        for i, d in enumerate(proposal["value"]):
            offset, label = d.get("offset"), d.get("label", "")
            if set(d) - {"offset", "label"} or isinstance(offset, bool) or not isinstance(offset, int) or not isinstance(label, str):
                raise trait_error(self, "diagonals", "entries {'offset': int, 'label': str}", f"{d!r:.80} at {i}")
            if abs(offset) > _MAX_OFFSET:
                raise trait_error(self, "diagonals", f"offsets in [-{_MAX_OFFSET}, {_MAX_OFFSET}]", f"{offset} at {i}")
            out.append({"offset": int(offset), "label": label[:_MAX_LABEL]})
        return out

    # ------------------------------------------------------------ data

    def set_data(self, tokens: Sequence[str], attention: ArrayLike, *, causal: bool | None = None) -> None:
        """Replace tokens and patterns (raw only); selections that no longer fit are reset."""
        token_list = _check_tokens(tokens)
        heads = _Heads(attention, len(token_list))
        check_state_bytes(heads.n_layers, heads.n_heads, heads.n, value_weighted=False)
        is_causal = _validate(heads, causal, row_stochastic=True)
        patterns = _encode_all(heads, is_causal)
        n_layers, n_heads, n = heads.n_layers, heads.n_heads, len(token_list)
        self._stream = None
        with self.hold_trait_notifications():
            self.pattern_kind = "raw"
            # (the traits allow None; NDArrayTrait's static type does not say so)
            self.value_patterns = None  # type: ignore[assignment]
            self.value_norms = None  # type: ignore[assignment]
            self.logit_effect = None  # type: ignore[assignment]
            self.tokens = token_list
            self.causal = is_causal
            self.patterns = patterns
            self.diagonals = _default_diagonals(token_list)
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
        """The weights as the view sees them, ``[n_layers, n_heads, dest, src]`` in [0, 1]."""
        self.finish()
        return decode_patterns(self.patterns, self.n_tokens, self.causal)

    @property
    def value_attention(self) -> NDArray[np.float32] | None:
        """The value-weighted patterns as the view sees them (rows normalised), or ``None``."""
        self.finish()
        vp = self.value_patterns
        return None if vp is None else decode_patterns(vp, self.n_tokens, self.causal)


# ---------------------------------------------------------------- argument checks


def check_state_bytes(n_layers: int, n_heads: int, n_tokens: int, *, value_weighted: bool) -> int:
    """Bytes of encoded patterns for these sizes (lower triangles); :class:`MemoryBudgetError` above :data:`MAX_STATE_BYTES`.

    Checked from the shapes alone, before any weight is read or converted.
    """
    per_head = n_tokens * (n_tokens + 1) // 2
    total = n_layers * n_heads * per_head * (2 if value_weighted else 1)
    if total > MAX_STATE_BYTES:
        raise MemoryBudgetError(
            f"attention: {n_layers} layers × {n_heads} heads over {n_tokens} tokens would put {total:,} bytes of "
            f"patterns in the widget state{' (raw and value-weighted)' if value_weighted else ''}, over the limit of "
            f"{MAX_STATE_BYTES:,} bytes; show fewer tokens, layers or heads"
        )
    return total


def _check_tokens(tokens: Any) -> list[str]:
    if isinstance(tokens, (str, bytes)) or not isinstance(tokens, Sequence):
        raise ArgumentTypeError(f"tokens: expected a list of token strings, got {type(tokens).__name__}")
    bad = next((i for i, t in enumerate(tokens) if not isinstance(t, str)), None)
    if bad is not None:
        raise ArgumentTypeError(f"tokens: expected str entries, got {type(tokens[bad]).__name__} at index {bad}")
    if len(tokens) == 0:
        raise ShapeError("tokens: expected at least one token, got an empty sequence")
    return list(tokens)


def _per_position(values: Any, name: str, heads: _Heads, *, nan_ok: bool) -> NDArray[np.float32] | None:
    """``[n_heads, n]`` or ``[n_layers, n_heads, n]`` → float32 ``[n_layers, n_heads, n]``."""
    if values is None:
        return None
    if isinstance(values, torch.Tensor):
        values = values.detach().to("cpu", torch.float32).numpy()
    try:
        v = np.asarray(values, dtype=np.float32)
    except (TypeError, ValueError) as exc:
        raise ArgumentTypeError(f"{name}: expected an array of numbers, got {type(values).__name__} ({exc})") from None
    if v.ndim == 2:
        v = v[None]
    expected = (heads.n_layers, heads.n_heads, heads.n)
    if v.shape != expected:
        raise ShapeError(f"{name}: expected shape {expected} [n_layers, n_heads, n_tokens] (like attention), got {tuple(np.shape(values))}")
    finite = np.isfinite(v) | (np.isnan(v) if nan_ok else False)
    if not finite.all():
        raise NonFiniteError(f"{name}: expected finite values{' (or NaN)' if nan_ok else ''}, got {int((~finite).sum())} other entries")
    return np.ascontiguousarray(v)


def _from_model(model: Any, text_or_tokens: Any) -> _Source:
    """Tokens, patterns (every layer), value norms and logit effects of one forward pass."""
    if not isinstance(model, CircuitModel):
        raise ArgumentTypeError(f"model: expected a circuitwidgets.CircuitModel, got {type(model).__name__}")
    if isinstance(text_or_tokens, str):
        if not text_or_tokens:
            raise ShapeError("text_or_tokens: expected a non-empty text, got ''")
        ids = model.to_tokens(text_or_tokens)[0]
    elif text_or_tokens is None:
        raise ArgumentTypeError("text_or_tokens: expected a text or token ids, got None")
    else:
        if isinstance(text_or_tokens, Sequence) and any(isinstance(t, str) for t in text_or_tokens):
            raise ArgumentTypeError(
                "text_or_tokens: expected a text (str) or token ids (ints), got a list of str; "
                "for token strings with precomputed attention use AttentionPatterns.from_arrays"
            )
        try:
            ids = torch.as_tensor(text_or_tokens)
        except (TypeError, ValueError, RuntimeError) as exc:
            raise ArgumentTypeError(f"text_or_tokens: expected a text or token ids, got {type(text_or_tokens).__name__} ({exc})") from None
        if ids.ndim == 2 and ids.shape[0] == 1:
            ids = ids[0]
        if ids.ndim != 1:
            raise ShapeError(f"text_or_tokens: expected token ids [pos] or [1, pos], got shape {tuple(ids.shape)}")
        if ids.numel() == 0:
            raise ShapeError("text_or_tokens: expected at least one token, got 0")
        if ids.dtype.is_floating_point or ids.dtype.is_complex or ids.dtype == torch.bool:
            raise ArgumentTypeError(f"text_or_tokens: expected integer token ids, got dtype {ids.dtype}")
    ids = model._check_tokens(ids)[0]
    check_state_bytes(model.cfg.n_layers, model.cfg.n_heads, int(ids.shape[0]), value_weighted=True)
    tokens = model.to_str_tokens(ids)
    _, cache = model.run_with_cache(ids[None], names=["pattern", "v", "z"])
    heads = _Heads([cache["pattern", layer][0] for layer in range(model.cfg.n_layers)], len(tokens))
    return _Source(tokens, heads, True, value_norms(model, cache), logit_effects(model, cache, ids), known_causal=True)
