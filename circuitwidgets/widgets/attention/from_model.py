"""The model side of the attention widget: token ids, the context check, forward passes.

- :func:`prompt_list`: whether ``text_or_tokens`` is one prompt or a batch (several
  texts, several token lists, ids ``[batch, pos]``), and its prompts;
- :func:`token_ids`: checked ids ``[pos]`` of one prompt, refused before any work
  when longer than the model's context (:func:`~circuitwidgets.widgets.core.context.check_context`),
  saying how to proceed;
- :func:`from_model_source`: tokens, every layer's pattern, value norms, logit
  effects and the per-token loss (from its logits) of one forward pass; :func:`qk_from_model`: tokens, queries and keys
  (long inputs); :func:`batch_from_model`: one forward pass per prompt, stacked;
- :func:`model_data`: which of those (or windows,
  :mod:`~circuitwidgets.widgets.attention.window`) a widget's arguments ask for.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from circuitwidgets.activations.loss import next_token_loss
from circuitwidgets.activations.qk_patterns import QKPatterns
from circuitwidgets.activations.value_paths import logit_effects, value_norms
from circuitwidgets.errors import ArgumentError, ArgumentTypeError, ShapeError
from circuitwidgets.model import CircuitModel
from circuitwidgets.widgets.attention.batch import Prepared, stack_prompts
from circuitwidgets.widgets.attention.codec import Heads, check_state_bytes
from circuitwidgets.widgets.attention.source import Source, build_bar
from circuitwidgets.widgets.attention.tiles import LongText
from circuitwidgets.widgets.attention.window import check_window, windowed_data
from circuitwidgets.widgets.core.context import check_context, context_limited

__all__ = [
    "LONG_TOKENS",
    "batch_from_model",
    "from_model_source",
    "long_text_advice",
    "model_data",
    "prompt_list",
    "qk_from_model",
    "token_ids",
]

#: ``from_model`` computes patterns on demand from queries and keys above this many tokens.
LONG_TOKENS = 2048


def long_text_advice(model: CircuitModel) -> str:
    """What the context check proposes for a text longer than ``n_ctx``: the widget's overlapping windows."""
    n_ctx = int(model.cfg.n_ctx)
    return (
        f"or show it in overlapping windows of the model's context: AttentionPatterns(model, text, window={n_ctx}) "
        "(each query row from the window that gives it the most left context; stride half a window by default)"
    )


def prompt_list(text_or_tokens: Any) -> list[Any] | None:
    """The prompts of a batch (two or more), or ``None`` for one text or one token sequence.

    A batch is a list of texts, a list of token-id lists (of any lengths), or ids
    ``[batch, pos]`` with ``batch ≥ 2`` (numpy or torch). A batch of one is one prompt
    (``[[1, 2, 3]]`` and ``[1, pos]`` are, as before, one sequence).
    """
    x = text_or_tokens
    if isinstance(x, (torch.Tensor, np.ndarray)):
        return [x[i] for i in range(int(x.shape[0]))] if x.ndim == 2 and int(x.shape[0]) >= 2 else None
    if isinstance(x, (str, bytes)) or not isinstance(x, Sequence) or len(x) < 2:
        return None
    if all(isinstance(t, str) for t in x):
        return list(x)
    if all(isinstance(t, (Sequence, torch.Tensor, np.ndarray)) and not isinstance(t, (str, bytes)) for t in x):
        return list(x)
    return None


def single_prompt(text_or_tokens: Any) -> Any:
    """The one prompt of a batch of one (``["text"]``, ``[[ids]]``), else ``text_or_tokens`` unchanged."""
    x = text_or_tokens
    if isinstance(x, (list, tuple)) and len(x) == 1 and isinstance(x[0], (str, Sequence, torch.Tensor, np.ndarray)):
        return x[0]
    return x


def token_ids(
    model: Any, text_or_tokens: Any, name: str = "text_or_tokens", *, check_length: bool = True
) -> torch.Tensor:
    """Checked token ids ``[pos]`` for ``model`` from a text (tokenised, BOS as the model does) or ids.

    ``name`` is the argument the errors name; ``check_length`` refuses more tokens than the
    model's context (learned positions) before anything else is done, saying how to proceed.
    """
    if not isinstance(model, CircuitModel):
        raise ArgumentTypeError(f"model: expected a circuitwidgets.CircuitModel, got {type(model).__name__}")
    if isinstance(text_or_tokens, str):
        if not text_or_tokens:
            raise ShapeError(f"{name}: expected a non-empty text, got ''")
        ids = model.to_tokens(text_or_tokens)[0]
    elif text_or_tokens is None:
        raise ArgumentTypeError(f"{name}: expected a text or token ids, got None")
    else:
        if isinstance(text_or_tokens, Sequence) and any(isinstance(t, str) for t in text_or_tokens):
            raise ArgumentTypeError(
                f"{name}: expected a text (str), texts (a list of str) or token ids (ints), got a list mixing str "
                "and other values; for token strings with precomputed attention use AttentionPatterns.from_arrays"
            )
        try:
            ids = torch.as_tensor(text_or_tokens)
        except (TypeError, ValueError, RuntimeError) as exc:
            raise ArgumentTypeError(
                f"{name}: expected a text or token ids, got {type(text_or_tokens).__name__} ({exc})"
            ) from None
        if ids.ndim == 2 and ids.shape[0] == 1:
            ids = ids[0]
        if ids.ndim != 1:
            raise ShapeError(f"{name}: expected token ids [pos] or [1, pos], got shape {tuple(ids.shape)}")
        if ids.numel() == 0:
            raise ShapeError(f"{name}: expected at least one token, got 0")
        if ids.dtype.is_floating_point or ids.dtype.is_complex or ids.dtype == torch.bool:
            raise ArgumentTypeError(f"{name}: expected integer token ids, got dtype {ids.dtype}")
    if check_length:
        check_context(model, int(ids.shape[0]), name, long_text_advice(model))
    if int(ids.min()) < 0 or int(ids.max()) >= model.cfg.d_vocab:
        raise ArgumentError(
            f"{name}: expected ids in [0, {model.cfg.d_vocab}), got range [{int(ids.min())}, {int(ids.max())}]"
        )
    if context_limited(model) and int(ids.shape[0]) > model.cfg.n_ctx:
        return ids.long().to(model.device)  # (windows cut it to n_ctx; the model's own check would refuse the whole)
    checked: torch.Tensor = model._check_tokens(ids)[0]
    return checked


def from_model_source(model: CircuitModel, ids: torch.Tensor) -> Source:
    """Tokens, patterns (every layer), value norms, logit effects and per-token loss of one forward pass over ``ids [pos]``."""
    check_state_bytes(model.cfg.n_layers, model.cfg.n_heads, int(ids.shape[0]), value_weighted=True)
    tokens = model.to_str_tokens(ids)
    logits, cache = model.run_with_cache(ids[None], names=["pattern", "v", "z", "scale_final"])
    heads = Heads([cache["pattern", layer][0] for layer in range(model.cfg.n_layers)], len(tokens))
    norms, effects, loss = value_norms(model, cache), logit_effects(model, cache, ids), next_token_loss(logits, ids)
    return Source(tokens, heads, True, norms, effects, known_causal=True, loss=loss)


def qk_from_model(model: CircuitModel, ids: torch.Tensor) -> LongText:
    """Tokens, post-rotary queries and keys of every layer with the value norms, the logit effects and the loss.

    One forward pass that keeps no pattern (attention runs in chunks of rows). The cache
    records ``q``, ``k`` and ``v`` as ``[batch, pos, head, d_head]`` (keys and values already
    repeated per query head) and each head's mixed values ``z``; the model's scale, soft-cap
    and per-layer sliding windows go with them. The value norms make the value-weighted
    pattern available on demand; the logit effects (``[n_layers, n_heads, pos]``) come from
    ``z`` as in :func:`~circuitwidgets.activations.value_paths.logit_effects`; the loss from the pass's logits.
    Cost: ``16 · n_layers · n_heads · pos · d_head`` bytes while the pass's cache lives.
    """
    cfg = model.cfg
    logits, cache = model.run_with_cache(ids[None], names=["q", "k", "v", "z", "scale_final"])
    loss = next_token_loss(logits, ids)
    del logits
    q = torch.stack([cache["q", layer][0].transpose(0, 1) for layer in range(cfg.n_layers)]).float()
    k = torch.stack([cache["k", layer][0].transpose(0, 1) for layer in range(cfg.n_layers)]).float()
    norms, effects = value_norms(model, cache), logit_effects(model, cache, ids)
    del cache
    windows = [cfg.window(layer) for layer in range(cfg.n_layers)]
    engine = QKPatterns(
        q, k, causal=True, scale=cfg.scale, sliding_window=windows, softcap=cfg.attn_softcap, value_norms=norms
    )
    return LongText(model.to_str_tokens(ids), engine, effects, loss)


def batch_from_model(model: CircuitModel, prompts: Sequence[Any], progress_bar: bool | None = None) -> Prepared:
    """Every prompt's data (one forward pass each, at its own length), padded into one batch.

    Every prompt is tokenised and checked (errors name ``text_or_tokens[i]``) and the
    state's size is checked before the first forward pass.
    """
    ids = [token_ids(model, prompt, f"text_or_tokens[{i}]") for i, prompt in enumerate(prompts)]
    lengths = [int(one.shape[0]) for one in ids]
    longest = int(np.argmax(lengths))
    if lengths[longest] > LONG_TOKENS:
        raise ArgumentError(
            f"text_or_tokens[{longest}]: expected prompts of at most {LONG_TOKENS} tokens in a batch (each is shown whole), "
            f"got {lengths[longest]}; show a long text alone, AttentionPatterns(model, text), which computes it on demand"
        )
    cfg = model.cfg
    check_state_bytes(cfg.n_layers, cfg.n_heads, max(lengths), value_weighted=True, n_prompts=len(ids))
    bar = build_bar(2 * len(ids) * cfg.n_layers * cfg.n_heads, "AttentionPatterns", progress_bar)
    parts = []
    try:
        for one in ids:
            data, _ = from_model_source(model, one).prepare(None, stream=False, loop_running=False, done=bar.update)
            parts.append(data)
    finally:
        bar.close()
    return Prepared(stack_prompts(parts, causal=True))


def model_data(
    model: CircuitModel,
    text_or_tokens: Any,
    *,
    window: int | None,
    stride: int | None,
    long: bool | None,
    progress_bar: bool | None,
) -> Source | Prepared | LongText:
    """What a widget built from ``model`` starts with: one text's source, a batch, windows, or queries and keys."""
    prompts = prompt_list(text_or_tokens)
    if prompts is not None:
        for name, value in (("window", window), ("stride", stride), ("long", long)):
            if value:
                raise ArgumentError(
                    f"{name}: applies to one text, got a batch of {len(prompts)} prompts in text_or_tokens; "
                    "show a long text alone"
                )
        return batch_from_model(model, prompts, progress_bar)
    one = single_prompt(text_or_tokens)
    if window is None:
        if stride is not None:
            raise ArgumentError(f"stride: the step between windows needs window= too, got stride={stride!r} alone")
        ids = token_ids(model, one)
    else:
        if long:
            raise ArgumentError(
                "long: computes a whole long text on demand; got it with window=, which cuts it into windows"
            )
        ids = token_ids(model, one, check_length=False)
        bos = model.tokenizer.bos_token_id
        windows = check_window(model, window, stride, int(ids.shape[0]), bos is not None and int(ids[0]) == bos)
        if int(ids.shape[0]) > window:
            return Prepared(windowed_data(model, ids, windows, progress_bar))
        ids = token_ids(model, one)  # (fits one window: shown whole, as without window)
    if long or (long is None and int(ids.shape[0]) > LONG_TOKENS):
        return qk_from_model(model, ids)
    return from_model_source(model, ids)
