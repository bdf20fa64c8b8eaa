"""Attention patterns to the wire and back: reading heads, argument checks, uint8 quantisation, triangle packing.

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
``logit_effect`` are float32 ``[n_layers, n_heads, n]``, ``per_token_loss`` float32 ``[n]``
(:mod:`~circuitwidgets.widgets.attention.loss`).
``js/src/lib/patterns.ts`` reads them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from numpy.typing import ArrayLike, NDArray

from circuitwidgets.errors import ArgumentError, ArgumentTypeError, MemoryBudgetError, NonFiniteError, ShapeError

__all__ = [
    "MAX_STATE_BYTES",
    "check_state_bytes",
    "decode_patterns",
    "encode_patterns",
]

#: Below 0.5/255, so ``255 a + 0.5`` stays in [0, 256) and needs no clipping.
_RANGE_TOLERANCE = 1e-3

#: Widget state (encoded patterns) larger than this is refused before anything is converted:
#: 2 GiB holds 12 layers × 12 heads of 4,096 tokens (3,800 with value-weighted patterns too).
MAX_STATE_BYTES = 2**31

#: A weight above the diagonal at least this large survives quantisation.
_SURVIVES = 0.5 / 255


# ---------------------------------------------------------------- reading heads


class Heads:
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
                raise ShapeError(
                    f"{name}: expected equal [n_heads, dest, src] shapes per layer, got {[tuple(a.shape) for a in self.layers]}"
                )
        else:
            if isinstance(attention, torch.Tensor):
                data: Any = attention.detach()
                if data.is_complex() or data.dtype == torch.bool:
                    raise ArgumentTypeError(f"{name}: expected real weights, got a tensor of dtype {data.dtype}")
            else:
                try:
                    data = np.asarray(attention)
                except (TypeError, ValueError) as exc:
                    raise ArgumentTypeError(
                        f"{name}: expected an array of weights, got {type(attention).__name__} ({exc})"
                    ) from None
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
                f"{n_tokens} (the number of tokens), got shape {shape[-4 if len(shape) >= 4 else 0 :]}"
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


def _where(heads: Heads, layer: int, head: int) -> str:
    return f"layer {layer}, head {head}" if heads.n_layers > 1 else f"head {head}"


def _check_head(
    heads: Heads,
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
        raise NonFiniteError(
            f"{name}: expected finite weights, got NaN or infinite values in {_where(heads, layer, head)}"
        )
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


def pack(a: NDArray[np.float32], causal: bool, tril: NDArray[np.bool_] | None) -> NDArray[np.uint8]:
    """One head ``[n, n]`` → uint8, the lower triangle row by row when causal (flat), else ``[n, n]``."""
    if causal:
        assert tril is not None
        return _quantise(a[tril])
    return _quantise(a)


def head_size(n: int, causal: bool) -> tuple[int, ...]:
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
    heads = Heads(attention, n_tokens)
    is_causal = validate(heads, causal, row_stochastic=False)
    return encode_all(heads, is_causal), is_causal


def decode_patterns(patterns: NDArray[np.uint8], n_tokens: int, causal: bool) -> NDArray[np.float32]:
    """Inverse of :func:`encode_patterns`: weights ``[n_layers, n_heads, n, n]`` in [0, 1]."""
    if not causal:
        return patterns.astype(np.float32) / 255.0
    n_layers, n_heads = patterns.shape[:2]
    out = np.zeros((n_layers, n_heads, n_tokens, n_tokens), dtype=np.float32)
    out[..., np.tri(n_tokens, dtype=bool)] = patterns.astype(np.float32) / 255.0
    return out


def validate(heads: Heads, causal: bool | None, *, row_stochastic: bool, known_causal: bool = False) -> bool:
    """Check every head; return whether the patterns are (to be sent) causal.

    ``known_causal``: the patterns come from a causal forward pass, so the
    check above the diagonal is skipped.
    """
    survives = False
    for layer in range(heads.n_layers):
        for head in range(heads.n_heads):
            a = heads.head(layer, head)
            survives |= _check_head(
                heads, layer, head, a, row_stochastic=row_stochastic, causal=causal, check_upper=not known_causal
            )
    if known_causal:
        return True
    return (not survives) if causal is None else causal


def encode_all(
    heads: Heads,
    causal: bool,
    weight: Callable[[int, int, NDArray[np.float32]], NDArray[np.float32]] | None = None,
    done: Callable[[int], object] | None = None,
) -> NDArray[np.uint8]:
    """Every head packed (:func:`pack`), optionally re-weighted first; ``done(n_heads)`` after each layer."""
    out = np.empty((heads.n_layers, heads.n_heads, *head_size(heads.n, causal)), dtype=np.uint8)
    tril = np.tri(heads.n, dtype=bool) if causal else None
    for layer in range(heads.n_layers):
        for head in range(heads.n_heads):
            a = heads.head(layer, head)
            out[layer, head] = pack(weight(layer, head, a) if weight else a, causal, tril)
        if done is not None:
            done(heads.n_heads)
    return out


# ---------------------------------------------------------------- argument checks


def check_state_bytes(n_layers: int, n_heads: int, n_tokens: int, *, value_weighted: bool, n_prompts: int = 1) -> int:
    """Bytes of encoded patterns for these sizes (lower triangles); :class:`MemoryBudgetError` above :data:`MAX_STATE_BYTES`.

    Checked from the shapes alone, before any weight is read or converted
    (``n_prompts`` prompts of at most ``n_tokens`` tokens each).
    """
    per_head = n_tokens * (n_tokens + 1) // 2
    total = n_prompts * n_layers * n_heads * per_head * (2 if value_weighted else 1)
    if total > MAX_STATE_BYTES:
        prompts = f"{n_prompts} prompts × " if n_prompts > 1 else ""
        raise MemoryBudgetError(
            f"attention: {prompts}{n_layers} layers × {n_heads} heads over {n_tokens} tokens would put {total:,} bytes of "
            f"patterns in the widget state{' (raw and value-weighted)' if value_weighted else ''}, over the limit of "
            f"{MAX_STATE_BYTES:,} bytes; show fewer {'prompts, ' if n_prompts > 1 else ''}tokens, layers or heads"
        )
    return total


def check_tokens(tokens: Any, name: str = "tokens") -> list[str]:
    """``tokens`` as a non-empty list of str, else a typed error naming ``name``."""
    if isinstance(tokens, (str, bytes)) or not isinstance(tokens, Sequence):
        raise ArgumentTypeError(f"{name}: expected a list of token strings, got {type(tokens).__name__}")
    bad = next((i for i, t in enumerate(tokens) if not isinstance(t, str)), None)
    if bad is not None:
        raise ArgumentTypeError(f"{name}: expected str entries, got {type(tokens[bad]).__name__} at index {bad}")
    if len(tokens) == 0:
        raise ShapeError(f"{name}: expected at least one token, got an empty sequence")
    return list(tokens)


def float32_array(values: Any, name: str) -> NDArray[np.float32]:
    """A user's per-position values (numpy, torch on any device, nested lists) as float32, or a typed error naming ``name``."""
    if isinstance(values, torch.Tensor):
        values = values.detach().to("cpu", torch.float32).numpy()
    try:
        return np.asarray(values, dtype=np.float32)
    except (TypeError, ValueError) as exc:
        raise ArgumentTypeError(f"{name}: expected an array of numbers, got {type(values).__name__} ({exc})") from None


def per_position(
    values: Any, name: str, heads: Heads | tuple[int, int, int], *, nan_ok: bool
) -> NDArray[np.float32] | None:
    """``[n_heads, n]`` or ``[n_layers, n_heads, n]`` → float32 ``[n_layers, n_heads, n]`` (``heads``: the patterns, or that shape)."""
    if values is None:
        return None
    v = float32_array(values, name)
    if v.ndim == 2:
        v = v[None]
    expected = heads if isinstance(heads, tuple) else (heads.n_layers, heads.n_heads, heads.n)
    if v.shape != expected:
        raise ShapeError(
            f"{name}: expected shape {expected} [n_layers, n_heads, n_tokens] (like attention), got {tuple(np.shape(values))}"
        )
    finite = np.isfinite(v) | (np.isnan(v) if nan_ok else False)
    if not finite.all():
        raise NonFiniteError(
            f"{name}: expected finite values{' (or NaN)' if nan_ok else ''}, got {int((~finite).sum())} other entries"
        )
    return np.ascontiguousarray(v)
