"""Several prompts in one attention widget: reading a batch, padding it for the wire, slicing it back.

Unequal lengths are padded, never refused
-----------------------------------------
Prompts may have different numbers of tokens. Each is analysed at its own
length (one forward pass per prompt, or each prompt's own corner of padded
arrays) and shown at its own length; on the wire the prompts share one array,
padded on the right to the longest, ``n``:

- ``prompts``: each prompt's token strings (``[]`` when the widget shows one text);
- ``patterns`` / ``value_patterns``: ``[n_prompts, n_layers, n_heads, n(n+1)/2]``
  (causal: prompt ``p`` of ``n_p`` tokens fills the first ``n_p(n_p+1)/2`` bytes of
  each head, which is exactly its own lower triangle, row by row) or
  ``[n_prompts, n_layers, n_heads, n, n]`` (its top-left ``n_p × n_p`` corner);
  padding is 0 and is never shown;
- ``value_norms`` / ``logit_effect``: ``[n_prompts, n_layers, n_heads, n]`` (padding
  0 and NaN); ``per_token_loss``: ``[n_prompts, n]`` (padding NaN).

Arrays a user brings (``from_arrays``, ``from_cache``) may be padded on the right
the same way (TransformerLens pads on the right): each prompt's top-left corner
is read, and its rows must sum to 1 over its own tokens, as they do for a causal
model whose padding comes after the prompt.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from numpy.typing import NDArray

from circuitwidgets.errors import ArgumentError, ArgumentTypeError, ShapeError
from circuitwidgets.widgets.attention.codec import Heads, check_state_bytes, check_tokens, head_size, per_position
from circuitwidgets.widgets.attention.loss import check_loss, stack_losses
from circuitwidgets.widgets.attention.source import Source, repeat_period

__all__ = [
    "ArrayBatch",
    "Prepared",
    "batch_diagonals",
    "cache_patterns",
    "is_batch_of_tokens",
    "prompt_slice",
    "sources_from_arrays",
    "stack_prompts",
]

#: Induction diagonals offered for a batch at most (one per distinct repeat period).
_MAX_INDUCTION_DIAGONALS = 3


class Prepared:
    """Data encoded already (a batch, or windows): what a widget starts with, never streamed."""

    def __init__(self, data: dict[str, Any]) -> None:
        self.data = data

    def prepare(
        self, widget: Any, stream: bool | None, loop_running: bool, done: Callable[[int], object] | None = None
    ) -> tuple[dict[str, Any], None]:
        """The initial traits (``stream=True`` is refused: this data is encoded at once)."""
        if stream:
            raise ArgumentError("stream: a batch of prompts, or a text in windows, is encoded at once; got stream=True")
        return self.data, None


# ------------------------------------------------------------------ the wire layout


def batch_diagonals(prompts: Sequence[Sequence[str]]) -> list[dict[str, Any]]:
    """Previous-token diagonal, and an induction diagonal per distinct repeat period among the prompts."""
    out: list[dict[str, Any]] = [{"offset": 1, "label": "previous token"}]
    periods = [p for p in (repeat_period(t) for t in prompts) if p is not None and p - 1 != 1]
    for period in list(dict.fromkeys(periods))[:_MAX_INDUCTION_DIAGONALS]:
        where = [str(i) for i, t in enumerate(prompts) if repeat_period(t) == period]
        label = (
            f"induction (repeat every {period}{'' if len(where) == len(prompts) else ', prompt ' + ', '.join(where)})"
        )
        out.append({"offset": period - 1, "label": label[:40]})
    return out


def _place(out: NDArray[Any], part: NDArray[Any], n: int, layout: str) -> None:
    """Put one prompt's array (``n`` tokens) into its padded slot ``out``."""
    if layout == "causal":
        out[..., : n * (n + 1) // 2] = part
    elif layout == "full":
        out[..., :n, :n] = part
    else:
        out[..., :n] = part


def prompt_slice(array: NDArray[Any], prompt: int, n: int, layout: str) -> NDArray[Any]:
    """Prompt ``prompt``'s part (``n`` tokens) of a padded batch array; ``layout`` is "causal", "full" or "position"."""
    part: NDArray[Any] = array[prompt]
    if layout == "causal":
        return part[..., : n * (n + 1) // 2]
    if layout == "full":
        return part[..., :n, :n]
    return part[..., :n]


def stack_prompts(parts: Sequence[dict[str, Any]], causal: bool) -> dict[str, Any]:
    """One widget's data traits from each prompt's encoded traits (``Source.prepare``), padded on the right."""
    prompts = [list(part["tokens"]) for part in parts]
    width = max(len(t) for t in prompts)
    n_layers, n_heads = (int(d) for d in parts[0]["patterns"].shape[:2])
    lead = (len(parts), n_layers, n_heads)

    def stacked(key: str, tail: tuple[int, ...], fill: float, dtype: Any, layout: str) -> NDArray[Any] | None:
        if any(part.get(key) is None for part in parts):
            return None
        out = np.full((*lead, *tail), fill, dtype=dtype)
        for i, part in enumerate(parts):
            _place(out[i], part[key], len(prompts[i]), layout)
        return out

    pattern_layout = "causal" if causal else "full"
    return {
        "prompts": prompts,
        "tokens": prompts[0],
        "causal": causal,
        "patterns": stacked("patterns", head_size(width, causal), 0, np.uint8, pattern_layout),
        "value_patterns": stacked("value_patterns", head_size(width, causal), 0, np.uint8, pattern_layout),
        "value_norms": stacked("value_norms", (width,), 0.0, np.float32, "position"),
        "logit_effect": stacked("logit_effect", (width,), np.nan, np.float32, "position"),
        "per_token_loss": stack_losses([part.get("per_token_loss") for part in parts], width),
        "diagonals": batch_diagonals(prompts),
    }


def encode_sources(
    sources: Sequence[Source], causal: bool | None, done: Callable[[int], object] | None
) -> dict[str, Any]:
    """Encode each prompt's validated data and stack it; sent causal only when every prompt is."""
    is_causal = all(s.causal for s in sources) if causal is None else causal
    parts = []
    for source in sources:
        source.causal = is_causal  # (a causal pattern may always be sent whole)
        data, _ = source.prepare(None, stream=False, loop_running=False, done=done)
        parts.append(data)
    return stack_prompts(parts, is_causal)


# ------------------------------------------------------------------ arrays a user brings


class ArrayBatch:
    """A batch of prompts from arrays (:func:`sources_from_arrays`): encoded when the widget is built."""

    def __init__(self, sources: list[Source], causal: bool | None) -> None:
        self.sources, self.causal = sources, causal
        first = sources[0]
        width = max(s.heads.n for s in sources)
        check_state_bytes(
            first.heads.n_layers,
            first.heads.n_heads,
            width,
            value_weighted=first.norms is not None,
            n_prompts=len(sources),
        )

    @property
    def encoded_heads(self) -> int:
        """Heads encoded (a progress bar's total)."""
        return sum(s.encoded_heads for s in self.sources)

    def prepare(
        self, widget: Any, stream: bool | None, loop_running: bool, done: Callable[[int], object] | None = None
    ) -> tuple[dict[str, Any], None]:
        """The batch's traits, encoded now (``stream=True`` is refused)."""
        if stream:
            raise ArgumentError("stream: a batch of prompts is encoded at once; got stream=True")
        return encode_sources(self.sources, self.causal, done), None


def is_batch_of_tokens(tokens: Any) -> bool:
    """Whether ``tokens`` is a list of token-string lists (one per prompt)."""
    return (
        isinstance(tokens, Sequence)
        and not isinstance(tokens, (str, bytes))
        and len(tokens) > 0
        and all(isinstance(t, Sequence) and not isinstance(t, (str, bytes)) for t in tokens)
    )


def _count(values: Any) -> int:
    if isinstance(values, (list, tuple)):
        return len(values)
    shape = getattr(values, "shape", None)
    if shape is None or len(shape) == 0:
        raise ArgumentTypeError(f"expected one array per prompt, got {type(values).__name__}")
    return int(shape[0])


def _side(item: Any) -> tuple[int, int] | None:
    """The last two sizes of one prompt's array (or of its first layer's, for a list of layers)."""
    first = item[0] if isinstance(item, (list, tuple)) and item else item
    shape = getattr(first, "shape", None)
    if shape is None:
        try:
            shape = np.shape(first)
        except (TypeError, ValueError):
            return None
    return (int(shape[-2]), int(shape[-1])) if len(shape) >= 2 else None


def _corner(item: Any, n: int, width: int, name: str, per_pos: bool = False) -> Any:
    """One prompt's own ``n`` tokens of its (possibly right-padded) array: sides ``n`` or ``width`` accepted."""
    if isinstance(item, (list, tuple)) and item and all(isinstance(a, torch.Tensor) for a in item):
        return [_corner(a, n, width, f"{name}[{k}]", per_pos) for k, a in enumerate(item)]
    if not isinstance(item, (torch.Tensor, np.ndarray)):
        try:
            item = np.asarray(item)
        except (TypeError, ValueError) as exc:
            raise ArgumentTypeError(f"{name}: expected an array, got {type(item).__name__} ({exc})") from None
    shape = tuple(int(d) for d in item.shape)
    sides = shape[-1:] if per_pos else shape[-2:]
    if (
        not shape
        or len(sides) < (1 if per_pos else 2)
        or any(s not in (n, width) for s in sides)
        or len(set(sides)) > 1
    ):
        what = f"[..., {width}]" if per_pos else f"[..., {width}, {width}]"
        raise ShapeError(
            f"{name}: expected {what} (the longest prompt's {width} tokens; shorter prompts padded on the right) "
            f"or its own {n} tokens, got shape {shape}"
        )
    return item[..., :n] if per_pos else item[..., :n, :n]


def sources_from_arrays(
    tokens: Sequence[Sequence[str]],
    attention: Any,
    causal: bool | None,
    value_norms: Any,
    logit_effect: Any,
    per_token_loss: Any = None,
) -> list[Source]:
    """Each prompt's validated data from a batch of arrays (``[n_prompts, ...]`` or one array per prompt).

    Raises :class:`ShapeError`, :class:`ArgumentTypeError`, :class:`NonFiniteError` or
    :class:`ArgumentError` naming the argument and the prompt (``attention[2]``).
    """
    prompts = [check_tokens(t, f"tokens[{i}]") for i, t in enumerate(tokens)]
    width = max(len(t) for t in prompts)
    given = {
        "attention": attention,
        "value_norms": value_norms,
        "logit_effect": logit_effect,
        "per_token_loss": per_token_loss,
    }
    for name, values in given.items():
        if values is None:
            continue
        try:
            count = _count(values)
        except ArgumentTypeError as exc:
            raise ArgumentTypeError(f"{name}: {exc}") from None
        if count != len(prompts):
            raise ShapeError(
                f"{name}: expected one entry per prompt ({len(prompts)} prompts in tokens) along the first axis, got {count}"
            )
    sources = []
    for i, prompt in enumerate(prompts):
        n = len(prompt)
        heads = Heads(_corner(attention[i], n, width, f"attention[{i}]"), n, name=f"attention[{i}]")
        norms = None if value_norms is None else _corner(value_norms[i], n, width, f"value_norms[{i}]", per_pos=True)
        effect = (
            None if logit_effect is None else _corner(logit_effect[i], n, width, f"logit_effect[{i}]", per_pos=True)
        )
        norms = per_position(norms, f"value_norms[{i}]", heads, nan_ok=False)
        if norms is not None and (norms < 0).any():
            raise ArgumentError(f"value_norms[{i}]: expected norms ≥ 0, got minimum {float(norms.min()):.4g}")
        effect = per_position(effect, f"logit_effect[{i}]", heads, nan_ok=True)
        loss = None
        if per_token_loss is not None:
            loss = check_loss(
                _corner(per_token_loss[i], n, width, f"per_token_loss[{i}]", per_pos=True), f"per_token_loss[{i}]", n
            )
        sources.append(Source(prompt, heads, causal, norms, effect, known_causal=False, loss=loss))
    if len({(s.heads.n_layers, s.heads.n_heads) for s in sources}) > 1:
        raise ShapeError(
            f"attention: expected the same layers and heads for every prompt, got "
            f"{[(s.heads.n_layers, s.heads.n_heads) for s in sources]}"
        )
    return sources


def cache_patterns(cache: Any, n_layers: int | None = None) -> list[Any]:
    """Every layer's pattern ``[batch, n_heads, pos, pos]`` from an activation cache (ours or TransformerLens's).

    Reads ``cache["pattern", layer]`` for layers 0, 1, … (``n_layers`` of them when given,
    else until one is missing).
    """
    if not hasattr(cache, "__getitem__"):
        raise ArgumentTypeError(
            f"cache: expected an activation cache (model.run_with_cache(...)[1]), got {type(cache).__name__}"
        )
    layers: list[Any] = []
    while n_layers is None or len(layers) < n_layers:
        try:
            layers.append(cache["pattern", len(layers)])
        except (KeyError, IndexError, ValueError, TypeError):
            if n_layers is not None:
                raise ArgumentError(
                    f"cache: expected 'pattern' for each of n_layers={n_layers} layers, missing layer {len(layers)} "
                    "(run the model with the attention patterns cached)"
                ) from None
            break
    if not layers:
        raise ArgumentError(
            "cache: expected attention patterns ('pattern' of layer 0, as run_with_cache records them), found none"
        )
    first = tuple(getattr(layers[0], "shape", ()))
    for layer, pattern in enumerate(layers):
        shape = tuple(getattr(pattern, "shape", ()))
        if len(shape) != 4 or shape[2] != shape[3] or shape != first:
            raise ShapeError(
                f"cache['pattern', {layer}]: expected [batch, n_heads, pos, pos] like layer 0's {first}, got shape {shape}"
            )
    return layers
